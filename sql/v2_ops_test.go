package sqlsrc_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// Tests of dedup keys, peek and leases on queues of engine 2, with the
// expectations engine 1's tests have, through the public SQL API; purge
// and redrive: v2_purge_redrive_test.go. Those whose body is the same on
// both engines run on both from semantics_test.go (TestConcurrentIdempotentSend),
// dedup_batch_test.go and peek_test.go (subtests engine1, engine2).

// v2sendKey sends body with a dedup key and returns the id send returned.
func (b *bundle) v2sendKey(queue, body, key string) int64 {
	b.t.Helper()
	var id int64
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.send($1, $2::jsonb, dedup_key => $3)", queue, body, key).Scan(&id); err != nil {
		b.t.Fatalf("send with dedup key %s: %v", key, err)
	}
	return id
}

// A dedup key sent again within the window returns the first message's id
// and enqueues nothing, in send and in send_batch (a key sent before, a key
// twice in the batch, a body without a key); keys are remembered across
// rotations, the slot holding them is not reclaimed within the window (with
// two slots the queue then stops rotating) and is once the window is
// shorter; after the window a key is sent again; outside READ COMMITTED a
// send with a key is refused (SL010).
func TestV2IdempotentSend(t *testing.T) {
	b := setup(t)
	b.createV2("v2d", `"retention": "0 seconds", "rotate_interval": "100 milliseconds", "lease": "300 milliseconds"`)
	first := b.v2sendKey("v2d", `{"n": 1}`, "order-42")
	if again := b.v2sendKey("v2d", `{"n": 2}`, "order-42"); again != first {
		t.Fatalf("second send with the same key returned %d, want %d", again, first)
	}
	other := b.v2sendKey("v2d", `{"n": 3}`, "order-43")
	ids := b.int64s(`SELECT * FROM sluice.send_batch('v2d', ARRAY['{"b":1}','{"b":2}','{"b":3}','{"b":4}']::jsonb[],
		dedup_keys => ARRAY['order-42', 'order-44', 'order-44', NULL])`)
	if len(ids) != 4 || ids[0] != first || ids[1] != ids[2] || ids[3] == ids[1] || ids[1] <= other {
		t.Fatalf("send_batch ids = %v, want [%d x x y]", ids, first)
	}
	got := b.v2drainAck("v2d", "default", 100)
	var bodies []string
	for _, m := range got {
		bodies = append(bodies, m.Body)
	}
	sort.Strings(bodies)
	if fmt.Sprint(bodies) != `[{"b": 2} {"b": 4} {"n": 1} {"n": 3}]` {
		t.Fatalf("enqueued %v, want one message per key and the one without", bodies)
	}
	traffic := func() {
		b.send(b.pool, "v2d", `{}`)
		b.v2drainAck("v2d", "default", 100)
		b.v2maintain()
	}
	waitFor(t, 10*time.Second, "a rotation", func() bool {
		traffic()
		return b.v2epoch("v2d") >= 1
	})
	for deadline := time.Now().Add(600 * time.Millisecond); time.Now().Before(deadline); {
		traffic()
	}
	if e, r := b.v2epoch("v2d"), b.v2reclaims("v2d"); e != 1 || r != 0 {
		t.Fatalf("within the dedup window: newest epoch %d, %d reclaimed, want 1 and 0", e, r)
	}
	if again := b.v2sendKey("v2d", `{"n": 4}`, "order-43"); again != other {
		t.Fatalf("after a rotation a resend returned %d, want %d", again, other)
	}
	// The window shortened: the slot is reclaimed, and a key may be sent again.
	b.exec(`SELECT sluice.alter_queue('v2d', '{"dedup_window": "1 millisecond"}')`)
	waitFor(t, 10*time.Second, "a reclaim once the window passed", func() bool {
		traffic()
		return b.v2reclaims("v2d") >= 1
	})
	if fresh := b.v2sendKey("v2d", `{"n": 5}`, "order-42"); fresh == first {
		t.Fatal("a key was deduplicated after its window")
	}
	if err := b.execRepeatableRead("SELECT sluice.send('v2d', '{}', dedup_key => 'x')"); sqlstate(err) != "SL010" {
		t.Fatalf("dedup send in REPEATABLE READ: %v, want SL010", err)
	}
	if err := b.execRepeatableRead("SELECT * FROM sluice.send_batch('v2d', ARRAY['{}'::jsonb], dedup_keys => ARRAY['x'])"); sqlstate(err) != "SL010" {
		t.Fatalf("dedup send_batch in REPEATABLE READ: %v, want SL010", err)
	}
	// (without a key, REPEATABLE READ is fine, as in engine 1)
	if err := b.execRepeatableRead("SELECT * FROM sluice.send_batch('v2d', ARRAY['{}'::jsonb], dedup_keys => ARRAY[NULL]::text[])"); err != nil {
		t.Fatalf("send_batch without keys in REPEATABLE READ: %v", err)
	}
}

