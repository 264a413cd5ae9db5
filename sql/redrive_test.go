package sqlsrc_test

import (
	"testing"
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
		got := b.receive("q", group, 1000, "1 hour")
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
