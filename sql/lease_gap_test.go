package sqlsrc_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A receive that waited before it held its lane (here for an uncommitted
// ack of a receipt it carries) dates its leases from when it holds the
// lane, not from when it began: meanwhile another receive scanned the
// lane's expired leases past the time the waiting receive's lease would
// have expired. Dated from its start, that lease was written behind the
// scan and never read: its message was never delivered again, though its
// consumer never acked it. (The docs called this a known gap: a lease shorter
// than the receive's own waits.)
func TestLeaseOfAReceiveThatWaitedIsDatedWhenItHoldsTheLane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 1}`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 5) g))`)
	m1 := b.receive("q", "default", 1, "1 hour")
	if len(m1) != 1 {
		t.Fatalf("first receive got %d messages", len(m1))
	}
	// X acks m1 and keeps its transaction open.
	x, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Rollback(b.ctx) //nolint:errcheck
	if n := ackOn(t, b.ctx, x, "q", "default", m1[0].Receipt); n != 1 {
		t.Fatalf("ack in X = %d", n)
	}
	// B receives with a short lease, carrying the same ack: it waits for X.
	bConn, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer bConn.Release()
	bPid := bConn.Conn().PgConn().PID()
	type result struct {
		ms      []msg
		expires time.Time
		err     error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		rows, err := bConn.Query(b.ctx, `SELECT id, attempt, lease_expires_at
			FROM sluice.receive('q', 'default', 1, '300 ms', ack => $1)`, []string{m1[0].Receipt})
		if err == nil {
			var m msg
			_, err = pgx.ForEachRow(rows, []any{&m.ID, &m.Attempt, &r.expires}, func() error {
				r.ms = append(r.ms, m)
				return nil
			})
		}
		r.err = err
		done <- r
	}()
	waitFor(t, 10*time.Second, "B waiting for X's ack", func() bool {
		return b.int64(`SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, bPid) == 1
	})
	// C takes m2 with a lease that ends after B's would, from B's start ...
	m2 := b.receive("q", "default", 1, "700 ms")
	if len(m2) != 1 {
		t.Fatalf("C's first receive got %d messages", len(m2))
	}
	time.Sleep(1000 * time.Millisecond)
	// ... and, once it expired, takes it again: that scan went past it.
	again := b.receive("q", "default", 1, "1 hour")
	if len(again) != 1 || again[0].ID != m2[0].ID || again[0].Attempt != 2 {
		t.Fatalf("C's second receive got %+v, want message %d at attempt 2", again, m2[0].ID)
	}
	xCommitted := time.Now()
	if err := x.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("B's receive: %v", r.err)
	}
	// B's lease began when it held the lane, after X committed (the clocks
	// of the test and the server are one machine's; a margin for rounding).
	if r.expires.Before(xCommitted.Add(250 * time.Millisecond)) {
		t.Fatalf("B's lease expires at %v, before X committed (%v) + 300 ms: dated from before B's wait",
			r.expires, xCommitted)
	}
	if len(r.ms) != 1 {
		t.Fatalf("B got %d messages, want 1", len(r.ms))
	}
	m3 := r.ms[0]
	// B's consumer never acks: once its lease ran out, m3 comes again.
	time.Sleep(time.Until(r.expires) + 200*time.Millisecond)
	seen := map[int64]int{}
	for i := 0; i < 5; i++ {
		for _, m := range b.receive("q", "default", 10, "1 hour") {
			seen[m.ID] = m.Attempt
		}
	}
	if seen[m3.ID] != 2 {
		t.Fatalf("message %d, leased by B and never acked, redelivered at attempt %d after its lease (0: never); got %v",
			m3.ID, seen[m3.ID], seen)
	}
}

// extend never shortens a lease. It takes no lane lock, so a shorter lease
// written in a transaction left open past its end became visible behind
// another receive's expiry scan and hid the longer one: its message was
// neither in flight nor ever delivered again.
func TestExtendNeverShortensALease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 1}`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 3) g))`)
	m1 := b.receive("q", "default", 1, "3 seconds")
	if len(m1) != 1 {
		t.Fatalf("first receive got %d messages", len(m1))
	}
	expiresOf := func(id int64) *time.Time {
		var at *time.Time
		err := b.pool.QueryRow(b.ctx, `SELECT (SELECT lease_expires_at FROM sluice.leases('q', 'default') WHERE id = $1)`,
			id).Scan(&at)
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	end := expiresOf(m1[0].ID)
	if end == nil {
		t.Fatalf("message %d not in flight after its receive", m1[0].ID)
	}
	// In its own transaction: the lease keeps its end.
	if n := b.int64(`SELECT sluice.extend('q', 'default', $1, '1 second')`, []string{m1[0].Receipt}); n != 1 {
		t.Fatalf("extend = %d, want 1 (the lease is current)", n)
	}
	if at := expiresOf(m1[0].ID); at == nil || !at.Equal(*end) {
		t.Fatalf("after a shorter extend the lease ends at %v, want %v (its end before)", at, *end)
	}
	// In a transaction left open while another receive scans past the
	// shorter end.
	x, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Rollback(b.ctx) //nolint:errcheck
	var n int
	if err := x.QueryRow(b.ctx, `SELECT sluice.extend('q', 'default', $1, '200 ms')`, []string{m1[0].Receipt}).Scan(&n); err != nil || n != 1 {
		t.Fatalf("extend in X = %d, %v", n, err)
	}
	m2 := b.receive("q", "default", 1, "400 ms")
	if len(m2) != 1 {
		t.Fatalf("second receive got %d messages", len(m2))
	}
	time.Sleep(700 * time.Millisecond)
	if again := b.receive("q", "default", 1, "1 hour"); len(again) != 1 || again[0].ID != m2[0].ID {
		t.Fatalf("third receive got %+v, want message %d again", again, m2[0].ID)
	}
	if err := x.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if at := expiresOf(m1[0].ID); at == nil || !at.Equal(*end) {
		t.Fatalf("after X committed, message %d's lease ends at %v (nil: not in flight), want %v",
			m1[0].ID, at, *end)
	}
	// Once that end passed, the message comes again.
	time.Sleep(time.Until(*end) + 200*time.Millisecond)
	var m1again *msg
	for i := 0; i < 5 && m1again == nil; i++ {
		for _, m := range b.receive("q", "default", 10, "1 hour") {
			if m.ID == m1[0].ID {
				m1again = &m
			}
		}
	}
	if m1again == nil || m1again.Attempt != 2 {
		t.Fatalf("message %d after its lease ran out: %+v, want it again at attempt 2", m1[0].ID, m1again)
	}
	// A longer extend still extends.
	if n := b.int64(`SELECT sluice.extend('q', 'default', $1, '3 hours')`, []string{m1again.Receipt}); n != 1 {
		t.Fatalf("longer extend = %d", n)
	}
	if at := expiresOf(m1[0].ID); at == nil || time.Until(*at) < 170*time.Minute {
		t.Fatalf("after a longer extend the lease ends at %v, want about three hours from now", at)
	}
}

// ackOn acks receipts in a transaction or on a connection and returns the count.
func ackOn(t *testing.T, ctx context.Context, db q, queue, group string, receipts ...string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(ctx, `SELECT sluice.ack($1, $2, $3)`, queue, group, receipts).Scan(&n); err != nil {
		t.Fatalf("ack: %v", err)
	}
	return n
}
