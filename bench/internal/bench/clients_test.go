package bench_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/bench/internal/bench"
)

// TestClientsSmoke runs the clients scenario on 200 messages from the
// repository's root: each client found (the Python venv, node with the
// compiled TypeScript client) must measure every mode beside Go, and a
// missing one must be named in a note. Skipped when neither is there.
func TestClientsSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("eleven cells, each starting an interpreter, take most of a minute")
	}
	cfg, err := pgxpool.ParseConfig(server.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir("../../.."); err != nil { // the scripts' paths are relative to the root
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chdir(wd) })
	o := bench.Options{Out: &bytes.Buffer{}, Command: "test", Preload: 200}
	cfg.MaxConns = int32(bench.MaxConnections(o))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	o.Pool = pool
	rep, err := bench.Run(ctx, []string{"clients"}, o)
	out := o.Out.(*bytes.Buffer).String()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Log(out)
	res := rep.Results[0]
	notes := strings.Join(res.Notes, "\n")
	want := map[string]int{"Go": 3} // rows per client
	for name, rows := range map[string]int{"Python": 5, "TypeScript": 3} {
		if strings.Contains(notes, name+" skipped") {
			t.Logf("%s skipped: %s", name, notes)
			continue
		}
		want[name] = rows
	}
	if len(want) == 1 {
		t.Skipf("neither the Python venv nor node with the compiled TypeScript client: %s", notes)
	}
	if len(res.Tables) != 1 {
		t.Fatalf("tables: %+v\n%s", res.Tables, out)
	}
	got := map[string]int{}
	for _, row := range res.Tables[0].Rows {
		got[strings.Fields(row[1])[0]]++
		for _, cell := range row[2:4] {
			if v, err := strconv.ParseFloat(cell, 64); err != nil || v <= 0 {
				t.Errorf("%v: %q is not a positive number", row, cell)
			}
		}
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%d rows of %s, want %d: %v", got[name], name, n, res.Tables[0].Rows)
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
