package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice"
)

const demoUsage = `Usage: sluice demo [flags]

Runs a live scenario for --duration (45s by default), then drains and prints
a summary:

  - producers send orders to the queue "orders" (--rate messages/s, in small
    batches, each with an ordering key per customer: each group handles one
    customer's orders in order);
  - two consumer groups, billing and shipping, each receive every order
    (fan-out), with 16 handlers each;
  - handlers fail now and then (a "timeout" on the first attempt: retried
    after a short backoff), and about 1 order in 100 is poison (a negative
    amount) that fails every attempt and ends as a dead letter after the
    queue's 4 attempts;
  - every second: sent, acknowledged, retried, dead, in flight, rates, and
    the end-to-end latency (from the send to the handler's start) p50/p99.

With no database configured it runs on the embedded PostgreSQL (see "sluice
--help"), which every sluice command of your OS user shares. The demo never
touches your queues: it creates a queue of its own, named
sluice_demo_<random> (or --queue NAME, which must not exist yet), and drops
it at the end (also after Ctrl-C or an error) unless --keep. It never drops
a queue it did not create in that run.

Examples:
  sluice demo
  sluice demo --duration 20s --rate 1000
  sluice demo --database-url postgres://localhost/scratch --queue demo_orders --keep
`

// demoMaxAttempts is the max_attempts of the demo's queue.
const demoMaxAttempts = 4

// demoGroups are the consumer groups of the demo.
var demoGroups = []string{"billing", "shipping"}

func demoCommand() command {
	return command{
		name: "demo", summary: "run a live one-minute scenario (producers, fan-out, retries, dead letters)", usage: demoUsage,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			var cfg demoConfig
			fs.DurationVar(&cfg.duration, "duration", 45*time.Second, "how long producers send (draining and the summary follow)")
			fs.IntVar(&cfg.rate, "rate", 300, "messages per second the producers send in all")
			fs.StringVar(&cfg.queue, "queue", "", "the demo's queue, created by the demo: a name that does not exist yet (default sluice_demo_<random>)")
			fs.BoolVar(&cfg.keep, "keep", false, "keep the demo's queue at the end (to look at its dead letters)")
			fs.Float64Var(&cfg.failureRate, "failure-rate", 0.05, "share of first attempts that fail (and are retried)")
			return func(ctx context.Context, _ []string) error {
				if cfg.duration <= 0 {
					return usagef("--duration must be positive")
				}
				if cfg.rate < 1 || cfg.rate > 100000 {
					return usagef("--rate must be from 1 to 100000, got %d", cfg.rate)
				}
				if cfg.failureRate < 0 || cfg.failureRate > 1 {
					return usagef("--failure-rate must be from 0 to 1")
				}
				if cfg.queue == "" {
					cfg.queue = fmt.Sprintf("sluice_demo_%06x", rand.IntN(1<<24))
				}
				return e.withDB(ctx, *url, func(db *database) error {
					d := &demo{e: e, db: db, cfg: cfg, tty: isTerminal(e.stdout)}
					return d.run(ctx)
				})
			}
		},
	}
}

type demoConfig struct {
	duration    time.Duration
	rate        int
	queue       string
	keep        bool
	failureRate float64
}

type demo struct {
	e   *env
	db  *database
	cfg demoConfig
	tty bool

	sent   atomic.Int64
	groups map[string]*groupStats
	start  time.Time
	lines  int // lines of the last progress block (tty)
}

// groupStats counts what one group's handlers did.
type groupStats struct {
	acked, retried atomic.Int64
	mu             sync.Mutex
	latencies      []time.Duration // first deliveries since the last report
	all            []time.Duration // every first delivery
	lastAcked      int64
}

