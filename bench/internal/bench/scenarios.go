package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// newSystem returns the system called name.
func (r *runner) newSystem(name string) (system, error) {
	switch name {
	case "sluice":
		return r.sluice(), nil
	case "sluice-v2": // (engine 2 explicitly: the default since issue 37)
		s := r.sluice()
		s.engine = 2
		return s, nil
	case "sluice-v1": // engine 1, the first engine
		s := r.sluice()
		s.engine = 1
		return s, nil
	case "skiplocked":
		return &tableSystem{table: "skiplocked"}, nil
	case "bare":
		return &tableSystem{table: "bare"}, nil
	case "pgmq":
		return pgmqSystem{vt: r.o.Lease}, nil
	case "pgmq-compat":
		return &pgmqCompatSystem{pgmqSystem: pgmqSystem{vt: r.o.Lease}, main: r.o.Pool, out: r.o.Out}, nil
	case "river":
		return newRiverSystem(r.o.Pool, r.o.Poll, r.o.Out), nil
	case "sluice-worker", "sluice-worker-async": // the Go library's worker, as River is driven by its client
		return &sluiceWorkerSystem{sluiceSystem: r.sluice(), poll: max(r.o.Poll, riverFetchCooldown),
			asyncAcks: name == "sluice-worker-async"}, nil
	}
	return nil, fmt.Errorf("unknown system %q (known: sluice, sluice-v1, sluice-v2, sluice-worker, sluice-worker-async, skiplocked, pgmq, pgmq-compat, river)", name)
}

// sluice returns sluice's system with the run's queue options (retention,
// lease), acking each batch durably after its receive.
func (r *runner) sluice() *sluiceSystem {
	return &sluiceSystem{retention: r.o.Retention, lease: r.o.Lease, lanes: r.o.Lanes, slots: r.o.Slots}
}

// systems returns the systems named by --systems, else def.
func (r *runner) systems(def ...string) ([]system, error) {
	names := r.o.Systems
	if len(names) == 0 {
		names = def
	}
	var out []system
	for _, n := range names {
		s, err := r.newSystem(n)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// cleanupAll drops the benchmark queues of systems and the peer schema, even
// when ctx was cancelled.
func (r *runner) cleanupAll(ctx context.Context, systems ...system) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	peers := false
	for _, s := range systems {
		if err := s.cleanup(ctx, r.poolOf(s)); err != nil {
			fmt.Fprintf(r.o.Out, "cleanup: %v\n", err)
		}
		if ps, ok := s.(pooledSystem); ok {
			if err := ps.close(ctx); err != nil {
				fmt.Fprintf(r.o.Out, "cleanup: %v\n", err)
			}
		}
		if _, ok := s.(*tableSystem); ok {
			peers = true
		}
	}
	if peers {
		if _, err := r.o.Pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+peerSchema+` CASCADE`); err != nil {
			fmt.Fprintf(r.o.Out, "cleanup: dropping schema %s: %v\n", peerSchema, err)
		}
	}
}

// producers runs fn on n goroutines for s: each with its own connection,
// or with none (nil) for a clientSystem, whose client takes connections from
// its pool as it sends.
func (r *runner) producers(ctx context.Context, s system, n int, fn func(ctx context.Context, i int, conn *pgxpool.Conn) error) error {
	if _, ok := s.(clientSystem); !ok {
		return workersOn(ctx, r.poolOf(s), n, fn)
	}
	return fanOut(ctx, n, func(i int) error { return fn(ctx, i, nil) })
}

// consumers runs n consumers of s, receiving batches of up to b, until
// deadline or until enough (if not nil) returns true: consumeLoop on a
// connection each, or the client's own consumers for a clientSystem.
func (r *runner) consumers(ctx context.Context, s system, n, b int, deadline time.Time, enough func() bool, c *counters, lat *recorder) error {
	if cs, ok := s.(clientSystem); ok {
		return cs.runConsumers(ctx, n, b, deadline, enough, c, lat)
	}
	return workersOn(ctx, r.poolOf(s), n, func(ctx context.Context, _ int, conn *pgxpool.Conn) error {
		return r.consumeLoop(ctx, conn, s, b, deadline, enough, c, lat)
	})
}

