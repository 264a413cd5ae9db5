package cli

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

const versionUsage = `Usage: sluice version

Prints the version of this sluice build and of the schema it installs (the
highest migration number, as recorded in sluice.schema_migration).

Example:
  sluice version
`

func versionCommand() command {
	return command{
		name:    "version",
		summary: "print the version of sluice and of its schema",
		usage:   versionUsage,
		setup: func(_ *flag.FlagSet, e *env) func(context.Context, []string) error {
			return func(context.Context, []string) error {
				migrations, err := migrate.Migrations(sqlsrc.FS)
				if err != nil {
					return err
				}
				functions, err := migrate.Functions(sqlsrc.FS)
				if err != nil {
					return err
				}
				schema := 0
				if len(migrations) > 0 {
					schema = migrations[len(migrations)-1].Version
				}
				fmt.Fprintf(e.stdout, "sluice %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
				fmt.Fprintf(e.stdout, "schema version %d (%d migrations, %d function files)\n", schema, len(migrations), len(functions))
				return nil
			}
		},
	}
}

// buildVersion returns the module version this binary was built from
// ("devel" for a build from a work tree), with the VCS revision when the
// build recorded it.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " " + rev + modified
	}
	return v
}
