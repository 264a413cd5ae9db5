package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/sluicemq/sluice"
)

const groupUsage = `Usage: sluice group <command> [arguments] [flags]

Manages consumer groups. Every group of a queue receives every message
(fan-out); the consumers of one group compete for its messages.

Commands:
%s
Examples:
  sluice group create orders billing
  sluice group create orders audit --start-from latest
  sluice group seek orders audit --to "2026-11-21 10:00:00+00" --yes
  sluice group drop orders audit
`

func groupCommand() command {
	return command{
		name:    "group",
		summary: "create, drop and rewind consumer groups",
		usage:   groupUsage,
		sub:     []command{groupCreateCommand(), groupDropCommand(), groupSeekCommand()},
	}
}

const startFromHelp = "where the group starts: earliest (the oldest retained message), latest (messages sent from now on) or a `timestamp` such as \"2026-11-21 10:00:00+00\" (replay within the retention)"

const groupCreateUsage = `Usage: sluice group create QUEUE GROUP [flags]

Adds a consumer group to a queue.

Examples:
  sluice group create orders billing
  sluice group create orders analytics --start-from latest
  sluice group create orders replay --start-from "2026-11-21 10:00:00+00"
  sluice group create orders scratch --ttl 1h
`

func groupCreateCommand() command {
	return command{
		name: "create", summary: "add a consumer group to a queue", usage: groupCreateUsage, minArgs: 2, maxArgs: 2,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			from := fs.String("start-from", sluice.StartEarliest, startFromHelp)
			ttl := fs.Duration("ttl", 0, "a temporary group: dropped by maintenance once unused by any receive for this long (1s to 365 days)")
			return func(ctx context.Context, args []string) error {
				if *ttl < 0 {
					return usagef("--ttl must not be negative")
				}
				return e.withDB(ctx, *url, func(db *database) error {
					if err := db.client.CreateGroup(ctx, args[0], args[1], &sluice.GroupOptions{StartFrom: *from, TTL: *ttl}); err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "created group %s of queue %s, starting from %s\n", args[1], args[0], *from)
					return nil
				})
			}
		},
	}
}

const groupDropUsage = `Usage: sluice group drop QUEUE GROUP [flags]

Removes a consumer group and its dead letters. It fails when there is no
such group, unless --if-exists.

Example:
  sluice group drop orders analytics
`

func groupDropCommand() command {
	return command{
		name: "drop", summary: "remove a consumer group", usage: groupDropUsage, minArgs: 2, maxArgs: 2,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			ifExists := fs.Bool("if-exists", false, "succeed when there is no such group")
			return func(ctx context.Context, args []string) error {
				return e.withDB(ctx, *url, func(db *database) error {
					ok, err := db.client.DropGroup(ctx, args[0], args[1])
					switch {
					case err != nil:
						return err
					case ok:
						fmt.Fprintf(e.stdout, "dropped group %s of queue %s\n", args[1], args[0])
					case *ifExists:
						fmt.Fprintf(e.stdout, "no group %s in queue %s\n", args[1], args[0])
					default:
						return fmt.Errorf("group %q of queue %q does not exist: %w", args[1], args[0], sluice.ErrGroupNotFound)
					}
					return nil
				})
			}
		},
	}
}

const groupSeekUsage = `Usage: sluice group seek QUEUE GROUP --to POSITION --yes [flags]

Moves a consumer group to another position: earliest (the oldest retained
message), latest (messages sent from now on) or a timestamp (the messages
batched from then on, within the retention). Backward, the group receives
again the messages it already acked (replay); forward, it skips what it had
not received. The group keeps its name, its ttl and its dead letters; its
consumers' leases held at the seek go stale (their acks count 0) and those
messages come again if they are at or after the new position; retries of
nacked messages still pending are forgotten. --yes confirms that.

Examples:
  sluice group seek orders analytics --to earliest --yes
  sluice group seek orders analytics --to latest --yes
  sluice group seek orders analytics --to "2026-11-21 10:00:00+00" --yes
`

func groupSeekCommand() command {
	return command{
		name: "seek", summary: "move a group to another position (replay or skip)", usage: groupSeekUsage, minArgs: 2, maxArgs: 2,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			to := fs.String("to", "", "the new position: earliest, latest or a `timestamp`")
			yes := fs.Bool("yes", false, "confirm that the group's leases go stale and its pending retries are forgotten (it replays or skips messages)")
			return func(ctx context.Context, args []string) error {
				if *to == "" {
					return usagef("--to is required")
				}
				if !*yes {
					return usagef("seeking makes the group's leases stale and forgets its pending retries: add --yes to confirm")
				}
				return e.withDB(ctx, *url, func(db *database) error {
					if err := db.client.SeekGroup(ctx, args[0], args[1], *to); err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "group %s of queue %s now starts from %s\n", args[1], args[0], *to)
					return nil
				})
			}
		},
	}
}
