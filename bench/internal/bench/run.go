// Package bench runs sluice's benchmark scenarios against a PostgreSQL
// server: sluice alone (send, drain, latency, steady, xmin) and side by side
// with a DIY SKIP LOCKED table, PGMQ and River (shootout). Each scenario
// makes its queues afresh, prints a progress line every second and a
// Markdown table, and adds a Result (tables, charts) to the run's Report.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Scenarios are the scenario names Run accepts, in the order of "all".
var scenarioNames = []string{"send", "drain", "keyed", "latency", "steady", "shootout", "overload", "app", "xmin", "clients", "http", "statusburst", "memory"}

// Scenarios returns the names of the scenarios.
func Scenarios() []string { return slices.Clone(scenarioNames) }

// Options configure a run. Zero values mean each scenario's defaults.
type Options struct {
	// Pool connects to the server; it needs MaxConns of at least
	// MaxConnections(o).
	Pool *pgxpool.Pool
	// Server names the server for the report (without a password).
	Server string
	// Out receives the progress lines and the tables; TTY rewrites the
	// progress line in place.
	Out io.Writer
	TTY bool
	// Command is the command line, for the report.
	Command string
	// Payload is the approximate size of a message body in bytes (100).
	Payload int
	// Duration is how long each measured cell runs (scenario defaults:
	// send 5s, drain at most 10s, latency 10s, steady 15s, xmin 10m).
	Duration time.Duration
	// XminDuration overrides Duration for the xmin scenario.
	XminDuration time.Duration
	// XminControl makes the xmin scenario run each system a second time
	// with no xid held (the control: how much the machine alone moves the
	// intervals).
	XminControl bool
	// Interval is the sampling interval of the xmin scenario (1m).
	Interval time.Duration
	// Producers, Consumers and Batches are swept by send and drain; steady
	// and xmin use the last producer and consumer counts and the last batch
	// size given.
	Producers, Consumers, Batches []int
	// Preload is how many messages drain and the subscriber latency
	// preload (50,000).
	Preload int
	// Rate is the offered rate in messages/s of latency (500), steady,
	// xmin and the shootout's steady (2,000).
	Rate int
	// Poll is how long an idle consumer sleeps before receiving again
	// (1ms).
	Poll time.Duration
	// Systems are compared by shootout (sluice, skiplocked, pgmq, river)
	// and by xmin (sluice).
	Systems []string
	// XminSystems are the systems of the xmin scenario (default: Systems,
	// else sluice).
	XminSystems []string
	// PGMQWheel is a pgmq wheel file to install PGMQ from instead of
	// downloading one with pip.
	PGMQWheel string
	// Retention sets the retention option of sluice's queue (0: the
	// engine's default).
	Retention time.Duration
	// Lanes sets the lanes option of sluice's queues in the scenarios
	// that make them through the sluice system and of the app scenario's
	// (0: the engine's default, 8).
	Lanes int
	// Slots sets the slots option of the same queues (0: the engine's
	// default, 2).
	Slots int
	// Lease is the lease of sluice's queue and the visibility timeout of
	// PGMQ's reads (0: 30 s). Shorter than a cell, it shows the cell past
	// the first expiries: a lease runs out whether or not its message was
	// acked, and sluice's receives then pass over the expired leases.
	Lease time.Duration
	// DrainLimit is how long the app scenario waits, after its push, for
	// the backlog to drain (2m).
	DrainLimit time.Duration
	// Python is the Python interpreter of the clients scenario, with the
	// package sluice installed (DefaultPython: the venv make test-python
	// makes). The Python client is skipped when it does not exist.
	Python string
	// Node is the node of the clients scenario (DefaultNode: node on the
	// PATH), running the TypeScript client's bench script as compiled by
	// make test-typescript. The TypeScript client is skipped without them.
	Node string
}

// MaxConnections is how many connections a run with o may use at once.
func MaxConnections(o Options) int {
	return max(slices.Max(append([]int{16}, o.Producers...)), 8) + max(slices.Max(append([]int{8}, o.Consumers...)), overloadConsumers) + 4
}

