package sqlsrc_test

import (
	"fmt"
	"testing"
	"time"
)

// deadLetter makes n dead letters of each named group of queue q (a queue
// whose max_attempts is 1): n messages sent, received and nacked by every
// group. It returns the messages' ids.
func (b *bundle) deadLetters(queue string, n int, groups ...string) []int64 {
	b.t.Helper()
	ids := b.int64s(fmt.Sprintf(`SELECT sluice.send_batch($1, ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, %d) g))`, n), queue)
	for _, g := range groups {
		got := 0
		for got < n {
			ms := b.receive(queue, g, n, "1 hour")
			if len(ms) == 0 {
				b.t.Fatalf("group %s received %d of %d messages", g, got, n)
			}
			for _, m := range ms {
				b.nack(queue, g, m.Receipt, "", "poison")
			}
			got += len(ms)
		}
	}
	return ids
}

// Discarding dead letters, by ids and all of a group's, on both engines:
// they leave dead_letters and status's dead and cannot be redriven;
// status's dead_lettered keeps counting them; the other group's stay.
func TestDiscardDeadLetters(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine%d", engine), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.createQueue("q", fmt.Sprintf(`{"max_attempts": 1, "engine": %d}`, engine))
			b.exec(`SELECT sluice.create_group('q', 'other')`)
			ids := b.deadLetters("q", 4, "default", "other")
			dead := func(group string) int64 {
				return b.int64(`SELECT count(*) FROM sluice.dead_letters('q', $1, 1000)`, group)
			}
			// Two ids of default's only.
			if n := b.int64(`SELECT sluice.discard_dead_letters('q', 'default', $1)`, ids[:2]); n != 2 {
				t.Fatalf("discard by ids = %d, want 2", n)
			}
			if d, o := dead("default"), dead("other"); d != 2 || o != 4 {
				t.Fatalf("dead letters left: default %d, other %d; want 2 and 4", d, o)
			}
			// The same again: nothing left to discard.
			if n := b.int64(`SELECT sluice.discard_dead_letters('q', 'default', $1)`, ids[:2]); n != 0 {
				t.Fatalf("discarding them again = %d, want 0", n)
			}
			// An id of every group: other's copy of ids[2], default's too.
			if n := b.int64(`SELECT sluice.discard_dead_letters('q', NULL, $1)`, ids[2:3]); n != 2 {
				t.Fatalf("discard of one id in every group = %d, want 2", n)
			}
			// All of other's.
			if n := b.int64(`SELECT sluice.discard_dead_letters('q', 'other')`); n != 3 {
				t.Fatalf("discard of other's = %d, want 3", n)
			}
			if n := b.int64(`SELECT sluice.redrive('q', 'other')`); n != 0 {
				t.Fatalf("redrive after the discard = %d, want 0", n)
			}
			st := b.int64s(`SELECT dead FROM sluice.status('q') ORDER BY group_name`)
			total := b.int64s(`SELECT dead_lettered FROM sluice.status('q') ORDER BY group_name`)
			if fmt.Sprint(st) != "[1 0]" || fmt.Sprint(total) != "[4 4]" {
				t.Fatalf("status dead %v (want [1 0]), dead_lettered %v (want [4 4])", st, total)
			}
			left := b.int64s(`SELECT id FROM sluice.dead_letters('q')`)
			if len(left) != 1 || left[0] != ids[3] {
				t.Fatalf("dead letters left %v, want default's %d", left, ids[3])
			}
		})
	}
}

// A discard of a dead letter that was redriven does nothing, and a redrive
// of a discarded one neither: each dead letter is disposed of once (both
// engines: they claim it in the same log).
func TestDiscardAndRedriveOnce(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine%d", engine), func(t *testing.T) {
			t.Parallel()
			discardAndRedriveOnce(t, engine)
		})
	}
}