func (d *demo) run(ctx context.Context) (err error) {
	created, err := d.setup(ctx)
	if created {
		defer func() {
			if d.cfg.keep {
				fmt.Fprintf(d.e.stdout, "sluice demo: kept queue %s (drop it with: sluice queue drop %s)\n", d.cfg.queue, d.cfg.queue)
				return
			}
			// Only the queue this run created; not cut short by Ctrl-C.
			if _, derr := d.db.client.DropQueue(context.WithoutCancel(ctx), d.cfg.queue); derr != nil && err == nil {
				err = fmt.Errorf("dropping the demo's queue %s: %w", d.cfg.queue, derr)
			}
		}()
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(d.e.stdout, "sluice demo: %d orders/s to queue %s (the demo's own) for %s; Ctrl-C stops early\n"+
		"groups %s each get every order\n\n",
		d.cfg.rate, d.cfg.queue, d.cfg.duration, strings.Join(demoGroups, " and "))

	d.start = time.Now()
	consumeCtx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	produceCtx, stopProducers := context.WithTimeout(ctx, d.cfg.duration)
	defer stopProducers()

	var wg sync.WaitGroup
	errs := make(chan error, len(demoGroups)+2)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, g := range demoGroups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := d.db.client.Consume(consumeCtx, d.cfg.queue, g, d.handler(g), &sluice.ConsumeOptions{
				Concurrency: 16, Consumer: "sluice demo", Logger: logger, DrainTimeout: 5 * time.Second})
			if err != nil {
				errs <- fmt.Errorf("group %s: %w", g, err)
			}
		}()
	}
	const producers = 2
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.produce(produceCtx, p, producers); err != nil {
				errs <- err
			}
		}()
	}

	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var last []sluice.Status
	draining, drainStart := false, time.Time{}
	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case runErr = <-errs:
			break loop
		case <-ticker.C:
		}
		st, err := d.db.client.Status(ctx, d.cfg.queue)
		if err != nil {
			if ctx.Err() != nil {
				break loop
			}
			runErr = err
			break loop
		}
		last = st
		if !draining && produceCtx.Err() != nil {
			draining, drainStart = true, time.Now()
		}
		d.report(st, draining)
		if draining && (settled(st) || time.Since(drainStart) > 15*time.Second) {
			break loop
		}
	}
	stopProducers()
	stopConsumers()
	wg.Wait()
	if runErr == nil {
		select {
		case runErr = <-errs:
		default:
		}
	}
	if runErr != nil {
		return runErr
	}
	if st, err := d.db.client.Status(context.WithoutCancel(ctx), d.cfg.queue); err == nil {
		last = st
	}
	d.summary(last, ctx.Err() != nil)
	return nil
}

// setup creates the demo's queue and groups; created reports whether it
// created the queue (so that run drops it, and nothing else). A queue of
// that name that exists already is not the demo's: setup fails without
// touching it.
func (d *demo) setup(ctx context.Context) (created bool, err error) {
	err = d.db.client.CreateQueue(ctx, d.cfg.queue, &sluice.QueueOptions{
		MaxAttempts: sluice.Ptr(demoMaxAttempts), BackoffBase: sluice.Ptr(200 * time.Millisecond), BackoffMax: sluice.Ptr(time.Second),
		Lease: sluice.Ptr(10 * time.Second), DefaultGroup: sluice.Ptr(false),
	})
	if errors.Is(err, sluice.ErrQueueExists) {
		return false, fmt.Errorf("queue %q exists in %s and is not the demo's: the demo only uses a queue it creates, so give --queue a new name, or leave it out for a name of the demo's own",
			d.cfg.queue, d.db.target)
	}
	if err != nil {
		return false, err
	}
	d.groups = map[string]*groupStats{}
	for _, g := range demoGroups {
		if err := d.db.client.CreateGroup(ctx, d.cfg.queue, g, nil); err != nil {
			return true, err
		}
		d.groups[g] = &groupStats{}
	}
	return true, nil
}

// order is the body of a demo message.
type order struct {
	Order    int64   `json:"order"`
	Customer string  `json:"customer"`
	Amount   float64 `json:"amount"`
	Items    int     `json:"items"`
}

