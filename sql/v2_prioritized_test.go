package sqlsrc_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A queue of engine 2 looks at its priority lane only once it has had an
// unkeyed message with a priority other than 0 (sluice.queue.prioritized,
// set by send, send_batch and redrive): every receive of a queue that never
// had one would pay the look (e2_prio_due_<slot>). Keyed messages keep their
// key's order whatever their priority and do not set it. Once set, the
// prioritized message comes first, as it would have.
func TestV2PriorityLaneLookedAtOnceThereIsOne(t *testing.T) {
	b := setup(t)
	b.createV2("q", `"lanes": 2, "max_attempts": 1`)
	flag := func() bool {
		return b.int64(`SELECT prioritized::int FROM sluice.queue WHERE name = 'q'`) == 1
	}
	looks := func(step string, want int64) []msg {
		t.Helper()
		got := b.receiveCounting(b.pool, 10, step, map[string]int64{"e2_prio_due_0": want})
		b.ack("q", "default", receipts(got)...)
		return got
	}

	b.send(b.pool, "q", `{"n": 1}`)
	b.exec(`SELECT sluice.send('q', '{"n": 2}', key => 'k', priority => 5)`)
	if got := looks("plain and keyed", 0); len(got) != 2 {
		t.Fatalf("plain and keyed: got %d messages, want 2", len(got))
	}
	if flag() {
		t.Fatal("a plain and a keyed prioritized send set prioritized")
	}

	b.exec(`SELECT sluice.send_batch('q', ARRAY['{"n": 3}', '{"n": 4}']::jsonb[], priorities => ARRAY[0, 3])`)
	if !flag() {
		t.Fatal("send_batch with an unkeyed priority 3 did not set prioritized")
	}
	if got := looks("after send_batch", 1); len(got) != 2 || got[0].Body != `{"n": 4}` {
		t.Fatalf("after send_batch: got %+v, want n 4 (priority 3) first", got)
	}

	// A dead letter with a priority, redriven into a queue whose flag is
	// off (as one that came from another queue's upgrade could be).
	b.exec(`SELECT sluice.send('q', '{"n": 5}', priority => 2)`)
	m := b.receiveAs("q", "default", 1, "1 hour", "")
	if len(m) != 1 || !b.nack("q", "default", m[0].Receipt, "0", "dead") {
		t.Fatalf("dead letter: %+v", m)
	}
	b.exec(`UPDATE sluice.queue SET prioritized = false WHERE name = 'q'`)
	if n := b.int64(`SELECT sluice.redrive('q')`); n != 1 {
		t.Fatalf("redrive = %d, want 1", n)
	}
	if !flag() {
		t.Fatal("a redrive of a prioritized dead letter did not set prioritized")
	}
	b.send(b.pool, "q", `{"n": 6}`)
	if got := looks("after the redrive", 1); len(got) != 2 || got[0].Body != `{"n": 5}` {
		t.Fatalf("after the redrive: got %+v, want n 5 (priority 2) first", got)
	}
}

// A nacked unkeyed message keeps its priority: the retry returns it, and is
// ordered by it (found by TestV2RandomSemantics: the retry copy was sent
// with priority 0, so a message of priority -2 came back before the other
// messages, and one of 7 behind them).
func TestV2RetryKeepsItsPriority(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createV2("q", `"lanes": 1`)
	b.exec(`SELECT sluice.send_batch('q', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[], priorities => ARRAY[-2, 7])`)
	first := b.receive("q", "default", 2, "")
	if len(first) != 2 || first[0].Body != `{"n": 2}` || first[1].Body != `{"n": 1}` {
		t.Fatalf("first receive: %+v, want n 2 (priority 7) then n 1 (priority -2)", first)
	}
	for _, m := range first {
		if !b.nack("q", "default", m.Receipt, "0", "again") {
			t.Fatalf("nack of %+v: stale", m)
		}
	}
	b.exec(`SELECT sluice.send_batch('q', ARRAY['{"n": 3}', '{"n": 4}']::jsonb[])`)
	got := b.receive("q", "default", 4, "")
	var order []string
	for _, m := range got {
		order = append(order, fmt.Sprintf("%s/%d/%d", m.Body, m.Priority, m.Attempt))
	}
	want := []string{`{"n": 2}/7/2`, `{"n": 3}/0/1`, `{"n": 4}/0/1`, `{"n": 1}/-2/2`}
	if !slices.Equal(order, want) {
		t.Errorf("after the nacks: %v, want %v (body/priority/attempt)", order, want)
	}
}