// produceAndConsume runs producers and consumers together and returns
// their errors; stopped, if not nil, is set once every producer returned.
func produceAndConsume(producers, consumers func() error, stopped *atomic.Bool) error {
	var perr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		perr = producers()
		if stopped != nil {
			stopped.Store(true)
		}
	}()
	cerr := consumers()
	<-done
	return errors.Join(perr, cerr)
}

// sendCell measures p producers sending batches of b for d.
func (r *runner) sendCell(ctx context.Context, s system, p, b int, d time.Duration) (*cell, error) {
	if err := r.setupSystem(ctx, s); err != nil {
		return nil, err
	}
	c := &counters{}
	deadline := time.Now().Add(d)
	return r.watch(ctx, fmt.Sprintf("send %s p=%d b=%d", s.name(), p, b), c, nil, func() error {
		return r.producers(ctx, s, p, func(ctx context.Context, _ int, conn *pgxpool.Conn) error {
			return r.produce(ctx, conn, s, b, deadline, c)
		})
	})
}

// drainCell preloads n messages and measures c consumers receiving
// batches of b until the queue is empty or d has passed.
func (r *runner) drainCell(ctx context.Context, s system, consumers, b, n int, d time.Duration) (*cell, error) {
	if err := r.setupSystem(ctx, s); err != nil {
		return nil, err
	}
	if err := r.preload(ctx, s, n); err != nil {
		return nil, err
	}
	c := &counters{}
	deadline := time.Now().Add(d)
	enough := func() bool { return c.done.Load() >= int64(n) }
	return r.watch(ctx, fmt.Sprintf("drain %s c=%d b=%d", s.name(), consumers, b), c, nil, func() error {
		return r.consumers(ctx, s, consumers, b, deadline, enough, c, nil)
	})
}

// steadyCell runs p paced producers (rate msg/s in all, one message per
// transaction) and c consumers (batches of up to b) together for d; the
// consumers go on for up to 2 s after the producers stop, to catch up.
// sample, if not nil, is called every interval with the counters.
func (r *runner) steadyCell(ctx context.Context, label string, s system, p, consumers, b, rate int, d time.Duration, sendLat, e2e *recorder) (*cell, *counters, error) {
	if err := r.setupSystem(ctx, s); err != nil {
		return nil, nil, err
	}
	c := &counters{}
	start := time.Now()
	deadline := start.Add(d)
	if e2e != nil {
		// (the first second's latencies include the connections' first
		// calls: steadyRow reports the rest apart)
		defer time.AfterFunc(time.Second, e2e.markWarm).Stop()
	}
	var stopped atomic.Bool
	caughtUp := func() bool { return stopped.Load() && c.done.Load() >= c.sent.Load() }
	res, err := r.watch(ctx, label, c, e2e, func() error {
		return produceAndConsume(func() error {
			return r.producers(ctx, s, p, func(ctx context.Context, _ int, conn *pgxpool.Conn) error {
				return r.producePaced(ctx, conn, s, float64(rate)/float64(p), deadline, c, sendLat)
			})
		}, func() error {
			return r.consumers(ctx, s, consumers, b, deadline.Add(2*time.Second), caughtUp, c, e2e)
		}, &stopped)
	})
	return res, c, err
}

// cut returns the points of ps with X <= x.
func cut(ps []Point, x float64) []Point {
	var out []Point
	for _, p := range ps {
		if p.X <= x {
			out = append(out, p)
		}
	}
	return out
}

// medianY is the median of the Y values of ps.
func medianY(ps []Point) float64 {
	ys := make([]float64, len(ps))
	for i, p := range ps {
		ys[i] = p.Y
	}
	return Median(ys)
}