// produce sends this producer's share of the rate, in a batch every 50 ms,
// until ctx is done.
func (d *demo) produce(ctx context.Context, p, producers int) error {
	const tick = 50 * time.Millisecond
	perSecond := float64(d.cfg.rate) / float64(producers)
	t := time.NewTicker(tick)
	defer t.Stop()
	begin := time.Now()
	var sent int64
	var n int64 = int64(p)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		due := int64(perSecond*time.Since(begin).Seconds()) - sent
		if due <= 0 {
			continue
		}
		batch := make([]sluice.BatchMessage, due)
		for i := range batch {
			o := order{Order: n, Customer: fmt.Sprintf("c-%02d", rand.IntN(40)), Amount: float64(rand.IntN(20000)) / 100, Items: 1 + rand.IntN(5)}
			if rand.IntN(100) == 0 {
				o.Amount = -o.Amount // poison: fails every attempt
			}
			body, err := json.Marshal(o)
			if err != nil {
				return err
			}
			batch[i] = sluice.BatchMessage{Body: body, Key: o.Customer}
			n += int64(producers)
		}
		// Not cut short by ctx: a batch the server committed must be counted.
		if _, err := d.db.client.SendBatch(context.WithoutCancel(ctx), d.cfg.queue, batch, nil); err != nil {
			return fmt.Errorf("producer %d: %w", p, err)
		}
		sent += due
		d.sent.Add(due)
	}
}

// handler is the demo's message handler for group g.
func (d *demo) handler(g string) sluice.Handler {
	stats := d.groups[g]
	return func(ctx context.Context, m *sluice.Message) error {
		if m.Attempt == 1 {
			lat := time.Since(m.SentAt)
			stats.mu.Lock()
			stats.latencies = append(stats.latencies, lat)
			stats.all = append(stats.all, lat)
			stats.mu.Unlock()
		}
		fail := func(err error) error {
			if m.Attempt < demoMaxAttempts {
				stats.retried.Add(1)
			}
			return err
		}
		var o order
		if err := json.Unmarshal(m.Body, &o); err != nil {
			return fail(fmt.Errorf("bad order: %w", err))
		}
		time.Sleep(time.Duration(1+rand.IntN(4)) * time.Millisecond) // the work
		if o.Amount < 0 {
			return fail(fmt.Errorf("%s: order %d has a negative amount %.2f", g, o.Order, o.Amount))
		}
		if m.Attempt == 1 && rand.Float64() < d.cfg.failureRate {
			return fail(errors.New(g + ": upstream timeout"))
		}
		stats.acked.Add(1)
		return nil
	}
}

// settled reports whether every group has handled everything: the engine
// holds nothing for it, waiting messages included (sluice.Status.Pending).
func settled(st []sluice.Status) bool {
	for _, s := range st {
		if s.Pending() > 0 {
			return false
		}
	}
	return len(st) > 0
}

// percentile returns the p-th percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// shortMS renders a latency in at most 6 characters: 3.2ms, 967ms, 1.2s.
func shortMS(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	default:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
}

