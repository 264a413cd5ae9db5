package bench_test

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/bench/internal/bench"
)

// TestPGMQCompatSmoke runs a tiny shootout cell and a tiny xmin run of the
// pgmq-compat system: it must make its own database (sluice's schema and
// the pgmq layer), send and consume there with PGMQ's statements, sample
// its tables under a held xid, and drop the database afterwards.
func TestPGMQCompatSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("a shootout and an xmin run take about 20 seconds")
	}
	o := bench.Options{
		Out: &bytes.Buffer{}, Command: "test", Duration: time.Second,
		XminDuration: 3 * time.Second, Interval: time.Second,
		Producers: []int{2}, Consumers: []int{2}, Batches: []int{10},
		Preload: 2000, Rate: 200, Systems: []string{"pgmq-compat"}, XminSystems: []string{"pgmq-compat"},
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
	rep, err := bench.Run(ctx, []string{"shootout", "xmin"}, o)
	out := o.Out.(*bytes.Buffer).String()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("results: %+v\n%s", rep.Results, out)
	}
	for _, res := range rep.Results {
		for _, n := range res.Notes {
			if strings.Contains(n, "skipped") {
				t.Errorf("%s: note %q\n%s", res.Scenario, n, out)
			}
		}
	}
	tp := rep.Results[0].Tables[0]
	col := slices.Index(tp.Columns, "pgmq-compat msg/s")
	if col < 0 {
		t.Fatalf("no pgmq-compat column in %v\n%s", tp.Columns, out)
	}
	if len(tp.Rows) != 4 {
		t.Fatalf("shootout rows: %v\n%s", tp.Rows, out)
	}
	for _, row := range tp.Rows {
		if v, err := strconv.ParseFloat(row[col], 64); err != nil || v <= 0 {
			t.Errorf("%s: %q: want a positive rate\n%s", row[0], row[col], out)
		}
	}
	ts := rep.Results[0].Tables[1]
	if len(ts.Rows) != 1 || ts.Rows[0][4] != "0" || ts.Rows[0][6] == "-" {
		t.Errorf("steady %v: want backlog at end 0 and an e2e p50\n%s", ts.Rows, out)
	}
	// xmin: samples of pgmq-compat's tables, in its own database.
	tx := rep.Results[1].Tables[0]
	if len(tx.Rows) == 0 {
		t.Fatalf("no xmin sample\n%s", out)
	}
	sizeCol := slices.Index(tx.Columns, "table size MB")
	if sizeCol < 0 {
		t.Fatalf("no table size column in %v\n%s", tx.Columns, out)
	}
	for _, row := range tx.Rows {
		size, err := strconv.ParseFloat(row[sizeCol], 64)
		if row[0] != "pgmq-compat" || err != nil || size <= 0 {
			t.Errorf("xmin sample %v: want pgmq-compat and a table size above 0\n%s", row, out)
		}
	}
	// The worst interval against the first, and the latency chart.
	if tw := rep.Results[1].Tables[1]; len(tw.Rows) != 1 || tw.Rows[0][0] != "pgmq-compat" || tw.Rows[0][4] == "-" {
		t.Errorf("xmin worst-interval table %v: want one pgmq-compat row with lowest / first\n%s", tw.Rows, out)
	}
	if ch := rep.Results[1].Charts; len(ch) != 2 || ch[1].File != "xmin-latency.svg" || len(ch[1].Series) != 2 {
		t.Errorf("xmin charts %+v: want the throughput and the latency chart (p50, p99)", ch)
	}
	if !strings.Contains(out, "xmin pgmq-compat: transaction") {
		t.Errorf("no xid held for pgmq-compat\n%s", out)
	}
	var left int
	err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_database WHERE datname = current_database() || '_pgmqcompat')
		+ (SELECT count(*) FROM pg_namespace WHERE nspname = 'pgmq')`).Scan(&left)
	if err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("the pgmq-compat database or a pgmq schema was left behind")
	}
}

// TestPGMQCompatSkippedWithoutCreatedb: a bench user who may not create a
// database runs the shootout without pgmq-compat, with a note saying why.
func TestPGMQCompatSkippedWithoutCreatedb(t *testing.T) {
	if testing.Short() {
		t.Skip("a shootout takes about 10 seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := server.NewOwnedDatabase(t, "bench_nocreatedb_", "NOSUPERUSER NOCREATEDB")
	o := bench.Options{
		Out: &bytes.Buffer{}, Command: "test", Duration: time.Second,
		Producers: []int{2}, Consumers: []int{2}, Batches: []int{10},
		Preload: 1000, Rate: 200, Systems: []string{"skiplocked", "pgmq-compat"},
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(bench.MaxConnections(o))
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
	skipped := false
	for _, n := range rep.Results[0].Notes {
		skipped = skipped || strings.Contains(n, "pgmq-compat skipped") && strings.Contains(n, "CREATEDB")
	}
	if !skipped {
		t.Errorf("no note that pgmq-compat was skipped for want of CREATEDB: %q\n%s", rep.Results[0].Notes, out)
	}
	if slices.Contains(rep.Results[0].Tables[0].Columns, "pgmq-compat msg/s") {
		t.Errorf("pgmq-compat measured without a database: %v", rep.Results[0].Tables[0].Columns)
	}
}
