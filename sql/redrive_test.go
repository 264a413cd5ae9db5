package sqlsrc_test

import (
	"testing"
	"time"
)

// Redriving many dead letters of two groups, a subset by id then the rest:
// each dead letter comes back once, to its own group only, as the message it
// was (id and body), and is then no longer a dead letter; the count
// returned is the number redriven.
func TestRedriveManyToTheirGroups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"max_attempts": 1}`)
	b.exec(`SELECT sluice.create_group('q', 'other')`)
	b.exec(`SELECT sluice.send_batch('q', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 600) g))`)
	// default dead-letters every message, other the even ones.
	b.exec(`SELECT count(*) FROM (SELECT sluice.nack('q', 'default', receipt) FROM sluice.receive('q', 'default', 1000)) x`)
	b.exec(`SELECT count(*) FROM (SELECT CASE WHEN (body->>'n')::int % 2 = 0 THEN sluice.nack('q', 'other', receipt)
	                                          ELSE sluice.ack('q', 'other', ARRAY[receipt]) > 0 END
	                              FROM sluice.receive('q', 'other', 1000)) x`)
	if n := b.int64(`SELECT count(*) FROM sluice.dead_letters('q', NULL, 1000)`); n != 900 {
		t.Fatalf("%d dead letters, want 900", n)
	}
	// The messages whose n is a multiple of 3, of both groups.
	if n := b.int64(`SELECT sluice.redrive('q', NULL, ARRAY(SELECT id FROM sluice.dead_letters('q', NULL, 1000)
	                                                      WHERE (body->>'n')::int % 3 = 0))`); n != 300 {
		t.Fatalf("redrive by ids = %d, want 300 (200 of default, 100 of other)", n)
	}
	if n := b.int64(`SELECT sluice.redrive('q', 'other')`); n != 200 {
		t.Fatalf("redrive of other's rest = %d, want 200", n)
	}
	if n := b.int64(`SELECT count(*) FROM sluice.dead_letters('q', NULL, 1000)`); n != 400 {
		t.Fatalf("%d dead letters left, want default's 400", n)
	}
	check := func(group string, want func(n int) bool, count int) {
		t.Helper()
		// (a receive takes from the lanes it gets: receive until empty)
		var got []msg
		for {
			ms := b.receive("q", group, 1000, "1 hour")
			if len(ms) == 0 {
				break
			}
			got = append(got, ms...)
		}
		if len(got) != count {
			t.Fatalf("%s received %d redriven messages, want %d", group, len(got), count)
		}
		seen := map[int64]bool{}
		for _, m := range got {
			n := b.int64(`SELECT ($1::jsonb->>'n')::bigint`, m.Body)
			if !want(int(n)) || seen[m.ID] || m.ID != n {
				t.Fatalf("%s got message %d with body %s (seen before: %v)", group, m.ID, m.Body, seen[m.ID])
			}
			seen[m.ID] = true
		}
	}
	check("default", func(n int) bool { return n%3 == 0 }, 200)
	check("other", func(n int) bool { return n%2 == 0 }, 300)
}

// Two redrives of the same dead letters at once: the second waits for the
// first and sends nothing (before, both sent every message, and the group
// received each twice).
func TestConcurrentRedriveSendsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"max_attempts": 1}`)
	b.exec(`SELECT sluice.send_batch('q', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 5) g))`)
	b.exec(`SELECT count(*) FROM (SELECT sluice.nack('q', 'default', receipt) FROM sluice.receive('q', 'default', 10)) x`)
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	var first int64
	if err := tx.QueryRow(b.ctx, `SELECT sluice.redrive('q')`).Scan(&first); err != nil || first != 5 {
		t.Fatalf("first redrive: %d, %v", first, err)
	}
	second := make(chan error, 1)
	var n int64
	go func() { second <- b.pool.QueryRow(b.ctx, `SELECT sluice.redrive('q')`).Scan(&n) }()
	time.Sleep(300 * time.Millisecond) // the second one waits for the first's locks
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil || n != 0 {
		t.Fatalf("second redrive: %d, %v; want 0", n, err)
	}
	var got []msg
	for {
		ms := b.receive("q", "default", 100, "1 hour")
		if len(ms) == 0 {
			break
		}
		got = append(got, ms...)
	}
	if len(got) != 5 {
		t.Fatalf("received %d redriven messages, want 5 (one each)", len(got))
	}
}
