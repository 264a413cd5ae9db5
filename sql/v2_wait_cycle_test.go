package sqlsrc_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A receive that holds the cut lock (it numbered) does not wait for a lane
// another receive holds: that receive may be waiting for the cut lock, and
// the two would wait for each other until both waits ran out (100 ms), or
// one would fail with "deadlock detected" under a deadlock_timeout below
// that (seen in the steady benchmark with deadlock_timeout = 10ms). Built
// step by step on one lane: B holds the lane's lock in an open
// transaction; A numbers a new message (taking the cut lock) and finds the
// lane busy; then B receives again in its transaction and waits for A's
// cut lock. Both run with deadlock_timeout = 10ms: the old wait failed one
// of them.
func TestV2ReceivesDoNotWaitInACycle(t *testing.T) {
	b := setup(t)
	b.createV2("cyc", `"lanes": 1`)
	connA, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer connA.Release()
	connB, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer connB.Release()
	for _, c := range []*pgxpool.Conn{connA, connB} {
		if _, err := c.Exec(b.ctx, "SET deadlock_timeout = '10ms'"); err != nil {
			t.Skipf("cannot set deadlock_timeout (not a superuser?): %v", err)
		}
	}
	var pidA int
	if err := connA.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&pidA); err != nil {
		t.Fatal(err)
	}

	// m1 and m2 numbered into the lane by another session, m1 taken
	first := b.send(b.pool, "cyc", `{"m": 1}`)
	b.send(b.pool, "cyc", `{"m": 2}`)
	if got := b.v2receive("cyc", "default", 1, ""); len(got) != 1 || got[0].ID != first {
		t.Fatalf("first receive: %+v", got)
	}
	// B takes m2 and keeps the lane's lock
	txB, err := connB.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback(b.ctx) //nolint:errcheck
	gotB, err := v2receiveOn(b.ctx, txB, "cyc", "default", 1, "")
	if err != nil || len(gotB) != 1 {
		t.Fatalf("B's first receive: %v, %+v", err, gotB)
	}
	third := b.send(b.pool, "cyc", `{"m": 3}`)

	// A numbers m3 (its cut lock held until it commits) and finds the
	// lane held by B
	type result struct {
		ms  []v2msg
		err error
	}
	doneA := make(chan result, 1)
	go func() {
		ms, err := v2receiveOn(b.ctx, connA, "cyc", "default", 1, "")
		doneA <- result{ms, err}
	}()
	var resA *result
	deadline := time.Now().Add(10 * time.Second)
	for resA == nil && time.Now().Before(deadline) {
		select {
		case r := <-doneA:
			resA = &r
		default:
		}
		if resA != nil {
			break
		}
		var waiting bool
		if err := b.pool.QueryRow(b.ctx,
			"SELECT coalesce(wait_event = 'advisory', false) FROM pg_stat_activity WHERE pid = $1", pidA).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break // (the old receive: waiting for B's lane)
		}
		time.Sleep(time.Millisecond)
	}
	// B receives again in its transaction: it waits for A's cut lock
	gotB2, errB := v2receiveOn(b.ctx, txB, "cyc", "default", 1, "")
	if resA == nil {
		select {
		case r := <-doneA:
			resA = &r
		case <-time.After(10 * time.Second):
			t.Fatal("A's receive did not return")
		}
	}
	if errB != nil {
		t.Errorf("B's second receive: %v (SQLSTATE %s)", errB, sqlstate(errB))
	}
	if resA.err != nil {
		t.Errorf("A's receive: %v (SQLSTATE %s)", resA.err, sqlstate(resA.err))
	}
	if t.Failed() {
		return
	}
	if err := txB.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	// m3 went to one of them, or is still there for the next receive
	got := append(append([]v2msg{}, resA.ms...), gotB2...)
	if len(got) == 0 {
		got = b.v2receive("cyc", "default", 10, "")
	}
	if len(got) != 1 || got[0].ID != third {
		t.Errorf("m3 (id %d) delivered as %+v, want once", third, got)
	}
}
