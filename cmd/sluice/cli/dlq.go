package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicemq/sluice"
)

const dlqUsage = `Usage: sluice dlq <command> [arguments] [flags]

Inspects, redrives and discards dead letters: messages that used up their
queue's max_attempts in a consumer group.

Commands:
%s
Examples:
  sluice dlq list orders
  sluice dlq list orders --group billing --json
  sluice dlq redrive orders --group billing
  sluice dlq redrive orders 17 42
  sluice dlq discard orders --group billing
  sluice dlq discard orders 17 42
`

func dlqCommand() command {
	return command{
		name: "dlq", summary: "list, redrive and discard dead letters", usage: dlqUsage,
		sub: []command{dlqListCommand(), dlqRedriveCommand(), dlqDiscardCommand()},
	}
}

const dlqListUsage = `Usage: sluice dlq list QUEUE [flags]

Lists the dead letters of a queue that were neither redriven nor discarded,
oldest first: a table, or JSON lines with --json (with the whole body and
error).

Examples:
  sluice dlq list orders
  sluice dlq list orders --group billing --max 1000 --json
`

func dlqListCommand() command {
	return command{
		name: "list", summary: "list dead letters", usage: dlqListUsage, minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			group := fs.String("group", "", "only this consumer `group`'s dead letters")
			max := fs.Int("max", 100, "most dead letters to list, 1 to 10000")
			asJSON := fs.Bool("json", false, "print JSON lines instead of a table")
			return func(ctx context.Context, args []string) error {
				if *max < 1 || *max > 10000 {
					return usagef("--max must be from 1 to 10000, got %d", *max)
				}
				return e.withDB(ctx, *url, func(db *database) error {
					dls, err := db.client.DeadLetters(ctx, args[0], &sluice.DeadLetterOptions{Group: *group, Max: *max})
					if err != nil {
						return err
					}
					if *asJSON {
						enc := json.NewEncoder(e.stdout)
						for _, d := range dls {
							died := d.DiedAt
							if err := enc.Encode(messageJSON{ID: d.ID, Queue: args[0], Group: d.Group, Attempts: d.Attempts, Key: d.Key,
								SentAt: d.SentAt, DiedAt: &died, Error: d.Error, Headers: d.Headers, Body: d.Body}); err != nil {
								return err
							}
						}
						return nil
					}
					if len(dls) == 0 {
						fmt.Fprintf(e.stdout, "no dead letters in queue %s\n", args[0])
						return nil
					}
					tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tGROUP\tATTEMPTS\tDIED\tERROR\tBODY")
					for _, d := range dls {
						fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", d.ID, d.Group, d.Attempts, d.DiedAt.Local().Format(time.DateTime),
							clip(d.Error, 40), clip(string(d.Body), 60))
					}
					return tw.Flush()
				})
			}
		},
	}
}

// clip shortens s to its first line and at most n characters.
func clip(s string, n int) string {
	s, _, cut := strings.Cut(s, "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	if cut {
		return s + " …"
	}
	return s
}

const dlqRedriveUsage = `Usage: sluice dlq redrive QUEUE [ID...] [flags]

Makes dead letters deliverable again, each to the group it died in, with its
attempts reset: all of the queue's, or those of --group, or only the
messages with the given ids.

Examples:
  sluice dlq redrive orders
  sluice dlq redrive orders --group billing
  sluice dlq redrive orders 17 42
`

func dlqRedriveCommand() command {
	return command{
		name: "redrive", summary: "make dead letters deliverable again", usage: dlqRedriveUsage, minArgs: 1, maxArgs: -1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			group := fs.String("group", "", "only this consumer `group`'s dead letters")
			return func(ctx context.Context, args []string) error {
				ids, err := messageIDs(args[1:])
				if err != nil {
					return err
				}
				return e.withDB(ctx, *url, func(db *database) error {
					n, err := db.client.Redrive(ctx, args[0], *group, ids...)
					if err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "redrove %s of queue %s\n", plural(n, "dead letter", "dead letters"), args[0])
					return nil
				})
			}
		},
	}
}

// messageIDs parses message ids given as arguments (nil for none).
func messageIDs(args []string) ([]int64, error) {
	var ids []int64
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, usagef("message id %q is not a positive integer", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

const dlqDiscardUsage = `Usage: sluice dlq discard QUEUE [ID...] [flags]

Discards dead letters for good: every one of --group's, or only the
messages with the given ids (of --group, or of every group). They are no
longer listed, counted as dead or redriven; status's dead_lettered still
counts them. It needs --group or ids: it never discards a whole queue's
dead letters by omission.

Examples:
  sluice dlq discard orders --group billing
  sluice dlq discard orders 17 42
`

func dlqDiscardCommand() command {
	return command{
		name: "discard", summary: "drop dead letters for good", usage: dlqDiscardUsage, minArgs: 1, maxArgs: -1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			group := fs.String("group", "", "only this consumer `group`'s dead letters (all of them without ids)")
			return func(ctx context.Context, args []string) error {
				ids, err := messageIDs(args[1:])
				if err != nil {
					return err
				}
				if *group == "" && ids == nil {
					return usagef("say which dead letters to discard: --group GROUP (all of its), or message ids")
				}
				return e.withDB(ctx, *url, func(db *database) error {
					n, err := db.client.DiscardDeadLetters(ctx, args[0], *group, ids)
					if err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "discarded %s of queue %s\n", plural(n, "dead letter", "dead letters"), args[0])
					return nil
				})
			}
		},
	}
}
