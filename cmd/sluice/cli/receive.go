package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/sluicemq/sluice"
)

const receiveUsage = `Usage: sluice receive QUEUE [flags]

Receives up to --max ready messages of a queue for a consumer group, prints
them as JSON lines and acknowledges them. It does not wait: with nothing
ready it prints nothing. To follow a queue, use "sluice tail".

With --no-ack the messages stay leased and are delivered again when the
lease expires (counting as a delivery attempt); their receipts are printed
so that they can be completed with "sluice ack", "sluice nack" or
"sluice extend" (or with SQL: sluice.ack).

Examples:
  sluice receive orders
  sluice receive orders --group billing --max 100
  sluice receive orders --no-ack --lease 5m
  sluice receive orders --no-ack | sluice ack orders
`

func printMessage(enc *json.Encoder, m *sluice.Message, withReceipt bool) error {
	out := messageJSON{ID: m.ID, Queue: m.Queue, Group: m.Group, Attempt: m.Attempt, Key: m.Key, Priority: m.Priority,
		SentAt: m.SentAt, Headers: m.Headers, Body: m.Body}
	if withReceipt {
		out.Receipt = m.Receipt
	}
	return enc.Encode(out)
}

func receiveCommand() command {
	return command{
		name: "receive", summary: "receive messages once, print and acknowledge them", usage: receiveUsage, minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			group := fs.String("group", "default", "consumer `group`")
			max := fs.Int("max", 10, "most messages to receive, 1 to 10000")
			lease := fs.Duration("lease", 0, "lease `duration` (default: the queue's lease option)")
			noAck := fs.Bool("no-ack", false, "leave the messages leased instead of acknowledging them")
			return func(ctx context.Context, args []string) error {
				if *max < 1 || *max > 10000 {
					return usagef("--max must be from 1 to 10000, got %d", *max)
				}
				if *lease < 0 || setToZero(fs, "lease") != "" {
					return usagef("--lease must be positive (leave it out for the queue's lease)")
				}
				return e.withDB(ctx, *url, func(db *database) error {
					msgs, err := db.client.Receive(ctx, args[0], *group, &sluice.ReceiveOptions{Max: *max, Lease: *lease, Consumer: "sluice receive"})
					if err != nil {
						return err
					}
					enc := json.NewEncoder(e.stdout)
					receipts := make([]string, 0, len(msgs))
					for i := range msgs {
						if err := printMessage(enc, &msgs[i], *noAck); err != nil {
							return err
						}
						receipts = append(receipts, msgs[i].Receipt)
					}
					if *noAck || len(msgs) == 0 {
						return nil
					}
					_, err = db.client.Ack(ctx, args[0], *group, receipts...)
					return err
				})
			}
		},
	}
}

const tailUsage = `Usage: sluice tail QUEUE [flags]

Follows a queue: prints its messages as JSON lines as they arrive, until
interrupted (Ctrl-C) or --count messages. It consumes for a group (default
"default"), acknowledging each message once printed, with LISTEN/NOTIFY
wake-ups and polling as fallback.

With --no-ack it only watches: it reads through a temporary group of its own
(tail-<pid>, starting from --from, latest by default) that is dropped when
it exits (at --count, Ctrl-C, SIGTERM or SIGHUP), so the real groups keep
their messages. The group is made with a time to live (--ttl, 10m by
default, and at least 20 poll intervals): a tail killed with SIGKILL
(kill -9) or by a crash cannot drop it, and maintenance (sluice.maintain, or
the upkeep of receives on the queue) drops it once it has not been read
for that long. --from and --ttl without --no-ack are usage errors.

Examples:
  sluice tail orders
  sluice tail orders --group billing
  sluice tail orders --no-ack
  sluice tail orders --no-ack --from earliest --count 10
`

// tailGroupTTL is the default time to live of the temporary group of
// "sluice tail --no-ack".
const tailGroupTTL = 10 * time.Minute

func tailCommand() command {
	return command{
		name: "tail", summary: "follow a queue, printing its messages", usage: tailUsage, minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			group := fs.String("group", "default", "consumer `group` (not with --no-ack)")
			noAck := fs.Bool("no-ack", false, "watch through a temporary group instead of consuming")
			from := fs.String("from", sluice.StartLatest, "with --no-ack, where the temporary group starts: earliest, latest or a `timestamp`")
			count := fs.Int("count", 0, "exit after this many messages (0: follow until interrupted)")
			poll := fs.Duration("poll-interval", sluice.DefaultPollInterval, "how often to look for messages when no wake-up comes")
			noListen := fs.Bool("no-listen", false, "poll only, without LISTEN (behind a transaction-mode pooler)")
			ttl := fs.Duration("ttl", tailGroupTTL, "with --no-ack, how long the temporary group outlives a tail killed without dropping it")
			return func(ctx context.Context, args []string) error {
				if *count < 0 {
					return usagef("--count must not be negative")
				}
				if *poll <= 0 {
					return usagef("--poll-interval must be positive")
				}
				if !*noAck && flagGiven(fs, "from") {
					return usagef("--from works only with --no-ack: a real group reads from where it is (move it with \"sluice group seek\")")
				}
				if !*noAck && flagGiven(fs, "ttl") {
					return usagef("--ttl works only with --no-ack (it is the temporary group's)")
				}
				if *ttl < time.Second {
					return usagef("--ttl must be at least 1s")
				}
				return e.withDB(ctx, *url, func(db *database) error {
					queue, g := args[0], *group
					if *noAck {
						g = fmt.Sprintf("tail-%d", os.Getpid())
						// The group outlives a tail killed with SIGKILL by its TTL only; it
						// must not expire under a live one between two polls.
						gttl := max(*ttl, 20**poll)
						if err := db.client.CreateGroup(ctx, queue, g, &sluice.GroupOptions{StartFrom: *from, TTL: gttl}); err != nil {
							return err
						}
						defer func() {
							dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
							defer cancel()
							if _, err := db.client.DropGroup(dctx, queue, g); err != nil {
								fmt.Fprintf(e.stderr, "sluice tail: dropping the temporary group %s: %v\n", g, err)
							}
						}()
					}
					ctx, stop := context.WithCancel(ctx)
					defer stop()
					enc := json.NewEncoder(e.stdout)
					var mu sync.Mutex
					printed := 0
					err := db.client.Consume(ctx, queue, g, func(_ context.Context, m *sluice.Message) error {
						mu.Lock()
						defer mu.Unlock()
						if *count > 0 && printed >= *count {
							stop()
							return fmt.Errorf("sluice tail: stopping after %s", plural(*count, "message", "messages"))
						}
						if err := printMessage(enc, m, false); err != nil {
							return err
						}
						printed++
						if *count > 0 && printed >= *count {
							stop()
						}
						return nil
					}, &sluice.ConsumeOptions{Concurrency: 1, PollInterval: *poll, DisableListen: *noListen,
						Consumer: "sluice tail", Logger: slog.New(slog.NewTextHandler(e.stderr, nil)), DrainTimeout: 5 * time.Second})
					return err
				})
			}
		},
	}
}