func discardAndRedriveOnce(t *testing.T, engine int) {
	b := setup(t)
	b.createQueue("q", fmt.Sprintf(`{"max_attempts": 1, "engine": %d}`, engine))
	ids := b.deadLetters("q", 2, "default")
	if n := b.int64(`SELECT sluice.redrive('q', 'default', $1)`, ids[:1]); n != 1 {
		t.Fatalf("redrive = %d", n)
	}
	if n := b.int64(`SELECT sluice.discard_dead_letters('q', 'default', $1)`, ids[:1]); n != 0 {
		t.Fatalf("discard of the redriven one = %d, want 0", n)
	}
	if n := b.int64(`SELECT sluice.discard_dead_letters('q', 'default', $1)`, ids[1:]); n != 1 {
		t.Fatalf("discard = %d, want 1", n)
	}
	if n := b.int64(`SELECT sluice.redrive('q', 'default', $1)`, ids[1:]); n != 0 {
		t.Fatalf("redrive of the discarded one = %d, want 0", n)
	}
	// The redriven message is delivered; the discarded one is not.
	ms := b.receive("q", "default", 10, "1 hour")
	if len(ms) != 1 || ms[0].ID != ids[0] {
		t.Fatalf("received %v, want only the redriven message %d", ms, ids[0])
	}
}

// A discard that meets a redrive of the same dead letters in progress waits
// for it and discards nothing once it commits; the redriven messages are
// delivered once.
func TestDiscardWaitsForConcurrentRedrive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"max_attempts": 1}`)
	b.deadLetters("q", 5, "default")
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	var first int64
	if err := tx.QueryRow(b.ctx, `SELECT sluice.redrive('q')`).Scan(&first); err != nil || first != 5 {
		t.Fatalf("redrive: %d, %v", first, err)
	}
	second := make(chan error, 1)
	var n int64
	go func() {
		second <- b.pool.QueryRow(b.ctx, `SELECT sluice.discard_dead_letters('q', 'default')`).Scan(&n)
	}()
	time.Sleep(300 * time.Millisecond) // the discard waits for the redrive's locks
	select {
	case err := <-second:
		t.Fatalf("the discard did not wait for the redrive: %d, %v", n, err)
	default:
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil || n != 0 {
		t.Fatalf("discard after the redrive: %d, %v; want 0", n, err)
	}
	if ms := b.receive("q", "default", 100, "1 hour"); len(ms) != 5 {
		t.Fatalf("received %d redriven messages, want 5", len(ms))
	}
}

// Bad input to discard_dead_letters raises its SQLSTATE and changes
// nothing, dead letters there to be discarded notwithstanding.
func TestDiscardBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"max_attempts": 1}`)
	ids := b.deadLetters("q", 2, "default")
	cases := []struct {
		sql  string
		args []any
		code string
	}{
		{`SELECT sluice.discard_dead_letters(NULL, 'default')`, nil, "SL001"},
		{`SELECT sluice.discard_dead_letters('bad name!', 'default')`, nil, "SL001"},
		{`SELECT sluice.discard_dead_letters('nope', 'default')`, nil, "SL002"},
		{`SELECT sluice.discard_dead_letters('q', 'nope')`, nil, "SL003"},
		{`SELECT sluice.discard_dead_letters('q', 'a"b')`, nil, "SL001"},
		{`SELECT sluice.discard_dead_letters('q')`, nil, "SL006"},
		{`SELECT sluice.discard_dead_letters('q', NULL, NULL)`, nil, "SL006"},
		{`SELECT sluice.discard_dead_letters('q', 'default', '{}')`, nil, "SL006"},
		{`SELECT sluice.discard_dead_letters('q', NULL, '{}')`, nil, "SL006"},
		{`SELECT sluice.discard_dead_letters('q', 'default', ARRAY[$1, NULL]::bigint[])`, []any{ids[0]}, "SL006"},
	}
	before := b.dataFingerprint()
	for _, c := range cases {
		_, err := b.pool.Exec(b.ctx, c.sql, c.args...)
		if code := sqlstate(err); code != c.code {
			t.Errorf("%s: got %v (SQLSTATE %q), want SQLSTATE %s", c.sql, err, code, c.code)
		}
	}
	if after := b.dataFingerprint(); after != before {
		t.Fatalf("bad input changed the data:\nbefore %s\nafter  %s", before, after)
	}
	if n := b.int64(`SELECT count(*) FROM sluice.dead_letters('q')`); n != 2 {
		t.Fatalf("%d dead letters after the bad calls, want 2", n)
	}
}