// A prioritized message sent just before a rotation (so stored in the slot
// before) is numbered before the first receive after it takes from the
// priority lane, as one sent in the current slot is (found by
// TestV2RandomSemantics: a receive whose priority lane had a lease that
// ended looked at the lane before numbering, and took the plain messages
// numbered after, passing the new prioritized one by).
func TestV2PriorityAcrossARotation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createV2("q", `"lanes": 1, "rotate_interval": "100 milliseconds", "retention": "0 seconds", "slots": 2`)
	b.exec(`SELECT sluice.send('q', '{"n": 1}', priority => 7)`)
	if got := b.receive("q", "default", 1, "100 milliseconds"); len(got) != 1 {
		t.Fatalf("first receive: %+v", got)
	}
	time.Sleep(200 * time.Millisecond) // its lease ends; the epoch is older than rotate_interval
	epoch := b.v2epoch("q")
	b.exec(`SELECT sluice.send_batch('q', ARRAY['{"n": 2}', '{"n": 3}', '{"n": 4}']::jsonb[], priorities => ARRAY[0, 3, 0])`)
	b.v2maintain()
	if e := b.v2epoch("q"); e != epoch+1 {
		t.Fatalf("epoch %d after maintain, want %d (it rotates)", e, epoch+1)
	}
	got := b.receive("q", "default", 3, "")
	var order []string
	for _, m := range got {
		order = append(order, fmt.Sprintf("%s/%d", m.Body, m.Attempt))
	}
	want := []string{`{"n": 1}/2`, `{"n": 3}/1`, `{"n": 2}/1`}
	if !slices.Equal(order, want) {
		t.Errorf("the receive after the rotation: %v, want %v (body/attempt)", order, want)
	}
}

// The first prioritized send of a queue notes it in the queue's row
// (sluice._mark_prioritized) without waiting for that row: a producer whose
// first prioritized send is left open in a transaction holds up no other
// producer, and the other's message is delivered first all the same (the
// receive that finds the priority lane numbered notes it). A REPEATABLE
// READ send whose snapshot predates the note does not fail on it. (The
// send waited for the open transaction's row lock until it ended.)
func TestV2PrioritizedSendsDoNotWaitForEachOther(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createV2("q", `"lanes": 1`)
	flag := func(q string) bool {
		return b.int64(`SELECT prioritized::int FROM sluice.queue WHERE name = $1`, q) == 1
	}
	sendWithin := func(tx pgx.Tx, q, body string, priority int) {
		t.Helper()
		if _, err := tx.Exec(b.ctx, `SET LOCAL statement_timeout = '5s'`); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(b.ctx, `SELECT sluice.send($1, $2::jsonb, priority => $3)`, q, body, priority); err != nil {
			t.Fatalf("prioritized send of %s while another is open: %v", body, err)
		}
	}

	b.send(b.pool, "q", `{"n": 0}`)
	open, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(b.ctx) //nolint:errcheck
	sendWithin(open, "q", `{"n": 1}`, 5)
	other, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(b.ctx) //nolint:errcheck
	sendWithin(other, "q", `{"n": 2}`, 3)
	if err := other.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if flag("q") {
		t.Fatal("prioritized is set while the transaction that set it is open")
	}
	got := b.receive("q", "default", 10, "")
	if len(got) != 2 || got[0].Body != `{"n": 2}` || got[1].Body != `{"n": 0}` {
		t.Fatalf("receive with the first prioritized send open: %+v, want n 2 (priority 3), then n 0", got)
	}
	b.ack("q", "default", receipts(got)...)
	if err := open.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if flag("q") {
		t.Fatal("prioritized is set after the transaction that set it rolled back")
	}
	if got := b.receive("q", "default", 10, ""); len(got) != 0 {
		t.Fatalf("a rolled-back send delivered: %+v", got)
	}
	if !flag("q") {
		t.Fatal("a receive that found the priority lane numbered did not set prioritized")
	}
	b.send(b.pool, "q", `{"n": 3}`)
	b.exec(`SELECT sluice.send('q', '{"n": 4}', priority => -1)`)
	b.exec(`SELECT sluice.send('q', '{"n": 5}', priority => 1)`)
	if got := b.receive("q", "default", 10, ""); len(got) != 3 || got[0].Body != `{"n": 5}` ||
		got[1].Body != `{"n": 3}` || got[2].Body != `{"n": 4}` {
		t.Fatalf("after the receive set it: %+v, want n 5, n 3, n 4", got)
	}

	// REPEATABLE READ, its snapshot from before another send set the flag.
	b.createV2("rr", `"lanes": 1`)
	rr, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Rollback(b.ctx) //nolint:errcheck
	if _, err := rr.Exec(b.ctx, `SELECT count(*) FROM sluice.queue`); err != nil {
		t.Fatal(err)
	}
	b.exec(`SELECT sluice.send('rr', '{"n": 1}', priority => 2)`)
	if !flag("rr") {
		t.Fatal("a prioritized send with no other open did not set prioritized")
	}
	sendWithin(rr, "rr", `{"n": 2}`, 4)
	if err := rr.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.receive("rr", "default", 10, ""); len(got) != 2 || got[0].Body != `{"n": 2}` {
		t.Fatalf("rr: %+v, want n 2 (priority 4) first", got)
	}
}

