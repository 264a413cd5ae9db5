package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice"
)

const queueUsage = `Usage: sluice queue <command> [arguments] [flags]

Creates, lists, inspects, purges, upgrades and drops queues.

Commands:
%s
Examples:
  sluice queue create orders --max-attempts 3 --lease 1m
  sluice queue list
  sluice queue config orders
  sluice queue purge orders
  sluice queue upgrade orders
  sluice queue drop orders
`

func queueCommand() command {
	return command{
		name:    "queue",
		summary: "create, list, configure, purge, upgrade and drop queues",
		usage:   queueUsage,
		sub:     []command{queueCreateCommand(), queueListCommand(), queueConfigCommand(), queuePurgeCommand(), queueUpgradeCommand(), queueDropCommand()},
	}
}

const queueCreateUsage = `Usage: sluice queue create QUEUE [flags]

Creates a queue, with the consumer group "default" reading it from its start
(unless --no-default-group). Names have 1 to 64 characters: ASCII letters,
digits, "_", "." and "-", starting with a letter or digit. Durations are Go
durations such as 500ms, 30s, 5m or 2h.

Examples:
  sluice queue create orders
  sluice queue create emails --max-attempts 10 --backoff-base 5s --backoff-max 10m
  sluice queue create events --no-default-group --retention 24h
`

// cliOption is a queue option as the commands take it: its engine name,
// its flag of "queue create" and the QueueOptions field it sets (a **int,
// **time.Duration or **bool; a boolean's flag is --no-..., which sets it to
// false).
type cliOption struct {
	name, flag string
	field      any
	usage      string
	positive   bool // 0 is refused (leave the flag out for the engine's default)
}

// cliOptions lists every option of the engine (test/queue_options.json,
// TestQueueOptionFlags) bound to the fields of o: the one table "queue
// create" and "queue config --set" read.
func cliOptions(o *sluice.QueueOptions) []cliOption {
	return []cliOption{
		{"max_attempts", "max-attempts", &o.MaxAttempts, "deliveries before a message becomes a dead letter (engine default 5)", true},
		{"lease", "lease", &o.Lease, "default lease of a receive (engine default 30s)", true},
		{"backoff_base", "backoff-base", &o.BackoffBase, "first retry delay after a failure, doubled per attempt (engine default 1s)", false},
		{"backoff_max", "backoff-max", &o.BackoffMax, "longest retry delay (engine default 1h)", false},
		{"retention", "retention", &o.Retention, "how long completed messages stay readable (engine default 1h)", false},
		{"rotate_interval", "rotate-interval", &o.RotateInterval, "how often a new storage epoch starts (engine default 1m)", true},
		{"max_payload", "max-payload", &o.MaxPayload, "largest body + headers in `bytes` (engine default 1048576)", true},
		{"dedup_window", "dedup-window", &o.DedupWindow, "how long a dedup key of a send is remembered (engine default 1h)", false},
		{"max_delay", "max-delay", &o.MaxDelay, "longest delay of a send or an explicit nack (engine default and upper bound 365 days)", false},
		{"lanes", "lanes", &o.Lanes, "dispatch lanes, fixed at creation; 1 keeps strict commit order (engine default 8)", true},
		{"slots", "slots", &o.Slots, "storage slots, 2 to 4, fixed at creation; fewer cost less per call, more keep less retained traffic on disk (engine default 2)", true},
		{"engine", "engine", &o.Engine, "storage engine, 1 or 2, fixed at creation (engine default 1; 2 is engine v2, docs/design.md)", true},
		{"notify", "no-notify", &o.Notify, "do not NOTIFY waiting consumers when a send commits (they poll)", false},
		{"default_group", "no-default-group", &o.DefaultGroup, `do not create the consumer group "default"`, false},
	}
}

func queueCreateCommand() command {
	return command{
		name: "create", summary: "create a queue", usage: queueCreateUsage, minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			var o sluice.QueueOptions
			opts := cliOptions(&o)
			// The flags hold plain values; a field is set only when its
			// flag is given, so that 0 (keep nothing, retry at once) is
			// told from "the engine's default".
			values := make([]any, len(opts))
			for i, c := range opts {
				switch c.field.(type) {
				case **int:
					values[i] = fs.Int(c.flag, 0, c.usage)
				case **time.Duration:
					values[i] = fs.Duration(c.flag, 0, c.usage)
				case **bool:
					values[i] = fs.Bool(c.flag, false, c.usage)
				}
			}
			return func(ctx context.Context, args []string) error {
				for i, c := range opts {
					if !flagGiven(fs, c.flag) {
						continue
					}
					switch p := c.field.(type) {
					case **int:
						n := *values[i].(*int)
						if n < 0 || n == 0 && c.positive {
							return usagef("--%s must be positive, got %d (leave it out for the engine's default)", c.flag, n)
						}
						*p = &n
					case **time.Duration:
						d := *values[i].(*time.Duration)
						if d < 0 {
							return usagef("--%s must not be negative", c.flag)
						}
						if d == 0 && c.positive {
							return usagef("--%s must be positive (leave it out for the engine's default)", c.flag)
						}
						*p = &d
					case **bool:
						if *values[i].(*bool) {
							*p = sluice.Ptr(false) // --no-...
						}
					}
				}
				return e.withDB(ctx, *url, func(db *database) error {
					if err := db.client.CreateQueue(ctx, args[0], &o); err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "created queue %s\n", args[0])
					return nil
				})
			}
		},
	}
}

