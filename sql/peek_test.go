package sqlsrc_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// peeked is a row of sluice.peek.
type peeked struct {
	ID        int64
	Body      string
	Key       *string
	Priority  int
	Delayed   bool
	ResentTo  []string
	HasHeader bool
}

func (b *bundle) peek(queue string, n int, after *int64) []peeked {
	b.t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT id, body::text, key, priority, deliver_at IS NOT NULL, resent_to,
		headers IS NOT NULL FROM sluice.peek($1, $2, $3)`, queue, n, after)
	if err != nil {
		b.t.Fatalf("peek: %v", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (peeked, error) {
		var p peeked
		err := r.Scan(&p.ID, &p.Body, &p.Key, &p.Priority, &p.Delayed, &p.ResentTo, &p.HasHeader)
		return p, err
	})
	if err != nil {
		b.t.Fatalf("peek: %v", err)
	}
	return ps
}

// lease is a row of sluice.leases.
type lease struct {
	Group       string
	ID, Pos     int64
	Attempt     int
	Consumer    *string
	DeliveredAt time.Time
	Expires     time.Time
}

func (b *bundle) leases(queue string, group *string, n int) []lease {
	b.t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT group_name, id, pos, attempt, consumer, delivered_at, lease_expires_at
		FROM sluice.leases($1, $2, $3)`, queue, group, n)
	if err != nil {
		b.t.Fatalf("leases: %v", err)
	}
	ls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease, error) {
		var l lease
		err := r.Scan(&l.Group, &l.ID, &l.Pos, &l.Attempt, &l.Consumer, &l.DeliveredAt, &l.Expires)
		return l, err
	})
	if err != nil {
		b.t.Fatalf("leases: %v", err)
	}
	return ls
}

func leaseIDs(ls []lease) []int64 {
	ids := make([]int64, len(ls))
	for i, l := range ls {
		ids[i] = l.ID
	}
	return ids
}

