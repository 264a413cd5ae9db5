package pgmqcompat

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// engineOf returns the engine of a pgmq queue's sluice queue.
func engineOf(t *testing.T, db *pgxpool.Pool, queue string) int {
	t.Helper()
	return scalar[int](t, db, "SELECT engine FROM sluice.queue WHERE name = $1", queue)
}

// msgSchema returns the engine 2 storage schema of a queue.
func msgSchema(t *testing.T, db *pgxpool.Pool, queue string) string {
	t.Helper()
	return scalar[string](t, db, "SELECT 'sluice_q' || id FROM sluice.queue WHERE name = $1", queue)
}

// TestQueuesAreEngine2 checks that pgmq.create makes a sluice queue of
// engine 2 whose messages are in its own schema (none in engine 1's shared
// sluice.messages), and that q_<name> shows them.
func TestQueuesAreEngine2(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	for _, create := range []string{"create", "create_non_partitioned", "create_unlogged", "create_partitioned"} {
		q := "e2_" + create
		exec(t, db, "SELECT pgmq."+create+"($1)", q)
		if e := engineOf(t, db, q); e != 2 {
			t.Fatalf("pgmq.%s made a queue of engine %d, want 2", create, e)
		}
	}
	q := "e2_create"
	a := scalar[int64](t, db, "SELECT * FROM pgmq.send($1, '{\"a\": 1}')", q)
	if n := scalar[int64](t, db, "SELECT count(*) FROM sluice.messages m JOIN sluice.queue x ON x.id = m.queue_id WHERE x.name = $1", q); n != 0 {
		t.Fatalf("%d rows of the engine 2 queue in sluice.messages", n)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM "+msgSchema(t, db, q)+".msg WHERE id = $1", a); n != 1 {
		t.Fatalf("%d rows of the message in the queue's msg table, want 1", n)
	}
	if got := scalar[int64](t, db, "SELECT msg_id FROM pgmq.q_e2_create"); got != a {
		t.Fatalf("q_e2_create shows %d, want %d", got, a)
	}
	if scalar[bool](t, db, "SELECT sluice.upgrade_queue($1)", q) {
		t.Fatal("sluice.upgrade_queue upgraded a queue of engine 2")
	}
}

// TestViewShowsRetriedMessageOnce checks, on engine 2, that a message that
// set_vt gave back with a delay (a retry copy with an id of its own) shows
// once in q_<name> under its msg_id with its vt and read_ct, also once the
// slot of its own row was reclaimed and only the copy is stored; that a
// delete then hides it; and that the side tables' rotation keeps its
// tombstone while the copy is stored, so that it does not come back.
func TestViewShowsRetriedMessageOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('rc')")
	sch := msgSchema(t, db, "rc")
	a := scalar[int64](t, db, "SELECT * FROM pgmq.send('rc', '{\"a\": 1}')")
	if got := msgs(t, db, "pgmq.read('rc', 3600, 1)"); len(got) != 1 || got[0].ID != a {
		t.Fatalf("read: %+v", got)
	}
	set := msgs(t, db, "pgmq.set_vt('rc', $1::bigint, 600)", a) // shorter: a retry copy due in 10 minutes
	if len(set) != 1 || set[0].ID != a {
		t.Fatalf("set_vt: %+v", set)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM "+sch+".msg WHERE orig = $1", a); n != 1 {
		t.Fatalf("%d retry copies of the message, want 1", n)
	}
	check := func(when string) {
		t.Helper()
		v := msgs(t, db, "pgmq.q_rc")
		if len(v) != 1 || v[0].ID != a || v[0].ReadCt != 1 || v[0].Message != `{"a": 1}` ||
			v[0].VT.Sub(set[0].VT).Abs() > time.Millisecond {
			t.Fatalf("%s: q_rc shows %+v, want msg %d once, read_ct 1, vt %v", when, v, a, set[0].VT)
		}
	}
	check("after set_vt")

	// Let sluice reclaim the slot of the message's own row: short rotations,
	// and traffic to move its epochs on (send and pop other messages).
	exec(t, db, `SELECT sluice.alter_queue('rc', '{"rotate_interval": "10 milliseconds"}')`)
	deadline := time.Now().Add(30 * time.Second)
	for scalar[int64](t, db, "SELECT count(*) FROM "+sch+".msg WHERE id = $1", a) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the message's own row was never reclaimed")
		}
		exec(t, db, "SELECT * FROM pgmq.send('rc', '{}')")
		msgs(t, db, "pgmq.pop('rc')")
		exec(t, db, "SELECT * FROM sluice.maintain()")
		time.Sleep(20 * time.Millisecond)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM "+sch+".msg WHERE orig = $1", a); n != 1 {
		t.Fatalf("%d retry copies left after the reclaim, want 1", n)
	}
	check("with only the retry copy stored")

	if !scalar[bool](t, db, "SELECT pgmq.delete('rc', $1::bigint)", a) {
		t.Fatal("delete of the held message returned false")
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.q_rc"); n != 0 {
		t.Fatalf("q_rc shows %d after the delete", n)
	}
	// Rotations now: the slot with the tombstone may not be truncated while
	// the copy (due in 10 minutes) is stored.
	for i := 0; i < 6; i++ {
		exec(t, db, "SELECT pgmq._rotate('rc')")
		exec(t, db, "SELECT * FROM sluice.maintain()")
		time.Sleep(20 * time.Millisecond)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM "+sch+".msg WHERE orig = $1", a); n != 1 {
		t.Fatalf("%d retry copies stored, want 1 (what this test is about)", n)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq._sl_d_rc WHERE msg_id = $1", a); n == 0 {
		t.Fatal("the tombstone was rotated away while the retry copy is stored")
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.q_rc"); n != 0 {
		t.Fatalf("q_rc shows %d after the rotations", n)
	}
}

// TestSideTablesRotateEngine1 runs the rotation checks of
// TestSideTablesRotate on a queue of engine 1, made by an earlier layer
// (testdata/pgmq-layer-d41f738.tar.gz) and kept through the layer's
// upgrade: the layer serves both engines (until sluice.upgrade_queue moves
// the queue: TestUpgradeQueueOfTheLayer).
func TestSideTablesRotateEngine1(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, db := oldLayerDatabase(ctx, t)
	exec(t, db, "SELECT pgmq.create('rot')")
	if _, err := Install(ctx, conn); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if e := engineOf(t, db, "rot"); e != 1 {
		t.Fatalf("the old queue is of engine %d after the upgrade, want 1", e)
	}
	sideTablesRotate(t, db)
}
