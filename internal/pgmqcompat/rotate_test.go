package pgmqcompat

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestSideTablesRotate checks that the side tables are reclaimed by
// rotation once nothing in the old slot is needed, and not before: not over
// a current lease, and not while sluice still keeps a completed message of
// the slot.
func TestSideTablesRotate(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	// (sluice's default rotate_interval, a minute: no read rotates by itself
	// until the reclaim below shortens it)
	exec(t, db, "SELECT pgmq.create('rot')")
	if e := engineOf(t, db, "rot"); e != 2 {
		t.Fatalf("queue of engine %d, want 2", e)
	}
	sideTablesRotate(t, db)
}

// sideTablesRotate is TestSideTablesRotate's body, on the pgmq queue 'rot'
// (fresh, of either engine, with sluice's default rotate_interval).
func sideTablesRotate(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	rotate := func() bool { return scalar[bool](t, db, "SELECT pgmq._rotate('rot')") }
	sideRows := func(ids ...int64) int64 {
		return scalar[int64](t, db, `SELECT (SELECT count(*) FROM pgmq._sl_r_rot WHERE msg_id = ANY ($1))
		                                  + (SELECT count(*) FROM pgmq._sl_d_rot WHERE msg_id = ANY ($1))`, ids)
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
	if rotate() {
		t.Fatal("rotated while sluice still keeps completed messages of the slot (no lease current)")
	}
	// wait for sluice to reclaim the completed messages (retention 0, which
	// pgmq.create gives, and short rotations now), then their side rows go
	// with a rotation (reads now rotate by themselves too)
	exec(t, db, `SELECT sluice.alter_queue('rot', '{"rotate_interval": "10 milliseconds"}')`)
	deadline := time.Now().Add(20 * time.Second)
	for sideRows(a, b) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the side rows of a and b never reclaimed (%d left, %d messages in sluice, status %s)", sideRows(a, b),
				scalar[int64](t, db, "SELECT count(*) FROM sluice.peek('rot', 1000)"),
				scalar[string](t, db, "SELECT row_to_json(s)::text FROM sluice.status('rot') s"))
		}
		exec(t, db, "SELECT * FROM sluice.maintain()")
		// traffic moves sluice's epochs on: send and pop one message
		exec(t, db, "SELECT * FROM pgmq.send('rot', '{}')")
		msgs(t, db, "pgmq.pop('rot')")
		rotate()
		time.Sleep(100 * time.Millisecond)
	}
	if got := msgs(t, db, "pgmq.read('rot', 30, 10)"); len(got) != 0 {
		t.Fatalf("read after rotation: %+v", got)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.q_rot"); n != 0 {
		t.Fatalf("q_rot shows %d", n)
	}
	if g := scalar[int64](t, db, "SELECT max(gen) FROM pgmq.side_generation WHERE sluice_queue = 'rot'"); g < 2 {
		t.Fatalf("generation %d, want 2 or more", g)
	}
}