// A rolled-back send with a key leaves the key free; a delayed send with a
// key is deduplicated too, and delivered once when due.
func TestV2DedupRollbackAndDelay(t *testing.T) {
	b := setup(t)
	b.createV2("v2dr", `"lanes": 2`)
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rolled int64
	if err := tx.QueryRow(b.ctx, "SELECT sluice.send('v2dr', '1', dedup_key => 'k')").Scan(&rolled); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	kept := b.v2sendKey("v2dr", "2", "k")
	if kept == rolled {
		t.Fatalf("the key of a rolled-back send returned its id %d", rolled)
	}
	var delayed, again int64
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.send('v2dr', '3', dedup_key => 'd', delay => '300 milliseconds')").Scan(&delayed); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.send('v2dr', '4', dedup_key => 'd')").Scan(&again); err != nil || again != delayed {
		t.Fatalf("send of a delayed message's key: %d, %v; want %d", again, err, delayed)
	}
	var got []int64
	waitFor(t, 10*time.Second, "the delayed message", func() bool {
		got = append(got, v2ids(b.v2drainAck("v2dr", "default", 10))...)
		return slices.Contains(got, delayed)
	})
	got = append(got, v2ids(b.v2drainAck("v2dr", "default", 10))...)
	if !v2same(got, []int64{kept, delayed}) {
		t.Fatalf("received %s", v2diff(got, []int64{kept, delayed}))
	}
}

// leases shows a delivery while it is current (group, id, position,
// attempt, consumer, times), not once it is acked or its lease has expired
// (without a receive in between); a redelivery shows with attempt 2; an
// extend renews the whole lease (engine 2 leases a receive's messages of a
// lane together); nacked messages are not in flight; groups are apart and
// the filter keeps one; max_messages bounds the rows; status's in_flight
// agrees.
func TestV2Leases(t *testing.T) {
	b := setup(t)
	b.createV2("v2l", `"lanes": 1`)
	b.exec("SELECT sluice.create_group('v2l', 'audit')")
	ms, _ := b.checkLeaseOfOneDelivery("v2l")
	b.ack("v2l", "default", ms[0].Receipt)
	b.v2drainAck("v2l", "audit", 10)

	// a receive of 6: each position once, in position order
	var sent []int64
	for i := range 6 {
		sent = append(sent, b.send(b.pool, "v2l", fmt.Sprint(i)))
	}
	ms = b.receiveAs("v2l", "default", 6, "10 minutes", "c1")
	if len(ms) != 6 {
		t.Fatalf("received %d, want 6", len(ms))
	}
	ls := b.leases("v2l", nil, 100)
	if got := leaseIDs(ls); !slices.Equal(got, sent) {
		t.Fatalf("leases of the receive: %v, want %v", got, sent)
	}
	for _, l := range ls {
		if l.Attempt != 1 || l.Consumer == nil || *l.Consumer != "c1" || !l.Expires.Equal(ls[0].Expires) {
			t.Errorf("lease of the receive: %+v", l)
		}
	}
	if got := leaseIDs(b.leases("v2l", nil, 4)); !slices.Equal(got, sent[:4]) {
		t.Errorf("leases, 4 at most: %v, want %v", got, sent[:4])
	}
	// extend one: it alone shows the new end (listed last, by expiry), the
	// others their lease's; consumer and time kept
	var n int
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.extend('v2l', 'default', $1, '1 hour')", []string{ms[2].Receipt}).Scan(&n); err != nil || n != 1 {
		t.Fatalf("extend: %d, %v", n, err)
	}
	ext := b.leases("v2l", nil, 100)
	want := append(append(append([]int64{}, sent[:2]...), sent[3:]...), sent[2])
	if got := leaseIDs(ext); !slices.Equal(got, want) {
		t.Fatalf("leases after an extend: %v, want %v", got, want)
	}
	for i, l := range ext {
		if i < len(ext)-1 {
			if !l.Expires.Equal(ls[0].Expires) {
				t.Errorf("lease not extended %+v, before %+v", l, ls[0])
			}
			continue
		}
		if d := l.Expires.Sub(ls[0].Expires); d < 45*time.Minute || *l.Consumer != "c1" || !l.DeliveredAt.Equal(ls[0].DeliveredAt) {
			t.Errorf("extended lease %+v, before %+v", l, ls[0])
		}
	}
	// nack two: not in flight
	if !b.nack("v2l", "default", ms[0].Receipt, "1 hour", "") || !b.nack("v2l", "default", ms[3].Receipt, "1 hour", "") {
		t.Fatal("nack")
	}
	want = []int64{sent[1], sent[4], sent[5], sent[2]}
	ls = b.leases("v2l", nil, 100)
	if got := leaseIDs(ls); !slices.Equal(got, want) {
		t.Errorf("leases after the nacks: %v, want %v", got, want)
	}
	if got := b.v2status("v2l", "default").InFlight; got != int64(len(ls)) {
		t.Errorf("status in flight %d, leases %d", got, len(ls))
	}
	// another group: its own leases; the filter keeps one group
	am := b.v2receive("v2l", "audit", 2, "")
	audit, def := "audit", "default"
	if got := b.leases("v2l", &audit, 100); len(got) != 2 || got[0].Group != "audit" {
		t.Errorf("audit's leases: %+v", got)
	}
	if got := b.leases("v2l", &def, 100); len(got) != len(ls) {
		t.Errorf("default's leases: %d, want %d", len(got), len(ls))
	}
	if got := b.leases("v2l", nil, 100); len(got) != len(ls)+2 {
		t.Errorf("every group's leases: %d, want %d", len(got), len(ls)+2)
	}
	before := b.dataFingerprint()
	b.leases("v2l", nil, 100)
	if after := b.dataFingerprint(); after != before {
		t.Errorf("leases changed the data:\n before %s\n after  %s", before, after)
	}
	b.ack("v2l", "default", ms[1].Receipt, ms[2].Receipt, ms[4].Receipt, ms[5].Receipt)
	b.ack("v2l", "audit", v2receipts(am)...)
	if got := b.leases("v2l", nil, 100); len(got) != 0 {
		t.Errorf("leases after the acks: %+v", got)
	}
}

