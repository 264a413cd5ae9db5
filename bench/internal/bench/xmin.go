package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// xminSystems returns the systems of the xmin scenario: --xmin-systems,
// else --systems, else sluice. Whichever they are, each sluice queue among
// them (sluice's, pgmq-compat's) keeps nothing after completion and
// rotates every reclaimRotation, so that its size shows what reclaim
// leaves (the backlog), not a retention period. (The fallback once took
// r.systems("sluice") as it was, with the default retention of 1 hour and
// rotation of 1 minute, under a note that said otherwise.)
func (r *runner) xminSystems() ([]system, error) {
	names := r.o.XminSystems
	if len(names) == 0 {
		names = r.o.Systems
	}
	if len(names) == 0 {
		names = []string{"sluice"}
	}
	var systems []system
	for _, n := range names {
		s, err := r.newSystem(n)
		if err != nil {
			return nil, err
		}
		switch sys := s.(type) {
		case *sluiceSystem:
			sys.reclaim = true
		case *pgmqCompatSystem:
			sys.reclaim = true
		}
		systems = append(systems, s)
	}
	return systems, nil
}

func (r *runner) xmin(ctx context.Context) (*Result, error) {
	systems, err := r.xminSystems()
	if err != nil {
		return nil, err
	}
	systems, notes, remove := r.prepare(ctx, systems)
	defer remove()
	if len(systems) == 0 {
		return nil, errors.New("no system left to run")
	}
	defer r.cleanupAll(ctx, systems...)
	rate := r.o.Rate
	if rate <= 0 {
		rate = 2000
	}
	d := r.dur(10 * time.Minute)
	if r.o.XminDuration > 0 {
		d = r.o.XminDuration
	}
	p, c, b, iv := last(r.o.Producers, 4), last(r.o.Consumers, 4), last(r.o.Batches, 10), r.o.Interval
	t := Table{Title: fmt.Sprintf("xmin: steady (%d producers, %d msg/s offered, %d consumers, batches of up to %d) while another connection holds a transaction with an xid for the whole %s", p, rate, c, b, d),
		Columns: []string{"system", "until", "consumed/s", "/ first", "e2e p50 ms", "e2e p99 ms", "backlog", "dead tuples", "catalog dead", "table size MB"}}
	worst := Table{Title: fmt.Sprintf("xmin: each system's worst %s interval against its first (consumed/s: the lowest; end-to-end latency: the highest)", iv),
		Columns: []string{"system", "consumed/s first", "lowest", "until", "lowest / first", "last / first",
			"e2e p50 ms first", "highest", "until", "highest / first", "e2e p99 ms first", "highest", "until", "highest / first"}}
	var series, latency []Series
	var lows, highs []string
	summaries := map[string]xminSummary{}
	for _, run := range xminRuns(systems, r.o.XminControl) {
		s, name := run.s, run.name
		rows, res, sum, err := r.xminRun(ctx, s, name, run.hold, p, c, b, rate, d, iv)
		if err != nil {
			return nil, err
		}
		t.Rows = append(t.Rows, rows...)
		worst.Rows = append(worst.Rows, sum.worstRow(name))
		notes = append(notes, sum.note)
		if run.hold {
			summaries[s.name()] = sum
		}
		series = append(series, Series{Name: name + " consumed/s", Points: res.rates})
		lows = append(lows, name+" "+fmtRatio(sum.low.rate, sum.first))
		highs = append(highs, name+" "+fmtRatio(sum.highP50.p50, sum.firstP50))
		p50, p99 := sum.latencySeries()
		latency = append(latency, Series{Name: name + " p50", Points: p50}, Series{Name: name + " p99", Points: p99})
	}
	if r.o.XminControl {
		notes = append(notes, xminControlNote)
	}
	notes = append(notes, "/ first: the interval's consumed/s over the first interval's. e2e p50/p99: of the messages consumed in the interval, by the server clock.",
		"dead tuples: sum of n_dead_tup, size: sum of pg_total_relation_size (indexes and TOAST included) over the tables of the system's schemas (sluice%: metadata and every queue schema; pgmq-compat: sluice% and pgmq, in its own database, where its xid holder connects too).",
		"catalog dead: sum of n_dead_tup over the system catalog's tables (pg_catalog) of the system's database, whoever made them, since each table's last vacuum: a TRUNCATE gives a relation a new pg_class row and an ANALYZE updates pg_statistic, dead rows that the dead tuples column does not count and that no vacuum removes while an xid is held (autovacuum removes them later, so a control run can start with those of the run before).")
	if n := xminRetentionNote(r.queues.snapshot()); n != "" {
		notes = append(notes, n)
	}
	tables := []Table{t, worst}
	if ct, ok := compatXminTable(summaries); ok {
		tables = append(tables, ct)
	}
	return &Result{
		Params: map[string]any{"rate": rate, "producers": p, "consumers": c, "consumer_batch": b, "duration_s": d.Seconds(), "interval_s": iv.Seconds()},
		Tables: tables,
		Charts: []Chart{
			{File: "xmin-throughput.svg", Title: "xmin: consumed/s with an xid held", XLabel: "seconds", YLabel: "messages/s", Series: series,
				Subtitle: fmt.Sprintf("consumed/s of the lowest %s interval / the first: %s", iv, strings.Join(lows, ", "))},
			{File: "xmin-latency.svg", Title: fmt.Sprintf("xmin: end-to-end latency per %s interval", iv), XLabel: "seconds (end of the interval)",
				YLabel: "milliseconds (log scale)", LogY: true, Series: latency,
				Subtitle: "e2e p50 of the highest interval / the first: " + strings.Join(highs, ", ")},
		},
		Notes: notes,
	}, nil
}

