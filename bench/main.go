// Command sluice-bench runs the benchmark scenarios of bench/README.md
// against a real PostgreSQL: "make bench" builds it into bin/ and runs the
// default set. It was the sluice command's bench subcommand before the
// benchmark got a module of its own (bench/), so that the sluice binary and
// the library do not link River and the other systems it measures; it takes
// the same scenarios and flags, and chooses its database as every sluice
// command does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/bench/internal/bench"
	"github.com/sluicemq/sluice/cmd/sluice/cli"
)

// main ends the run's context on Ctrl-C, SIGTERM and SIGHUP, so that the
// scenarios drop their queues and the embedded server stops.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := cli.RunProgram(ctx, "sluice-bench", benchCommand(), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const benchUsage = `Usage: sluice-bench SCENARIO... [flags]

Runs benchmark scenarios one after another, prints a progress line every
second and a Markdown table per scenario, and writes results.json,
results.md and SVG charts to --results-dir/<timestamp>/. Every scenario
makes its queue ("bench"; app: "bench_app" and "bench_app_stage2") afresh
and drops it at the end.

Scenarios:
  send      producers x batch size (1, 10, 100, 1000) -> msg/s, next to a bare
            INSERT into a plain table (the physical reference) and the ratio
  drain     preload --preload messages, consumers x batch size -> msg/s
  keyed     drain the preload unkeyed, with 5,000 uniform keys and with 5,000
            Zipf(1.1) keys (--consumers: last value, default 8; --batches
            10,100): msg/s and keyed / unkeyed
  latency   producer (send -> commit), subscriber (receive over a ready
            backlog) and end-to-end (server clock) p50/p95/p99/max at --rate
  steady    producers and consumers together at --rate: consumed/s, backlog,
            end-to-end percentiles
  shootout  send, drain and steady for sluice, a DIY SKIP LOCKED table, PGMQ
            (installed for the run from the pgmq PyPI wheel, if pip can fetch
            it), pgmq-compat (PGMQ's statements against sluice's pgmq schema,
            in a second database <database>_pgmqcompat made for the run and
            dropped afterwards: needs CREATEDB, else skipped) and River (a Go
            job queue, built in; its tables installed by rivermigrate for the
            run), with ratios, and pgmq-compat / PGMQ when both ran
  overload  drain with 32 consumers and with a CPU hog on every core, for
            sluice and SKIP LOCKED: msg/s and the ratio to the same system
            uncontended
  app       Queen's app-mode workload through the Go library: two fan-out
            groups (--consumers handlers each, default 8), 20 ms handlers,
            5,000 Zipf keys, failures, poison to the DLQ, atomic ack+send into
            a second queue; push at --rate (500) for --duration (1m), then a
            drain of at most --drain-limit (2m); an offline checker verifies
            no loss, no duplicate, per-key order: push/consume rates, backlog
  xmin      steady while another connection holds a transaction with an xid
            (default 10 minutes): consumed/s, dead tuples and table size per
            --interval (--xmin-systems; pgmq and pgmq-compat together add a
            pgmq-compat / PGMQ table)
  clients   the Python (clients/python) and TypeScript (clients/typescript)
            clients beside the Go library, on min(--preload, 20000) messages
            of queue "bench_clients": send batch 100, drain batch 100 (Python
            sync and async), a worker with a no-op handler (Python Worker and
            AsyncWorker, TypeScript Worker, concurrency 10): msg/s and the
            ratio to Go. Needs --python (default clients/python/.venv/bin/python,
            made by make test-python) and --node (default node on the PATH,
            with clients/typescript compiled by make test-typescript); a
            client without them is skipped. Run from the repository's root
  http      sluice server in this process: 64 HTTP clients sending (batch 1
            and 100) beside the same over SQL, long-poll receive + ack end
            to end at 1,000 msg/s, and the database work of 1,000 idle
            long polls
  statusburst
            sluice server in this process (auth on, pool of 16): other tokens'
            send, receive and ack p50/p99 without and with 64 callers of one
            token looping on GET /v1/status, in turns: the p99 ratio (issue
            39's target: at most 2)
  memory    one connection's memory after it received and completed a
            message on each of 1 and 20 queues, for sluice, PGMQ (installed
            for the run, as in shootout) and pgmq-compat: MB per further
            queue and the ratio to PGMQ's (needs superuser or
            pg_read_all_stats for pg_backend_memory_contexts)
  all       all of the above