func (o *Options) defaults() {
	if o.Payload <= 0 {
		o.Payload = 100
	}
	if o.Interval <= 0 {
		o.Interval = time.Minute
	}
	if o.Preload <= 0 {
		o.Preload = 50000
	}
	if o.Poll <= 0 {
		o.Poll = time.Millisecond
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Lease == 0 {
		o.Lease = defaultLease
	}
}

// defaultLease is the lease of the benchmark's queues (and PGMQ's
// visibility timeout) when the run sets none.
const defaultLease = 30 * time.Second

// leaseSeconds returns the run's lease in whole seconds, as PGMQ's read
// takes it, or an error when it is not a whole number of seconds from 1 s.
func (o *Options) leaseSeconds() (int, error) {
	if o.Lease < time.Second || o.Lease%time.Second != 0 {
		return 0, fmt.Errorf("--lease %s: want a whole number of seconds, at least 1s (PGMQ's visibility timeout is in seconds)", o.Lease)
	}
	return int(o.Lease / time.Second), nil
}

// runner runs the scenarios of one report.
type runner struct {
	o   Options
	pad string
	// queues records the options of the sluice queues the scenario that
	// runs made, as sluice.list_queues() gives them.
	queues queueLog
}

// Run runs the scenarios in order and returns the report, with what was
// measured until an error.
func Run(ctx context.Context, scenarios []string, o Options) (*Report, error) {
	o.defaults()
	lease, err := o.leaseSeconds()
	if err != nil {
		return &Report{Command: o.Command}, err
	}
	r := &runner{o: o, pad: strings.Repeat("x", max(o.Payload-40, 0))}
	rep := &Report{Command: o.Command, Started: time.Now(), PayloadBytes: o.Payload, LeaseSeconds: lease, Lanes: o.Lanes,
		Slots: o.Slots}
	env, err := probeEnv(ctx, o.Pool, o.Server)
	if err != nil {
		return rep, err
	}
	rep.Env = env
	var s []string
	for _, k := range pgSettings {
		s = append(s, k+"="+env.Settings[k])
	}
	fmt.Fprintf(o.Out, "sluice-bench: %s\n%d CPUs (%s), %.1f GiB; %s\n%s\n\n", strings.Join(scenarios, " "), env.CPUs, env.CPUModel, env.MemoryGiB, env.PGVersion, strings.Join(s, ", "))
	for _, name := range scenarios {
		start := time.Now()
		r.queues.take()
		var res *Result
		switch name {
		case "send":
			res, err = r.send(ctx)
		case "drain":
			res, err = r.drain(ctx)
		case "keyed":
			res, err = r.keyed(ctx)
		case "latency":
			res, err = r.latency(ctx)
		case "steady":
			res, err = r.steady(ctx)
		case "xmin":
			res, err = r.xmin(ctx)
		case "shootout":
			res, err = r.shootout(ctx)
		case "overload":
			res, err = r.overload(ctx)
		case "app":
			res, err = r.app(ctx)
		case "clients":
			res, err = r.clients(ctx)
		case "http":
			res, err = r.http(ctx)
		case "statusburst":
			res, err = r.statusburst(ctx)
		case "memory":
			res, err = r.memory(ctx)
		default:
			return rep, fmt.Errorf("unknown scenario %q (known: %s)", name, strings.Join(scenarioNames, ", "))
		}
		if err != nil {
			return rep, fmt.Errorf("scenario %s: %w", name, err)
		}
		res.Scenario, res.Started, res.Elapsed = name, start, time.Since(start)
		if res.Queues = r.queues.take(); len(res.Queues) > 0 {
			res.Notes = append(res.Notes, queueOptionsNote(res.Queues))
		}
		fmt.Fprintf(o.Out, "\n## %s\n\n", name)
		for _, t := range res.Tables {
			t.Markdown(o.Out)
		}
		for _, n := range res.Notes {
			fmt.Fprintf(o.Out, "- %s\n", n)
		}
		fmt.Fprintln(o.Out)
		rep.Results = append(rep.Results, *res)
	}
	return rep, nil
}

// dur returns the run's Duration, else def.
func (r *runner) dur(def time.Duration) time.Duration {
	if r.o.Duration > 0 {
		return r.o.Duration
	}
	return def
}

// list returns the flag's values, else def.
func list(v, def []int) []int {
	if len(v) > 0 {
		return v
	}
	return def
}

// last returns the last value of v, else def.
func last(v []int, def int) int {
	if len(v) > 0 {
		return v[len(v)-1]
	}
	return def
}

// counters count the messages of a measured cell.
type counters struct {
	sent, done atomic.Int64
}

// cell is what watch measured.
type cell struct {
	rates   []Point // done per second
	backlog []Point // sent - done, each second (when sending)
	count   int64
	elapsed time.Duration
}

// rate is the median of the per-second rates, or the mean over the cell
// when it lasted under 3 seconds.
func (c *cell) rate() float64 {
	if len(c.rates) >= 3 {
		ys := make([]float64, len(c.rates))
		for i, p := range c.rates {
			ys[i] = p.Y
		}
		return Median(ys)
	}
	if c.elapsed <= 0 {
		return 0
	}
	return float64(c.count) / c.elapsed.Seconds()
}

// watch runs work and prints a progress line every second until it
// returns.
func (r *runner) watch(ctx context.Context, label string, c *counters, lat *recorder, work func() error) (*cell, error) {
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- work() }()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	res := &cell{}
	var prev int64
	var latMark int
	for {
		select {
		case err := <-done:
			res.count, res.elapsed = c.done.Load(), time.Since(start)
			if r.o.TTY {
				fmt.Fprintln(r.o.Out)
			}
			return res, err
		case <-t.C:
		}
		now := c.done.Load()
		secs := time.Since(start).Seconds()
		res.rates = append(res.rates, Point{X: secs, Y: float64(now - prev)})
		line := fmt.Sprintf("%-34s %4.0fs %9d msg/s", label, secs, now-prev)
		if sent := c.sent.Load(); sent > 0 {
			res.backlog = append(res.backlog, Point{X: secs, Y: float64(sent - now)})
			line += fmt.Sprintf("  sent %d  backlog %d", sent, sent-now)
		}
		if lat != nil {
			var w []float64
			w, latMark = lat.window(latMark)
			if len(w) > 0 {
				line += fmt.Sprintf("  e2e p50 %s p99 %s ms", fmtMS(Percentile(w, 0.5)), fmtMS(Percentile(w, 0.99)))
			}
		}
		prev = now
		if r.o.TTY {
			fmt.Fprintf(r.o.Out, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(r.o.Out, line)
		}
	}
}

// workersOn runs fn on n goroutines, each with its own connection of pool,
// and returns their errors.
func workersOn(ctx context.Context, pool *pgxpool.Pool, n int, fn func(ctx context.Context, i int, conn *pgxpool.Conn) error) error {
	return fanOut(ctx, n, func(i int) error {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("connecting: %w", err)
		}
		defer conn.Release()
		return fn(ctx, i, conn)
	})
}

