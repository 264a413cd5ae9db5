package bench_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/bench"
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
		Pool: pool, Out: &out, Producers: []int{1}, Batches: []int{1}, Duration: time.Second, Command: "test",
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rep.Results) != 1 || len(rep.Results[0].Tables) != 1 || len(rep.Results[0].Tables[0].Rows) != 1 {
		t.Fatalf("results: %+v", rep.Results)
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
