package bench_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/bench/internal/bench"
	"github.com/sluicemq/sluice/internal/pgtest"
)

var server *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &server) }

// TestSendSmoke runs the send scenario for a second with one producer: it
// must measure something and leave no queue or table behind.
func TestSendSmoke(t *testing.T) {
	pool := server.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := bench.Run(ctx, []string{"send"}, bench.Options{
		Pool: pool, Out: &out, Producers: []int{1}, Batches: []int{1}, Duration: time.Second, Command: "test", Lanes: 2,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rep.Results) != 1 || len(rep.Results[0].Tables) != 1 || len(rep.Results[0].Tables[0].Rows) != 1 {
		t.Fatalf("results: %+v", rep.Results)
	}
	// The report states the queue's options as the engine has them: the
	// lanes given, the defaults filled in.
	if q := rep.Results[0].Queues; len(q) != 1 || q[0].System != "sluice" || fmt.Sprint(q[0].Options["lanes"]) != "2" || q[0].Options["retention"] != "1 hour" {
		t.Errorf("queues %+v: want sluice's queue with lanes 2 and the default retention 1 hour", q)
	}
	if notes := strings.Join(rep.Results[0].Notes, "\n"); !strings.Contains(notes, "sluice, queue bench: backoff_base 1 second,") || !strings.Contains(notes, "lanes 2, lease 30 seconds,") {
		t.Errorf("notes %q: want the queue's options", notes)
	}
	row := rep.Results[0].Tables[0].Rows[0]
	for _, cell := range row[2:4] {
		if v, err := strconv.ParseFloat(cell, 64); err != nil || v <= 0 {
			t.Errorf("rate %q in row %v: want a positive number", cell, row)
		}
	}
	var left int
	err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM sluice.list_queues())
		+ (SELECT count(*) FROM pg_namespace WHERE nspname = 'qbench')`).Scan(&left)
	if err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d queues or schemas left behind", left)
	}
	if _, err := rep.Save(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// TestShootoutSmoke runs a short shootout of sluice, SKIP LOCKED, River and
// sluice's Go worker: every system must send and consume, River and the
// worker included (their drains and steady backlogs prove their consumers
// ran), and nothing may be left behind.
func TestShootoutSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("a shootout of four systems takes about half a minute")
	}
	o := bench.Options{
		Out: &bytes.Buffer{}, Command: "test", Duration: time.Second,
		Producers: []int{2}, Consumers: []int{2}, Batches: []int{10},
		Preload: 2000, Rate: 200, Systems: []string{"sluice", "skiplocked", "river", "sluice-worker"},
	}
	cfg, err := pgxpool.ParseConfig(server.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(bench.MaxConnections(o))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	o.Pool = pool
	rep, err := bench.Run(ctx, []string{"shootout"}, o)
	out := o.Out.(*bytes.Buffer).String()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Results) != 1 || len(rep.Results[0].Tables) != 2 {
		t.Fatalf("results: %+v\n%s", rep.Results, out)
	}
	for _, n := range rep.Results[0].Notes {
		if strings.Contains(n, "skipped") {
			t.Errorf("note %q\n%s", n, out)
		}
	}
	// Throughput: every system's column of every workload is positive.
	tp := rep.Results[0].Tables[0]
	for _, name := range []string{"sluice", "SKIP LOCKED", "River", "sluice worker"} {
		col := slices.Index(tp.Columns, name+" msg/s")
		if col < 0 {
			t.Fatalf("no column for %s in %v\n%s", name, tp.Columns, out)
		}
		for _, row := range tp.Rows {
			if v, err := strconv.ParseFloat(row[col], 64); err != nil || v <= 0 {
				t.Errorf("%s: %s = %q: want a positive rate\n%s", row[0], tp.Columns[col], row[col], out)
			}
		}
	}
	// Steady: everything sent was consumed, with end-to-end latencies.
	ts := rep.Results[0].Tables[1]
	if len(ts.Rows) != 4 {
		t.Fatalf("steady rows: %v\n%s", ts.Rows, out)
	}
	for _, row := range ts.Rows {
		sent, err := strconv.ParseFloat(row[2], 64)
		if err != nil || sent <= 0 || row[4] != "0" || row[6] == "-" {
			t.Errorf("steady %v: want sent/s > 0, backlog at end 0 and an e2e p50\n%s", row, out)
		}
	}
	var left int
	err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM sluice.list_queues())
		+ (SELECT count(*) FROM pg_namespace WHERE nspname IN ('qbench', 'riverbench'))
		+ (SELECT count(*) FROM pg_class WHERE relname LIKE 'river%')
		+ (SELECT count(*) FROM pg_type WHERE typname LIKE 'river%')
		+ (SELECT count(*) FROM pg_proc WHERE proname LIKE 'river%')`).Scan(&left)
	if err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d queues, schemas or River objects left behind", left)
	}
}

