package sqlsrc_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// keyedStatus is every column of sluice.status for a group, with waiting.
type keyedStatus struct {
	Ready, Waiting, Delayed, InFlight, Dead, Lag, Lwm, Head int64
	Pending                                                 bool
}

// TestStatusKeysExact: keyed messages that wait for an earlier message of
// their key are not ready: status counts them as waiting, at every step of
// a drain (before the first cut, with a key's message leased, after a nack
// that parks it, after acks), checked column by column against a model of
// the queue (issue 15, item 7). On both engines; engine 2's positions are
// per lane, its head and lwm sums over the lanes (lwm: 1 + the positions
// before each lane's first one not completed).
func TestStatusKeysExact(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		statusKeysExact(t, opts, strings.Contains(opts(""), `"engine": 2`))
	})
}

func statusKeysExact(t *testing.T, opts func(string) string, v2 bool) {
	b := setup(t)
	b.createQueue("k", opts(`{"lanes": 2}`))
	type m struct {
		key  string
		lane int64 // engine 2's (engine 1: 0, one sequence)
		pos  int64 // 0 until numbered
		done bool
		out  bool // leased
	}
	var msgs []*m
	add := func(key string) {
		if key == "" {
			b.send(b.pool, "k", `"u"`)
		} else {
			b.sendKeyed("k", fmt.Sprintf("%q", key), key, 0)
		}
		msgs = append(msgs, &m{key: key})
	}
	for _, k := range []string{"a", "b", "a", "", "a", "b", "", "c"} {
		add(k)
	}
	qid := b.queueID("k")
	heads := map[int64]int64{} // by lane
	// Positions are given by the cut, lane by lane (not in send order):
	// read them from the batches once numbered. Ids are in send order.
	numbered := func() {
		query := `SELECT u.id, 0, b.first_pos + u.o - 1
			FROM sluice_q%d.batches b CROSS JOIN LATERAL unnest(b.ids) WITH ORDINALITY AS u(id, o)`
		if v2 {
			query = `SELECT u.id, b.lane, b.first_pos + u.o - 1
			FROM sluice_q%d.batch b CROSS JOIN LATERAL unnest(b.ids) WITH ORDINALITY AS u(id, o)`
		}
		rows, err := b.pool.Query(b.ctx, fmt.Sprintf(query, qid))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id, lane, pos int64
			if err := rows.Scan(&id, &lane, &pos); err != nil {
				t.Fatal(err)
			}
			msgs[id-1].lane, msgs[id-1].pos = lane, pos
			heads[lane] = max(heads[lane], pos)
		}
	}
	// head: the sum of the lanes' heads; lwm: 1 + the positions before each
	// lane's first one not completed
	positions := func() (head, lwm int64) {
		lwm = 1
		for lane, h := range heads {
			head += h
			v := h + 1
			for _, x := range msgs {
				if !x.done && x.pos != 0 && x.lane == lane {
					v = min(v, x.pos)
				}
			}
			lwm += v - 1
		}
		return head, lwm
	}
	// The model: per key, none ready while one is leased, else the first left.
	want := func() keyedStatus {
		var s keyedStatus
		seen := map[string]bool{}
		busy := map[string]bool{}
		for _, x := range msgs {
			if x.key != "" && x.out && !x.done {
				busy[x.key] = true
			}
		}
		for _, x := range msgs {
			if x.done {
				continue
			}
			s.Lag++
			switch {
			case x.out:
				s.InFlight++
			case x.key == "":
				s.Ready++
			case busy[x.key] || seen[x.key]:
				s.Waiting++
			default:
				s.Ready++
			}
			if x.key != "" {
				seen[x.key] = true
			}
		}
		s.Head, s.Lwm = positions()
		s.Pending = s.Lag > 0
		return s
	}
	check := func(what string) {
		t.Helper()
		var got keyedStatus
		if err := b.pool.QueryRow(b.ctx, `SELECT ready, waiting, delayed, in_flight, dead, lag, lwm, head,
			oldest_pending_age IS NOT NULL FROM sluice.status('k') WHERE group_name = 'default'`).Scan(
			&got.Ready, &got.Waiting, &got.Delayed, &got.InFlight, &got.Dead, &got.Lag, &got.Lwm, &got.Head,
			&got.Pending); err != nil {
			t.Fatalf("status: %v", err)
		}
		if w := want(); got != w {
			t.Fatalf("status %s:\n got %+v\nwant %+v", what, got, w)
		}
	}
	check("before the first receive (nothing numbered)")
	nacked := false
	for step := 0; step < 40; step++ {
		ms := b.receive("k", "default", 1, "")
		if len(ms) == 0 {
			break
		}
		numbered()
		r := ms[0]
		x := msgs[r.ID-1]
		x.out = true
		check(fmt.Sprintf("after receiving position %d (key %q)", r.Pos, x.key))
		if x.key == "a" && !nacked {
			// Retried at once: a due retry, the key's head again.
			nacked = true
			if !b.nack("k", "default", r.Receipt, "0 seconds", "") {
				t.Fatal("nack")
			}
			x.out = false
			check(fmt.Sprintf("after nacking position %d (key a) with no delay", r.Pos))
			continue
		}
		if b.ack("k", "default", r.Receipt) != 1 {
			t.Fatal("ack")
		}
		x.out, x.done = false, true
		check(fmt.Sprintf("after acking position %d (key %q)", r.Pos, x.key))
	}
	if w := want(); w.Lag != 0 {
		t.Fatalf("not drained: %+v", w)
	}
	// New messages of a key, not numbered yet, behind a leased one.
	add("d")
	ms := b.receive("k", "default", 1, "")
	if len(ms) != 1 {
		t.Fatal("receive d")
	}
	msgs[ms[0].ID-1].out = true
	numbered()
	add("d")
	add("d")
	add("e")
	add("e")
	check("keyed messages not numbered yet behind a leased one")
}

