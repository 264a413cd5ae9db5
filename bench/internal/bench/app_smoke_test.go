package bench_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/bench/internal/bench"
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

// TestAppUndrainedHotKey ends an app run while the engine still holds the
// messages of a hot key: in group fanout_a the key's first message is in
// flight and its 19 others wait behind it (status counts them as waiting,
// not ready); group fanout_b received nothing. The checker must count all
// of them as not drained, none as lost, and the report must name the key
// behind and how many of its messages.
func TestAppUndrainedHotKey(t *testing.T) {
	pool := server.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := bench.Options{Pool: pool, Out: &bytes.Buffer{}, Command: "test"}
	run, err := bench.NewAppRun(ctx, o, bench.DefaultAppConfig(o))
	if err != nil {
		t.Fatal(err)
	}
	defer run.Cleanup(ctx)
	send := func(k int32) {
		t.Helper()
		if err := run.Send(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		send(1)
	}
	client := sluice.NewClient(pool)
	got, err := client.Receive(ctx, bench.AppQueue, "fanout_a", nil)
	if err != nil || len(got) != 1 || got[0].Key != "k1" {
		t.Fatalf("receive: %+v, %v: want the first message of key 1", got, err)
	}
	for k := int32(2); k <= 4; k++ {
		send(k)
	}
	st, err := client.Status(ctx, bench.AppQueue)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Pending() != 23 || s.Group == "fanout_a" && (s.InFlight != 1 || s.Waiting != 19) {
			t.Fatalf("status %+v: want 23 held in each group, of fanout_a's 1 in flight and 19 waiting", s)
		}
	}

	res, check, err := run.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("check: %+v", *check)
	if n := check.Violations(); n != 0 || check.Lost != 0 {
		t.Errorf("%d violations, %d lost: %v", n, check.Lost, check.Details)
	}
	for g, gc := range check.Groups[:2] {
		if gc.Expected != 23 || gc.Unfinished != 23 || gc.Pending != 23 || gc.Lost != 0 {
			t.Errorf("group %d: %+v: want 23 expected, unfinished and pending, none lost", g, gc)
		}
		if b := check.Behind[g]; len(b) != 4 || b[0].Key != 1 || b[0].Messages != 20 {
			t.Errorf("group %d: behind %+v: want key 1 first, with 20 messages, then 3 keys", g, b)
		}
	}
	tk := res.Tables[2] // the offline check: group, expected, completed, dead, not drained, lost, ...
	for _, row := range tk.Rows[:2] {
		if row[4] != "23" || row[5] != "0" {
			t.Errorf("check row %v: want 23 not drained, 0 lost", row)
		}
	}
	notes := strings.Join(res.Notes, "\n")
	t.Logf("notes:\n%s", notes)
	for _, want := range []string{"checker: PASS", "they are counted as not drained, not lost",
		"fanout_a: 23 messages of 4 keys (key 1: 20, key 2: 1, key 3: 1, key 4: 1), 87% of them of key 1", "stage2: none"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes want %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "FAIL") || strings.Contains(notes, "lost:") {
		t.Errorf("notes report a loss:\n%s", notes)
	}
}
