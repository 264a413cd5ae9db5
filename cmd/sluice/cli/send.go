package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
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
					return usagef("--delay must not be negative, got %s", formatDuration(*delay))
				}
				if *priority < math.MinInt32 || *priority > math.MaxInt32 {
					return usagef("--priority must be from %d to %d, got %d", math.MinInt32, math.MaxInt32, *priority)
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
				if body == nil && e.stdinIsTerminal() {
					fmt.Fprintln(e.stderr, "sluice send: reading messages from standard input, one JSON value per line; "+
						"end with Ctrl-D (or give BODY as an argument to send one message)")
				}
				return e.withDB(ctx, *url, func(db *database) error {
					if body == nil {
						return e.sendStdin(ctx, db, args[0], opts)
					}
					var id int64
					var duplicate bool
					err := db.client.InTx(ctx, func(tx pgx.Tx) error {
						var err error
						if id, err = db.client.SendTx(ctx, tx, args[0], body, opts); err != nil {
							return err
						}
						duplicate, err = enqueuedNothing(ctx, tx, opts)
						return err
					})
					if err != nil {
						return err
					}
					fmt.Fprintln(e.stdout, id)
					if duplicate {
						fmt.Fprintf(e.stderr, "sluice send: nothing enqueued: dedup key %q was sent to queue %s within its dedup window; "+
							"%d is the id of that earlier message\n", opts.DedupKey, args[0], id)
					}
					return nil
				})
			}
		},
	}
}

// enqueuedNothing reports whether the sends of tx so far, all with
// opts.DedupKey, were duplicates: a send that enqueues a message writes, and
// a write gives the transaction an id; a duplicate only reads.
func enqueuedNothing(ctx context.Context, tx pgx.Tx, opts *sluice.SendOptions) (bool, error) {
	if opts.DedupKey == "" {
		return false, nil
	}
	var none bool
	if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id_if_assigned() IS NULL").Scan(&none); err != nil {
		return false, fmt.Errorf("checking whether the send was a duplicate: %w", err)
	}
	return none, nil
}

// defaultMaxLine is the longest line of standard input that sluice send
// reads as one message.
const defaultMaxLine = 128 << 20

// sendStdin sends the NDJSON lines of standard input in batches.
func (e *env) sendStdin(ctx context.Context, db *database, queue string, opts *sluice.SendOptions) error {
	const batchSize = 1000
	maxLine := e.maxLine
	if maxLine <= 0 {
		maxLine = defaultMaxLine
	}
	sc := bufio.NewScanner(e.stdin)
	sc.Buffer(make([]byte, 0, min(64*1024, maxLine)), maxLine)
	var batch []json.RawMessage
	var sent, first, last int64
	duplicates := 0 // messages a dedup key kept out
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var ids []int64
		var err error
		if opts.Priority != 0 || opts.DedupKey != "" {
			// send_batch has no priority or dedup key: send one by one, in one transaction.
			dups := 0
			err = db.client.InTx(ctx, func(tx pgx.Tx) error {
				for _, b := range batch {
					id, err := db.client.SendTx(ctx, tx, queue, b, opts)
					if err != nil {
						return err
					}
					ids = append(ids, id)
				}
				// Every message carries the same dedup key: at most the
				// first is enqueued, and only if the transaction wrote.
				none, err := enqueuedNothing(ctx, tx, opts)
				switch {
				case err != nil:
					return err
				case opts.DedupKey == "":
				case none:
					dups = len(batch)
				default:
					dups = len(batch) - 1
				}
				return nil
			})
			duplicates += dups
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
			return fmt.Errorf("standard input, line %d: not JSON (sent %s before it): %.80q", line, plural(sent, "message", "messages"), text)
		}
		batch = append(batch, json.RawMessage(text))
		if len(batch) == batchSize {
			if err := flush(); err != nil {
				return fmt.Errorf("sent %s, then: %w", plural(sent, "message", "messages"), err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("standard input, line %d: longer than %d bytes, the most one line (one message) may hold; "+
				"nothing of it was sent (sent %s before it)", line+1, maxLine, plural(sent, "message", "messages"))
		}
		return fmt.Errorf("reading standard input (sent %s): %w", plural(sent, "message", "messages"), err)
	}
	if err := flush(); err != nil {
		return fmt.Errorf("sent %s, then: %w", plural(sent, "message", "messages"), err)
	}
	if sent == 0 {
		fmt.Fprintln(e.stdout, "sent no messages (standard input had none)")
		return nil
	}
	if sent == 1 {
		fmt.Fprintf(e.stdout, "sent 1 message to queue %s (id %d)\n", queue, first)
	} else {
		fmt.Fprintf(e.stdout, "sent %d messages to queue %s (ids %d to %d)\n", sent, queue, first, last)
	}
	if duplicates > 0 {
		fmt.Fprintf(e.stderr, "sluice send: %d of the %d messages enqueued nothing: dedup key %q was sent to queue %s within its dedup window\n",
			duplicates, sent, opts.DedupKey, queue)
	}
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