func peekIDs(ps []peeked) []int64 {
	ids := make([]int64, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids
}

// peek pages through the stored messages in id order, shows what send
// stored (headers, key, delay, priority), and changes nothing (no lease,
// no cursor, no row anywhere); a nacked message (its retry copy) still
// shows once, naming its group in resent_to (a keyed one is retried in
// place: no copy, no resent_to); a received one is still stored; an
// uncommitted send is not shown. On both engines (engine 2's was
// TestV2PeekPagesInIDOrder).
func TestPeekPagesInIDOrder(t *testing.T) {
	onBothEngines(t, `"lanes": 2`, func(b *bundle, _ int) { b.checkPeekPages("q") })
}

// checkPeekPages is TestPeekPagesInIDOrder on queue (empty, 2 lanes,
// group default).
func (b *bundle) checkPeekPages(queue string) {
	t := b.t
	var sent []int64
	for i := range 23 {
		var id int64
		if err := b.pool.QueryRow(b.ctx, `SELECT sluice.send($2, jsonb_build_object('n', $1::int),
			headers => CASE WHEN $1::int = 3 THEN '{"h": 1}'::jsonb END,
			key => CASE WHEN $1::int IN (4, 7) THEN 'k' END,
			delay => CASE WHEN $1::int = 5 THEN interval '1 hour' END,
			priority => CASE WHEN $1::int = 6 THEN 7 ELSE 0 END)`, i, queue).Scan(&id); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, id)
	}
	before := b.dataFingerprint()
	statusBefore := b.statusRow(queue)

	var all []peeked
	var after *int64
	for page := 0; ; page++ {
		ps := b.peek(queue, 10, after)
		if len(ps) == 0 {
			break
		}
		if page > 3 {
			t.Fatalf("more than 3 pages of 10 for 23 messages")
		}
		all = append(all, ps...)
		last := ps[len(ps)-1].ID
		after = &last
	}
	if got := peekIDs(all); !slices.Equal(got, sent) {
		t.Fatalf("paged ids %v, want %v", got, sent)
	}
	for i, p := range all {
		if want := fmt.Sprintf(`{"n": %d}`, i); p.Body != want {
			t.Errorf("message %d: body %s, want %s", i, p.Body, want)
		}
		if p.HasHeader != (i == 3) || (p.Key != nil) != (i == 4 || i == 7) || p.Delayed != (i == 5) ||
			(p.Priority == 7) != (i == 6) || p.ResentTo != nil {
			t.Errorf("message %d: %+v", i, p)
		}
	}
	if got := b.peek(queue, 1000, nil); len(got) != 23 {
		t.Errorf("peek 1000: %d rows, want 23", len(got))
	}
	if got := peekIDs(b.peek(queue, 3, &sent[20])); !slices.Equal(got, sent[21:]) {
		t.Errorf("peek after %d: %v, want %v", sent[20], got, sent[21:])
	}
	if after := b.dataFingerprint(); after != before {
		t.Errorf("peek changed the data:\n before %s\n after  %s", before, after)
	}
	if got := b.statusRow(queue); got != statusBefore {
		t.Errorf("status after peek %+v, want %+v", got, statusBefore)
	}
	if n := len(b.leases(queue, nil, 100)); n != 0 {
		t.Errorf("%d leases after peek, want 0", n)
	}

	// Receive everything due; nack an unkeyed message (stored again as a
	// retry copy for its group) and the first keyed one (retried in place;
	// it releases the key's second if in its run).
	ms := b.receiveAs(queue, "default", 100, "1 hour", "")
	for len(ms) < 21 {
		more := b.receiveAs(queue, "default", 100, "1 hour", "")
		if len(more) == 0 {
			t.Fatalf("received %d, want the 21 due (a key's second waits)", len(ms))
		}
		ms = append(ms, more...)
	}
	var nacked int64
	keyedNacked := false
	for _, m := range ms {
		if (m.Key != nil && !keyedNacked) || (m.Key == nil && nacked == 0) {
			if !b.nack(queue, "default", m.Receipt, "1 hour", "") {
				t.Fatalf("nack of %d", m.ID)
			}
			if m.Key == nil {
				nacked = m.ID
			} else {
				keyedNacked = true
			}
		}
	}
	ps := b.peek(queue, 1000, nil)
	if got := peekIDs(ps); !slices.Equal(got, sent) {
		t.Fatalf("peek after a nack: %v, want %v", got, sent)
	}
	for _, p := range ps {
		var want []string
		if p.ID == nacked {
			want = []string{"default"}
		}
		if !slices.Equal(p.ResentTo, want) || p.Delayed != (p.Body == `{"n": 5}`) {
			t.Errorf("after a nack of %d: %+v (want resent_to %v)", nacked, p, want)
		}
	}
	// An uncommitted send is not shown.
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	b.send(tx, queue, `"open"`)
	if n := len(b.peek(queue, 1000, nil)); n != len(sent) {
		t.Errorf("peek beside an uncommitted send: %d, want %d", n, len(sent))
	}
}

// After purge_queue, peek finds nothing; messages sent after it show.
func TestPeekAfterPurge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("p", "")
	for i := range 5 {
		b.send(b.pool, "p", fmt.Sprint(i))
	}
	b.receive("p", "default", 2, "")
	if n := len(b.peek("p", 10, nil)); n != 5 {
		t.Fatalf("peek before purge: %d, want 5", n)
	}
	b.exec("SELECT sluice.purge_queue('p')")
	if ps := b.peek("p", 10, nil); len(ps) != 0 {
		t.Errorf("peek after purge: %+v, want nothing", ps)
	}
	if ls := b.leases("p", nil, 10); len(ls) != 0 {
		t.Errorf("leases after purge: %+v, want nothing", ls)
	}
	id := b.send(b.pool, "p", `"after"`)
	if got := b.peek("p", 10, nil); len(got) != 1 || got[0].ID != id {
		t.Errorf("peek of a message sent after purge: %+v", got)
	}
}