// maxY is the largest Y value of ps, 0 for none.
func maxY(ps []Point) float64 {
	m := 0.0
	for _, p := range ps {
		m = math.Max(m, p.Y)
	}
	return m
}

func (r *runner) send(ctx context.Context) (*Result, error) {
	ps, bs, d := list(r.o.Producers, []int{1, 16}), list(r.o.Batches, []int{1, 10, 100, 1000}), r.dur(5*time.Second)
	sl, bare := r.sluice(), &tableSystem{table: "bare"}
	defer r.cleanupAll(ctx, sl, bare)
	t := Table{Title: "send: messages/s (median of per-second rates), one transaction per batch",
		Columns: []string{"producers", "batch", "sluice msg/s", "bare INSERT msg/s", "sluice / bare"}}
	var series []Series
	for _, p := range ps {
		for _, b := range bs {
			cs, err := r.sendCell(ctx, sl, p, b, d)
			if err != nil {
				return nil, err
			}
			cb, err := r.sendCell(ctx, bare, p, b, d)
			if err != nil {
				return nil, err
			}
			t.Rows = append(t.Rows, []string{fmt.Sprint(p), fmt.Sprint(b), fmtRate(cs.rate()), fmtRate(cb.rate()), fmtRatio(cs.rate(), cb.rate())})
			series = append(series, Series{Name: fmt.Sprintf("sluice p=%d b=%d", p, b), Points: cs.rates},
				Series{Name: fmt.Sprintf("bare p=%d b=%d", p, b), Points: cb.rates})
		}
	}
	return &Result{
		Params: map[string]any{"producers": ps, "batches": bs, "duration_s": d.Seconds()},
		Tables: []Table{t},
		Charts: []Chart{{File: "send-throughput.svg", Title: "send: throughput over time", XLabel: "seconds", YLabel: "messages/s", Series: series}},
		Notes: []string{"bare INSERT: INSERT into a table with a bigserial primary key and a jsonb body, the same body built on the server, in the same run: the physical reference.",
			"sluice batch 1 is sluice.send; larger batches are one sluice.send_batch call per transaction."},
	}, nil
}

func (r *runner) drain(ctx context.Context) (*Result, error) {
	cs, bs, d, n := list(r.o.Consumers, []int{1, 8}), list(r.o.Batches, []int{1, 100}), r.dur(10*time.Second), r.o.Preload
	sl := r.sluice()
	defer r.cleanupAll(ctx, sl)
	t := Table{Title: fmt.Sprintf("drain: %d messages preloaded, consumed (receive, then ack) for at most %s", n, d),
		Columns: []string{"consumers", "batch", "msg/s", "drained"}}
	var series []Series
	for _, c := range cs {
		for _, b := range bs {
			res, err := r.drainCell(ctx, sl, c, b, n, d)
			if err != nil {
				return nil, err
			}
			t.Rows = append(t.Rows, []string{fmt.Sprint(c), fmt.Sprint(b), fmtRate(float64(res.count) / res.elapsed.Seconds()), fmt.Sprintf("%d / %d", res.count, n)})
			series = append(series, Series{Name: fmt.Sprintf("c=%d b=%d", c, b), Points: res.rates})
		}
	}
	return &Result{
		Params: map[string]any{"consumers": cs, "batches": bs, "preload": n, "max_duration_s": d.Seconds()},
		Tables: []Table{t},
		Charts: []Chart{{File: "drain-throughput.svg", Title: "drain: throughput over time", XLabel: "seconds", YLabel: "messages/s", Series: series}},
		Notes: []string{"msg/s = messages drained / time to drain (or the time limit). Each batch is two transactions: sluice.receive, then sluice.ack of its receipts.",
			"Consumers of one group take different lanes, each under a try-lock (docs/design.md, Lanes); what limits batch-1 consumption is the server CPU per receive and ack (docs/design.md, Costs and limits)."},
	}, nil
}