// An extended lease whose first end has passed (a receive put it off: a
// deferral) is still in flight, until its extension ends; the expired
// lease's redelivery (parked positions delivered again) shows with its
// attempts.
func TestV2LeasesExtendedPastTheirEnd(t *testing.T) {
	b := setup(t)
	b.createV2("v2le", `"lanes": 1`)
	ids := b.v2sendN("v2le", 3)
	ms := b.v2receive("v2le", "default", 3, "200 milliseconds")
	if len(ms) != 3 {
		t.Fatalf("received %d", len(ms))
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.extend('v2le', 'default', $1, '1 second')", []string{ms[0].Receipt}).Scan(&n); err != nil || n != 1 {
		t.Fatalf("extend: %d, %v", n, err)
	}
	time.Sleep(300 * time.Millisecond)
	// a receive now finds the lease ended, one position extended: it
	// delivers the others again and puts that one off
	got := b.v2receive("v2le", "default", 3, "1 hour")
	if !v2same(v2ids(got), ids[1:]) {
		t.Fatalf("received %v past the lease's end, want the two not extended %v", v2ids(got), ids[1:])
	}
	if got := leaseIDs(b.leases("v2le", nil, 100)); !v2same(got, ids) {
		t.Fatalf("leases of a lease past its first end, one position extended: %s", v2diff(got, ids))
	}
	waitFor(t, 10*time.Second, "the extension to end", func() bool { return len(b.leases("v2le", nil, 100)) == 2 })
	again := b.v2receive("v2le", "default", 2, "1 hour")
	if len(again) != 1 || again[0].ID != ids[0] || again[0].Attempt != 2 {
		t.Fatalf("redelivered %+v, want %d attempt 2", again, ids[0])
	}
	ls := b.leases("v2le", nil, 100)
	if len(ls) != 3 || ls[0].Attempt != 2 || ls[1].Attempt != 2 || ls[2].Attempt != 2 || !v2same(leaseIDs(ls), ids) {
		t.Fatalf("leases of the redeliveries: %+v, want %v with attempt 2", ls, ids)
	}
}

