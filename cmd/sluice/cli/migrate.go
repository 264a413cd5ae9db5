package cli

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/pgmqcompat"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

const migrateUsage = `Usage: sluice migrate [--database-url URL] [--print] [--pgmq]

Installs the sluice schema (PostgreSQL schema "sluice") in a database, or
upgrades it: applies the migrations the database has not had yet and reloads
all functions, in one transaction; calls of the API that start meanwhile wait
for it, and none fails (docs/operations.md). Running it again changes nothing;
concurrent runs wait for each other. Run it as a dedicated owner role, not
as a superuser: the API's functions run as their owner (it warns when that
owner is a superuser; see docs/operations.md).

The database is the one --database-url names, else $DATABASE_URL, else the
one the libpq environment variables (PGHOST, PGPORT, PGDATABASE, PGUSER,
PGPASSWORD, PGSSLMODE, ...) and their defaults describe, when any of PGHOST,
PGHOSTADDR, PGPORT, PGDATABASE, PGUSER or PGSERVICE is set. With none of
these, the embedded server (see "sluice --help"), which has the schema
already.

With --print, nothing is connected to: the same work is written to standard
output as one SQL script for psql or your own migration tool. The script is
idempotent too, and takes the same lock. Connected, it then names on standard
error the queues still of engine 1, which "sluice queue upgrade QUEUE" moves
to engine 2 in place.

With --pgmq, the PGMQ compatibility layer (schema "pgmq": the PGMQ 1.13 SQL
API on sluice, see docs/pgmq.md) is installed or upgraded too, after the
sluice schema; with --print, its script follows sluice's. It refuses a
database where the pgmq extension is installed.

Examples:
  sluice migrate --database-url postgres://app:secret@db.example.com:5432/app
  DATABASE_URL=postgres://localhost/app sluice migrate
  PGHOST=/var/run/postgresql PGDATABASE=app sluice migrate
  sluice migrate --print > sluice.sql && psql -d app -f sluice.sql
  sluice migrate --pgmq --database-url postgres://localhost/app
`

func migrateCommand() command {
	return command{
		name:    "migrate",
		summary: "install or upgrade the sluice schema in a database",
		usage:   migrateUsage,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			print := fs.Bool("print", false, "write the migration SQL script to standard output instead of connecting")
			withPGMQ := fs.Bool("pgmq", false, "also install or upgrade the PGMQ compatibility layer (schema pgmq)")
			return func(ctx context.Context, _ []string) error {
				if *print {
					script, err := migrate.Script(sqlsrc.FS)
					if err != nil {
						return err
					}
					if *withPGMQ {
						more, err := pgmqcompat.Script()
						if err != nil {
							return err
						}
						script += "\n" + more
					}
					_, err = fmt.Fprint(e.stdout, script)
					return err
				}
				return runMigrate(ctx, e, *url, *withPGMQ)
			}
		},
	}
}

func runMigrate(ctx context.Context, e *env, flagURL string, withPGMQ bool) error {
	conn, target, closeConn, err := e.connectOne(ctx, flagURL)
	if err != nil {
		return err
	}
	defer closeConn()
	res, err := migrate.Apply(ctx, conn, sqlsrc.FS)
	for _, m := range res.Applied {
		fmt.Fprintf(e.stdout, "applied %s\n", m.Path)
	}
	if err != nil {
		return fmt.Errorf("migrating %s: %w", target, err)
	}
	if len(res.Applied) == 0 {
		fmt.Fprintf(e.stdout, "schema sluice is up to date at version %d\n", res.Version)
	} else {
		fmt.Fprintf(e.stdout, "schema sluice is at version %d\n", res.Version)
	}
	if len(res.Functions) == 0 {
		fmt.Fprintln(e.stdout, "function files unchanged: nothing reloaded")
	} else {
		fmt.Fprintf(e.stdout, "reloaded %d function files\n", len(res.Functions))
	}
	if res.SuperuserOwner != "" {
		fmt.Fprintf(e.stderr, "warning: the sluice functions are owned by superuser %q: the SECURITY DEFINER ones (every\n"+
			"  function of the API) run as superuser for whoever may call them. Migrate as a dedicated owner\n"+
			"  role without SUPERUSER or CREATEROLE instead (docs/operations.md, \"Who runs the migration\").\n",
			res.SuperuserOwner)
	}
	if withPGMQ {
		pres, err := pgmqcompat.Install(ctx, conn)
		for _, m := range pres.Applied {
			fmt.Fprintf(e.stdout, "applied sql/pgmq/%s\n", m.Path)
		}
		if err != nil {
			return fmt.Errorf("installing the pgmq layer in %s: %w", target, err)
		}
		fmt.Fprintf(e.stdout, "schema pgmq is at version %d; reloaded %d function files\n", pres.Version, len(pres.Functions))
	}
	return noteEngine1Queues(ctx, e, conn)
}

// noteEngine1Queues says on standard error which queues are still of
// engine 1 (an upgrade's old storage aside: it goes by itself) and how to
// move them to engine 2, the pgmq layer's among them.
func noteEngine1Queues(ctx context.Context, e *env, conn *pgx.Conn) error {
	var names []string
	if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(q.name ORDER BY q.name), '{}') FROM sluice.queue q
		WHERE q.engine = 1 AND NOT EXISTS (SELECT 1 FROM sluice.queue s WHERE s.predecessor = q.id)`).Scan(&names); err != nil {
		return fmt.Errorf("listing the queues of engine 1: %w", err)
	}
	if len(names) == 0 {
		return nil
	}
	list := strings.Join(names, ", ")
	if len(names) > 10 {
		list = strings.Join(names[:10], ", ") + fmt.Sprintf(" and %d more", len(names)-10)
	}
	fmt.Fprintf(e.stderr, "note: %d queue(s) still on engine 1, the slower first engine: %s. Move each to engine 2\n"+
		"  in place, with its producers and consumers running: sluice queue upgrade QUEUE (sluice.upgrade_queue;\n"+
		"  docs/operations.md, \"Upgrading a queue to engine 2\").\n", len(names), list)
	return nil
}