// keyed drains the same preload unkeyed, with 5,000 uniform keys and with
// 5,000 Zipf(1.1) keys, and compares consumed/s.
func (r *runner) keyed(ctx context.Context) (*Result, error) {
	cs, bs, d, n := list(r.o.Consumers, []int{8}), list(r.o.Batches, []int{10, 100}), r.dur(10*time.Second), r.o.Preload
	c := cs[len(cs)-1]
	type variant struct {
		label string
		sys   *sluiceSystem
	}
	// each engine's keyed runs next to its own unkeyed one
	var variants []variant
	for _, engine := range []int{1, 2} {
		sys := func() *sluiceSystem { s := r.sluice(); s.engine = engine; return s }
		prefix := fmt.Sprintf("engine %d: ", engine)
		variants = append(variants, variant{prefix + "unkeyed", sys()},
			variant{prefix + "5,000 keys, uniform", sys().withKeys(5000, false)},
			variant{prefix + "5,000 keys, Zipf(1.1)", sys().withKeys(5000, true)})
	}
	defer r.cleanupAll(ctx, variants[0].sys, variants[3].sys)
	t := Table{Title: fmt.Sprintf("keyed: %d messages preloaded, drained by %d consumers (receive, then ack), at most %s", n, c, d),
		Columns: []string{"batch", "messages", "msg/s", "drained", "keyed / unkeyed"}}
	var series []Series
	for _, b := range bs {
		var base float64
		for i, v := range variants {
			res, err := r.drainCell(ctx, v.sys, c, b, n, d)
			if err != nil {
				return nil, err
			}
			rate := float64(res.count) / res.elapsed.Seconds()
			ratio := ""
			if i%3 == 0 {
				base = rate
			} else {
				ratio = fmtRatio(rate, base)
			}
			t.Rows = append(t.Rows, []string{fmt.Sprint(b), v.label, fmtRate(rate), fmt.Sprintf("%d / %d", res.count, n), ratio})
			series = append(series, Series{Name: fmt.Sprintf("%s b=%d", v.label, b), Points: res.rates})
		}
	}
	return &Result{
		Params: map[string]any{"consumers": c, "batches": bs, "preload": n, "max_duration_s": d.Seconds(), "keys": 5000},
		Tables: []Table{t},
		Charts: []Chart{{File: "keyed-throughput.svg", Title: "keyed: throughput over time", XLabel: "seconds", YLabel: "messages/s", Series: series}},
		Notes: []string{"Every message of a keyed run has an ordering key: a group delivers one key's messages in order, none while an earlier one is unacked (a receive may return a run of one key).",
			"Zipf(1.1) keys come from the inverse of the continuous Zipf distribution over [1, 5000]: the hottest key carries about 12% of the messages ((1 - 2^-0.1) / (1 - 5000^-0.1)).",
			"Target (issue 3): keyed with 5,000 keys at least 0.6 of unkeyed."},
	}, nil
}

