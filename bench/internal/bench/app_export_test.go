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

// AppQueue is the app scenario's first queue, read by two fan-out groups.
const AppQueue = appQueue

// AppRun is a run of the app scenario that an external test drives itself:
// it sends, lets the engine hold what it wants, and checks.
type AppRun struct{ a *appRun }

// NewAppRun sets up a run of the app scenario with cfg: its queues made
// afresh, nothing sent, no consumer.
func NewAppRun(ctx context.Context, o Options, cfg AppConfig) (*AppRun, error) {
	o.defaults()
	r := &runner{o: o, pad: strings.Repeat("x", max(o.Payload-40, 0))}
	a := r.newAppRun(cfg)
	if err := a.setup(ctx); err != nil {
		return nil, err
	}
	return &AppRun{a: a}, nil
}

// Send sends one message of key k (neither poison nor forwarded) and
// records it in the run's history.
func (r *AppRun) Send(ctx context.Context, k int32) error { return r.a.send(ctx, k, 100) }

// Finish ends the run as the drain limit would, without a drain: the
// offline check against the dead letters and what the engine holds, and
// the scenario's result.
func (r *AppRun) Finish(ctx context.Context) (*Result, *AppCheck, error) {
	return r.a.finish(ctx, &appSeries{})
}

// Cleanup drops the run's queues.
func (r *AppRun) Cleanup(ctx context.Context) { r.a.cleanup(ctx) }

// XminQueueOptions makes the queue of each system of the xmin scenario
// with o as the scenario would, and returns their options read back from
// sluice.list_queues(); the queues are dropped afterwards.
func XminQueueOptions(ctx context.Context, o Options) ([]QueueRecord, error) {
	o.defaults()
	r := &runner{o: o}
	systems, err := r.xminSystems()
	if err != nil {
		return nil, err
	}
	defer r.cleanupAll(ctx, systems...)
	for _, s := range systems {
		if err := r.setupSystem(ctx, s); err != nil {
			return nil, err
		}
	}
	return r.queues.take(), nil
}