const queueListUsage = `Usage: sluice queue list [flags]

Lists the queues with their consumer groups: a table, or JSON lines with
--json (with every option of each queue).

Examples:
  sluice queue list
  sluice queue list --json
`

func queueListCommand() command {
	return command{
		name: "list", summary: "list the queues and their groups", usage: queueListUsage,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			asJSON := fs.Bool("json", false, "print JSON lines instead of a table")
			return func(ctx context.Context, _ []string) error {
				return e.withDB(ctx, *url, func(db *database) error {
					qs, err := db.client.ListQueues(ctx)
					if err != nil {
						return err
					}
					if *asJSON {
						enc := json.NewEncoder(e.stdout)
						for _, q := range qs {
							groups := q.Groups
							if groups == nil {
								groups = []string{}
							}
							if err := enc.Encode(map[string]any{"queue": q.Name, "groups": groups, "created_at": q.CreatedAt,
								"options": q.RawOptions}); err != nil {
								return err
							}
						}
						return nil
					}
					if len(qs) == 0 {
						fmt.Fprintln(e.stdout, `no queues (create one with "sluice queue create NAME")`)
						return nil
					}
					tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "QUEUE\tGROUPS\tCREATED")
					for _, q := range qs {
						groups := strings.Join(q.Groups, ",")
						if groups == "" {
							groups = "-"
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\n", q.Name, groups, q.CreatedAt.Local().Format(time.DateTime))
					}
					return tw.Flush()
				})
			}
		},
	}
}

const queueConfigUsage = `Usage: sluice queue config QUEUE [--set option=value]... [flags]

Shows the options of a queue (with the engine's defaults filled in) and its
groups. With --set, changes options first; options not named keep their
values. The changes apply to the calls that start afterwards.

Options: max_attempts, max_payload (integers), notify (true/false), lease,
backoff_base, backoff_max, retention, rotate_interval, dedup_window,
max_delay (durations such as 30s, 5m or 1h). lanes, slots and engine are
fixed when the queue is created; default_group is create's only.

Examples:
  sluice queue config orders
  sluice queue config orders --set max_attempts=10 --set lease=2m
`

// optionFlags collects repeated --set option=value flags into the
// QueueOptions of sluice.AlterQueue.
type optionFlags struct{ o sluice.QueueOptions }

func (f *optionFlags) String() string { return "" }

func (f *optionFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want option=value, got %q", s)
	}
	for _, c := range cliOptions(&f.o) {
		if c.name != k {
			continue
		}
		switch p := c.field.(type) {
		case **time.Duration:
			d, err := parseDuration(v)
			if err != nil {
				return fmt.Errorf("option %s: %w", k, err)
			}
			*p = &d
		case **int:
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("option %s: want an integer, got %q", k, v)
			}
			*p = &n
		case **bool:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("option %s: want true or false, got %q", k, v)
			}
			*p = &b
		}
		return nil
	}
	return fmt.Errorf("unknown option %q (see --help)", k)
}

func queueConfigCommand() command {
	return command{
		name: "config", summary: "show or change the options of a queue", usage: queueConfigUsage, minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			changes := &optionFlags{}
			fs.Var(changes, "set", "change an option, as `option=value` (repeatable)")
			return func(ctx context.Context, args []string) error {
				return e.withDB(ctx, *url, func(db *database) error {
					if flagGiven(fs, "set") {
						if _, err := db.client.AlterQueue(ctx, args[0], &changes.o); err != nil {
							return err
						}
					}
					qs, err := db.client.ListQueues(ctx)
					if err != nil {
						return err
					}
					for _, q := range qs {
						if q.Name != args[0] {
							continue
						}
						tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
						fmt.Fprintf(tw, "queue\t%s\n", q.Name)
						fmt.Fprintf(tw, "created\t%s\n", q.CreatedAt.Local().Format(time.RFC3339))
						fmt.Fprintf(tw, "groups\t%s\n", strings.Join(q.Groups, ", "))
						for _, c := range cliOptions(&q.Options) {
							var text string
							switch p := c.field.(type) {
							case **int:
								if *p != nil {
									text = strconv.Itoa(**p)
								}
							case **time.Duration:
								if *p != nil {
									text = formatDuration(**p)
								}
							case **bool:
								if *p != nil {
									text = strconv.FormatBool(**p)
								}
							}
							if text != "" {
								fmt.Fprintf(tw, "%s\t%s\n", c.name, text)
							}
						}
						return tw.Flush()
					}
					return fmt.Errorf("queue %q does not exist: %w", args[0], sluice.ErrQueueNotFound)
				})
			}
		},
	}
}