func (r *runner) latency(ctx context.Context) (*Result, error) {
	systems, err := r.systems("sluice")
	if err != nil {
		return nil, err
	}
	defer r.cleanupAll(ctx, systems...)
	rate := r.o.Rate
	if rate <= 0 {
		rate = 500
	}
	d, p, b := r.dur(10*time.Second), last(r.o.Producers, 2), last(r.o.Batches, 100)
	t := Table{Title: fmt.Sprintf("latency (ms): %d producers offering %d msg/s in all (1 message per transaction), 1 consumer (batches of up to %d, polling every %s when idle)", p, rate, b, r.o.Poll),
		Columns: []string{"system", "latency", "p50", "p95", "p99", "max", "samples"}}
	var cdf []Series
	row := func(s system, what string, sorted []float64) {
		l := Summarize(sorted)
		t.Rows = append(t.Rows, []string{s.name(), what, fmtMS(l.P50), fmtMS(l.P95), fmtMS(l.P99), fmtMS(l.Max), fmt.Sprint(l.Count)})
		cdf = append(cdf, Series{Name: s.name() + " " + strings.SplitN(what, ":", 2)[0], Points: CDFPoints(sorted, 100)})
	}
	notes := []string{"End-to-end: the producer stamps clock_timestamp() into the body in its send statement (before its commit); the consumer's receive query computes clock_timestamp() minus that stamp, as in PgQue's methodology.",
		"The consumer polls every " + r.o.Poll.String() + " when idle and does not use LISTEN/NOTIFY; the Go worker's default poll interval is 500 ms, with NOTIFY wake-ups."}
	for _, s := range systems {
		if _, ok := s.(clientSystem); ok {
			notes = append(notes, s.name()+" is sent and consumed through its client (bench/README.md): its consumer is the client's workers (MaxWorkers = consumers x batch), which also LISTEN; end-to-end is from its own timestamps by the server clock (fetch time minus insert transaction time); it has no receive call to time.")
		}
		sendLat, e2e := &recorder{}, &recorder{}
		if _, _, err := r.steadyCell(ctx, fmt.Sprintf("latency %s %d msg/s", s.name(), rate), s, p, 1, b, rate, d, sendLat, e2e); err != nil {
			return nil, err
		}
		row(s, "producer: send → commit (client round trip)", sendLat.sorted())
		if _, ok := s.(clientSystem); ok {
			// No receive call to time: the client's workers fetch.
			row(s, "end-to-end: send → consumer sees it (server clock)", e2e.sorted())
			continue
		}
		for _, rb := range []int{1, 100} {
			recv, err := r.receiveLatency(ctx, s, rb, min(r.o.Preload, 20000), min(d, 5*time.Second))
			if err != nil {
				return nil, err
			}
			row(s, fmt.Sprintf("subscriber: receive %d over a ready backlog (client round trip)", rb), recv)
		}
		row(s, "end-to-end: send → consumer sees it (server clock)", e2e.sorted())
	}
	return &Result{
		Params: map[string]any{"rate": rate, "producers": p, "consumer_batch": b, "duration_s": d.Seconds(), "poll_ms": r.o.Poll.Seconds() * 1000},
		Tables: []Table{t},
		Charts: []Chart{{File: "latency-cdf.svg", Title: "latency CDF", XLabel: "milliseconds (log scale)", YLabel: "fraction of messages", LogX: true, Series: cdf}},
		Notes:  notes,
	}, nil
}

// receiveLatency preloads n messages and times receives of b messages
// (each then completed) until the backlog is gone or d has passed.
func (r *runner) receiveLatency(ctx context.Context, s system, b, n int, d time.Duration) ([]float64, error) {
	if err := r.setupSystem(ctx, s); err != nil {
		return nil, err
	}
	if err := r.preload(ctx, s, n); err != nil {
		return nil, err
	}
	rec := &recorder{}
	c := &counters{}
	deadline := time.Now().Add(d)
	_, err := r.watch(ctx, fmt.Sprintf("receive %s b=%d over backlog", s.name(), b), c, nil, func() error {
		return workersOn(ctx, r.poolOf(s), 1, func(ctx context.Context, _ int, conn *pgxpool.Conn) error {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				got, _, took, err := s.consume(ctx, conn, b)
				if err != nil || got == 0 {
					return err
				}
				rec.add(float64(took) / float64(time.Millisecond))
				c.done.Add(int64(got))
			}
			return nil
		})
	})
	return rec.sorted(), err
}