// TestHTTPSmoke runs the http scenario briefly: sluice server in process,
// HTTP beside SQL, long polls; it must measure something and leave no queue
// behind.
func TestHTTPSmoke(t *testing.T) {
	pool := server.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := bench.Run(ctx, []string{"http"}, bench.Options{Pool: pool, Out: &out, Duration: time.Second, Preload: 2000, Command: "test"})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rep.Results) != 1 || len(rep.Results[0].Tables) != 4 {
		t.Fatalf("results: %+v", rep.Results)
	}
	for _, row := range rep.Results[0].Tables[0].Rows {
		for _, cell := range row[1:4] { // HTTP, HTTP with a token, SQL
			if v, err := strconv.ParseFloat(cell, 64); err != nil || v <= 0 {
				t.Errorf("rate %q in row %v: want a positive number\n%s", cell, row, out.String())
			}
		}
	}
	if rows := rep.Results[0].Tables[1].Rows; len(rows) != 3 {
		t.Errorf("end-to-end latencies: %v, want rows for HTTP (two) and SQL\n%s", rows, out.String())
	}
	if idle := rep.Results[0].Tables[2].Rows; len(idle) != 1 || idle[0][1] != "1000" || idle[0][2] != "1" {
		t.Errorf("idle long polls: %v\n%s", idle, out.String())
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sluice.list_queues()`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d queues left behind (%v)", left, err)
	}
}

// TestStatusBurstSmoke runs the statusburst scenario briefly: it must
// measure the steady work in each cell, the burst's status calls, and
// leave no queue behind. (Its ratio, the target, is read from a
// real run: bench/README.md.)
func TestStatusBurstSmoke(t *testing.T) {
	pool := server.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := bench.Run(ctx, []string{"statusburst"}, bench.Options{Pool: pool, Out: &out, Duration: time.Second, Command: "test"})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rep.Results) != 1 || len(rep.Results[0].Tables) != 2 {
		t.Fatalf("results: %+v\n%s", rep.Results, out.String())
	}
	rows := rep.Results[0].Tables[0].Rows
	if len(rows) != 10 {
		t.Fatalf("rows %v, want an idle and a burst cell per turn\n%s", rows, out.String())
	}
	for _, row := range rows {
		if ops, err := strconv.Atoi(row[2]); err != nil || ops < 10 {
			t.Errorf("row %v: want the steady work's requests measured\n%s", row, out.String())
		}
		if row[1] == "burst" {
			if calls, err := strconv.ParseFloat(row[8], 64); err != nil || calls <= 0 {
				t.Errorf("row %v: want status calls answered\n%s", row, out.String())
			}
		}
	}
	if r := rep.Results[0].Tables[1].Rows; len(r) != 1 {
		t.Errorf("summary %v", r)
	} else if v, err := strconv.ParseFloat(r[0][2], 64); err != nil || v <= 0 {
		t.Errorf("summary ratio %q", r[0][2])
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sluice.list_queues()`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d queues left behind (%v)", left, err)
	}
}

// TestMemorySmoke runs the memory scenario for sluice and pgmq-compat: each
// must report a connection's memory after 1 and after 20 queues, growing
// with the queues (each queue's copy of the engine is compiled and planned
// in the connection), and more once the queues rotated, and leave no queue
// behind.
func TestMemorySmoke(t *testing.T) {
	pool := server.NewPool(t)
	// (40 queues made and dropped, each with its copy of the engine: over
	// two minutes on a loaded 2-core machine with PostgreSQL 14)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := bench.Run(ctx, []string{"memory"}, bench.Options{
		Pool: pool, Out: &out, Command: "test", Systems: []string{"sluice", "pgmq-compat"},
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rep.Results) != 1 || len(rep.Results[0].Tables) != 1 {
		t.Fatalf("results: %+v\n%s", rep.Results, out.String())
	}
	rows := rep.Results[0].Tables[0].Rows
	if len(rows) != 2 {
		t.Fatalf("rows %v, want sluice and pgmq-compat\n%s", rows, out.String())
	}
	for _, row := range rows {
		one, err1 := strconv.ParseFloat(row[1], 64)
		all, err2 := strconv.ParseFloat(row[2], 64)
		per, err3 := strconv.ParseFloat(row[3], 64)
		if err1 != nil || err2 != nil || err3 != nil || one <= 0 || all <= one || per <= 0 {
			t.Errorf("row %v: want positive MB, growing from 1 to 20 queues", row)
		}
		// (after a rotation a connection also holds the copies that name
		// each queue's second slot)
		if rot, err := strconv.ParseFloat(row[5], 64); err != nil || rot <= per {
			t.Errorf("row %v: want more MB a queue after a rotation than before", row)
		}
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sluice.list_queues()`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d queues left behind", left)
	}
}
