package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice"
)

const sendUsage = `Usage: sluice send QUEUE [BODY] [flags]

Sends a message to a queue. BODY is any JSON value; quote text as a JSON
string ('"hello"'). Without BODY, reads messages from standard input as
NDJSON (one JSON value per line; empty lines are skipped) and sends them in
batches of 1000, each batch atomically. The flags apply to every message.

With BODY it prints the message's id; from standard input, a summary.

Examples:
  sluice send orders '{"id": 1, "total": 9.5}'
  sluice send orders '{"id": 2}' --key customer-7 --header trace=abc --header source=cli
  sluice send reminders '"call Ada"' --delay 10m --priority 5
  printf '{"n":1}\n{"n":2}\n' | sluice send orders
`

// headerFlags collects repeated --header k=v flags.
type headerFlags map[string]string

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	h[k] = v
	return nil
}

func sendCommand() command {
	return command{
		name: "send", summary: "send a message (or NDJSON from standard input)", usage: sendUsage, minArgs: 1, maxArgs: 2,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			key := fs.String("key", "", "ordering key of the messages: per group, one key's messages are delivered in order")
			delay := fs.Duration("delay", 0, "deliver no earlier than this `duration` from now, such as 30s or 5m")
			priority := fs.Int("priority", 0, "priority of unkeyed messages: higher is delivered first")
			dedup := fs.String("dedup-key", "", "deduplication key: a key already sent to the queue within its dedup window enqueues nothing")
			headers := headerFlags{}
			fs.Var(headers, "header", "a header as `key=value` (repeatable; values are strings)")
			return func(ctx context.Context, args []string) error {
				if *delay < 0 {
					return usagef("--delay must not be negative, got %s", *delay)
				}
				opts := &sluice.SendOptions{Key: *key, Delay: *delay, Priority: *priority, DedupKey: *dedup}
				if len(headers) > 0 {
					h, err := json.Marshal(map[string]string(headers))
					if err != nil {
						return err
					}
					opts.Headers = h
				}
				var body json.RawMessage
				if len(args) == 2 {
					body = json.RawMessage(args[1])
					if !json.Valid(body) {
						return usagef("BODY %q is not JSON; to send text, quote it as a JSON string: '\"%s\"'", args[1], args[1])
					}
				}
				return e.withDB(ctx, *url, func(db *database) error {
					if body != nil {
						id, err := db.client.Send(ctx, args[0], body, opts)
						if err != nil {
							return err
						}
						fmt.Fprintln(e.stdout, id)
						return nil
					}
					return e.sendStdin(ctx, db, args[0], opts)
				})
			}
		},
	}
}

// sendStdin sends the NDJSON lines of standard input in batches.
func (e *env) sendStdin(ctx context.Context, db *database, queue string, opts *sluice.SendOptions) error {
	const batchSize = 1000
	sc := bufio.NewScanner(e.stdin)
	sc.Buffer(make([]byte, 64*1024), 128*1024*1024)
	var batch []json.RawMessage
	var sent, first, last int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var ids []int64
		var err error
		if opts.Priority != 0 || opts.DedupKey != "" {
			// send_batch has no priority or dedup key: send one by one, in one transaction.
			err = db.client.InTx(ctx, func(tx pgx.Tx) error {
				for _, b := range batch {
					id, err := db.client.SendTx(ctx, tx, queue, b, opts)
					if err != nil {
						return err
					}
					ids = append(ids, id)
				}
				return nil
			})
		} else {
			msgs := make([]sluice.BatchMessage, len(batch))
			for i, b := range batch {
				msgs[i] = sluice.BatchMessage{Body: b, Headers: opts.Headers, Key: opts.Key}
			}
			ids, err = db.client.SendBatch(ctx, queue, msgs, &sluice.SendBatchOptions{Delay: opts.Delay})
		}
		if err != nil {
			return err
		}
		if sent == 0 {
			first = ids[0]
		}
		last = ids[len(ids)-1]
		sent += int64(len(ids))
		batch = batch[:0]
		return nil
	}
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		if !json.Valid([]byte(text)) {
			return fmt.Errorf("standard input, line %d: not JSON (sent %d messages before it): %.80q", line, sent, text)
		}
		batch = append(batch, json.RawMessage(text))
		if len(batch) == batchSize {
			if err := flush(); err != nil {
				return fmt.Errorf("sent %d messages, then: %w", sent, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading standard input (sent %d messages): %w", sent, err)
	}
	if err := flush(); err != nil {
		return fmt.Errorf("sent %d messages, then: %w", sent, err)
	}
	if sent == 0 {
		fmt.Fprintln(e.stdout, "sent no messages (standard input had none)")
		return nil
	}
	fmt.Fprintf(e.stdout, "sent %d messages to queue %s (ids %d to %d)\n", sent, queue, first, last)
	return nil
}

// messageJSON is how receive, tail and dlq print a message.
type messageJSON struct {
	ID       int64           `json:"id"`
	Queue    string          `json:"queue"`
	Group    string          `json:"group"`
	Attempt  int             `json:"attempt,omitempty"`
	Attempts int             `json:"attempts,omitempty"`
	Key      string          `json:"key,omitempty"`
	Priority int             `json:"priority,omitempty"`
	SentAt   time.Time       `json:"sent_at"`
	DiedAt   *time.Time      `json:"died_at,omitempty"`
	Error    string          `json:"error,omitempty"`
	Receipt  string          `json:"receipt,omitempty"`
	Headers  json.RawMessage `json:"headers,omitempty"`
	Body     json.RawMessage `json:"body"`
}