// TestReadsRotateAtTheQueuesPace checks that a read rotates the side tables
// by itself once the generation is as old as the queue's rotate_interval,
// that a session tries again only a rotate_interval later (another session
// at once), and that a shorter rotate_interval makes both sooner.
func TestReadsRotateAtTheQueuesPace(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('pace')") // rotate_interval: a minute
	conn, err := db.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	gen := func() int64 {
		return scalar[int64](t, db, "SELECT max(gen) FROM pgmq.side_generation WHERE sluice_queue = 'pace'")
	}
	started := func(g int64, ago string) {
		exec(t, db, "INSERT INTO pgmq.side_generation VALUES ('pace', $1, clock_timestamp() - $2::interval)", g, ago)
	}
	readOn := func(c interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}) {
		if _, err := c.Exec(ctxT(t), "SELECT * FROM pgmq.read('pace', 30, 1)"); err != nil {
			t.Fatal(err)
		}
	}
	read := func() { readOn(conn) }
	read()
	if g := gen(); g != 0 {
		t.Fatalf("generation %d after a read of a fresh queue, want 0", g)
	}
	started(1, "2 minutes")
	read()
	if g := gen(); g != 2 {
		t.Fatalf("generation %d after a read, want 2", g)
	}
	started(3, "2 minutes")
	read()
	if g := gen(); g != 3 {
		t.Fatalf("generation %d after a second read of the session within the minute, want 3 (not tried)", g)
	}
	msgs(t, db, "pgmq.read('pace', 30, 1)") // another session
	if g := gen(); g != 4 {
		t.Fatalf("generation %d after another session's read, want 4", g)
	}
	// A shorter rotate_interval: a session tries at the pace of the
	// interval it read at its last try (this one's: a minute), one that
	// reads it anew at once, and then every two seconds.
	exec(t, db, `SELECT sluice.alter_queue('pace', '{"rotate_interval": "2 seconds"}')`)
	started(5, "3 seconds")
	read()
	if g := gen(); g != 5 {
		t.Fatalf("generation %d after a read of the session that last tried under a minute's interval, want 5", g)
	}
	fresh, err := pgx.Connect(ctxT(t), db.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close(context.Background())
	readFresh := func() { readOn(fresh) }
	readFresh()
	if g := gen(); g != 6 {
		t.Fatalf("generation %d after a new session's read with a 2 s rotate_interval, want 6", g)
	}
	readFresh()
	if g := gen(); g != 6 {
		t.Fatalf("generation %d after a second read at once, want 6 (the generation is not due)", g)
	}
	time.Sleep(2100 * time.Millisecond)
	readFresh()
	if g := gen(); g != 7 {
		t.Fatalf("generation %d after a read two seconds later, want 7", g)
	}
}

// TestReadsAsARoleWithoutSluiceTables checks that a role with the sluice
// roles and no other right, which may not read sluice's own tables, reads
// and deletes while a rotation is due, and that its read rotates: the
// layer's functions run as its owner (before, such a role's sessions did
// not rotate, and only the owner's did).
func TestReadsAsARoleWithoutSluiceTables(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	role := fmt.Sprintf("pgmq_app_%d", time.Now().UnixNano()%1_000_000_000)
	exec(t, db, "SELECT pgmq.create('priv')")
	exec(t, db, "CREATE ROLE "+role+" NOLOGIN IN ROLE sluice_consumer, sluice_producer")
	t.Cleanup(func() {
		if _, err := db.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
			t.Errorf("dropping %s: %v", role, err)
		}
	})
	exec(t, db, "INSERT INTO pgmq.side_generation VALUES ('priv', 1, clock_timestamp() - interval '2 minutes')")
	exec(t, db, "SELECT * FROM pgmq.send('priv', '{}')")
	conn, err := db.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctxT(t), "SET ROLE "+role); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "RESET ROLE") //nolint:errcheck // (back to the pool as the test user)
	if _, err := conn.Exec(ctxT(t), "SELECT count(*) FROM sluice.queue"); err == nil {
		t.Fatalf("%s may read sluice.queue: the test would show nothing", role)
	}
	var got int64
	var deleted bool
	if err := conn.QueryRow(ctxT(t), "SELECT msg_id FROM pgmq.read('priv', 30, 1)").Scan(&got); err != nil {
		t.Fatalf("read as %s with a rotation due: %v", role, err)
	}
	if err := conn.QueryRow(ctxT(t), "SELECT pgmq.delete('priv', $1::bigint)", got).Scan(&deleted); err != nil || !deleted {
		t.Fatalf("delete as %s: %v, %v", role, deleted, err)
	}
	if g := scalar[int64](t, db, "SELECT max(gen) FROM pgmq.side_generation WHERE sluice_queue = 'priv'"); g != 2 {
		t.Fatalf("generation %d after %s's read: want 2 (the read rotates)", g, role)
	}
}