// A prioritized message sent in a transaction that was open over a cut
// (its id in the cut's list of transactions in progress) is numbered
// before a receive takes from the lanes, as one sent after the cut is; and
// a receive whose own cut numbers a prioritized message takes it too (found
// by TestV2RandomSemantics: the probe for prioritized messages to number
// looked only past the last cut's xmax, so the receive took the plain
// messages and left the prioritized one, numbered by its own cut, to a
// later receive, returning fewer than it asked for).
func TestV2PriorityFromATransactionOpenOverACut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	order := func(got []msg) []string {
		var o []string
		for _, m := range got {
			o = append(o, m.Body)
		}
		return o
	}
	for _, want := range []int{1, 10} {
		q := fmt.Sprintf("q%d", want)
		b.createV2(q, `"lanes": 1`)
		b.exec(`SELECT sluice.send($1, '{"n": 0}', priority => 1)`, q) // (the queue is prioritized)
		if got := b.receive(q, "default", 1, ""); len(got) != 1 {
			t.Fatalf("%s: first receive: %v", q, order(got))
		} else {
			b.ack(q, "default", receipts(got)...)
		}
		open, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer open.Rollback(b.ctx) //nolint:errcheck
		if _, err := open.Exec(b.ctx, `SELECT sluice.send($1, '{"n": 1}')`, q); err != nil {
			t.Fatal(err)
		}
		if _, err := open.Exec(b.ctx, `SELECT sluice.send($1, '{"n": 2}', priority => 3)`, q); err != nil {
			t.Fatal(err)
		}
		b.send(b.pool, q, `{"n": 3}`)
		// a cut while the transaction is open: it numbers n 3
		if got := b.receive(q, "default", 1, ""); len(got) != 1 || got[0].Body != `{"n": 3}` {
			t.Fatalf("%s: receive with the transaction open: %v, want n 3", q, order(got))
		} else {
			b.ack(q, "default", receipts(got)...)
		}
		b.send(b.pool, q, `{"n": 4}`)
		if err := open.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		got := b.receive(q, "default", want, "")
		b.ack(q, "default", receipts(got)...)
		all := []string{`{"n": 2}`, `{"n": 1}`, `{"n": 4}`}
		if !slices.Equal(order(got), all[:min(want, 3)]) {
			t.Errorf("%s: receive of %d after the commit: %v, want %v", q, want, order(got), all[:min(want, 3)])
		}
		rest := b.receive(q, "default", 10, "")
		if len(got)+len(rest) != 3 {
			t.Errorf("%s: then %v: %d messages in all, want 3", q, order(rest), len(got)+len(rest))
		}
	}
}

// A receive whose own cut numbers a prioritized message, committed after
// the receive's probe for one, takes it before the plain messages that cut
// numbered (the receive looks at the priority lane again when its lane look
// reads a priority head past the one after its last look). Here the
// receive waits for the cut lock of another group's receive, left open,
// while the prioritized message commits.
func TestV2PriorityNumberedByTheReceivesOwnCut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createV2("q", `"lanes": 1`)
	b.exec(`SELECT sluice.create_group('q', 'other', 'earliest')`)
	b.exec(`SELECT sluice.send('q', '{"n": 0}', priority => 1)`) // (the queue is prioritized)
	conn, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// (the consumer's session warmed up: its first receive compiles the copies)
	if got, err := receiveOn(b.ctx, conn, "q", "default", 1, ""); err != nil || len(got) != 1 {
		t.Fatalf("first receive: %v %v", got, err)
	} else {
		b.ack("q", "default", receipts(got)...)
	}
	b.send(b.pool, "q", `{"n": 1}`)
	open, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(b.ctx) //nolint:errcheck
	// the other group's receive numbers n 0 for it and n 1, and holds the cut lock
	if got, err := receiveOn(b.ctx, open, "q", "other", 2, ""); err != nil || len(got) != 2 {
		t.Fatalf("the other group's receive: %v %v", got, err)
	}
	b.send(b.pool, "q", `{"n": 2}`)
	done := make(chan []msg, 1)
	go func() {
		got, err := receiveOn(b.ctx, conn, "q", "default", 10, "")
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	time.Sleep(30 * time.Millisecond) // (it probed, found no free lane, and waits for the cut lock)
	b.exec(`SELECT sluice.send('q', '{"n": 3}', priority => 3)`)
	if err := open.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	got := <-done
	var order []string
	for _, m := range got {
		order = append(order, m.Body)
	}
	// (a machine too busy for the 100 ms the receive waits for the cut lock
	// leaves it nothing to number: it returns empty, and that says nothing)
	if len(got) == 0 {
		t.Skip("the receive's wait for the cut lock ran out before the other receive committed")
	}
	want := []string{`{"n": 3}`, `{"n": 1}`, `{"n": 2}`}
	if !slices.Equal(order, want) {
		t.Fatalf("the receive that numbered a prioritized message committed while it waited: %v, want %v", order, want)
	}
}
