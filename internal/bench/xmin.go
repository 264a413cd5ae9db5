package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func (r *runner) xmin(ctx context.Context) (*Result, error) {
	var systems []system
	for _, n := range r.o.XminSystems {
		s, err := r.newSystem(n)
		if err != nil {
			return nil, err
		}
		if sl, ok := s.(*sluiceSystem); ok {
			sl.reclaim = true // the size must show the backlog, not a retention period
		}
		systems = append(systems, s)
	}
	if len(systems) == 0 {
		var err error
		if systems, err = r.systems("sluice"); err != nil {
			return nil, err
		}
	}
	var notes []string
	if i := slices.IndexFunc(systems, func(s system) bool { _, ok := s.(pgmqSystem); return ok }); i >= 0 {
		// As in the shootout, a PGMQ that cannot be installed (no pip, no
		// network) skips PGMQ, not the scenario.
		version, remove, err := installPGMQ(ctx, r.o.Pool, r.o.PGMQWheel)
		if err != nil {
			fmt.Fprintf(r.o.Out, "%s skipped: %v\n", systems[i].name(), err)
			notes = append(notes, fmt.Sprintf("%s skipped: %v", systems[i].name(), err))
			systems = slices.Delete(systems, i, i+1)
		} else {
			defer func() {
				if err := remove(context.WithoutCancel(ctx)); err != nil {
					fmt.Fprintf(r.o.Out, "cleanup: %v\n", err)
				}
			}()
			notes = append(notes, fmt.Sprintf("PGMQ %s, installed for the run from the SQL script of the pgmq PyPI wheel and removed afterwards.", version))
		}
	}
	systems, more := r.openPooled(ctx, systems)
	notes = append(notes, more...)
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
		Columns: []string{"system", "until", "consumed/s", "e2e p50 ms", "e2e p99 ms", "backlog", "dead tuples", "table size MB"}}
	var series []Series
	summaries := map[string]xminSummary{}
	for _, s := range systems {
		rows, res, sum, err := r.xminRun(ctx, s, p, c, b, rate, d, iv)
		if err != nil {
			return nil, err
		}
		t.Rows = append(t.Rows, rows...)
		notes = append(notes, sum.note)
		summaries[s.name()] = sum
		series = append(series, Series{Name: s.name() + " consumed/s", Points: res.rates})
	}
	notes = append(notes, "dead tuples: sum of n_dead_tup, size: sum of pg_total_relation_size (indexes and TOAST included) over the tables of the system's schemas (sluice%: metadata and every queue schema; pgmq-compat: sluice% and pgmq, in its own database, where its xid holder connects too).")
	tables := []Table{t}
	if ct, ok := compatXminTable(summaries); ok {
		tables = append(tables, ct)
	}
	return &Result{
		Params: map[string]any{"rate": rate, "producers": p, "consumers": c, "consumer_batch": b, "duration_s": d.Seconds(), "interval_s": iv.Seconds()},
		Tables: tables,
		Charts: []Chart{{File: "xmin-throughput.svg", Title: "xmin: consumed/s with an xid held", XLabel: "seconds", YLabel: "messages/s", Series: series}},
		Notes:  notes,
	}, nil
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

// xminRun runs steady for s with an xid held, sampling every iv.
func (r *runner) xminRun(ctx context.Context, s system, p, consumers, b, rate int, d, iv time.Duration) ([][]string, *cell, xminSummary, error) {
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

	e2e := &recorder{}
	var rows [][]string
	var first, lastRate, lastP99 float64
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
			if len(rows) == 0 {
				first = cur
			}
			lastRate, lastP99, lastBacklog = cur, Percentile(w, 0.99), cs.sent.Load()-done
			maxDead = max(maxDead, dead)
			sizes = append(sizes, size)
			rows = append(rows, []string{s.name(), time.Since(start).Round(time.Second).String(), fmtRate(cur), fmtMS(Percentile(w, 0.5)), fmtMS(Percentile(w, 0.99)),
				fmt.Sprint(cs.sent.Load() - done), fmt.Sprint(dead), fmt.Sprintf("%.1f", float64(size)/(1<<20))})
			fmt.Fprintf(r.o.Out, "xmin %s sample: %s\n", s.name(), strings.Join(rows[len(rows)-1][1:], "  "))
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
	note := fmt.Sprintf("%s: consumed/s in the last interval / the first = %s; at most %d dead tuples; size %.1f MB after the first interval, %.1f MB at the most, %.1f MB at the end",
		s.name(), fmtRatio(lastRate, first), maxDead, float64(size0)/(1<<20), float64(slices.Max(append(sizes, 0)))/(1<<20), float64(sizeN)/(1<<20))
	return rows, res, xminSummary{note: note, first: first, last: lastRate, p99: lastP99, backlog: lastBacklog, maxDead: maxDead, sizeEnd: sizeN}, nil
}

// xminSummary is what an xmin run of one system ends with.
type xminSummary struct {
	note        string
	first, last float64 // consumed/s in the first and the last interval
	p99         float64 // e2e p99 ms in the last interval
	backlog     int64   // at the last sample
	maxDead     int64
	sizeEnd     int64 // bytes, at the last sample
}

// xminSteady is steadyCell that hands its counters to the sampler.
func (r *runner) xminSteady(ctx context.Context, s system, p, consumers, b, rate int, d time.Duration, e2e *recorder, ready chan<- *counters) (*cell, error) {
	if err := s.setup(ctx, r.poolOf(s)); err != nil {
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