// A keyed message retried in place (nack) waits for its backoff as
// delayed, and in lag, and the later messages of its key wait behind it,
// numbered or not, passed by the cursor or not; once the backoff has
// passed it is ready again. A keyed run whose lease expired is ready at its
// first message, the rest waiting, also when its redelivery took only the
// first. On both engines; one lane, so that positions are the same.
func TestStatusKeyedRetriesInPlace(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		b := setup(t)
		b.createQueue("k", opts(`{"lanes": 1}`))
		check := func(what string, want keyedStatus) {
			t.Helper()
			var got keyedStatus
			if err := b.pool.QueryRow(b.ctx, `SELECT ready, waiting, delayed, in_flight, dead, lag, lwm, head,
				oldest_pending_age IS NOT NULL FROM sluice.status('k') WHERE group_name = 'default'`).Scan(
				&got.Ready, &got.Waiting, &got.Delayed, &got.InFlight, &got.Dead, &got.Lag, &got.Lwm, &got.Head,
				&got.Pending); err != nil {
				t.Fatalf("status: %v", err)
			}
			want.Pending = want.Lag > 0
			if got != want {
				t.Fatalf("status %s:\n got %+v\nwant %+v", what, got, want)
			}
		}
		one := func(what string, n int, lease string) msg {
			t.Helper()
			ms := b.receive("k", "default", n, lease)
			if len(ms) != 1 {
				t.Fatalf("%s: received %+v", what, ms)
			}
			return ms[0]
		}
		for _, k := range []string{"a", "a", "a", ""} {
			b.sendKeyed("k", `"m"`, k, 0)
		}
		check("a1 a2 a3 u1 sent", keyedStatus{Ready: 2, Waiting: 2, Lag: 4, Lwm: 1})
		a1 := one("a1", 1, "")
		check("a1 leased", keyedStatus{Ready: 1, Waiting: 2, InFlight: 1, Lag: 4, Lwm: 1, Head: 4})
		if !b.nack("k", "default", a1.Receipt, "1 hour", "later") {
			t.Fatal("nack a1")
		}
		check("a1 retried in an hour", keyedStatus{Ready: 1, Waiting: 2, Delayed: 1, Lag: 4, Lwm: 1, Head: 4})
		u1 := one("u1 (a held)", 10, "")
		check("u1 leased, a2 a3 passed", keyedStatus{Waiting: 2, Delayed: 1, InFlight: 1, Lag: 4, Lwm: 1, Head: 4})
		if b.ack("k", "default", u1.Receipt) != 1 {
			t.Fatal("ack u1")
		}
		check("u1 acked", keyedStatus{Waiting: 2, Delayed: 1, Lag: 3, Lwm: 1, Head: 4})
		b.sendKeyed("k", `"m"`, "a", 0)
		check("a4 sent", keyedStatus{Waiting: 3, Delayed: 1, Lag: 4, Lwm: 1, Head: 4})

		// b1 b2: b1 is retried in a second
		b.sendKeyed("k", `"m"`, "b", 0)
		b.sendKeyed("k", `"m"`, "b", 0)
		b1 := one("b1", 1, "")
		check("b1 leased", keyedStatus{Waiting: 4, Delayed: 1, InFlight: 1, Lag: 6, Lwm: 1, Head: 7})
		if !b.nack("k", "default", b1.Receipt, "1 second", "soon") {
			t.Fatal("nack b1")
		}
		check("b1 retried in a second", keyedStatus{Waiting: 4, Delayed: 2, Lag: 6, Lwm: 1, Head: 7})
		time.Sleep(1200 * time.Millisecond)
		check("b1's retry due", keyedStatus{Ready: 1, Waiting: 4, Delayed: 1, Lag: 6, Lwm: 1, Head: 7})
		b1 = one("b1 again", 1, "")
		if b1.Attempt != 2 {
			t.Fatalf("b1's retry: %+v", b1)
		}
		check("b1's retry leased", keyedStatus{Waiting: 4, Delayed: 1, InFlight: 1, Lag: 6, Lwm: 1, Head: 7})
		if b.ack("k", "default", b1.Receipt) != 1 {
			t.Fatal("ack b1")
		}
		check("b1 acked", keyedStatus{Ready: 1, Waiting: 3, Delayed: 1, Lag: 5, Lwm: 1, Head: 7})

		// A keyed run whose lease expires.
		b.createQueue("x", opts(`{"lanes": 1}`))
		for range 3 {
			b.sendKeyed("x", `"m"`, "c", 0)
		}
		if ms := b.receive("x", "default", 3, "200 milliseconds"); len(ms) != 3 {
			t.Fatalf("the run of c: %+v", ms)
		}
		time.Sleep(300 * time.Millisecond)
		var got keyedStatus
		if err := b.pool.QueryRow(b.ctx, `SELECT ready, waiting, in_flight, lag, lwm, head
			FROM sluice.status('x') WHERE group_name = 'default'`).Scan(
			&got.Ready, &got.Waiting, &got.InFlight, &got.Lag, &got.Lwm, &got.Head); err != nil {
			t.Fatal(err)
		}
		if want := (keyedStatus{Ready: 1, Waiting: 2, Lag: 3, Lwm: 1, Head: 3}); got != want {
			t.Fatalf("status of an expired run:\n got %+v\nwant %+v", got, want)
		}
		if ms := b.receive("x", "default", 1, ""); len(ms) != 1 || ms[0].Attempt != 2 {
			t.Fatalf("the run's redelivery: %+v", ms)
		}
		got = keyedStatus{}
		if err := b.pool.QueryRow(b.ctx, `SELECT ready, waiting, in_flight, lag, lwm, head
			FROM sluice.status('x') WHERE group_name = 'default'`).Scan(
			&got.Ready, &got.Waiting, &got.InFlight, &got.Lag, &got.Lwm, &got.Head); err != nil {
			t.Fatal(err)
		}
		if want := (keyedStatus{Waiting: 2, InFlight: 1, Lag: 3, Lwm: 1, Head: 3}); got != want {
			t.Fatalf("status of a run redelivered in part:\n got %+v\nwant %+v", got, want)
		}
	})
}

