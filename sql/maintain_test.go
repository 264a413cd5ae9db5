package sqlsrc_test

import (
	"testing"
	"time"
)

// maintain() rolls back each queue's maintenance that wrote nothing, which
// lets go of the locks its reads took (kept, a few hundred queues filled the
// lock table every session shares); a queue whose maintenance did write
// (here a rotation) keeps it, and its locks, until the caller commits.
func TestMaintainLetsIdleQueuesLocksGo(t *testing.T) {
	b := setup(t)
	b.createQueue("idle1", "")
	b.createQueue("idle2", "")
	b.createQueue("busy", "")
	for _, q := range []string{"idle1", "idle2", "busy"} {
		b.send(b.pool, q, `{}`)
		b.ack(q, "default", receipts(b.receive(q, "default", 1, ""))...)
	}
	// (only now: with 100 ms from the start, a receive's upkeep on a slow
	// machine could rotate first, and then maintain could not, the first
	// slot being kept for its retention)
	b.exec(`SELECT sluice.alter_queue('busy', '{"rotate_interval": "100 milliseconds"}')`)
	b.send(b.pool, "busy", `{}`) // traffic in the current slot: due to rotate
	time.Sleep(200 * time.Millisecond)
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	rows, err := tx.Query(b.ctx, `SELECT queue, rotated FROM sluice.maintain()`)
	if err != nil {
		t.Fatal(err)
	}
	rotated := map[string]bool{}
	for rows.Next() {
		var q string
		var r bool
		if err := rows.Scan(&q, &r); err != nil {
			t.Fatal(err)
		}
		rotated[q] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rotated) != 3 || rotated["idle1"] || rotated["idle2"] || !rotated["busy"] {
		t.Fatalf("maintain() rows: %v, want the three queues, busy rotated", rotated)
	}
	held := func(queue string) int64 {
		t.Helper()
		var n int64
		if err := tx.QueryRow(b.ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		                               WHERE l.pid = pg_backend_pid()
		                                 AND c.relnamespace = (SELECT format('sluice_q%s', id)::regnamespace
		                                                       FROM sluice.queue WHERE name = $1)`, queue).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, q := range []string{"idle1", "idle2"} {
		if n := held(q); n != 0 {
			t.Fatalf("after maintain(), the transaction holds %d locks on %s's tables, want 0", n, q)
		}
	}
	if n := held("busy"); n == 0 {
		t.Fatalf("the rotated queue's locks were let go: its rotation would not be kept")
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.int64(`SELECT count(*) FROM sluice.epoch e JOIN sluice.queue q ON q.id = e.queue_id WHERE q.name = 'busy'`); n != 2 {
		t.Fatalf("busy has %d epochs after the commit, want 2", n)
	}
}

// maintain() skips a queue whose maintenance another transaction is running
// (its maint lock held), the first queue included, and goes on with the
// others.
func TestMaintainSkipsAQueueInMaintenance(t *testing.T) {
	b := setup(t)
	b.createQueue("first", "")
	b.createQueue("second", "")
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	if _, err := tx.Exec(b.ctx, `SELECT pg_advisory_xact_lock(sluice._lock_ns('maint'), id) FROM sluice.queue WHERE name = 'first'`); err != nil {
		t.Fatal(err)
	}
	got := b.int64s(`SELECT q.id FROM sluice.maintain() m JOIN sluice.queue q ON q.name = m.queue`)
	want := b.int64s(`SELECT id FROM sluice.queue WHERE name = 'second'`)
	if len(got) != 1 || got[0] != want[0] {
		t.Fatalf("maintain() ran on queues %v, want only second (%v)", got, want)
	}
}
