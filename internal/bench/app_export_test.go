package bench

import (
	"context"
	"strings"
)

// AppConfig is the app scenario's workload, for the external tests.
type AppConfig = appConfig

// AppCheck is the app checker's verdict, for the external tests.
type AppCheck = appCheck

// Violations is the number of violations of every kind.
func (c *appCheck) Violations() int64 { return c.violations() }

// DefaultAppConfig returns the workload Run gives the app scenario with o.
func DefaultAppConfig(o Options) AppConfig {
	o.defaults()
	r := &runner{o: o}
	return r.appConfig()
}

// RunApp runs the app scenario with cfg, as Run would with its defaults.
func RunApp(ctx context.Context, o Options, cfg AppConfig) (*Result, *AppCheck, error) {
	o.defaults()
	r := &runner{o: o, pad: strings.Repeat("x", max(o.Payload-40, 0))}
	return r.runApp(ctx, cfg)
}
