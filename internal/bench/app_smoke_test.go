package bench_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/internal/bench"
)

// TestAppSmoke runs the app scenario for a few seconds with few keys and
// many failures, poison messages and forwards, so that every path (retry,
// dead letter, atomic ack+send, stage 2) is taken: the checker must find
// nothing wrong, the backlog must drain, and no queue may be left behind.
func TestAppSmoke(t *testing.T) {
	if !slices.Contains(bench.Scenarios(), "app") {
		t.Fatalf("scenarios %v: no app", bench.Scenarios())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	o := bench.Options{Out: &out, Command: "test", Rate: 150, Duration: 4 * time.Second,
		Producers: []int{2}, Consumers: []int{4}, DrainLimit: 45 * time.Second}
	pcfg, err := pgxpool.ParseConfig(server.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = int32(bench.MaxConnections(o))
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	o.Pool = pool

	cfg := bench.DefaultAppConfig(o)
	if cfg.Keys != 5000 || cfg.MaxAttempts != 5 || cfg.Rate != 150 || cfg.Concurrency != 4 || cfg.Push != 4*time.Second {
		t.Fatalf("default config from the options: %+v", cfg)
	}
	cfg.Keys = 40 // long runs of a key, so that order matters
	cfg.FailPct, cfg.PoisonPct, cfg.ForwardPct = 10, 2, 20
	cfg.BackoffBase, cfg.BackoffMax = 20*time.Millisecond, 100*time.Millisecond
	// A short lease: when a poison message dies inside a run of its key,
	// the rest of the run stays leased until the lease expires (the note
	// "Lease expiries" of the scenario).
	cfg.Lease = 2 * time.Second
	res, check, err := bench.RunApp(ctx, o, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Logf("check: %+v", *check)
	if n := check.Violations(); n != 0 {
		t.Errorf("%d violations: %v\n%s", n, check.Details, out.String())
	}
	if check.Sent < 300 || check.Forwards == 0 || check.Poison == 0 {
		t.Errorf("sent %d, forwarded %d, poison %d: want at least 300, 1 and 1", check.Sent, check.Forwards, check.Poison)
	}
	for g, gc := range check.Groups {
		if gc.Pending != 0 || gc.Unfinished != 0 || gc.Lost != 0 {
			t.Errorf("group %d: %+v: want everything finished", g, gc)
		}
		if g < 2 && (gc.Expected != check.Sent || gc.Dead != check.Poison || gc.Failures == 0) {
			t.Errorf("group %d: %+v: want %d expected, %d dead, some failures", g, gc, check.Sent, check.Poison)
		}
	}
	if got := check.Groups[2].Expected; got != check.Forwards {
		t.Errorf("stage 2 expected %d messages, want the %d forwards", got, check.Forwards)
	}
	if len(res.Tables) != 3 || len(res.Charts) != 2 {
		t.Errorf("%d tables, %d charts: want 3 and 2", len(res.Tables), len(res.Charts))
	}
	res.Scenario = "app"
	rep := &bench.Report{Command: "test", Started: time.Now(), Results: []bench.Result{*res}}
	if _, err := rep.Save(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sluice.list_queues()`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d queues left behind", left)
	}
}