func (b *bundle) receiveAs(queue, group string, n int, lease, consumer string) []msg {
	b.t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT id, body::text, key, attempt, receipt, pos, priority
		FROM sluice.receive($1, $2, $3, $4::interval, $5)`, queue, group, n, lease, consumer)
	if err != nil {
		b.t.Fatalf("receive: %v", err)
	}
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (msg, error) {
		var m msg
		err := r.Scan(&m.ID, &m.Body, &m.Key, &m.Attempt, &m.Receipt, &m.Pos, &m.Priority)
		return m, err
	})
	if err != nil {
		b.t.Fatalf("receive: %v", err)
	}
	return ms
}

// leases shows a single delivery while it is current, and not once it is
// acked or its lease has expired; a redelivery shows with its attempt;
// status's in_flight agrees. On both engines (TestV2Leases goes on from
// there on engine 2).
func TestLeasesSingleDelivery(t *testing.T) {
	onBothEngines(t, "", func(b *bundle, _ int) {
		_, ls := b.checkLeaseOfOneDelivery("q")
		if n := b.status("q")["default"].InFlight; n != int64(len(ls)) {
			b.t.Errorf("status in flight %d, leases %d", n, len(ls))
		}
	})
}

// checkLeaseOfOneDelivery checks, on queue (nothing stored, group default),
// that leases shows a single delivery while it is current (group, id,
// position, attempt 1, consumer, an hour from about now), and not once it
// is acked or its lease has expired, without a receive in between; its
// redelivery shows with attempt 2, at its position, with no consumer. It
// returns the redelivery (not acked) and the leases then.
func (b *bundle) checkLeaseOfOneDelivery(queue string) ([]msg, []lease) {
	t := b.t
	t.Helper()
	id := b.send(b.pool, queue, `"a"`)
	start := time.Now()
	ms := b.receiveAs(queue, "default", 1, "1 hour", "worker-1")
	if len(ms) != 1 {
		t.Fatalf("received %d", len(ms))
	}
	ls := b.leases(queue, nil, 100)
	if len(ls) != 1 {
		t.Fatalf("leases: %+v, want one", ls)
	}
	l := ls[0]
	if l.Group != "default" || l.ID != id || l.Pos != ms[0].Pos || l.Attempt != 1 || l.Consumer == nil || *l.Consumer != "worker-1" {
		t.Errorf("lease %+v, want message %d at %d, attempt 1, consumer worker-1", l, id, ms[0].Pos)
	}
	if d := l.Expires.Sub(l.DeliveredAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("lease from %s to %s, want an hour", l.DeliveredAt, l.Expires)
	}
	if l.DeliveredAt.Before(start.Add(-time.Minute)) || l.DeliveredAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("delivered_at %s, want about now", l.DeliveredAt)
	}
	if n := b.ack(queue, "default", ms[0].Receipt); n != 1 {
		t.Fatalf("ack: %d", n)
	}
	if ls := b.leases(queue, nil, 100); len(ls) != 0 {
		t.Errorf("leases after the ack: %+v", ls)
	}

	// A lease that expires is no longer in flight, without a receive in
	// between; its redelivery is, with attempt 2.
	id = b.send(b.pool, queue, `"b"`)
	ms = b.receive(queue, "default", 1, "300 milliseconds")
	if len(ms) != 1 || len(b.leases(queue, nil, 100)) != 1 {
		t.Fatalf("second message: received %d", len(ms))
	}
	waitFor(t, 10*time.Second, "the lease to expire", func() bool { return len(b.leases(queue, nil, 100)) == 0 })
	ms = b.receive(queue, "default", 1, "1 hour")
	if len(ms) != 1 || ms[0].Attempt != 2 {
		t.Fatalf("redelivery: %+v", ms)
	}
	ls = b.leases(queue, nil, 100)
	if len(ls) != 1 || ls[0].ID != id || ls[0].Attempt != 2 || ls[0].Consumer != nil || ls[0].Pos != ms[0].Pos {
		t.Errorf("leases after the redelivery: %+v, want message %d, attempt 2, no consumer", ls, id)
	}
	return ms, ls
}

// A run leased by one receive shows each position once; an extend of one
// of them shows its new expiry (once); a nacked message, keyed or not, is
// not in flight; an ack of the rest empties the list. Groups are apart,
// and the group filter keeps one.
//
// On both engines (engine 2 leases a receive's messages of one lane with
// one lease row, as engine 1's run, and an extend renews the receipts
// given).
func TestLeasesRunsExtendNack(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) {
			t.Parallel()
			leasesRunsExtendNack(t, engine)
		})
	}
}

func leasesRunsExtendNack(t *testing.T, engine int) {
	b := setup(t)
	b.createQueue("r", fmt.Sprintf(`{"engine": %d, "lanes": 1}`, engine))
	b.exec("SELECT sluice.create_group('r', 'audit')")
	var sent []int64
	for i := range 6 {
		sent = append(sent, b.send(b.pool, "r", fmt.Sprint(i)))
	}
	keyed := int64(0)
	if err := b.pool.QueryRow(b.ctx, `SELECT sluice.send('r', '"k"', key => 'k')`).Scan(&keyed); err != nil {
		t.Fatal(err)
	}
	ms := b.receiveAs("r", "default", 6, "10 minutes", "c1")
	if len(ms) != 6 {
		t.Fatalf("received %d, want 6", len(ms))
	}
	qid := b.queueID("r")
	runs := map[int]string{1: "SELECT count(*) FROM sluice_q%d.runs", 2: "SELECT count(*) FROM sluice_q%d.lease WHERE kind = 'r'"}[engine]
	if n := b.int64(fmt.Sprintf(runs, qid)); n != 1 {
		t.Fatalf("%d runs (lease) rows after a receive of 6 unkeyed messages, want 1 (the test is about runs)", n)
	}
	ls := b.leases("r", nil, 100)
	if got := leaseIDs(ls); !slices.Equal(got, sent) {
		t.Fatalf("leases of the run: %v, want %v", got, sent)
	}
	for _, l := range ls {
		if l.Attempt != 1 || l.Consumer == nil || *l.Consumer != "c1" || !l.Expires.Equal(ls[0].Expires) {
			t.Errorf("lease in the run: %+v", l)
		}
	}
	if got := leaseIDs(b.leases("r", nil, 4)); !slices.Equal(got, sent[:4]) {
		t.Errorf("leases, 4 at most: %v, want %v", got, sent[:4])
	}

	// Extend the third: it comes last (the latest expiry), once.
	var n int
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.extend('r', 'default', $1, '1 hour')", []string{ms[2].Receipt}).Scan(&n); err != nil || n != 1 {
		t.Fatalf("extend: %d, %v", n, err)
	}
	before := ls[0].Expires
	ls = b.leases("r", nil, 100)
	want := append(slices.Clone(sent[:2]), sent[3:]...)
	want = append(want, sent[2])
	extended := ls[len(ls)-1:]
	if got := leaseIDs(ls); !slices.Equal(got, want) {
		t.Fatalf("leases after an extend: %v, want %v", got, want)
	}
	for _, l := range extended {
		if d := l.Expires.Sub(before); d < 45*time.Minute {
			t.Errorf("extended lease %d expires %s, before %s", l.ID, l.Expires, before)
		}
		if l.Consumer == nil || *l.Consumer != "c1" || !l.DeliveredAt.Equal(ls[0].DeliveredAt) {
			t.Errorf("the extended lease keeps its receive's consumer and time: %+v, run %+v", l, ls[0])
		}
	}

	// Nack the first (unkeyed: completed, a retry copy is sent) and the
	// keyed one (parked in place): neither is in flight.
	if !b.nack("r", "default", ms[0].Receipt, "1 hour", "") {
		t.Fatal("nack")
	}
	km := b.receiveAs("r", "default", 10, "10 minutes", "c2")
	if len(km) != 1 || km[0].ID != keyed {
		t.Fatalf("receive of the keyed message: %+v", km)
	}
	if got := leaseIDs(b.leases("r", nil, 100)); !slices.Contains(got, keyed) || slices.Contains(got, sent[0]) || len(got) != 6 {
		t.Errorf("leases after the nack and the keyed receive: %v", got)
	}
	if !b.nack("r", "default", km[0].Receipt, "1 hour", "") {
		t.Fatal("nack of the keyed message")
	}
	ls = b.leases("r", nil, 100)
	if got := leaseIDs(ls); !slices.Equal(got, want[1:]) {
		t.Errorf("leases after the nacks: %v, want %v", got, want[1:])
	}
	if got := b.status("r")["default"].InFlight; got != int64(len(ls)) {
		t.Errorf("status in flight %d, leases %d", got, len(ls))
	}

	// Another group: its own leases; the filter keeps one group.
	am := b.receive("r", "audit", 2, "")
	audit := "audit"
	def := "default"
	if got := b.leases("r", &audit, 100); len(got) != 2 || got[0].Group != "audit" {
		t.Errorf("audit's leases: %+v", got)
	}
	if got := b.leases("r", &def, 100); len(got) != len(ls) {
		t.Errorf("default's leases: %d, want %d", len(got), len(ls))
	}
	if got := b.leases("r", nil, 100); len(got) != len(ls)+2 {
		t.Errorf("every group's leases: %d, want %d", len(got), len(ls)+2)
	}

	b.ack("r", "default", receipts(ms[1:])...)
	b.ack("r", "audit", receipts(am)...)
	if got := b.leases("r", nil, 100); len(got) != 0 {
		t.Errorf("leases after the acks: %+v", got)
	}
}

// Bad input gets its SL code and changes nothing.
func TestPeekLeasesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	b.send(b.pool, "q", "1")
	b.receive("q", "default", 1, "")
	before := b.dataFingerprint()
	for _, c := range []struct{ sql, code string }{
		{`SELECT * FROM sluice.peek('q', 0)`, "SL006"},
		{`SELECT * FROM sluice.peek('q', 1001)`, "SL006"},
		{`SELECT * FROM sluice.peek('q', NULL)`, "SL006"},
		{`SELECT * FROM sluice.peek('nope')`, "SL002"},
		{`SELECT * FROM sluice.peek('bad name')`, "SL001"},
		{`SELECT * FROM sluice.peek(NULL)`, "SL001"},
		{`SELECT * FROM sluice.leases('q', NULL, 0)`, "SL006"},
		{`SELECT * FROM sluice.leases('q', NULL, 1001)`, "SL006"},
		{`SELECT * FROM sluice.leases('q', 'default', -1)`, "SL006"},
		{`SELECT * FROM sluice.leases('nope')`, "SL002"},
		{`SELECT * FROM sluice.leases('bad name')`, "SL001"},
		{`SELECT * FROM sluice.leases('q', 'nope')`, "SL003"},
		{`SELECT * FROM sluice.leases('q', 'bad name')`, "SL001"},
	} {
		_, err := b.pool.Exec(b.ctx, c.sql)
		if got := sqlstate(err); got != c.code {
			t.Errorf("%s: SQLSTATE %q (%v), want %s", c.sql, got, err, c.code)
		}
	}
	if after := b.dataFingerprint(); after != before {
		t.Errorf("bad input changed the data:\n before %s\n after  %s", before, after)
	}
}

// peek and leases wait for nobody: a receive that holds its lanes (and
// the cut) in an open transaction does not hold them up; its leases show
// once it commits, those of the messages it received. On both engines
// (engine 2's was TestV2PeekLeasesDoNotWait).
func TestPeekLeasesDoNotWait(t *testing.T) {
	onBothEngines(t, `"lanes": 2`, peekLeasesDoNotWait)
}

// peekLeasesDoNotWait is TestPeekLeasesDoNotWait on queue q.
func peekLeasesDoNotWait(b *bundle, _ int) {
	t := b.t
	for i := range 10 {
		b.send(b.pool, "q", fmt.Sprint(i))
	}
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	ms, err := receiveOn(b.ctx, tx, "q", "default", 4, "1 hour")
	if err != nil || len(ms) != 4 {
		t.Fatalf("receive in a transaction: %d, %v", len(ms), err)
	}
	conn, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(b.ctx, "SET statement_timeout = '3s'"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(b.ctx, "RESET statement_timeout") //nolint:errcheck
	var n int64
	if err := conn.QueryRow(b.ctx, "SELECT count(*) FROM sluice.peek('q', 100)").Scan(&n); err != nil || n != 10 {
		t.Fatalf("peek beside an open receive: %d, %v", n, err)
	}
	if err := conn.QueryRow(b.ctx, "SELECT count(*) FROM sluice.leases('q')").Scan(&n); err != nil || n != 0 {
		t.Fatalf("leases beside an open receive: %d, %v (want 0: not committed)", n, err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	received := make([]int64, len(ms))
	for i, m := range ms {
		received[i] = m.ID
	}
	if got := leaseIDs(b.leases("q", nil, 100)); !v2same(got, received) {
		t.Fatalf("leases after the receive committed: %s", v2diff(got, received))
	}
}