// steadyRow runs steady for s and returns the row of the steady table.
func (r *runner) steadyRow(ctx context.Context, s system, p, consumers, b, rate int, d time.Duration) ([]string, *cell, []float64, error) {
	e2e := newRecorder()
	res, c, err := r.steadyCell(ctx, fmt.Sprintf("steady %s %d+%d %d msg/s", s.name(), p, consumers, rate), s, p, consumers, b, rate, d, nil, e2e)
	if err != nil {
		return nil, nil, nil, err
	}
	sorted := e2e.sorted()
	l := Summarize(sorted)
	w := Latency{P50: math.NaN(), P99: math.NaN(), Max: math.NaN()} // ("-": a run shorter than the warm-up)
	if after, ok := e2e.sortedWarm(); ok {
		w = Summarize(after)
	}
	during := cut(res.rates, d.Seconds())
	return []string{s.name(), fmt.Sprint(rate), fmtRate(float64(c.sent.Load()) / d.Seconds()), fmtRate(medianY(during)),
		fmt.Sprint(c.sent.Load() - c.done.Load()), fmt.Sprint(int64(maxY(res.backlog))),
		fmtMS(l.P50), fmtMS(l.P95), fmtMS(l.P99), fmtMS(l.Max), fmtMS(w.P50), fmtMS(w.P99), fmtMS(w.Max)}, res, sorted, nil
}

// steadyColumns: the end-to-end latencies of every message, then of those
// consumed after the first second (when the connections' first calls on
// the queue, which compile and plan its functions, are over).
var steadyColumns = []string{"system", "offered/s", "sent/s", "consumed/s (median)", "backlog at end", "max backlog",
	"e2e p50 ms", "p95", "p99", "max", "after 1 s: p50", "p99", "max"}

func (r *runner) steady(ctx context.Context) (*Result, error) {
	systems, err := r.systems("sluice")
	if err != nil {
		return nil, err
	}
	defer r.cleanupAll(ctx, systems...)
	rate := r.o.Rate
	if rate <= 0 {
		rate = 2000
	}
	d, p, c, b := r.dur(15*time.Second), last(r.o.Producers, 4), last(r.o.Consumers, 4), last(r.o.Batches, 10)
	t := Table{Title: fmt.Sprintf("steady: %d producers offering %d msg/s in all (1 message per transaction), %d consumers (batches of up to %d), %s",
		p, rate, c, b, d), Columns: steadyColumns}
	var series, cdf []Series
	for _, s := range systems {
		row, res, sorted, err := r.steadyRow(ctx, s, p, c, b, rate, d)
		if err != nil {
			return nil, err
		}
		t.Rows = append(t.Rows, row)
		series = append(series, Series{Name: s.name() + " consumed/s", Points: res.rates}, Series{Name: s.name() + " backlog", Points: res.backlog})
		cdf = append(cdf, Series{Name: s.name() + " end-to-end", Points: CDFPoints(sorted, 100)})
	}
	return &Result{
		Params: map[string]any{"rate": rate, "producers": p, "consumers": c, "consumer_batch": b, "duration_s": d.Seconds()},
		Tables: []Table{t},
		Charts: []Chart{
			{File: "steady-throughput.svg", Title: "steady: consumed/s and backlog", XLabel: "seconds", YLabel: "messages/s, messages", Series: series},
			{File: "steady-latency-cdf.svg", Title: "steady: end-to-end latency CDF", XLabel: "milliseconds (log scale)", YLabel: "fraction of messages", LogX: true, Series: cdf},
		},
		Notes: []string{"consumed/s is the median of the per-second rates while producers run; e2e by the server clock (see latency)."},
	}, nil
}