// fanOut runs fn on n goroutines and returns their errors joined, else
// ctx's error.
func fanOut(ctx context.Context, n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// produce sends batches of batch messages back to back until deadline.
func (r *runner) produce(ctx context.Context, conn *pgxpool.Conn, s system, batch int, deadline time.Time, c *counters) error {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if err := send(ctx, conn, s, batch, r.pad); err != nil {
			return err
		}
		c.done.Add(int64(batch))
	}
	return nil
}

// paced calls step rate times a second until deadline (or until step
// fails), catching up when late.
func paced(ctx context.Context, rate float64, deadline time.Time, step func() error) error {
	interval := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(deadline) {
			return nil
		}
		if d := next.Sub(now); d > 0 {
			sleep(ctx, min(d, deadline.Sub(now)))
			continue
		}
		if err := step(); err != nil {
			return err
		}
		next = next.Add(interval)
	}
	return nil
}

// producePaced sends one message per transaction at rate messages/s until
// deadline, catching up when late; sendLat gets each send's duration.
func (r *runner) producePaced(ctx context.Context, conn *pgxpool.Conn, s system, rate float64, deadline time.Time, c *counters, sendLat *recorder) error {
	return paced(ctx, rate, deadline, func() error {
		t0 := time.Now()
		if err := send(ctx, conn, s, 1, r.pad); err != nil {
			return err
		}
		if sendLat != nil {
			sendLat.add(msSince(t0))
		}
		c.sent.Add(1)
		return nil
	})
}

// consumeLoop consumes batches until deadline, or until enough returns
// true; it sleeps Poll when nothing is ready.
func (r *runner) consumeLoop(ctx context.Context, conn *pgxpool.Conn, s system, batch int, deadline time.Time, enough func() bool, c *counters, lat *recorder) error {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if enough != nil && enough() {
			return nil
		}
		n, l, _, err := s.consume(ctx, conn, batch)
		if err != nil {
			return err
		}
		if n == 0 {
			sleep(ctx, r.o.Poll)
			continue
		}
		c.done.Add(int64(n))
		if lat != nil {
			lat.add(l...)
		}
	}
	return nil
}

// preload sends n messages in batches of 1000 on 2 connections.
func (r *runner) preload(ctx context.Context, s system, n int) error {
	var left atomic.Int64
	left.Store(int64(n))
	return workersOn(ctx, r.poolOf(s), 2, func(ctx context.Context, _ int, conn *pgxpool.Conn) error {
		for {
			b := min(left.Add(-1000)+1000, 1000)
			if b <= 0 {
				return nil
			}
			if err := send(ctx, conn, s, int(b), r.pad); err != nil {
				return fmt.Errorf("preloading: %w", err)
			}
		}
	})
}

func msSince(t time.Time) float64 { return float64(time.Since(t)) / float64(time.Millisecond) }