// A keyed tail taken as far as a receive had room leaves the rest waiting
// from the key's next position, and nothing when the key has no more: its
// positions were the last of the key, the lane went on past other keys. An
// empty tail once stayed in the lane's state (from the position after the
// last taken), and status counted it as a waiting message: waiting -1,
// ready 1 on an idle queue.
func TestStatusKeyTailTakenToItsEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createV2("tail", `"lanes": 1`)
	first := b.sendKeyed("tail", `{}`, "k", 0)
	rest := []int64{b.sendKeyed("tail", `{}`, "k", 0), b.sendKeyed("tail", `{}`, "k", 0)}
	other := b.send(b.pool, "tail", `{}`)
	held := b.v2receive("tail", "default", 1, "")
	if len(held) != 1 || held[0].ID != first {
		t.Fatalf("first receive: %v, want [%d]", v2ids(held), first)
	}
	if got := b.v2receive("tail", "default", 10, ""); len(got) != 1 || got[0].ID != other {
		t.Fatalf("while k is held: %v, want [%d]", v2ids(got), other)
	} else {
		b.ack("tail", "default", got[0].Receipt)
	}
	b.ack("tail", "default", held[0].Receipt)
	got := b.v2receive("tail", "default", 2, "")
	if !v2same(v2ids(got), rest) {
		t.Fatalf("the tail: %s", v2diff(v2ids(got), rest))
	}
	var ready, waiting, inFlight int64
	if err := b.pool.QueryRow(b.ctx, `SELECT ready, waiting, in_flight FROM sluice.status('tail')
		WHERE group_name = 'default'`).Scan(&ready, &waiting, &inFlight); err != nil {
		t.Fatal(err)
	}
	if ready != 0 || waiting != 0 || inFlight != 2 {
		t.Fatalf("status: ready %d, waiting %d, in flight %d; want 0, 0, 2", ready, waiting, inFlight)
	}
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'tail'"))
	if w := b.int64(fmt.Sprintf(`SELECT coalesce(cardinality(s.waiting), 0) FROM %s.lease s
		ORDER BY s.lease_no DESC LIMIT 1`, schema)); w != 0 {
		t.Fatalf("the lane's state keeps %d waiting positions, want none", w)
	}
}
