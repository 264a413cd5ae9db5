package sqlsrc_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Black-box tests of queues of engine 2 (option {"engine": 2}) through the
// public SQL API. Each test states the property it checks.

// A message is received once, acked once, and nothing is left.
func TestV2Basic(t *testing.T) {
	b := setup(t)
	b.createV2("v2b", "")
	ids := b.v2sendN("v2b", 3)
	ids = append(ids, b.v2sendBatch("v2b", 5, "")...)
	got := b.v2drainAck("v2b", "default", 2)
	if !v2same(v2ids(got), ids) {
		t.Fatalf("received: %s", v2diff(v2ids(got), ids))
	}
	for _, m := range got {
		if m.Attempt != 1 {
			t.Errorf("message %d: attempt %d, want 1", m.ID, m.Attempt)
		}
	}
	b.v2expectEmpty("v2b", "default")
}

// Unacked messages come back after their lease, with attempt 2, and not
// before; a receipt whose lease ended counts 0 when acked (before and after
// the redelivery); a current receipt counts 1, then 0.
func TestV2Redelivery(t *testing.T) {
	b := setup(t)
	ids, first := b.v2leased("v2r", 5, 10, "1 second")
	end := first[0].Expires
	// Not before the lease ends.
	for time.Now().Add(100 * time.Millisecond).Before(end) {
		if ms := b.v2receive("v2r", "default", 10, "1 second"); len(ms) > 0 {
			t.Fatalf("redelivered %v at %s, before the lease ends at %s", v2ids(ms), time.Now().Format(time.RFC3339Nano), end.Format(time.RFC3339Nano))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Until(end) + 100*time.Millisecond)
	// Expired, not yet redelivered: the ack counts 0.
	if n := b.ack("v2r", "default", first[0].Receipt); n != 0 {
		t.Errorf("ack of an expired receipt (not yet redelivered) counted %d, want 0", n)
	}
	second := b.v2drain("v2r", "default", 10, "30 seconds")
	if !v2same(v2ids(second), ids) {
		t.Fatalf("after expiry: %s", v2diff(v2ids(second), ids))
	}
	for _, m := range second {
		if m.Attempt != 2 {
			t.Errorf("redelivery of %d: attempt %d, want 2", m.ID, m.Attempt)
		}
	}
	// Expired receipts, after the redelivery: 0.
	if n := b.ack("v2r", "default", v2receipts(first)...); n != 0 {
		t.Errorf("ack of expired receipts counted %d, want 0", n)
	}
	if n := b.ack("v2r", "default", second[0].Receipt); n != 1 {
		t.Errorf("ack of a current receipt counted %d, want 1", n)
	}
	if n := b.ack("v2r", "default", second[0].Receipt); n != 0 {
		t.Errorf("second ack of a receipt counted %d, want 0", n)
	}
	st := b.v2status("v2r", "default")
	if st.InFlight != 4 || st.Ready != 0 {
		t.Errorf("status: in_flight %d ready %d, want 4 and 0", st.InFlight, st.Ready)
	}
	if n := b.ack("v2r", "default", v2receipts(second)...); n != 4 {
		t.Errorf("ack of the 4 left counted %d, want 4", n)
	}
	b.v2expectEmpty("v2r", "default")
	if ms := b.v2receive("v2r", "default", 10, ""); len(ms) != 0 {
		t.Errorf("after every ack, received %v", v2ids(ms))
	}
}

// Acking some positions of a lease one by one and the rest together
// completes each once; the lease's end then redelivers nothing.
func TestV2PartialAcksThenExpiry(t *testing.T) {
	b := setup(t)
	_, ms := b.v2leased("v2pa", 6, 6, "1 second")
	if n := b.ack("v2pa", "default", ms[0].Receipt); n != 1 {
		t.Errorf("ack 1 counted %d", n)
	}
	if n := b.ack("v2pa", "default", ms[0].Receipt, ms[1].Receipt, ms[2].Receipt); n != 2 {
		t.Errorf("ack of 1 acked + 2 fresh counted %d, want 2", n)
	}
	// 3, 4 acked; 5 left to expire
	if n := b.ack("v2pa", "default", ms[3].Receipt, ms[4].Receipt, ms[3].Receipt); n != 2 {
		t.Errorf("ack of 2 fresh (one twice) counted %d, want 2", n)
	}
	time.Sleep(time.Until(ms[0].Expires) + 100*time.Millisecond)
	again := b.v2drain("v2pa", "default", 10, "")
	if len(again) != 1 || again[0].ID != ms[5].ID || again[0].Attempt != 2 {
		t.Fatalf("after expiry got %+v, want only message %d as attempt 2", again, ms[5].ID)
	}
	if n := b.ack("v2pa", "default", again[0].Receipt); n != 1 {
		t.Errorf("ack counted %d", n)
	}
	b.v2expectEmpty("v2pa", "default")
}

// A lease that keeps expiring dead-letters its message after max_attempts
// deliveries, with the error 'lease expired'.
func TestV2ExpiryDeadLetters(t *testing.T) {
	b := setup(t)
	b.createV2("v2x", `"lanes": 1, "max_attempts": 2`)
	id := b.send(b.pool, "v2x", `{"x": 1}`)
	m1 := b.v2receive("v2x", "default", 1, "300 milliseconds")
	if len(m1) != 1 || m1[0].ID != id || m1[0].Attempt != 1 {
		t.Fatalf("first: %+v", m1)
	}
	time.Sleep(400 * time.Millisecond)
	m2 := b.v2receive("v2x", "default", 1, "300 milliseconds")
	if len(m2) != 1 || m2[0].ID != id || m2[0].Attempt != 2 {
		t.Fatalf("second: %+v", m2)
	}
	time.Sleep(400 * time.Millisecond)
	if m3 := b.v2drain("v2x", "default", 1, ""); len(m3) != 0 {
		t.Fatalf("after max_attempts deliveries, received %+v", m3)
	}
	var n int64
	var errText string
	var attempts int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) OVER (), coalesce(error, ''), attempts
		FROM sluice.dead_letters('v2x') WHERE id = $1`, id).Scan(&n, &errText, &attempts); err != nil {
		t.Fatalf("dead letter of %d: %v", id, err)
	}
	if errText != "lease expired" || attempts != 2 {
		t.Errorf("dead letter: error %q attempts %d, want 'lease expired', 2", errText, attempts)
	}
	st := b.v2status("v2x", "default")
	if st.Dead != 1 || st.InFlight != 0 || st.Ready != 0 {
		t.Errorf("status: dead %d in_flight %d ready %d, want 1 0 0", st.Dead, st.InFlight, st.Ready)
	}
}

// nack: the retry is not delivered before its delay, comes with attempt + 1
// after it; default backoff is honoured; after max_attempts the nack
// dead-letters the message with its error; a stale receipt's nack is false.
func TestV2Nack(t *testing.T) {
	b := setup(t)
	b.createV2("v2n", `"lanes": 1, "max_attempts": 4, "backoff_base": "1 second"`)
	id := b.send(b.pool, "v2n", `{"n": 1}`)

	m := b.v2receive("v2n", "default", 1, "")
	if len(m) != 1 || m[0].ID != id || m[0].Attempt != 1 {
		t.Fatalf("first: %+v", m)
	}
	// explicit delay
	t0 := time.Now()
	if !b.nack("v2n", "default", m[0].Receipt, "1.5 seconds", "e1") {
		t.Fatal("nack of a current receipt: false")
	}
	if b.nack("v2n", "default", m[0].Receipt, "0", "again") {
		t.Error("second nack of the same receipt: true")
	}
	if n := b.ack("v2n", "default", m[0].Receipt); n != 0 {
		t.Errorf("ack of a nacked receipt counted %d", n)
	}
	st := b.v2status("v2n", "default")
	if st.Delayed != 1 || st.Ready != 0 || st.InFlight != 0 {
		t.Errorf("status after nack: delayed %d ready %d in_flight %d, want 1 0 0", st.Delayed, st.Ready, st.InFlight)
	}
	w := b.v2waitReceive("v2n", "default", 5*time.Second)
	if el := time.Since(t0); el < 1500*time.Millisecond {
		t.Errorf("retry delivered after %s, before the delay of 1.5 s", el)
	}
	if w.ID != id || w.Attempt != 2 {
		t.Fatalf("retry: id %d attempt %d, want %d and 2", w.ID, w.Attempt, id)
	}
	// default backoff: backoff_base * 2^(attempt-1) = 2 s for attempt 2
	t0 = time.Now()
	if !b.nack("v2n", "default", w.Receipt, "", "e2") {
		t.Fatal("nack 2: false")
	}
	w = b.v2waitReceive("v2n", "default", 6*time.Second)
	if el := time.Since(t0); el < 2*time.Second {
		t.Errorf("retry with default backoff delivered after %s, before 2 s", el)
	}
	if w.Attempt != 3 {
		t.Fatalf("attempt %d, want 3", w.Attempt)
	}
	// delay 0: at once
	if !b.nack("v2n", "default", w.Receipt, "0", "e3") {
		t.Fatal("nack 3: false")
	}
	ms := b.v2receive("v2n", "default", 1, "")
	if len(ms) != 1 || ms[0].Attempt != 4 || ms[0].ID != id {
		t.Fatalf("after nack with delay 0: %+v, want message %d attempt 4 at once", ms, id)
	}
	// the 4th delivery is the last: the nack dead-letters it
	if !b.nack("v2n", "default", ms[0].Receipt, "0", "boom") {
		t.Fatal("nack 4: false")
	}
	if left := b.v2drain("v2n", "default", 10, ""); len(left) != 0 {
		t.Fatalf("after the last nack, received %+v", left)
	}
	rows, err := b.pool.Query(b.ctx, `SELECT id, group_name, attempts, coalesce(error, '') FROM sluice.dead_letters('v2n')`)
	if err != nil {
		t.Fatal(err)
	}
	var dl []string
	for rows.Next() {
		var did int64
		var g, e string
		var att int
		if err := rows.Scan(&did, &g, &att, &e); err != nil {
			t.Fatal(err)
		}
		dl = append(dl, fmt.Sprintf("%d/%s/%d/%s", did, g, att, e))
	}
	if want := fmt.Sprintf("%d/default/4/boom", id); len(dl) != 1 || dl[0] != want {
		t.Errorf("dead letters %v, want [%s]", dl, want)
	}
	st = b.v2status("v2n", "default")
	if st.Dead != 1 || st.Ready != 0 || st.Delayed != 0 || st.InFlight != 0 {
		t.Errorf("status: dead %d ready %d delayed %d in_flight %d, want 1 0 0 0", st.Dead, st.Ready, st.Delayed, st.InFlight)
	}
}

// v2waitReceive receives one message, polling, within timeout.
func (b *bundle) v2waitReceive(queue, group string, timeout time.Duration) v2msg {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ms := b.v2receive(queue, group, 1, "")
		if len(ms) == 1 {
			return ms[0]
		}
		if len(ms) > 1 {
			b.t.Fatalf("asked for 1, got %d", len(ms))
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("nothing received within %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nack of one message among others of its lease: only it comes back; its
// lease-mates acked are not redelivered, those unacked come back only at
// the lease's end.
func TestV2NackAmongLeaseMates(t *testing.T) {
	b := setup(t)
	_, ms := b.v2leased("v2nm", 4, 4, "2 seconds")
	if !b.nack("v2nm", "default", ms[1].Receipt, "0", "x") {
		t.Fatal("nack false")
	}
	if n := b.ack("v2nm", "default", ms[0].Receipt, ms[2].Receipt); n != 2 {
		t.Errorf("ack counted %d, want 2", n)
	}
	r := b.v2receive("v2nm", "default", 10, "")
	if len(r) != 1 || r[0].ID != ms[1].ID || r[0].Attempt != 2 {
		t.Fatalf("after nack: %+v, want message %d attempt 2 only", r, ms[1].ID)
	}
	if n := b.ack("v2nm", "default", r[0].Receipt); n != 1 {
		t.Errorf("ack of the retry counted %d", n)
	}
	time.Sleep(time.Until(ms[0].Expires) + 100*time.Millisecond)
	r = b.v2drain("v2nm", "default", 10, "")
	if len(r) != 1 || r[0].ID != ms[3].ID || r[0].Attempt != 2 {
		t.Fatalf("after the lease's end: %+v, want message %d attempt 2 only", r, ms[3].ID)
	}
	b.ack("v2nm", "default", r[0].Receipt)
	b.v2expectEmpty("v2nm", "default")
}

// extend: an extended lease is not redelivered before its new end and its
// ack still counts after the old end; a shorter extension never shortens a
// lease; an expired receipt cannot be extended.
func TestV2Extend(t *testing.T) {
	b := setup(t)
	_, ms := b.v2leased("v2e", 2, 2, "1 second")
	var n int
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.extend('v2e', 'default', $1, '3 seconds')",
		[]string{ms[0].Receipt}).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("extend counted %d, want 1", n)
	}
	newEnd := time.Now().Add(3 * time.Second)
	time.Sleep(time.Until(ms[0].Expires) + 300*time.Millisecond)
	// past the old end: the lease-mate comes back, the extended message
	// does not (extend renews the receipts it is given, as on engine 1)
	r := b.v2drain("v2e", "default", 10, "")
	if len(r) != 1 || r[0].ID != ms[1].ID || r[0].Attempt != 2 {
		t.Fatalf("after the old end: %+v, want %d attempt 2 only", r, ms[1].ID)
	}
	if n := b.ack("v2e", "default", ms[0].Receipt); n != 1 {
		t.Errorf("ack of an extended receipt past its old end counted %d, want 1", n)
	}
	if n := b.ack("v2e", "default", r[0].Receipt); n != 1 {
		t.Errorf("ack counted %d", n)
	}
	time.Sleep(time.Until(newEnd) + 200*time.Millisecond)
	if r := b.v2receive("v2e", "default", 10, ""); len(r) > 0 {
		t.Fatalf("after the new end: %v came back, all were acked", v2ids(r))
	}
	// expired receipts cannot be extended
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.extend('v2e', 'default', $1, '10 seconds')",
		[]string{ms[1].Receipt}).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("extend of an expired receipt counted %d", n)
	}

	// never shortened: a lease of 3 s extended by 1 s still lasts 3 s
	id := b.send(b.pool, "v2e", `{"s": 1}`)
	m := b.v2receive("v2e", "default", 1, "3 seconds")
	if len(m) != 1 || m[0].ID != id {
		t.Fatalf("receive: %+v", m)
	}
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.extend('v2e', 'default', $1, '1 second')",
		[]string{m[0].Receipt}).Scan(&n); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if r := b.v2receive("v2e", "default", 10, ""); len(r) > 0 {
		t.Fatalf("a lease extended by less than it had left was redelivered early: %+v", r)
	}
	if n := b.ack("v2e", "default", m[0].Receipt); n != 1 {
		t.Errorf("ack after a shorter extension's end counted %d, want 1 (lease never shortened)", n)
	}
	b.v2expectEmpty("v2e", "default")
}

// An extension made twice: the later end counts. Each extension reaches
// 2 s past its call and the check follows 700 ms later: the first lease
// (500 ms) has run out by then, and a loaded machine has 1.3 s of slack.
func TestV2ExtendTwice(t *testing.T) {
	b := setup(t)
	b.createV2("v2e2", `"lanes": 1`)
	id := b.send(b.pool, "v2e2", `{}`)
	m := b.v2receive("v2e2", "default", 1, "500 milliseconds")
	if len(m) != 1 || m[0].ID != id {
		t.Fatalf("receive: %+v", m)
	}
	var n int
	for i := 0; i < 4; i++ {
		if err := b.pool.QueryRow(b.ctx, "SELECT sluice.extend('v2e2', 'default', $1, '2 seconds')",
			[]string{m[0].Receipt}).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("extend %d counted %d", i, n)
		}
		time.Sleep(700 * time.Millisecond)
		if r := b.v2receive("v2e2", "default", 1, ""); len(r) > 0 {
			t.Fatalf("redelivered during extension %d: %+v", i, r)
		}
	}
	if n := b.ack("v2e2", "default", m[0].Receipt); n != 1 {
		t.Errorf("ack counted %d", n)
	}
	time.Sleep(2200 * time.Millisecond) // past the last extension's end
	if r := b.v2drain("v2e2", "default", 1, ""); len(r) > 0 {
		t.Errorf("acked message redelivered: %+v", r)
	}
	b.v2expectEmpty("v2e2", "default")
}

// Delayed sends: not delivered before due, delivered after; status counts
// them delayed meanwhile.
func TestV2DelayedSends(t *testing.T) {
	b := setup(t)
	b.createV2("v2d", "")
	now := b.send(b.pool, "v2d", `{"now": 1}`)
	var d1 int64
	if err := b.pool.QueryRow(b.ctx, `SELECT sluice.send('v2d', '{"d": 1}', delay => '1.5 seconds')`).Scan(&d1); err != nil {
		t.Fatal(err)
	}
	batch := b.v2sendBatch("v2d", 5, "2 seconds")
	sent := time.Now()
	got := b.v2drainAck("v2d", "default", 10)
	if len(got) != 1 || got[0].ID != now {
		t.Fatalf("at once: got %v, want only %d", v2ids(got), now)
	}
	st := b.v2status("v2d", "default")
	if st.Delayed != 6 {
		t.Errorf("status delayed %d, want 6", st.Delayed)
	}
	var seen []v2msg
	for len(seen) < 6 && time.Since(sent) < 10*time.Second {
		ms := b.v2receive("v2d", "default", 10, "")
		for _, m := range ms {
			el := time.Since(sent)
			if m.ID == d1 && el < 1500*time.Millisecond-50*time.Millisecond {
				t.Errorf("message delayed 1.5 s delivered after %s", el)
			}
			if m.ID != d1 && el < 2*time.Second-50*time.Millisecond {
				t.Errorf("message %d delayed 2 s delivered after %s", m.ID, el)
			}
			if m.Attempt != 1 {
				t.Errorf("delayed message %d: attempt %d", m.ID, m.Attempt)
			}
		}
		if len(ms) > 0 {
			b.ack("v2d", "default", v2receipts(ms)...)
		}
		seen = append(seen, ms...)
		time.Sleep(30 * time.Millisecond)
	}
	want := append([]int64{d1}, batch...)
	if !v2same(v2ids(seen), want) {
		t.Fatalf("delayed: %s", v2diff(v2ids(seen), want))
	}
	b.v2expectEmpty("v2d", "default")
}

// A delayed message sent in a transaction that commits after its due time
// is delivered.
func TestV2DelayedCommittedLate(t *testing.T) {
	b := setup(t)
	b.createV2("v2dl", "")
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	var id int64
	if err := tx.QueryRow(b.ctx, `SELECT sluice.send('v2dl', '{}', delay => '300 milliseconds')`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	other := b.v2sendN("v2dl", 3)
	if got := b.v2drainAck("v2dl", "default", 10); !v2same(v2ids(got), other) {
		t.Fatalf("others: %s", v2diff(v2ids(got), other))
	}
	time.Sleep(600 * time.Millisecond)
	if got := b.v2drainAck("v2dl", "default", 10); len(got) != 0 {
		t.Fatalf("before commit: %v", v2ids(got))
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	got := b.v2drainAck("v2dl", "default", 10)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("after commit: %v, want [%d]", v2ids(got), id)
	}
}

// A transaction holding an xid does not stop delivery of later committed
// messages; a message sent in a long-open transaction is delivered once it
// commits; a rolled-back one never.
func TestV2HeldXid(t *testing.T) {
	b := setup(t)
	b.createV2("v2h", "")
	holder, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(b.ctx) //nolint:errcheck
	if _, err := holder.Exec(b.ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}
	a := b.v2sendN("v2h", 10)
	if got := b.v2drainAck("v2h", "default", 3); !v2same(v2ids(got), a) {
		t.Fatalf("with an xid held: %s", v2diff(v2ids(got), a))
	}
	slow, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(b.ctx) //nolint:errcheck
	m := b.send(slow, "v2h", `{"slow": 1}`)
	gone, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Rollback(b.ctx) //nolint:errcheck
	r := b.send(gone, "v2h", `{"rolled back": 1}`)
	for round := 0; round < 3; round++ {
		c := b.v2sendN("v2h", 7)
		c = append(c, b.v2sendBatch("v2h", 4, "")...)
		if got := b.v2drainAck("v2h", "default", 5); !v2same(v2ids(got), c) {
			t.Fatalf("round %d, with a send open: %s", round, v2diff(v2ids(got), c))
		}
	}
	if err := gone.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := slow.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	got := b.v2drainAck("v2h", "default", 5)
	if len(got) != 1 || got[0].ID != m {
		t.Fatalf("after the slow send committed: %v, want [%d] (rolled back: %d)", v2ids(got), m, r)
	}
	if err := holder.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	d := b.v2sendN("v2h", 3)
	if got := b.v2drainAck("v2h", "default", 5); !v2same(v2ids(got), d) {
		t.Fatalf("after the holder ended: %s", v2diff(v2ids(got), d))
	}
	b.v2expectEmpty("v2h", "default")
}

// Groups: a group created 'latest' does not get older messages; seek to
// 'earliest' replays everything kept; a group created at a time gets what
// was sent after it; seek to 'latest' skips the backlog.
func TestV2GroupStarts(t *testing.T) {
	b := setup(t)
	b.createV2("v2g", "")
	old := b.v2sendN("v2g", 5)
	// number them (a receive of another group)
	b.v2drainAck("v2g", "default", 10)
	b.exec("SELECT sluice.create_group('v2g', 'late', 'latest')")
	time.Sleep(20 * time.Millisecond)
	var mid time.Time
	if err := b.pool.QueryRow(b.ctx, "SELECT clock_timestamp()").Scan(&mid); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	newer := b.v2sendN("v2g", 3)
	got := b.v2drainAck("v2g", "late", 10)
	if !v2same(v2ids(got), newer) {
		t.Fatalf("'latest' group: %s", v2diff(v2ids(got), newer))
	}
	b.exec("SELECT sluice.seek_group('v2g', 'late', 'earliest')")
	all := append(append([]int64{}, old...), newer...)
	got = b.v2drainAck("v2g", "late", 3)
	if !v2same(v2ids(got), all) {
		t.Fatalf("after seek to 'earliest': %s", v2diff(v2ids(got), all))
	}
	b.exec("SELECT sluice.create_group('v2g', 'attime', $1)", mid.Format(time.RFC3339Nano))
	got = b.v2drainAck("v2g", "attime", 10)
	if !v2same(v2ids(got), newer) {
		t.Fatalf("group from a time: %s", v2diff(v2ids(got), newer))
	}
	more := b.v2sendN("v2g", 2)
	b.exec("SELECT sluice.seek_group('v2g', 'attime', 'latest')")
	if got := b.v2drainAck("v2g", "attime", 10); len(got) != 0 {
		t.Fatalf("after seek to 'latest', got %v (backlog %v)", v2ids(got), more)
	}
	after := b.v2sendN("v2g", 2)
	if got := b.v2drainAck("v2g", "attime", 10); !v2same(v2ids(got), after) {
		t.Fatalf("after seek to 'latest' then sends: %s", v2diff(v2ids(got), after))
	}
	// a 'latest' group created while messages are committed but not numbered
	b.v2sendN("v2g", 4)
	b.exec("SELECT sluice.create_group('v2g', 'late2', 'latest')")
	if got := b.v2drainAck("v2g", "late2", 10); len(got) != 0 {
		t.Fatalf("'latest' group got messages sent before it: %v", v2ids(got))
	}
	// drop_group: gone
	b.exec("SELECT sluice.drop_group('v2g', 'late2')")
	_, err := v2receiveOn(b.ctx, b.pool, "v2g", "late2", 1, "")
	if sqlstate(err) != "SL003" {
		t.Errorf("receive of a dropped group: %v, want SL003", err)
	}
}

// Seek to 'earliest' while messages are in flight: the group's new
// incarnation gets them all, and the old receipts are stale.
func TestV2SeekWhileInFlight(t *testing.T) {
	b := setup(t)
	b.createV2("v2s", "")
	ids := b.v2sendN("v2s", 6)
	ms := b.v2receive("v2s", "default", 6, "")
	if len(ms) == 0 {
		t.Fatal("nothing received")
	}
	b.exec("SELECT sluice.seek_group('v2s', 'default', 'earliest')")
	if n := b.ack("v2s", "default", v2receipts(ms)...); n != 0 {
		t.Errorf("ack of receipts of the group before the seek counted %d, want 0", n)
	}
	got := b.v2drainAck("v2s", "default", 4)
	if !v2same(v2ids(got), ids) {
		t.Fatalf("after seek: %s", v2diff(v2ids(got), ids))
	}
}

// Bad input: forged receipts (wrong token, slot, lane, position, lease)
// count 0 and change nothing (dedup keys, peek, leases, purge and redrive:
// v2_ops_test.go).
func TestV2BadInput(t *testing.T) {
	b := setup(t)
	b.createV2("v2bad", `"lanes": 2`)
	b.exec("SELECT sluice.create_group('v2bad', 'other')")
	b.v2sendN("v2bad", 4)
	ms := b.v2receive("v2bad", "default", 1, "")
	if len(ms) != 1 {
		t.Fatalf("receive: %+v", ms)
	}
	rc := ms[0].Receipt
	if parts := strings.Split(rc, "."); len(parts) != 5 {
		t.Fatalf("receipt %q: want 5 parts (slot.pos.lane.lease_no.token)", rc)
	}
	parts := strings.Split(rc, ".")
	otherLane := "0"
	if parts[2] == "0" {
		otherLane = "1"
	}
	forged := map[string]string{
		"wrong token":       v2forge(rc, 4, "12345"),
		"token 0":           v2forge(rc, 4, "0"),
		"wrong slot 9":      v2forge(rc, 0, "9"),
		"wrong slot 1":      v2forge(rc, 0, "1"),
		"wrong lane":        v2forge(rc, 2, otherLane),
		"lane out of range": v2forge(rc, 2, "7"),
		"wrong pos":         v2forge(rc, 1, "999"),
		"wrong lease":       v2forge(rc, 3, "1"),
		"lease 0":           v2forge(rc, 3, "0"),
		"huge pos":          v2forge(rc, 1, "999999999999999999"),
		"huge lease":        v2forge(rc, 3, "999999999999999999"),
	}
	before := b.dataFingerprint()
	for what, r := range forged {
		var n int
		err := b.pool.QueryRow(b.ctx, "SELECT sluice.ack('v2bad', 'default', $1)", []string{r}).Scan(&n)
		if err != nil {
			t.Errorf("ack of a forged receipt (%s) %q: %v; want 0", what, r, err)
		} else if n != 0 {
			t.Errorf("ack of a forged receipt (%s) %q counted %d", what, r, n)
		}
		var ok bool
		err = b.pool.QueryRow(b.ctx, "SELECT sluice.nack('v2bad', 'default', $1, '0')", r).Scan(&ok)
		if err != nil {
			t.Errorf("nack of a forged receipt (%s) %q: %v; want false", what, r, err)
		} else if ok {
			t.Errorf("nack of a forged receipt (%s) %q: true", what, r)
		}
		err = b.pool.QueryRow(b.ctx, "SELECT sluice.extend('v2bad', 'default', $1, '1 hour')", []string{r}).Scan(&n)
		if err != nil {
			t.Errorf("extend of a forged receipt (%s) %q: %v; want 0", what, r, err)
		} else if n != 0 {
			t.Errorf("extend of a forged receipt (%s) %q counted %d", what, r, n)
		}
	}
	// the real receipt in another group
	var n int
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.ack('v2bad', 'other', $1)", []string{rc}).Scan(&n); err != nil || n != 0 {
		t.Errorf("ack of a receipt in another group: %d, %v; want 0", n, err)
	}
	if after := b.dataFingerprint(); after != before {
		t.Errorf("forged receipts changed the data:\nbefore %s\nafter  %s", before, after)
	}
	if n := b.ack("v2bad", "default", rc); n != 1 {
		t.Errorf("the real receipt counted %d after the forged ones, want 1", n)
	}
	// malformed: SL008
	b.v2expectState("SL008", "SELECT sluice.ack('v2bad', 'default', ARRAY['x.y'])")

	// the queue holds the 4 messages sent
	got := b.v2drainAck("v2bad", "other", 10)
	if len(got) != 4 {
		t.Errorf("group other received %d messages, want the 4 sent", len(got))
	}
	// key NULL, priority 0 and dedup NULL arrays are fine
	ids := b.int64s(`SELECT * FROM sluice.send_batch('v2bad', ARRAY['{}'::jsonb, '{}'],
		keys => ARRAY[NULL, NULL]::text[], priorities => ARRAY[0, 0], dedup_keys => ARRAY[NULL, NULL]::text[])`)
	if len(ids) != 2 {
		t.Errorf("send_batch with empty keys: %v", ids)
	}
}
