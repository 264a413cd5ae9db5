package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/sluicemq/sluice"
)

const statusUsage = `Usage: sluice status [QUEUE] [flags]

Shows the depth and progress of every consumer group of a queue (of every
queue without QUEUE): messages ready, waiting (keyed messages behind an
earlier one of their key), delayed (delay or retry backoff), in flight
(leased), dead, the group's lag (messages from its oldest pending one
to the newest) and the age of its oldest pending message. With --watch it
refreshes every --interval until interrupted. With --json it prints one
JSON object per group instead of the table (oldest_pending_age in seconds).

Examples:
  sluice status
  sluice status orders --watch
  sluice status orders --json
`

func statusCommand() command {
	return command{
		name: "status", summary: "show queue depth and group progress (--watch)", usage: statusUsage, maxArgs: 1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			watch := fs.Bool("watch", false, "refresh until interrupted")
			interval := fs.Duration("interval", time.Second, "refresh interval of --watch")
			asJSON := fs.Bool("json", false, "print JSON lines instead of a table")
			return func(ctx context.Context, args []string) error {
				if *interval <= 0 {
					return usagef("--interval must be positive")
				}
				queue := ""
				if len(args) == 1 {
					queue = args[0]
				}
				return e.withDB(ctx, *url, func(db *database) error {
					tty := isTerminal(e.stdout)
					for {
						st, err := db.client.Status(ctx, queue)
						if err != nil {
							if *watch && ctx.Err() != nil {
								return nil
							}
							return err
						}
						if *asJSON {
							if err := printStatusJSON(e.stdout, st); err != nil {
								return err
							}
						} else {
							if *watch && tty {
								fmt.Fprint(e.stdout, "\033[H\033[2J")
							}
							if *watch {
								fmt.Fprintf(e.stdout, "%s  (every %s, Ctrl-C to stop)\n", time.Now().Format(time.TimeOnly), formatDuration(*interval))
							}
							if err := printStatus(e.stdout, st); err != nil {
								return err
							}
						}
						if !*watch {
							return nil
						}
						if !tty && !*asJSON {
							fmt.Fprintln(e.stdout)
						}
						select {
						case <-ctx.Done():
							return nil
						case <-time.After(*interval):
						}
					}
				})
			}
		},
	}
}

func printStatus(w io.Writer, st []sluice.Status) error {
	if len(st) == 0 {
		_, err := fmt.Fprintln(w, `no queues (create one with "sluice queue create NAME")`)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QUEUE\tGROUP\tREADY\tWAITING\tDELAYED\tIN FLIGHT\tDEAD\tLAG\tOLDEST PENDING\t")
	for _, s := range st {
		group := s.Group
		if group == "" {
			group = "-"
		}
		// (~: an estimate, see sluice.status)
		approx := ""
		if s.Estimated {
			approx = "~"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%d\t%d\t%d\t%d\t%d\t%s%d\t%s\t\n", s.Queue, group, approx, s.Ready, s.Waiting, s.Delayed, s.InFlight, s.Dead,
			approx, s.Lag, age(s.OldestPendingAge))
	}
	return tw.Flush()
}

// statusJSON is one line of status --json.
type statusJSON struct {
	Queue            string  `json:"queue"`
	Group            *string `json:"group"` // null for a queue without groups
	Ready            int64   `json:"ready"`
	Waiting          int64   `json:"waiting"`
	Delayed          int64   `json:"delayed"`
	InFlight         int64   `json:"in_flight"`
	Dead             int64   `json:"dead"`
	Lag              int64   `json:"lag"`
	OldestPendingAge float64 `json:"oldest_pending_age"` // seconds, 0 for none
	HoldsReclaim     bool    `json:"holds_reclaim"`
	Estimated        bool    `json:"estimated"`
	DeadLettered     int64   `json:"dead_lettered"` // every dead letter of the group, redriven ones included
}

// printStatusJSON prints st as JSON lines, one per group.
func printStatusJSON(w io.Writer, st []sluice.Status) error {
	enc := json.NewEncoder(w)
	for _, s := range st {
		out := statusJSON{Queue: s.Queue, Ready: s.Ready, Waiting: s.Waiting, Delayed: s.Delayed, InFlight: s.InFlight, Dead: s.Dead, Lag: s.Lag,
			OldestPendingAge: s.OldestPendingAge.Seconds(), HoldsReclaim: s.HoldsReclaim, Estimated: s.Estimated,
			DeadLettered: s.DeadLettered}
		if s.Group != "" {
			out.Group = &s.Group
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	return nil
}

// age renders a duration for tables: "-" for none, else rounded.
func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return formatDuration(d.Round(time.Second))
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