// xminRetentionNote says, for each system's sluice queue of the run, the
// retention and rotation it had (read back from sluice.list_queues()) and
// so what its size shows: what reclaim leaves, or also what a retention
// period keeps.
func xminRetentionNote(recs []QueueRecord) string {
	var parts []string
	for _, rec := range recs {
		o := rec.Options
		part := fmt.Sprintf("%s's %s had retention %v and rotate_interval %v", rec.System, queueNames(rec.Queues), o["retention"], o["rotate_interval"])
		if reclaimOptions(o) {
			part += ": it keeps nothing after completion, so its size shows what reclaim leaves, not a retention period"
		} else {
			part += ": its size includes the completed messages its retention keeps, not only what reclaim leaves"
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return ""
	}
	return "As sluice.list_queues() gave them once made: " + strings.Join(parts, "; ") + "."
}

// tableStats returns the dead tuples and total size of the tables of s
// (in the schemas matching one of the patterns of s.schemas(), in the
// database of s).
func (r *runner) tableStats(ctx context.Context, s system) (dead, size int64, err error) {
	err = r.poolOf(s).QueryRow(ctx, `SELECT coalesce(sum(n_dead_tup), 0)::bigint, coalesce(sum(pg_total_relation_size(relid)), 0)::bigint
FROM pg_stat_all_tables WHERE schemaname LIKE ANY (string_to_array($1, ','))`, s.schemas()).Scan(&dead, &size)
	if err != nil {
		return 0, 0, fmt.Errorf("reading table statistics: %w", err)
	}
	return dead, size, nil
}

// xminControlNote says what the control rows are.
const xminControlNote = "no xid held (control): the same system and load run again after its run with the xid held, with no transaction held open: what the machine and the system's own rotation do to the intervals without a held xid."

// xminRunOf is one run of the xmin scenario: a system, with or without the
// held xid, and the name its rows carry.
type xminRunOf struct {
	s    system
	name string
	hold bool
}

// xminRuns lists the runs of the xmin scenario: each system with the xid
// held, followed (control) by the same with none.
func xminRuns(systems []system, control bool) []xminRunOf {
	var runs []xminRunOf
	for _, s := range systems {
		runs = append(runs, xminRunOf{s: s, name: s.name(), hold: true})
		if control {
			runs = append(runs, xminRunOf{s: s, name: s.name() + " (no xid held)"})
		}
	}
	return runs
}

// catalogDead returns the dead tuples of the system catalog's tables in
// the database of s (n_dead_tup of pg_stat_sys_tables in pg_catalog).
func (r *runner) catalogDead(ctx context.Context, s system) (int64, error) {
	var dead int64
	err := r.poolOf(s).QueryRow(ctx, `SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_sys_tables WHERE schemaname = 'pg_catalog'`).Scan(&dead)
	if err != nil {
		return 0, fmt.Errorf("reading the catalog's statistics: %w", err)
	}
	return dead, nil
}

// xminRun runs steady for s, sampling every iv, with an xid held (hold)
// or with none (the control); its rows and notes carry name.
func (r *runner) xminRun(ctx context.Context, s system, name string, hold bool, p, consumers, b, rate int, d, iv time.Duration) ([][]string, *cell, xminSummary, error) {
	if hold {
		holder, err := r.poolOf(s).Acquire(ctx)
		if err != nil {
			return nil, nil, xminSummary{}, fmt.Errorf("connecting the xid holder: %w", err)
		}
		defer holder.Release()
		tx, err := holder.Begin(ctx)
		if err != nil {
			return nil, nil, xminSummary{}, fmt.Errorf("holding an xid: %w", err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		var xid string
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
			return nil, nil, xminSummary{}, fmt.Errorf("holding an xid: %w", err)
		}
		fmt.Fprintf(r.o.Out, "xmin %s: transaction %s holds its xid for %s\n", s.name(), xid, d)
	} else {
		fmt.Fprintf(r.o.Out, "xmin %s: no xid held for %s (control)\n", s.name(), d)
	}

	e2e := &recorder{}
	var rows [][]string
	var ivs []xminInterval
	var maxDead, lastBacklog int64
	var sizes []int64
	sampled := make(chan error, 1)
	stop := make(chan struct{})
	// The sampler starts once xminSteady has made its counters.
	ready := make(chan *counters, 1)
	go func() {
		cs := <-ready
		if cs == nil {
			sampled <- nil
			return
		}
		start := time.Now()
		tick := time.NewTicker(iv)
		defer tick.Stop()
		var prev int64
		var mark int
		for {
			select {
			case <-stop:
				sampled <- nil
				return
			case <-tick.C:
			}
			done := cs.done.Load()
			cur := float64(done-prev) / iv.Seconds()
			prev = done
			var w []float64
			w, mark = e2e.window(mark)
			dead, size, err := r.tableStats(ctx, s)
			if err != nil {
				sampled <- err
				return
			}
			catDead, err := r.catalogDead(ctx, s)
			if err != nil {
				sampled <- err
				return
			}
			iv := xminInterval{until: time.Since(start).Round(time.Second), rate: cur, p50: Percentile(w, 0.5), p99: Percentile(w, 0.99)}
			ivs = append(ivs, iv)
			lastBacklog = cs.sent.Load() - done
			maxDead = max(maxDead, dead)
			sizes = append(sizes, size)
			rows = append(rows, []string{name, iv.until.String(), fmtRate(cur), fmtRatio(cur, ivs[0].rate), fmtMS(iv.p50), fmtMS(iv.p99),
				fmt.Sprint(lastBacklog), fmt.Sprint(dead), fmt.Sprint(catDead), fmt.Sprintf("%.1f", float64(size)/(1<<20))})
			fmt.Fprintf(r.o.Out, "xmin %s sample: %s\n", name, strings.Join(rows[len(rows)-1][1:], "  "))
		}
	}()
	res, err := r.xminSteady(ctx, s, p, consumers, b, rate, d, e2e, ready)
	close(stop)
	if serr := <-sampled; err == nil {
		err = serr
	}
	if err != nil {
		return nil, nil, xminSummary{}, err
	}
	size0 := int64(0)
	if len(sizes) > 0 {
		size0 = sizes[0]
	}
	sizeN := int64(0)
	if len(sizes) > 0 {
		sizeN = sizes[len(sizes)-1]
	}
	sum := summarizeXmin(ivs)
	sum.backlog, sum.maxDead, sum.sizeEnd = lastBacklog, maxDead, sizeN
	sum.note = fmt.Sprintf("%s: consumed/s in the last interval / the first = %s, in the lowest (until %s) / the first = %s; e2e p50 at the highest (until %s) / the first = %s; at most %d dead tuples; size %.1f MB after the first interval, %.1f MB at the most, %.1f MB at the end",
		name, fmtRatio(sum.last, sum.first), sum.low.until, fmtRatio(sum.low.rate, sum.first), sum.highP50.until, fmtRatio(sum.highP50.p50, sum.firstP50),
		maxDead, float64(size0)/(1<<20), float64(slices.Max(append(sizes, 0)))/(1<<20), float64(sizeN)/(1<<20))
	return rows, res, sum, nil
}

// xminInterval is one sampling interval of an xmin run.
type xminInterval struct {
	until    time.Duration // since the start of the run
	rate     float64       // consumed/s
	p50, p99 float64       // e2e ms of the messages consumed in the interval (NaN: none)
}

// xminSummary is what an xmin run of one system ends with.
type xminSummary struct {
	note        string
	intervals   []xminInterval
	first, last float64 // consumed/s in the first and the last interval
	p99         float64 // e2e p99 ms in the last interval
	// firstP50 and firstP99 are the first interval's e2e percentiles; low is
	// the interval with the lowest consumed/s, highP50 and highP99 those
	// with the highest e2e percentiles (the first of equals).
	firstP50, firstP99    float64
	low, highP50, highP99 xminInterval
	backlog               int64 // at the last sample
	maxDead               int64
	sizeEnd               int64 // bytes, at the last sample
}

// summarizeXmin finds the first, last, lowest and highest intervals of ivs.
func summarizeXmin(ivs []xminInterval) xminSummary {
	nan := math.NaN()
	sum := xminSummary{intervals: ivs, first: nan, last: nan, p99: nan, firstP50: nan, firstP99: nan,
		low: xminInterval{rate: nan, p50: nan, p99: nan}}
	sum.highP50, sum.highP99 = sum.low, sum.low
	if len(ivs) == 0 {
		return sum
	}
	f, l := ivs[0], ivs[len(ivs)-1]
	sum.first, sum.last, sum.p99, sum.firstP50, sum.firstP99 = f.rate, l.rate, l.p99, f.p50, f.p99
	sum.low, sum.highP50, sum.highP99 = f, f, f
	for _, iv := range ivs[1:] {
		if iv.rate < sum.low.rate {
			sum.low = iv
		}
		if iv.p50 > sum.highP50.p50 || math.IsNaN(sum.highP50.p50) {
			sum.highP50 = iv
		}
		if iv.p99 > sum.highP99.p99 || math.IsNaN(sum.highP99.p99) {
			sum.highP99 = iv
		}
	}
	return sum
}

// worstRow is the system's row of the worst-interval table.
func (s xminSummary) worstRow(name string) []string {
	until := func(iv xminInterval) string {
		if len(s.intervals) == 0 {
			return "-"
		}
		return iv.until.String()
	}
	return []string{name, fmtRate(s.first), fmtRate(s.low.rate), until(s.low), fmtRatio(s.low.rate, s.first), fmtRatio(s.last, s.first),
		fmtMS(s.firstP50), fmtMS(s.highP50.p50), until(s.highP50), fmtRatio(s.highP50.p50, s.firstP50),
		fmtMS(s.firstP99), fmtMS(s.highP99.p99), until(s.highP99), fmtRatio(s.highP99.p99, s.firstP99)}
}

// latencySeries returns the e2e p50 and p99 of each interval, at the
// interval's end in seconds (intervals with no message left out).
func (s xminSummary) latencySeries() (p50, p99 []Point) {
	for _, iv := range s.intervals {
		x := iv.until.Seconds()
		if !math.IsNaN(iv.p50) {
			p50 = append(p50, Point{X: x, Y: iv.p50})
		}
		if !math.IsNaN(iv.p99) {
			p99 = append(p99, Point{X: x, Y: iv.p99})
		}
	}
	return p50, p99
}

// xminSteady is steadyCell that hands its counters to the sampler.
func (r *runner) xminSteady(ctx context.Context, s system, p, consumers, b, rate int, d time.Duration, e2e *recorder, ready chan<- *counters) (*cell, error) {
	if err := r.setupSystem(ctx, s); err != nil {
		ready <- nil
		return nil, err
	}
	c := &counters{}
	ready <- c
	deadline := time.Now().Add(d)
	return r.watch(ctx, fmt.Sprintf("xmin %s %d+%d %d msg/s", s.name(), p, consumers, rate), c, e2e, func() error {
		return produceAndConsume(func() error {
			return r.producers(ctx, s, p, func(ctx context.Context, _ int, conn *pgxpool.Conn) error {
				return r.producePaced(ctx, conn, s, float64(rate)/float64(p), deadline, c, nil)
			})
		}, func() error {
			return r.consumers(ctx, s, consumers, b, deadline, nil, c, e2e)
		}, nil)
	})
}