Durations: each cell runs --duration (defaults: send 5s, drain at most 10s,
latency 10s, steady 15s, app 1m, xmin 10m; --xmin-duration sets xmin's alone).
--producers, --consumers and --batches are swept by send and drain; steady,
latency, app and xmin use the last value of each.

The benchmark writes to the database: use a scratch database or the
embedded server, never production.

Choosing the database: --database-url URL, else $DATABASE_URL, else the
libpq variables (PGHOST, PGPORT, PGDATABASE, ...), else the sluice command's
embedded PostgreSQL (see "sluice help").

Examples:
  sluice-bench send
  sluice-bench send drain latency steady --database-url postgres://localhost/scratch
  sluice-bench shootout --duration 10s
  sluice-bench xmin --duration 3m --interval 30s
  sluice-bench shootout --systems pgmq,pgmq-compat --duration 5s
  sluice-bench xmin --xmin-systems pgmq,pgmq-compat --xmin-duration 2m --interval 30s
  sluice-bench xmin --xmin-control --xmin-duration 10m --interval 30s
  sluice-bench app --rate 800 --consumers 16 --duration 2m --drain-limit 5m
`

// intList is a flag of comma-separated positive integers.
type intList []int

func (l *intList) String() string {
	var s []string
	for _, v := range *l {
		s = append(s, strconv.Itoa(v))
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	*l = nil
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("want comma-separated positive integers, got %q", v)
		}
		*l = append(*l, n)
	}
	return nil
}

// benchCommand is the program's one command: its flags, and the run.
func benchCommand() cli.Command {
	return cli.Command{
		Usage:   benchUsage,
		MinArgs: 1, MaxArgs: -1,
		Setup: func(fs *flag.FlagSet, e *cli.Env) func(context.Context, []string) error {
			url := cli.DatabaseFlag(fs)
			var o bench.Options
			var producers, consumers, batches intList
			var systems string
			resultsDir := fs.String("results-dir", "bench/results", "where to write the results (a new `directory` per run)")
			noSave := fs.Bool("no-save", false, "print the tables only; write no result files")
			fs.DurationVar(&o.Duration, "duration", 0, "how long each measured cell runs (0: each scenario's default)")
			fs.DurationVar(&o.XminDuration, "xmin-duration", 0, "how long the xmin scenario runs (default --duration, else 10m)")
			fs.DurationVar(&o.Interval, "interval", time.Minute, "sampling interval of the xmin scenario")
			fs.BoolVar(&o.XminControl, "xmin-control", false, "xmin: also run each system with no xid held, after its run with one (the control)")
			fs.Var(&producers, "producers", "producer counts, comma-separated (send default 1,16; steady, app 4)")
			fs.Var(&consumers, "consumers", "consumer counts, comma-separated (drain default 1,8; steady 4; app: handlers per fan-out group, 8)")
			fs.Var(&batches, "batches", "batch sizes, comma-separated (send default 1,10,100,1000; drain 1,100; steady 10)")
			fs.IntVar(&o.Payload, "payload", 100, "approximate message body size in bytes")
			fs.IntVar(&o.Preload, "preload", 50000, "messages preloaded by drain")
			fs.IntVar(&o.Rate, "rate", 0, "offered messages/s of latency and app (default 500), steady and xmin (default 2000)")
			fs.DurationVar(&o.Poll, "poll", time.Millisecond, "how long an idle benchmark consumer sleeps before receiving again")
			fs.StringVar(&systems, "systems", "", "comma-separated systems (sluice, skiplocked, pgmq, pgmq-compat, river) for shootout (default sluice,skiplocked,pgmq,pgmq-compat,river), latency, steady and xmin (default sluice)")
			var xminSystems string
			fs.StringVar(&xminSystems, "xmin-systems", "", "comma-separated systems for xmin (default --systems, else sluice)")
			fs.StringVar(&o.PGMQWheel, "pgmq-wheel", "", "pgmq wheel `file` to install PGMQ from (default: pip download pgmq --no-deps)")
			fs.DurationVar(&o.Retention, "retention", 0, "retention option of sluice's benchmark queue (0: the engine's default)")
			fs.IntVar(&o.Lanes, "lanes", 0, "lanes option of sluice's benchmark queues, the app scenario's included (0: the engine's default, 8)")
			fs.IntVar(&o.Slots, "slots", 0, "slots option of sluice's benchmark queues, the app scenario's included (0: the engine's default, 2)")
			fs.DurationVar(&o.Lease, "lease", 0, "lease of sluice's benchmark queue and visibility timeout of PGMQ's reads (whole seconds, at least 1s; 0: 30s)")
			fs.DurationVar(&o.DrainLimit, "drain-limit", 2*time.Minute, "how long the app scenario waits for its backlog to drain after the push")
			fs.StringVar(&o.Python, "python", bench.DefaultPython, "Python interpreter `file` of the clients scenario, with the package sluice installed (make test-python makes it)")
			fs.StringVar(&o.Node, "node", bench.DefaultNode, "node `command` of the clients scenario, running the TypeScript client compiled by make test-typescript")
			return func(ctx context.Context, args []string) error {
				var scenarios []string
				for _, a := range args {
					if a == "all" {
						scenarios = append(scenarios, bench.Scenarios()...)
						continue
					}
					if !contains(bench.Scenarios(), a) {
						return cli.Usagef("unknown scenario %q (known: %s, all)", a, strings.Join(bench.Scenarios(), ", "))
					}
					scenarios = append(scenarios, a)
				}
				if o.Payload < 1 || o.Payload > 1<<20 {
					return cli.Usagef("--payload must be from 1 to 1048576")
				}
				if o.Rate < 0 || o.Preload < 1 {
					return cli.Usagef("--rate must not be negative, --preload must be positive")
				}
				o.Producers, o.Consumers, o.Batches = producers, consumers, batches
				for _, b := range batches {
					if b > 10000 {
						return cli.Usagef("--batches: at most 10000 per batch")
					}
				}
				if systems != "" {
					for _, s := range strings.Split(systems, ",") {
						o.Systems = append(o.Systems, strings.TrimSpace(s))
					}
				}
				for _, s := range strings.Split(xminSystems, ",") {
					if s = strings.TrimSpace(s); s != "" {
						o.XminSystems = append(o.XminSystems, s)
					}
				}
				o.Out, o.TTY = e.Stdout(), e.StdoutIsTerminal()
				o.Command = commandLine(fs, args)
				return e.WithDatabase(ctx, *url, func(dbPool *pgxpool.Pool, target string) error {
					cfg := dbPool.Config()
					cfg.MaxConns = int32(bench.MaxConnections(o))
					pool, err := pgxpool.NewWithConfig(ctx, cfg)
					if err != nil {
						return fmt.Errorf("connecting to %s: %w", target, err)
					}
					defer pool.Close()
					o.Pool, o.Server = pool, target
					rep, runErr := bench.Run(ctx, scenarios, o)
					if *noSave || len(rep.Results) == 0 {
						return runErr
					}
					dir, err := rep.Save(*resultsDir)
					if err != nil {
						return err
					}
					fmt.Fprintf(e.Stdout(), "results: %s\n", dir)
					return runErr
				})
			}
		},
	}
}

// commandLine spells the command as given (the flags set, in name order),
// with the database URL left out: it may hold a password.
func commandLine(fs *flag.FlagSet, args []string) string {
	parts := append([]string{"sluice-bench"}, args...)
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "database-url" {
			parts = append(parts, "--database-url ...")
			return
		}
		parts = append(parts, "--"+f.Name+" "+f.Value.String())
	})
	return strings.Join(parts, " ")
}

// contains reports whether list holds s.
func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