func (r *runner) shootout(ctx context.Context) (*Result, error) {
	all, err := r.systems("sluice", "skiplocked", "pgmq", "pgmq-compat", "river")
	if err != nil {
		return nil, err
	}
	ready, notes, remove := r.prepare(ctx, all)
	defer remove()
	var systems []system
	for _, s := range ready {
		switch s := s.(type) {
		case *sluiceWorkerSystem:
			notes = append(notes, "sluice worker: sluice's queue and sends, consumed by the Go library's worker: "+s.settings()+".")
		case *riverSystem:
			// A trial install, so that a database where River cannot
			// run (no CREATE on it, ...) skips River, not the run.
			err := s.setup(ctx, r.poolOf(s))
			if cerr := s.cleanup(context.WithoutCancel(ctx), r.o.Pool); err == nil {
				err = cerr
			}
			if err != nil {
				notes = append(notes, r.skipped(s, err))
				continue
			}
			notes = append(notes,
				fmt.Sprintf("River %s (Go module %s, driver riverpgxv5), installed by rivermigrate into the schema %s for every cell and migrated down and dropped afterwards. Client settings: %s.", s.version(), riverModule, riverSchema, s.settings()),
				"River is driven by its client: batch 1 is one Insert (its own transaction), batch 100 one InsertMany (one transaction); consumers are the workers of one started river.Client running a no-op job, which completes through River's batched completer. River has no receive batch size (a fetch takes as many jobs as there are idle workers), so both of its drain rows run the same configuration.",
				"River's end-to-end latency is by the server clock too, from River's own timestamps, read by the worker: attempted_at (now() of the fetch that hands the job to a worker) minus created_at (now() of the insert transaction, which Insert/InsertMany begins one round trip before its INSERT); the other systems stamp clock_timestamp() in the send statement and subtract it in the receive statement.")
		}
		systems = append(systems, s)
	}
	if len(systems) == 0 {
		return nil, fmt.Errorf("no system left to run: %s", strings.Join(notes, "; "))
	}
	bare := &tableSystem{table: "bare"}
	defer r.cleanupAll(ctx, append(systems, bare)...)
	names := []string{"workload", "bare INSERT"}
	for _, s := range systems {
		names = append(names, s.name()+" msg/s")
	}
	for _, s := range systems[1:] {
		names = append(names, systems[0].name()+" / "+s.name())
	}
	names = append(names, systems[0].name()+" / bare INSERT")
	tp := Table{Title: "shootout: send and drain, messages/s", Columns: names}
	var series []Series
	row := func(workload string, bareRate float64, rates []float64) {
		cells := []string{workload, "-"}
		if bareRate > 0 {
			cells[1] = fmtRate(bareRate)
		}
		for _, v := range rates {
			cells = append(cells, fmtRate(v))
		}
		for _, v := range rates[1:] {
			cells = append(cells, fmtRatio(rates[0], v))
		}
		if bareRate > 0 {
			cells = append(cells, fmtRatio(rates[0], bareRate))
		} else {
			cells = append(cells, "-")
		}
		tp.Rows = append(tp.Rows, cells)
	}
	// The send and drain rates of every system, for compatShootoutTable.
	var workloads []string
	var measured [][]float64
	sp, d := last(r.o.Producers, 16), r.dur(5*time.Second)
	for _, b := range []int{1, 100} {
		cb, err := r.sendCell(ctx, bare, sp, b, d)
		if err != nil {
			return nil, err
		}
		var rates []float64
		for _, s := range systems {
			cs, err := r.sendCell(ctx, s, sp, b, d)
			if err != nil {
				return nil, err
			}
			rates = append(rates, cs.rate())
			series = append(series, Series{Name: fmt.Sprintf("send %s b=%d", s.name(), b), Points: cs.rates})
		}
		row(fmt.Sprintf("send %d producers x %d msg/txn", sp, b), cb.rate(), rates)
		workloads, measured = append(workloads, fmt.Sprintf("send %d producers x %d msg/txn", sp, b)), append(measured, rates)
	}
	dc, dd, n := last(r.o.Consumers, 8), r.dur(10*time.Second), r.o.Preload
	drained := map[int][]float64{}
	for _, b := range []int{1, 100} {
		var rates []float64
		for _, s := range systems {
			cs, err := r.drainCell(ctx, s, dc, b, n, dd)
			if err != nil {
				return nil, err
			}
			rates = append(rates, float64(cs.count)/cs.elapsed.Seconds())
		}
		drained[b] = rates
		row(fmt.Sprintf("drain %d preloaded, %d consumers x batch %d", n, dc, b), 0, rates)
		workloads, measured = append(workloads, fmt.Sprintf("drain %d preloaded, %d consumers x batch %d", n, dc, b)), append(measured, rates)
	}
	// The Go library's ways, against the peers' rows above: receive then an
	// ack that commits without waiting for the disk (Client.Ack), and each
	// batch acked by the next receive (one transaction per batch, the
	// worker's fetch loop).
	if _, ok := systems[0].(*sluiceSystem); ok {
		for _, v := range []struct {
			s     *sluiceSystem
			label string
		}{
			{r.sluice().acking(true, false), "sluice receive then ack with durable => false"},
			{r.sluice().acking(false, true), "sluice acking with the next receive"},
		} {
			for _, b := range []int{1, 100} {
				cs, err := r.drainCell(ctx, v.s, dc, b, n, dd)
				if err != nil {
					return nil, err
				}
				rates := append([]float64{float64(cs.count) / cs.elapsed.Seconds()}, drained[b][1:]...)
				row(fmt.Sprintf("drain %d preloaded, %d consumers x batch %d, %s", n, dc, b, v.label), 0, rates)
			}
		}
	}
	rate := r.o.Rate
	if rate <= 0 {
		rate = 2000
	}
	p, c, b, sd := 4, 4, last(r.o.Batches, 10), r.dur(15*time.Second)
	ts := Table{Title: fmt.Sprintf("shootout: steady, %d producers offering %d msg/s, %d consumers (batches of up to %d), %s", p, rate, c, b, sd), Columns: steadyColumns}
	var cdf []Series
	for _, s := range systems {
		row, _, sorted, err := r.steadyRow(ctx, s, p, c, b, rate, sd)
		if err != nil {
			return nil, err
		}
		ts.Rows = append(ts.Rows, row)
		cdf = append(cdf, Series{Name: s.name(), Points: CDFPoints(sorted, 100)})
	}
	notes = append(notes,
		"One server, one system after another, same statements shape (River: its client's statements, see above): bodies built on the server, one transaction per batch, synchronous_commit as stated above.",
		"sluice consumes with sluice.receive then sluice.ack (two transactions; the ack durable, the receive committed asynchronously), or, in the rows that say so, with an ack that commits asynchronously too (durable => false, as the Go library's Client.Ack), or with one sluice.receive per batch that acks the previous batch (ack => receipts; one transaction, committed asynchronously); a lost asynchronous commit is a redelivery, never a lost message; SKIP LOCKED with one DELETE ... WHERE id = ANY(ARRAY(SELECT id ... ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED)) RETURNING; PGMQ with pgmq.read (visibility timeout: the run's lease) then pgmq.delete (two transactions); River with its client's workers (see above).",
		"drain msg/s = messages drained / time to drain (or the time limit, then fewer than preloaded were drained: see the drain scenario for counts).")
	tables := []Table{tp, ts}
	if ct, ok := compatShootoutTable(systems, workloads, measured); ok {
		tables = append(tables, ct)
		notes = append(notes, compatTargets)
	}
	return &Result{
		Params: map[string]any{"producers": sp, "consumers": dc, "preload": n, "rate": rate, "duration_s": d.Seconds()},
		Tables: tables,
		Charts: []Chart{
			{File: "shootout-send-throughput.svg", Title: "shootout: send throughput over time", XLabel: "seconds", YLabel: "messages/s", Series: series},
			{File: "shootout-steady-latency-cdf.svg", Title: "shootout: steady end-to-end latency CDF", XLabel: "milliseconds (log scale)", YLabel: "fraction of messages", LogX: true, Series: cdf},
		},
		Notes: notes,
	}, nil
}
