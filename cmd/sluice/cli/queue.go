package cli

import (
	"bytes"
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

Creates, lists, inspects, purges and drops queues.

Commands:
%s
Examples:
  sluice queue create orders --max-attempts 3 --lease 1m
  sluice queue list
  sluice queue config orders
  sluice queue purge orders
  sluice queue drop orders
`

func queueCommand() command {
	return command{
		name:    "queue",
		summary: "create, list, configure, purge and drop queues",
		usage:   queueUsage,
		sub:     []command{queueCreateCommand(), queueListCommand(), queueConfigCommand(), queuePurgeCommand(), queueDropCommand()},
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

func queueCreateCommand() command {
	return command{
		name: "create", summary: "create a queue", usage: queueCreateUsage, minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			var o sluice.QueueOptions
			fs.IntVar(&o.MaxAttempts, "max-attempts", 0, "deliveries before a message becomes a dead letter (engine default 5)")
			fs.DurationVar(&o.Lease, "lease", 0, "default lease of a receive (engine default 30s)")
			fs.DurationVar(&o.BackoffBase, "backoff-base", 0, "first retry delay after a failure, doubled per attempt (engine default 1s)")
			fs.DurationVar(&o.BackoffMax, "backoff-max", 0, "longest retry delay (engine default 1h)")
			fs.DurationVar(&o.Retention, "retention", 0, "how long completed messages stay readable (engine default 1h)")
			fs.DurationVar(&o.RotateInterval, "rotate-interval", 0, "how often a new storage epoch starts (engine default 1m)")
			fs.DurationVar(&o.MaxDelay, "max-delay", 0, "longest delay of a send or an explicit nack (engine default and upper bound 365 days)")
			fs.IntVar(&o.MaxPayload, "max-payload", 0, "largest body + headers in `bytes` (engine default 1048576)")
			fs.BoolVar(&o.DisableNotify, "no-notify", false, "do not NOTIFY waiting consumers when a send commits (they poll)")
			fs.BoolVar(&o.NoDefaultGroup, "no-default-group", false, `do not create the consumer group "default"`)
			fs.IntVar(&o.Lanes, "lanes", 0, "dispatch lanes, fixed at creation; 1 keeps strict commit order (engine default 8)")
			fs.IntVar(&o.Slots, "slots", 0, "storage slots, 2 to 4, fixed at creation; fewer cost less per call, more keep less retained traffic on disk (engine default 2)")
			return func(ctx context.Context, args []string) error {
				for name, d := range map[string]time.Duration{"lease": o.Lease, "backoff-base": o.BackoffBase,
					"backoff-max": o.BackoffMax, "retention": o.Retention, "rotate-interval": o.RotateInterval,
					"max-delay": o.MaxDelay} {
					if d < 0 {
						return usagef("--%s must not be negative", name)
					}
				}
				for name, n := range map[string]int{"max-attempts": o.MaxAttempts, "max-payload": o.MaxPayload, "lanes": o.Lanes,
					"slots": o.Slots} {
					if n < 0 {
						return usagef("--%s must be positive, got %d", name, n)
					}
				}
				if name := setToZero(fs, "lease", "rotate-interval", "max-attempts", "max-payload", "lanes", "slots"); name != "" {
					return usagef("--%s must be positive (leave it out for the engine's default)", name)
				}
				// Zero is a value of its own for these (keep nothing, retry at
				// once), which QueueOptions cannot say: set it in the same
				// transaction.
				zeros := map[string]any{}
				for flagName, option := range map[string]string{"retention": "retention",
					"backoff-base": "backoff_base", "backoff-max": "backoff_max", "max-delay": "max_delay"} {
					if setToZero(fs, flagName) != "" {
						zeros[option] = "0 seconds"
					}
				}
				return e.withDB(ctx, *url, func(db *database) error {
					err := db.client.InTx(ctx, func(tx pgx.Tx) error {
						if err := db.client.CreateQueueTx(ctx, tx, args[0], &o); err != nil {
							return err
						}
						if len(zeros) == 0 {
							return nil
						}
						_, err := db.client.AlterQueueTx(ctx, tx, args[0], zeros)
						return err
					})
					if err != nil {
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
								"options": q.Options}); err != nil {
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
max_delay (durations such as 30s, 5m or 1h).

Examples:
  sluice queue config orders
  sluice queue config orders --set max_attempts=10 --set lease=2m
`

// durationOptions are the queue options that are intervals.
var durationOptions = map[string]bool{"lease": true, "backoff_base": true, "backoff_max": true, "retention": true,
	"rotate_interval": true, "dedup_window": true, "max_delay": true}

// optionFlags collects repeated --set option=value flags as the JSON values
// of sluice.alter_queue: durations as interval strings, integers, booleans.
type optionFlags map[string]any

func (o optionFlags) String() string { return "" }

func (o optionFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want option=value, got %q", s)
	}
	switch k {
	case "lease", "backoff_base", "backoff_max", "retention", "rotate_interval", "dedup_window", "max_delay":
		d, err := parseDuration(v)
		if err != nil {
			return fmt.Errorf("option %s: %w", k, err)
		}
		o[k] = sluice.IntervalString(d)
	case "max_attempts", "max_payload":
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("option %s: want an integer, got %q", k, v)
		}
		o[k] = n
	case "notify":
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("option notify: want true or false, got %q", v)
		}
		o[k] = b
	default:
		return fmt.Errorf("unknown option %q (see --help)", k)
	}
	return nil
}

func queueConfigCommand() command {
	return command{
		name: "config", summary: "show or change the options of a queue", usage: queueConfigUsage, minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			changes := optionFlags{}
			fs.Var(changes, "set", "change an option, as `option=value` (repeatable)")
			return func(ctx context.Context, args []string) error {
				return e.withDB(ctx, *url, func(db *database) error {
					if len(changes) > 0 {
						if _, err := db.client.AlterQueue(ctx, args[0], changes); err != nil {
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
						var opts map[string]json.RawMessage
						if err := json.Unmarshal(q.Options, &opts); err != nil {
							return fmt.Errorf("reading the options of queue %s: %w", q.Name, err)
						}
						tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
						fmt.Fprintf(tw, "queue\t%s\n", q.Name)
						fmt.Fprintf(tw, "created\t%s\n", q.CreatedAt.Local().Format(time.RFC3339))
						fmt.Fprintf(tw, "groups\t%s\n", strings.Join(q.Groups, ", "))
						for _, k := range []string{"max_attempts", "lease", "backoff_base", "backoff_max", "retention",
							"rotate_interval", "dedup_window", "max_delay", "max_payload", "notify", "default_group"} {
							v, ok := opts[k]
							if !ok {
								continue
							}
							text := string(bytes.Trim(v, `"`))
							if durationOptions[k] {
								text = formatInterval(text)
							}
							fmt.Fprintf(tw, "%s\t%s\n", k, text)
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
and continue with the messages sent afterwards.

Example:
  sluice queue purge orders
`

func queuePurgeCommand() command {
	return command{
		name: "purge", summary: "remove every message of a queue", usage: queuePurgeUsage, minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			return func(ctx context.Context, args []string) error {
				return e.withDB(ctx, *url, func(db *database) error {
					n, err := db.client.PurgeQueue(ctx, args[0])
					if err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "purged %s from queue %s\n", plural(n, "message", "messages"), args[0])
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