// report prints one second of progress.
func (d *demo) report(st []sluice.Status, draining bool) {
	byGroup := map[string]sluice.Status{}
	for _, s := range st {
		byGroup[s.Group] = s
	}
	elapsed := time.Since(d.start).Round(time.Second)
	phase := fmt.Sprintf("%s / %s", elapsed, d.cfg.duration)
	if draining {
		phase = fmt.Sprintf("%s, producers stopped, draining", elapsed)
	}
	sent := d.sent.Load()
	var b strings.Builder
	if d.tty {
		fmt.Fprintf(&b, "\033[1m%-10s %8s %8s %7s %8s %6s %8s %7s %9s %9s %9s\033[0m  %s\n",
			"", "sent", "acked", "acks/s", "retried", "dead", "backlog", "ready", "in flight", "p50", "p99", phase)
		fmt.Fprintf(&b, "%-10s %8d\n", "producers", sent)
	}
	for _, g := range demoGroups {
		gs := d.groups[g]
		s := byGroup[g]
		acked := gs.acked.Load()
		rate := acked - gs.lastAcked
		gs.lastAcked = acked
		gs.mu.Lock()
		lat := gs.latencies
		gs.latencies = nil
		gs.mu.Unlock()
		slices.Sort(lat)
		retried := gs.retried.Load()
		// The backlog is what the group still has to do: sent and not yet
		// acknowledged or dead. When it grows, the handlers fall behind.
		backlog := max(sent-acked-s.Dead, 0)
		if d.tty {
			fmt.Fprintf(&b, "%-10s %8s %8d %7d %8d %6d %8d %7d %9d %9s %9s\n", g, "", acked, rate, retried, s.Dead, backlog,
				s.Ready, s.InFlight, ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)))
		} else {
			// One line per group, within 120 columns.
			fmt.Fprintf(&b, "[%s] %-8s sent %d acked %d (%d/s) backlog %d ready %d leased %d retried %d dead %d p50 %s p99 %s\n",
				elapsed, g, sent, acked, rate, backlog, s.Ready, s.InFlight, retried, s.Dead,
				shortMS(percentile(lat, 0.5)), shortMS(percentile(lat, 0.99)))
		}
	}
	if d.tty && d.lines > 0 {
		fmt.Fprintf(d.e.stdout, "\033[%dA", d.lines)
	}
	out := b.String()
	if d.tty {
		out = strings.ReplaceAll(out, "\n", "\033[K\n")
		d.lines = strings.Count(b.String(), "\n")
	}
	fmt.Fprint(d.e.stdout, out)
}

// summary prints the outcome.
func (d *demo) summary(st []sluice.Status, interrupted bool) {
	byGroup := map[string]sluice.Status{}
	for _, s := range st {
		byGroup[s.Group] = s
	}
	elapsed := time.Since(d.start)
	sent := d.sent.Load()
	w := d.e.stdout
	fmt.Fprintln(w)
	if interrupted {
		fmt.Fprintln(w, "interrupted")
	}
	producing := min(elapsed, d.cfg.duration)
	fmt.Fprintf(w, "summary after %s: %d orders sent (%.0f/s)\n", elapsed.Round(time.Second), sent, float64(sent)/producing.Seconds())
	all := true
	for _, g := range demoGroups {
		gs := d.groups[g]
		s := byGroup[g]
		gs.mu.Lock()
		lat := slices.Clone(gs.all)
		gs.mu.Unlock()
		slices.Sort(lat)
		acked := gs.acked.Load()
		pending := s.Pending() // ready, waiting behind an earlier order of the customer, delayed, in flight
		if acked+s.Dead != sent || pending > 0 {
			all = false
		}
		fmt.Fprintf(w, "  %-9s acked %d, retried %d, dead letters %d, pending %d\n", g, acked, gs.retried.Load(), s.Dead, pending)
		fmt.Fprintf(w, "  %-9s latency from send to handler: p50 %s, p99 %s, max %s\n", "",
			ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)), ms(percentile(lat, 1)))
	}
	if all {
		fmt.Fprintln(w, "every order was acknowledged or dead-lettered once per group: nothing lost")
	} else {
		fmt.Fprintln(w, "some orders were still pending when the demo stopped")
	}
	if d.cfg.keep {
		fmt.Fprintf(w, "\nlook around (the queue stays, --keep):\n  sluice status %s\n  sluice dlq list %s\n  sluice dlq redrive %s --group billing\n",
			d.cfg.queue, d.cfg.queue, d.cfg.queue)
	} else {
		fmt.Fprintf(w, "\nthe demo's queue %s is dropped now; run with --keep to look around in it afterwards\n", d.cfg.queue)
	}
}