// Bad input to the calls of this file gets its SQLSTATE and changes
// nothing.
func TestV2OpsBadInput(t *testing.T) {
	b := setup(t)
	b.createV2("v2ob", `"max_attempts": 1`)
	b.send(b.pool, "v2ob", "1")
	b.v2sendKey("v2ob", "2", "k")
	ms := b.v2receive("v2ob", "default", 1, "")
	if len(ms) != 1 || !b.nack("v2ob", "default", ms[0].Receipt, "0", "dead") {
		t.Fatal("receive and nack")
	}
	long := strings.Repeat("x", 513)
	before := b.dataFingerprint()
	for _, c := range []struct{ sql, code string }{
		{`SELECT sluice.send('v2ob', '{}', dedup_key => '` + long + `')`, "SL006"},
		{`SELECT sluice.send('v2ob', NULL, dedup_key => 'n')`, "SL006"},
		{`SELECT sluice.send('v2ob', '{}', dedup_key => 'n', delay => '-1 second')`, "SL006"},
		{`SELECT sluice.send('nope', '{}', dedup_key => 'n')`, "SL002"},
		{`SELECT * FROM sluice.send_batch('v2ob', ARRAY['{}'::jsonb, '{}'], dedup_keys => ARRAY['n'])`, "SL006"},
		{`SELECT * FROM sluice.send_batch('v2ob', ARRAY['{}'::jsonb], dedup_keys => ARRAY[['n']])`, "SL006"},
		{`SELECT * FROM sluice.send_batch('v2ob', ARRAY['{}'::jsonb], dedup_keys => ARRAY['` + long + `'])`, "SL006"},
		{`SELECT * FROM sluice.send_batch('v2ob', ARRAY['{}'::jsonb, NULL], dedup_keys => ARRAY['n', 'm'])`, "SL006"},
		{`SELECT * FROM sluice.peek('v2ob', 0)`, "SL006"},
		{`SELECT * FROM sluice.peek('v2ob', 1001)`, "SL006"},
		{`SELECT * FROM sluice.peek('v2ob', NULL)`, "SL006"},
		{`SELECT * FROM sluice.leases('v2ob', NULL, 0)`, "SL006"},
		{`SELECT * FROM sluice.leases('v2ob', 'nope')`, "SL003"},
		{`SELECT * FROM sluice.leases('v2ob', 'bad name')`, "SL001"},
		{`SELECT sluice.purge_queue('nope')`, "SL002"},
		{`SELECT sluice.purge_queue('bad name')`, "SL001"},
		{`SELECT sluice.purge_queue(NULL)`, "SL001"},
		{`SELECT sluice.redrive('v2ob', 'nope')`, "SL003"},
		{`SELECT sluice.redrive('nope')`, "SL002"},
	} {
		_, err := b.pool.Exec(b.ctx, c.sql)
		if got := sqlstate(err); got != c.code {
			t.Errorf("%s: SQLSTATE %q (%v), want %s", c.sql, got, err, c.code)
		}
	}
	if after := b.dataFingerprint(); after != before {
		t.Errorf("bad input changed the data:\n before %s\n after  %s", before, after)
	}
	// a redrive naming no dead letter sends nothing
	if n := b.int64(`SELECT sluice.redrive('v2ob', NULL, ARRAY[123456789])`); n != 0 {
		t.Errorf("redrive of an unknown id: %d", n)
	}
	if after := b.dataFingerprint(); after != before {
		t.Errorf("a redrive of nothing changed the data:\n before %s\n after  %s", before, after)
	}
}

// Dedup keys with ordering keys: what is sent keeps its ordering key (send
// and send_batch), a duplicate sends nothing whatever its key.
func TestV2DedupWithOrderingKeys(t *testing.T) {
	b := setup(t)
	b.createV2("v2dk", `"lanes": 2`)
	var one, again int64
	if err := b.pool.QueryRow(b.ctx, `SELECT sluice.send('v2dk', '"one"', key => 'a', dedup_key => 'x')`).Scan(&one); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(b.ctx, `SELECT sluice.send('v2dk', '"dup"', key => 'b', dedup_key => 'x')`).Scan(&again); err != nil || again != one {
		t.Fatalf("a duplicate with another key: %d, %v; want %d", again, err, one)
	}
	ids := b.int64s(`SELECT * FROM sluice.send_batch('v2dk', ARRAY['"two"', '"dup2"', '"three"', '"four"']::jsonb[],
		keys => ARRAY['a', 'c', NULL, 'a'], dedup_keys => ARRAY['y', 'y', 'z', 'x'])`)
	if len(ids) != 4 || ids[1] != ids[0] || ids[3] != one || ids[2] <= ids[0] {
		t.Fatalf("send_batch ids %v", ids)
	}
	ps := b.peek("v2dk", 10, nil)
	want := map[int64][2]string{one: {`"one"`, "a"}, ids[0]: {`"two"`, "a"}, ids[2]: {`"three"`, ""}}
	if len(ps) != len(want) {
		t.Fatalf("peek: %+v, want 3 messages", ps)
	}
	for _, p := range ps {
		key := ""
		if p.Key != nil {
			key = *p.Key
		}
		if w := want[p.ID]; p.Body != w[0] || key != w[1] {
			t.Errorf("message %d: body %s key %q, want %v", p.ID, p.Body, key, w)
		}
	}
	// the key's order: "one" before "two"
	var got []msg
	waitFor(t, 5*time.Second, "the three messages", func() bool {
		ms := b.receiveAs("v2dk", "default", 10, "1 hour", "")
		got = append(got, ms...)
		b.ack("v2dk", "default", receipts(ms)...)
		return len(got) >= 3
	})
	var order []int64
	for _, m := range got {
		if m.Key != nil && *m.Key == "a" {
			order = append(order, m.ID)
		}
	}
	if !slices.Equal(order, []int64{one, ids[0]}) || len(got) != 3 {
		t.Errorf("received %+v; key a in order %v, want [%d %d]", got, order, one, ids[0])
	}
}
