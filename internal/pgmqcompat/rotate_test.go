package pgmqcompat

import (
	"testing"
	"time"
)

// TestSideTablesRotate checks that the side tables are reclaimed by
// rotation once nothing in the old slot is needed, and not before.
func TestSideTablesRotate(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('rot')")
	exec(t, db, `SELECT sluice.alter_queue('rot', '{"retention": "10 milliseconds", "rotate_interval": "10 milliseconds"}')`)
	rotate := func() bool { return scalar[bool](t, db, "SELECT pgmq._rotate('rot')") }
	rows := func() int64 {
		return scalar[int64](t, db, "SELECT (SELECT count(*) FROM pgmq._sl_r_rot) + (SELECT count(*) FROM pgmq._sl_d_rot)")
	}

	a := scalar[int64](t, db, "SELECT * FROM pgmq.send('rot', '{}')")
	b := scalar[int64](t, db, "SELECT * FROM pgmq.send('rot', '{}')")
	msgs(t, db, "pgmq.read('rot', 1, 1)") // a, vt 1 s
	exec(t, db, "SELECT pgmq.delete('rot', $1::bigint)", a)
	msgs(t, db, "pgmq.read('rot', 60, 1)") // b, vt 60 s: current lease
	if !rotate() {                         // generation 0 -> 1: slot 1 was empty
		t.Fatal("first rotation refused")
	}
	if rotate() {
		t.Fatal("rotated over a current lease and a completed message sluice still keeps")
	}
	exec(t, db, "SELECT pgmq.delete('rot', $1::bigint)", b)
	// wait for sluice to reclaim the completed messages, then the slot is free
	deadline := time.Now().Add(20 * time.Second)
	for !rotate() {
		if time.Now().After(deadline) {
			t.Fatalf("side slot 0 never reclaimed (%d side rows, %d messages in sluice, status %s)", rows(),
				scalar[int64](t, db, "SELECT count(*) FROM sluice.messages m JOIN sluice.queue q ON q.id = m.queue_id WHERE q.name = 'rot'"),
				scalar[string](t, db, "SELECT row_to_json(s)::text FROM sluice.status('rot') s"))
		}
		exec(t, db, "SELECT * FROM sluice.maintain()")
		// traffic moves sluice's epochs on: send and pop one message
		exec(t, db, "SELECT * FROM pgmq.send('rot', '{}')")
		msgs(t, db, "pgmq.pop('rot')")
		time.Sleep(100 * time.Millisecond)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq._sl_r_rot WHERE msg_id IN ($1, $2)", a, b); n != 0 {
		t.Fatalf("%d read rows of a and b left after rotation", n)
	}
	if got := msgs(t, db, "pgmq.read('rot', 30, 10)"); len(got) != 0 {
		t.Fatalf("read after rotation: %+v", got)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.q_rot"); n != 0 {
		t.Fatalf("q_rot shows %d", n)
	}
	if g := scalar[int64](t, db, "SELECT max(gen) FROM pgmq.side_generation WHERE sluice_queue = 'rot'"); g != 2 {
		t.Fatalf("generation %d, want 2", g)
	}
	// a read rotates by itself once the generation is a minute old; the
	// same session tries again only a minute later, another session at once
	conn, err := db.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	gen := func() int64 {
		return scalar[int64](t, db, "SELECT max(gen) FROM pgmq.side_generation WHERE sluice_queue = 'rot'")
	}
	read := func() {
		if _, err := conn.Exec(ctxT(t), "SELECT * FROM pgmq.read('rot', 30, 1)"); err != nil {
			t.Fatal(err)
		}
	}
	exec(t, db, "INSERT INTO pgmq.side_generation VALUES ('rot', 3, clock_timestamp() - interval '2 minutes')")
	read()
	if g := gen(); g != 4 {
		t.Fatalf("generation %d after a read, want 4", g)
	}
	exec(t, db, "INSERT INTO pgmq.side_generation VALUES ('rot', 5, clock_timestamp() - interval '2 minutes')")
	read()
	if g := gen(); g != 5 {
		t.Fatalf("generation %d after a second read of the session within the minute, want 5 (not tried)", g)
	}
	msgs(t, db, "pgmq.read('rot', 30, 1)") // another session
	if g := gen(); g != 6 {
		t.Fatalf("generation %d after another session's read, want 6", g)
	}
}