const queuePurgeUsage = `Usage: sluice queue purge QUEUE [flags]

Removes every message of a queue at once, pending or not. Its groups stay
and continue with the messages sent afterwards. Dead letters stay too
(status's dead) unless --dead-letters discards every group's as well, in
the same transaction (sluice dlq discard discards some).

Examples:
  sluice queue purge orders
  sluice queue purge orders --dead-letters
`

func queuePurgeCommand() command {
	return command{
		name: "purge", summary: "remove every message of a queue", usage: queuePurgeUsage, minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			withDead := fs.Bool("dead-letters", false, "also discard every group's dead letters")
			return func(ctx context.Context, args []string) error {
				return e.withDB(ctx, *url, func(db *database) error {
					var n, dead int64
					err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) (err error) {
						if n, err = db.client.PurgeQueueTx(ctx, tx, args[0]); err != nil || !*withDead {
							return err
						}
						qs, err := db.client.ListQueuesTx(ctx, tx)
						if err != nil {
							return err
						}
						for _, q := range qs {
							if q.Name != args[0] {
								continue
							}
							for _, g := range q.Groups {
								d, err := db.client.DiscardDeadLettersTx(ctx, tx, args[0], g, nil)
								if err != nil {
									return err
								}
								dead += d
							}
						}
						return nil
					})
					if err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "purged %s from queue %s\n", plural(n, "message", "messages"), args[0])
					if *withDead {
						fmt.Fprintf(e.stdout, "discarded %s\n", plural(dead, "dead letter", "dead letters"))
					}
					return nil
				})
			}
		},
	}
}

const queueUpgradeUsage = `Usage: sluice queue upgrade QUEUE [flags]

Replaces a queue of engine 1 by a queue of engine 2 of the same name,
options and groups, in place, without copying messages (sluice.upgrade_queue;
an admin role). Sends go to the new storage at once; each group receives
what the old storage still holds for it first, and receipts of either can be
acked. Status counts both storages until sluice.maintain() (run by your
scheduler, such as pg_cron) drops the old one, once every group has drained
it; "group seek" is refused meanwhile. A queue of engine 2 is left as it is.

Examples:
  sluice queue upgrade orders
`

func queueUpgradeCommand() command {
	return command{
		name: "upgrade", summary: "move a queue of engine 1 to engine 2 in place", usage: queueUpgradeUsage, minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			return func(ctx context.Context, args []string) error {
				return e.withDB(ctx, *url, func(db *database) error {
					ok, err := db.client.UpgradeQueue(ctx, args[0])
					switch {
					case err != nil:
						return err
					case ok:
						fmt.Fprintf(e.stdout, "upgraded queue %s to engine 2\n", args[0])
					default:
						fmt.Fprintf(e.stdout, "queue %s is of engine 2 already: nothing to do\n", args[0])
					}
					return nil
				})
			}
		},
	}
}

const queueDropUsage = `Usage: sluice queue drop QUEUE [flags]

Drops a queue with its groups, messages and dead letters. It fails when
there is no such queue, unless --if-exists.

Examples:
  sluice queue drop orders
  sluice queue drop scratch --if-exists
`

func queueDropCommand() command {
	return command{
		name: "drop", summary: "drop a queue, its groups and messages", usage: queueDropUsage, minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			ifExists := fs.Bool("if-exists", false, "succeed when there is no such queue")
			return func(ctx context.Context, args []string) error {
				return e.withDB(ctx, *url, func(db *database) error {
					ok, err := db.client.DropQueue(ctx, args[0])
					switch {
					case err != nil:
						return err
					case ok:
						fmt.Fprintf(e.stdout, "dropped queue %s\n", args[0])
					case *ifExists:
						fmt.Fprintf(e.stdout, "no queue %s\n", args[0])
					default:
						return fmt.Errorf("queue %q does not exist: %w", args[0], sluice.ErrQueueNotFound)
					}
					return nil
				})
			}
		},
	}
}

// flagGiven reports whether flag name was given on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// setToZero returns the first of the named flags that was given on the
// command line with the value zero (where leaving it out means a default),
// or "".
func setToZero(fs *flag.FlagSet, names ...string) string {
	found := ""
	fs.Visit(func(f *flag.Flag) {
		if found != "" || !slices.Contains(names, f.Name) {
			return
		}
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		switch v := g.Get().(type) {
		case time.Duration:
			if v == 0 {
				found = f.Name
			}
		case int:
			if v == 0 {
				found = f.Name
			}
		}
	})
	return found
}
