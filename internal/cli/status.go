package cli

import (
	"context"
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
queue without QUEUE): messages ready, delayed (delay or retry backoff), in
flight (leased), dead, the group's lag (messages from its oldest pending one
to the newest) and the age of its oldest pending message. With --watch it
refreshes every --interval until interrupted.

Examples:
  sluice status
  sluice status orders --watch
`

func statusCommand() command {
	return command{
		name: "status", summary: "show queue depth and group progress (--watch)", usage: statusUsage, maxArgs: 1,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			watch := fs.Bool("watch", false, "refresh until interrupted")
			interval := fs.Duration("interval", time.Second, "refresh interval of --watch")
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
						if *watch && tty {
							fmt.Fprint(e.stdout, "\033[H\033[2J")
						}
						if *watch {
							fmt.Fprintf(e.stdout, "%s  (every %s, Ctrl-C to stop)\n", time.Now().Format(time.TimeOnly), *interval)
						}
						if err := printStatus(e.stdout, st); err != nil {
							return err
						}
						if !*watch {
							return nil
						}
						if !tty {
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
	fmt.Fprintln(tw, "QUEUE\tGROUP\tREADY\tDELAYED\tIN FLIGHT\tDEAD\tLAG\tOLDEST PENDING\t")
	for _, s := range st {
		group := s.Group
		if group == "" {
			group = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n", s.Queue, group, s.Ready, s.Delayed, s.InFlight, s.Dead, s.Lag,
			age(s.OldestPendingAge))
	}
	return tw.Flush()
}

// age renders a duration for tables: "-" for none, else rounded.
func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
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
