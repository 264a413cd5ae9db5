package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/sluicemq/sluice"
)

const ackUsage = `Usage: sluice ack QUEUE [RECEIPT...] [flags]

Completes messages received with "sluice receive --no-ack", by their
receipts: given as arguments, else read from standard input, one per line,
either the receipt itself or a JSON line as receive prints it (its
"receipt", and its "group" unless --group is given). A stale receipt (lease
expired, message delivered again or already completed) changes nothing and
is reported.

Examples:
  sluice ack orders 'RECEIPT'
  sluice receive orders --no-ack --max 100 | sluice ack orders
  sluice receive orders --group billing --no-ack | sluice ack orders
`

const nackUsage = `Usage: sluice nack QUEUE [RECEIPT...] [flags]

Gives messages back after a failure, by their receipts (as arguments or on
standard input, as for "sluice ack"): each is delivered again after the
queue's backoff (or --delay, or at once with --now), or becomes a dead letter
once it has had the queue's max_attempts deliveries.

Examples:
  sluice nack orders 'RECEIPT' --error "card declined"
  sluice receive orders --no-ack | sluice nack orders --delay 1m
`

const extendUsage = `Usage: sluice extend QUEUE [RECEIPT...] --lease DURATION [flags]

Renews the leases of received messages (a heartbeat), by their receipts (as
arguments or on standard input, as for "sluice ack"): each current lease then
lasts at least --lease from now.

Examples:
  sluice extend orders 'RECEIPT' --lease 5m
  sluice receive orders --no-ack > leased.jsonl; sluice extend orders --lease 10m < leased.jsonl
`

func ackCommand() command {
	return receiptCommand("ack", "complete received messages by their receipts", ackUsage,
		func(fs *flag.FlagSet) func(ctx context.Context, db *database, queue, group string, receipts []string) (string, error) {
			return func(ctx context.Context, db *database, queue, group string, receipts []string) (string, error) {
				n, err := db.client.Ack(ctx, queue, group, receipts...)
				return counted("acknowledged", n, len(receipts), queue, group), err
			}
		})
}

func nackCommand() command {
	return receiptCommand("nack", "give received messages back for a retry", nackUsage,
		func(fs *flag.FlagSet) func(ctx context.Context, db *database, queue, group string, receipts []string) (string, error) {
			delay := fs.Duration("delay", 0, "retry after this `duration` (default: the queue's backoff)")
			now := fs.Bool("now", false, "retry at once")
			text := fs.String("error", "", "what went wrong, kept with the message if it becomes a dead letter")
			return func(ctx context.Context, db *database, queue, group string, receipts []string) (string, error) {
				if *delay < 0 {
					return "", usagef("--delay must not be negative")
				}
				if *now && *delay > 0 {
					return "", usagef("--now and --delay exclude each other")
				}
				n := 0
				for _, r := range receipts {
					ok, err := db.client.Nack(ctx, queue, group, r, &sluice.NackOptions{Error: *text, Delay: *delay, Now: *now})
					if err != nil {
						return "", fmt.Errorf("gave back %d of %s, then: %w", n, plural(len(receipts), "message", "messages"), err)
					}
					if ok {
						n++
					}
				}
				return counted("gave back", n, len(receipts), queue, group), nil
			}
		})
}

func extendCommand() command {
	return receiptCommand("extend", "renew the leases of received messages", extendUsage,
		func(fs *flag.FlagSet) func(ctx context.Context, db *database, queue, group string, receipts []string) (string, error) {
			lease := fs.Duration("lease", 0, "new lease `duration`, from now (required)")
			return func(ctx context.Context, db *database, queue, group string, receipts []string) (string, error) {
				if *lease <= 0 {
					return "", usagef("--lease is required and must be positive, such as --lease 5m")
				}
				n, err := db.client.Extend(ctx, queue, group, *lease, receipts...)
				return counted("extended the leases of", n, len(receipts), queue, group), err
			}
		})
}

// counted says what a receipt command did: n of total receipts counted.
func counted(verb string, n, total int, queue, group string) string {
	s := fmt.Sprintf("%s %s of queue %s, group %s", verb, plural(n, "message", "messages"), queue, group)
	switch stale := total - n; {
	case stale == 1:
		s += "; 1 receipt was stale (lease expired, message delivered again or already completed): nothing changed for it"
	case stale > 1:
		s += fmt.Sprintf("; %d receipts were stale (lease expired, message delivered again or already completed): nothing changed for them", stale)
	}
	return s
}

// receiptCommand builds ack, nack and extend: QUEUE, receipts from the
// arguments or standard input, --group; setup adds the command's own flags
// and returns what it does with one group's receipts.
func receiptCommand(name, summary, usage string,
	setup func(fs *flag.FlagSet) func(ctx context.Context, db *database, queue, group string, receipts []string) (string, error)) command {
	return command{
		name: name, summary: summary, usage: usage, minArgs: 1, maxArgs: -1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			group := fs.String("group", "default", "consumer `group` of the receipts (default: a JSON line's group, else \"default\")")
			do := setup(fs)
			return func(ctx context.Context, args []string) error {
				queue := args[0]
				byGroup := map[string][]string{}
				var order []string
				add := func(g, r string) {
					if _, ok := byGroup[g]; !ok {
						order = append(order, g)
					}
					byGroup[g] = append(byGroup[g], r)
				}
				if len(args) > 1 {
					for _, r := range args[1:] {
						add(*group, r)
					}
				} else {
					if e.stdinIsTerminal() {
						fmt.Fprintf(e.stderr, "sluice %s: reading receipts from standard input, one per line; end with Ctrl-D\n", name)
					}
					if err := readReceipts(e, *group, flagGiven(fs, "group"), add); err != nil {
						return err
					}
				}
				if len(order) == 0 {
					return usagef("no receipts: give them as arguments or on standard input")
				}
				return e.withDB(ctx, *url, func(db *database) error {
					for _, g := range order {
						msg, err := do(ctx, db, queue, g, byGroup[g])
						if err != nil {
							return err
						}
						fmt.Fprintln(e.stdout, msg)
					}
					return nil
				})
			}
		},
	}
}

// readReceipts reads receipts from standard input: one per line, bare or
// as a JSON line of "sluice receive --no-ack" (whose group counts unless
// --group was given).
func readReceipts(e *env, group string, groupGiven bool, add func(group, receipt string)) error {
	sc := bufio.NewScanner(e.stdin)
	sc.Buffer(make([]byte, 0, 64*1024), defaultMaxLine)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		switch {
		case text == "":
			continue
		case strings.HasPrefix(text, "{"):
			var m struct {
				Receipt string `json:"receipt"`
				Group   string `json:"group"`
			}
			if err := json.Unmarshal([]byte(text), &m); err != nil {
				return usagef("standard input, line %d: not JSON: %v", line, err)
			}
			if m.Receipt == "" {
				return usagef("standard input, line %d: a message without a receipt (\"sluice receive --no-ack\" prints them)", line)
			}
			g := group
			if !groupGiven && m.Group != "" {
				g = m.Group
			}
			add(g, m.Receipt)
		default:
			add(group, text)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading receipts from standard input: %w", err)
	}
	return nil
}
