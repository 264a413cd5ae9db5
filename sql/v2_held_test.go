package sqlsrc_test

import (
	"context"
	"testing"
	"time"
)

// A receive that numbers new messages inside a transaction it keeps open
// holds them back from every group until it commits (the documented rule:
// receive in its own short transaction), and status says who holds them and
// for how long, for both engines.
func TestStatusNamesTheHolderOfNumbering(t *testing.T) {
	for _, engine := range []string{"1", "2"} {
		t.Run("engine "+engine, func(t *testing.T) {
			b := setup(t)
			queue := "held" + engine
			b.createQueue(queue, `{"engine": `+engine+`}`)
			b.exec("SELECT sluice.create_group($1, 'other')", queue)
			b.send(b.pool, queue, `{"n": 1}`)
			tx, err := b.pool.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(b.ctx) //nolint:errcheck
			var pid int
			if err := tx.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				t.Fatal(err)
			}
			// the open receive numbers the message (and takes it for its group)
			if _, err := tx.Exec(b.ctx, "SELECT * FROM sluice.receive($1, 'default', 1)", queue); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			var held int
			var heldFor time.Duration
			if err := b.pool.QueryRow(b.ctx,
				"SELECT coalesce(held_by_pid, 0), coalesce(held_for, '0') FROM sluice.status($1) WHERE group_name = 'other'",
				queue).Scan(&held, &heldFor); err != nil {
				t.Fatal(err)
			}
			if held != pid || heldFor < 50*time.Millisecond {
				t.Errorf("status while pid %d holds the numbering: held_by_pid %d, held_for %v", pid, held, heldFor)
			}
			// the other group gets nothing until the holder commits
			if got := b.receive(queue, "other", 10, ""); len(got) != 0 {
				t.Errorf("group other received %d messages while the numbering was held", len(got))
			}
			if err := tx.Commit(b.ctx); err != nil {
				t.Fatal(err)
			}
			if got := b.receive(queue, "other", 10, ""); len(got) != 1 {
				t.Errorf("group other received %d messages after the holder committed, want 1", len(got))
			}
			if err := b.pool.QueryRow(b.ctx,
				"SELECT coalesce(held_by_pid, 0) FROM sluice.status($1) WHERE group_name = 'other'", queue).Scan(&held); err != nil {
				t.Fatal(err)
			}
			if held != 0 {
				t.Errorf("held_by_pid %d after the commit, want none", held)
			}
		})
	}
}

// An ack, nack or extend left uncommitted blocks at most a conflicting call
// on the same message: other consumers of the group go on receiving and
// acking (engine 2).
func TestV2UncommittedCompletionsFreezeNothing(t *testing.T) {
	b := setup(t)
	b.createV2("v2open", `"lanes": 2`)
	b.v2sendN("v2open", 40)
	ms := b.v2receive("v2open", "default", 3, "")
	if len(ms) != 3 {
		t.Fatalf("receive: %+v", ms)
	}
	for i, call := range []string{
		"SELECT sluice.ack('v2open', 'default', ARRAY[$1])",
		"SELECT sluice.nack('v2open', 'default', $1, '0')",
		"SELECT sluice.extend('v2open', 'default', ARRAY[$1], '1 hour')",
	} {
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(b.ctx, call, ms[i].Receipt); err != nil {
			t.Fatal(err)
		}
		// meanwhile, with a deadline: receives and acks of other messages
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		got, err := v2receiveOn(ctx, b.pool, "v2open", "default", 5, "")
		if err != nil || len(got) == 0 {
			t.Errorf("%s left open: a receive got %d, %v", call, len(got), err)
		}
		for _, m := range got {
			var n int
			if err := b.pool.QueryRow(ctx, "SELECT sluice.ack('v2open', 'default', ARRAY[$1])", m.Receipt).Scan(&n); err != nil || n != 1 {
				t.Errorf("%s left open: an ack of another message counted %d, %v", call, n, err)
			}
		}
		cancel()
		if err := tx.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// status of a queue of engine 2 adds up: what is numbered and not taken,
// what is in flight, what ended without an ack (ready again), what is
// delayed, what is not numbered yet; lag is their sum but the delayed send
// (docs/sql.md: lag counts ready, in flight, retries and what is not
// numbered yet; a delayed send is not the group's to complete yet, as on
// engine 1).
func TestV2StatusCounts(t *testing.T) {
	b := setup(t)
	b.createV2("v2st", `"lanes": 1`)
	b.v2sendN("v2st", 6)
	short := b.v2receive("v2st", "default", 2, "200 milliseconds") // will end unacked
	long := b.v2receive("v2st", "default", 2, "1 hour")            // in flight
	if len(short) != 2 || len(long) != 2 {
		t.Fatalf("receives: %d, %d", len(short), len(long))
	}
	b.ack("v2st", "default", long[0].Receipt)
	b.exec("SELECT sluice.send('v2st', '{}', delay => '1 hour')")
	b.v2sendN("v2st", 1) // not numbered yet
	time.Sleep(300 * time.Millisecond)
	s := b.status("v2st")["default"]
	// numbered and not taken: 2; ended unacked: 2; not numbered: 1
	if s.Ready != 5 || s.InFlight != 1 || s.Delayed != 1 || s.Lag == nil || *s.Lag != 6 {
		t.Fatalf("status %+v (lag %v): want ready 5, in flight 1, delayed 1, lag 6", s, deref(s.Lag))
	}
}

func deref(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}
