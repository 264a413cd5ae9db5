package sqlsrc_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// seek moves group of queue to position with sluice.seek_group.
func (b *bundle) seek(queue, group, position string) {
	b.t.Helper()
	b.exec("SELECT sluice.seek_group($1, $2, $3)", queue, group, position)
}

// TestSeekGroupReplaysAndSkips: seeking back replays messages the group
// acked (first deliveries again, attempt 1); seeking to 'latest' skips the
// backlog; seeking to a time starts at the batches cut from then on; the
// other group of the queue goes on as before.
func TestSeekGroupReplaysAndSkips(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 1}`)
	b.exec("SELECT sluice.create_group('q', 'other')")
	var sent []int64
	for i := range 5 {
		sent = append(sent, b.send(b.pool, "q", fmt.Sprintf(`{"i": %d}`, i)))
	}
	got := b.receive("q", "default", 10, "")
	if !slices.Equal(ids(got), sent) {
		t.Fatalf("first receive: %v, want %v", ids(got), sent)
	}
	if n := b.ack("q", "default", receipts(got)...); n != 5 {
		t.Fatalf("ack: %d, want 5", n)
	}
	otherHeld := b.receive("q", "other", 2, "")

	b.seek("q", "default", "earliest")
	replay := b.receive("q", "default", 10, "")
	if !slices.Equal(ids(replay), sent) {
		t.Fatalf("receive after seeking to earliest: %v, want the acked %v again", ids(replay), sent)
	}
	for _, m := range replay {
		if m.Attempt != 1 {
			t.Errorf("replayed message %d has attempt %d, want 1", m.ID, m.Attempt)
		}
	}
	if n := b.ack("q", "default", receipts(replay)...); n != 5 {
		t.Fatalf("ack of the replay: %d, want 5", n)
	}

	// A time between two batches: only what was cut after it.
	time.Sleep(50 * time.Millisecond)
	mark := time.Now()
	time.Sleep(50 * time.Millisecond)
	late := b.send(b.pool, "q", `{"late": true}`)
	if got := ids(b.receive("q", "default", 10, "")); !slices.Equal(got, []int64{late}) {
		t.Fatalf("receive of the late message: %v", got)
	}
	b.seek("q", "default", mark.Format(time.RFC3339Nano))
	if got := ids(b.receive("q", "default", 10, "")); !slices.Equal(got, []int64{late}) {
		t.Fatalf("receive after seeking to %s: %v, want [%d]", mark, got, late)
	}

	// Forward: a backlog the group never received is skipped.
	for i := range 3 {
		b.send(b.pool, "q", fmt.Sprintf(`{"backlog": %d}`, i))
	}
	b.seek("q", "default", "latest")
	if got := b.receive("q", "default", 10, ""); len(got) != 0 {
		t.Fatalf("receive after seeking to latest: %v, want nothing", ids(got))
	}
	if st := b.status("q")["default"]; st.Ready != 0 || st.InFlight != 0 || st.Lag == nil || *st.Lag != 0 {
		t.Errorf("status after seeking to latest: ready %d, in flight %d, lag %v; want 0, 0, 0", st.Ready, st.InFlight, st.Lag)
	}
	fresh := b.send(b.pool, "q", `{"fresh": true}`)
	if got := ids(b.receive("q", "default", 10, "")); !slices.Equal(got, []int64{fresh}) {
		t.Fatalf("receive after latest and a send: %v, want [%d]", got, fresh)
	}

	// The other group was not moved: its leases hold, it has the rest.
	if n := b.ack("q", "other", receipts(otherHeld)...); n != 2 {
		t.Errorf("other group's ack across the seeks: %d, want 2", n)
	}
	if got := b.receive("q", "other", 100, ""); len(got) != 8 {
		t.Errorf("other group received %d more, want 8 (the 10 sent but the 2 it held)", len(got))
	}
}

// TestSeekGroupLeasesGoStale: a lease held across a seek is stale (ack 0,
// nack and extend false or 0) and its message is delivered again if it is at
// or after the new position; a pending retry is forgotten (delivered once,
// as the original, not twice); a lease before a 'latest' seek is not
// delivered again.
func TestSeekGroupLeasesGoStale(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 1}`)
	a := b.send(b.pool, "q", `{"m": "a"}`)
	k := b.send(b.pool, "q", `{"m": "k"}`)
	k2 := b.int64(`SELECT sluice.send('q', '{"m": "k2"}', key => 'k')`)
	c := b.send(b.pool, "q", `{"m": "c"}`)
	d := b.send(b.pool, "q", `{"m": "d"}`)

	// Single deliveries (deliveries rows), then a keyed one and a run of two.
	first := b.receive("q", "default", 1, "1 minute") // a
	run := b.receive("q", "default", 1, "1 minute")   // k
	if len(first) != 1 || first[0].ID != a || len(run) != 1 || run[0].ID != k {
		t.Fatalf("receives: %v %v", ids(first), ids(run))
	}
	rest := b.receive("q", "default", 10, "1 minute") // k2 (keyed), c and d (a run)
	if len(rest) != 3 {
		t.Fatalf("third receive: %v", ids(rest))
	}
	// A nack with a delay leaves a pending retry of c.
	var cReceipt string
	for _, m := range rest {
		if m.ID == c {
			cReceipt = m.Receipt
		}
	}
	if !b.nack("q", "default", cReceipt, "0 seconds", "retry me") {
		t.Fatal("nack of c before the seek was stale")
	}

	b.seek("q", "default", "earliest")
	if n := b.ack("q", "default", first[0].Receipt); n != 0 {
		t.Errorf("ack of a lease held across the seek: %d, want 0", n)
	}
	var extended int
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.extend('q', 'default', $1, '1 minute')", receipts(rest)).Scan(&extended); err != nil || extended != 0 {
		t.Errorf("extend of leases held across the seek: %d, %v; want 0", extended, err)
	}
	if b.nack("q", "default", run[0].Receipt, "", "late") {
		t.Errorf("nack of a lease held across the seek returned true")
	}
	if n := b.int64("SELECT count(*) FROM sluice.dead_letters('q')"); n != 0 {
		t.Errorf("%d dead letters after stale nacks", n)
	}

	// Everything comes again, once each: the retry copy of c is forgotten.
	var again []int64
	for range 10 {
		ms := b.receive("q", "default", 10, "1 minute")
		if len(ms) == 0 {
			break
		}
		again = append(again, ids(ms)...)
		if n := b.ack("q", "default", receipts(ms)...); n != len(ms) {
			t.Fatalf("ack after the seek: %d of %d", n, len(ms))
		}
	}
	slices.Sort(again)
	all := []int64{a, k, k2, c, d}
	if !slices.Equal(again, all) {
		t.Fatalf("after seeking to earliest: %v, want each of %v once", again, all)
	}

	// Leases held across a seek to 'latest': stale, and not delivered again.
	e := b.send(b.pool, "q", `{"m": "e"}`)
	held := b.receive("q", "default", 10, "1 minute")
	if !slices.Equal(ids(held), []int64{e}) {
		t.Fatalf("receive of e: %v", ids(held))
	}
	b.seek("q", "default", "latest")
	if n := b.ack("q", "default", receipts(held)...); n != 0 {
		t.Errorf("ack after seeking to latest: %d, want 0", n)
	}
	if got := b.receive("q", "default", 10, ""); len(got) != 0 {
		t.Errorf("receive after seeking to latest: %v, want nothing", ids(got))
	}
	if st := b.status("q")["default"]; st.InFlight != 0 {
		t.Errorf("status in flight after the seek: %d, want 0", st.InFlight)
	}
	if n := b.int64("SELECT count(*) FROM sluice.leases('q')"); n != 0 {
		t.Errorf("leases after the seek: %d, want 0", n)
	}
}

// TestSeekGroupKeepsDeadLettersAndTTL: the group keeps its name, its ttl,
// its creation time and its dead letters (listed, counted by status,
// redriven to it); another group's dead letters stay where they are.
func TestSeekGroupKeepsDeadLettersAndTTL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"max_attempts": 1, "default_group": false}`)
	b.exec("SELECT sluice.create_group('q', 'temp', 'earliest', '1 hour')")
	b.exec("SELECT sluice.create_group('q', 'other')")
	dead := b.send(b.pool, "q", `{"dies": true}`)
	for _, g := range []string{"temp", "other"} {
		m := b.receive("q", g, 1, "")
		if len(m) != 1 || !b.nack("q", g, m[0].Receipt, "", "boom") {
			t.Fatalf("%s: nack to a dead letter failed", g)
		}
	}
	type row struct {
		ttl     string
		created time.Time
		n       int64
	}
	catalog := func() row {
		var r row
		if err := b.pool.QueryRow(b.ctx, `SELECT ttl::text, created_at, count(*) OVER ()
			FROM sluice.consumer_group WHERE name = 'temp'`).Scan(&r.ttl, &r.created, &r.n); err != nil {
			t.Fatalf("catalog: %v", err)
		}
		return r
	}
	before := catalog()
	oldID := b.int64("SELECT id FROM sluice.consumer_group WHERE name = 'temp'")

	b.seek("q", "temp", "latest")
	after := catalog()
	if after != before {
		t.Errorf("group row after the seek: %+v, want %+v (ttl and created_at kept, one row)", after, before)
	}
	if newID := b.int64("SELECT id FROM sluice.consumer_group WHERE name = 'temp'"); newID == oldID {
		t.Errorf("the group kept its internal id %d", oldID)
	}
	for _, g := range []string{"temp", "other"} {
		var id int64
		var errText string
		if err := b.pool.QueryRow(b.ctx, "SELECT id, error FROM sluice.dead_letters('q', $1)", g).Scan(&id, &errText); err != nil || id != dead || errText != "boom" {
			t.Errorf("dead letters of %s after the seek: %d %q %v; want %d boom", g, id, errText, err, dead)
		}
		if st := b.status("q")[g]; st.Dead != 1 {
			t.Errorf("status of %s after the seek: dead %d, want 1", g, st.Dead)
		}
	}
	if n := b.int64("SELECT sluice.redrive('q', 'temp')"); n != 1 {
		t.Fatalf("redrive after the seek: %d, want 1", n)
	}
	if got := b.receive("q", "temp", 10, ""); !slices.Equal(ids(got), []int64{dead}) {
		t.Errorf("receive of the redriven dead letter after a seek to latest: %v, want [%d]", ids(got), dead)
	}
	if got := b.receive("q", "other", 10, ""); len(got) != 0 {
		t.Errorf("the other group received %v", ids(got))
	}
	// drop_group still takes them with it.
	b.exec("SELECT sluice.drop_group('q', 'temp')")
	if n := b.int64("SELECT count(*) FROM sluice.dead_letter"); n != 1 {
		t.Errorf("dead letter rows after drop_group: %d, want 1 (the other group's)", n)
	}
}

// TestSeekGroupBadInput: a bad call raises its SQLSTATE and changes nothing;
// a consumer may not seek.
func TestSeekGroupBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	b.send(b.pool, "q", `1`)
	held := b.receive("q", "default", 1, "")
	cases := []struct {
		args []any
		code string
	}{
		{[]any{"nope", "default", "earliest"}, "SL002"},
		{[]any{"q", "nope", "earliest"}, "SL003"},
		{[]any{"q", "bad name", "earliest"}, "SL001"},
		{[]any{"q", "default", "soon"}, "SL006"},
		{[]any{"q", "default", ""}, "SL006"},
		{[]any{"q", "default", nil}, "SL006"},
		{[]any{nil, "default", "latest"}, "SL001"},
		{[]any{"q", nil, "latest"}, "SL001"},
	}
	before := b.dataFingerprint()
	for _, c := range cases {
		_, err := b.pool.Exec(b.ctx, "SELECT sluice.seek_group($1, $2, $3)", c.args...)
		if code := sqlstate(err); code != c.code {
			t.Errorf("seek_group%v: %v (SQLSTATE %q), want %s", c.args, err, code, c.code)
		}
	}
	if err := b.execRepeatableRead("SELECT sluice.seek_group('q', 'default', 'latest')"); sqlstate(err) != "SL010" {
		t.Errorf("seek_group latest in REPEATABLE READ: %v, want SL010", err)
	}
	consumer := b.login("consumer", "sluice_consumer")
	b.denied(consumer, "consumer", "SELECT sluice.seek_group('q', 'default', 'earliest')")
	if after := b.dataFingerprint(); after != before {
		t.Fatalf("bad seeks changed the data:\nbefore %s\nafter  %s", before, after)
	}
	if n := b.ack("q", "default", held[0].Receipt); n != 1 {
		t.Errorf("the lease held across the bad seeks: ack %d, want 1", n)
	}
	admin := b.login("admin", "sluice_admin")
	b.allowed(admin, "admin", "SELECT sluice.seek_group('q', 'default', 'earliest')")
}

// TestSeekGroupConcurrentWithReceivers: consumers drain a queue while the
// group is sought back to 'earliest' again and again. No message is held
// under two valid leases at once (two counted acks of one message always
// have a seek between their deliveries), none is lost (after the last seek
// every message is received and acked again), and another group of the
// queue, drained at the same time, gets every message exactly once.
func TestSeekGroupConcurrentWithReceivers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const total = 2000
	b.createQueue("q", `{"lanes": 4}`)
	b.exec("SELECT sluice.create_group('q', 'other')")
	sent := b.int64s(`SELECT * FROM sluice.send_batch('q',
		array(SELECT jsonb_build_object('i', g) FROM generate_series(1, $1::int) g),
		keys => array(SELECT CASE WHEN g % 3 = 0 THEN 'k' || (g % 7) END FROM generate_series(1, $1::int) g))`, total)
	if len(sent) != total {
		t.Fatalf("send_batch: %d ids", len(sent))
	}

	ctx, cancel := context.WithTimeout(b.ctx, 3*time.Minute)
	defer cancel()
	type acked struct {
		received, done time.Time // receive started, ack returned
	}
	type span struct{ start, end time.Time }
	var (
		mu        sync.Mutex
		ackedBy   = map[string]map[int64][]acked{"default": {}, "other": {}}
		seeks     []span
		lastSeek  atomic.Pointer[time.Time]
		stop      atomic.Bool
		errs      = make(chan error, 16)
		wg        sync.WaitGroup
		afterLast = map[int64]bool{} // acked from a receive after the last seek
	)
	consume := func(group string) {
		defer wg.Done()
		for !stop.Load() && ctx.Err() == nil {
			start := time.Now()
			ms, err := receiveOn(ctx, b.pool, "q", group, 20, "1 minute")
			if err != nil {
				errs <- fmt.Errorf("%s receive: %w", group, err)
				return
			}
			if len(ms) == 0 {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			// One ack per message: the count says which were current.
			for _, m := range ms {
				var n int
				if err := b.pool.QueryRow(ctx, "SELECT sluice.ack('q', $1, ARRAY[$2])", group, m.Receipt).Scan(&n); err != nil {
					errs <- fmt.Errorf("%s ack: %w", group, err)
					return
				}
				if n == 1 {
					mu.Lock()
					ackedBy[group][m.ID] = append(ackedBy[group][m.ID], acked{start, time.Now()})
					if ls := lastSeek.Load(); group == "default" && ls != nil && start.After(*ls) {
						afterLast[m.ID] = true
					}
					mu.Unlock()
				}
			}
		}
	}
	for range 3 {
		wg.Add(2)
		go consume("default")
		go consume("other")
	}
	for i := range 4 {
		time.Sleep(time.Duration(150+100*i) * time.Millisecond)
		s := span{start: time.Now()}
		if i == 3 {
			// From here on a receive may get the new position: one that
			// starts while the seek commits and acks before it returns
			// counts too (its acks find the new incarnation). One that got
			// the old position and acked before the commit may count too;
			// the status check after the drain catches a message the new
			// position never delivered.
			lastSeek.Store(&s.start)
		}
		if _, err := b.pool.Exec(ctx, "SELECT sluice.seek_group('q', 'default', 'earliest')"); err != nil {
			t.Errorf("seek %d: %v", i, err)
		}
		s.end = time.Now()
		mu.Lock()
		seeks = append(seeks, s)
		t.Logf("seek %d took %v; counted acks so far: default %d messages, other %d", i, s.end.Sub(s.start).Round(time.Millisecond),
			len(ackedBy["default"]), len(ackedBy["other"]))
		mu.Unlock()
	}
	// Drain: until the other group has everything once and the default
	// group everything again after the last seek.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		mu.Lock()
		done := len(afterLast) == total && len(ackedBy["other"]) == total
		mu.Unlock()
		if done || time.Now().After(deadline) || len(errs) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(afterLast) != total {
		t.Errorf("after the last seek the group acked %d of %d messages (loss)", len(afterLast), total)
	}
	if st := b.status("q")["default"]; st.Ready != 0 || st.InFlight != 0 || st.Lag == nil || *st.Lag != 0 {
		t.Errorf("after the drain the sought group has ready %d, in flight %d, lag %v: want all completed",
			st.Ready, st.InFlight, st.Lag)
	}
	for _, id := range sent {
		if n := len(ackedBy["other"][id]); n != 1 {
			t.Errorf("the other group acked message %d %d times, want once", id, n)
		}
	}
	// Two counted acks of one message in the sought group: a seek must lie
	// between the first's receive and the second's ack, else the message was
	// leased twice at once.
	dups := 0
	for id, as := range ackedBy["default"] {
		for i := 1; i < len(as); i++ {
			p, c := as[i-1], as[i]
			between := false
			for _, s := range seeks {
				if s.end.After(p.received) && s.start.Before(c.done) {
					between = true
				}
			}
			if !between && dups < 10 {
				t.Errorf("message %d acked twice with no seek between (received %v, %v)", id, p.received, c.received)
			}
			if !between {
				dups++
			}
		}
		if len(as) > len(seeks)+1 {
			t.Errorf("message %d acked %d times over %d seeks", id, len(as), len(seeks))
		}
	}
	t.Logf("%d seeks; counted acks in the sought group: %d messages, after the last seek %d", len(seeks), len(ackedBy["default"]), len(afterLast))
}
