package sqlsrc_test

import (
	"fmt"
	"testing"
	"time"
)

// Rotation and reclaim: a queue rotating every second, retention 0, two
// slots, traffic for ~12 s with maintain() calls. Group g1 leaves some
// messages unacked once (acked on attempt 2) and some twice (acked on
// attempt 3), so leases expire and redeliver across rotations; group g2
// lags (receives nothing) for the first 5 s: meanwhile no slot is
// reclaimed; once it catches up, slots are reclaimed. In the end every
// message was acked exactly once in each group, with exactly the
// deliveries planned (no loss, no duplicate).
func TestV2RotationAndReclaim(t *testing.T) {
	b := setup(t)
	b.createV2("v2rot", `"default_group": false, "rotate_interval": "1 second", "retention": "0 seconds",
		"slots": 2, "lanes": 2`)
	b.exec("SELECT sluice.create_group('v2rot', 'g1')")
	b.exec("SELECT sluice.create_group('v2rot', 'g2')")

	// ackAt: the attempt g1 acks a message on
	ackAt := func(id int64) int {
		switch {
		case id%11 == 0:
			return 3
		case id%7 == 0:
			return 2
		}
		return 1
	}
	var sent []int64
	attempts := map[string]map[int64][]int{"g1": {}, "g2": {}}
	acked := map[string]map[int64]int{"g1": {}, "g2": {}}
	var problems []string
	consume := func(g string) {
		for {
			ms := b.v2receive("v2rot", g, 10, "1 second")
			if len(ms) == 0 {
				return
			}
			var ack []v2msg
			for _, m := range ms {
				attempts[g][m.ID] = append(attempts[g][m.ID], m.Attempt)
				if g == "g2" || m.Attempt >= ackAt(m.ID) {
					ack = append(ack, m)
				}
			}
			if len(ack) > 0 {
				n := b.ack("v2rot", g, v2receipts(ack)...)
				if n != len(ack) {
					problems = append(problems, fmt.Sprintf("%s: ack of %d fresh receipts counted %d", g, len(ack), n))
				}
				for _, m := range ack {
					acked[g][m.ID]++
				}
			}
		}
	}
	start := time.Now()
	tick := 0
	var reclaimedWhileLagging int64
	for time.Since(start) < 12*time.Second {
		tick++
		if time.Since(start) < 10*time.Second {
			sent = append(sent, b.v2sendBatch("v2rot", 5, "")...)
			sent = append(sent, b.send(b.pool, "v2rot", `{"one": 1}`))
		}
		consume("g1")
		lagging := time.Since(start) < 5*time.Second
		if !lagging {
			consume("g2")
		}
		if tick%3 == 0 {
			b.v2maintain()
		}
		if lagging {
			reclaimedWhileLagging = b.v2reclaims("v2rot")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// the last redeliveries: leases of 1 s, at most two more rounds
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		consume("g1")
		consume("g2")
		b.v2maintain()
		time.Sleep(100 * time.Millisecond)
	}
	reclaimed := b.v2reclaims("v2rot")
	t.Logf("%d sent, epoch %d, %d slots reclaimed (%d while g2 lagged)", len(sent), b.v2epoch("v2rot"),
		reclaimed, reclaimedWhileLagging)
	if reclaimedWhileLagging != 0 {
		t.Errorf("%d slots reclaimed while group g2 had received nothing", reclaimedWhileLagging)
	}
	if reclaimed < 2 {
		t.Errorf("%d slots reclaimed over ~12 s of traffic with rotate_interval 1 s; want at least 2", reclaimed)
	}
	for _, p := range problems {
		t.Error(p)
	}
	for _, g := range []string{"g1", "g2"} {
		var got []int64
		for id, n := range acked[g] {
			for i := 0; i < n; i++ {
				got = append(got, id)
			}
		}
		if !v2same(got, sent) {
			t.Errorf("group %s, acked: %s", g, v2diff(got, sent))
		}
		bad := 0
		for _, id := range sent {
			want := []int{1}
			if g == "g1" {
				want = want[:0]
				for a := 1; a <= ackAt(id); a++ {
					want = append(want, a)
				}
			}
			if fmt.Sprint(attempts[g][id]) != fmt.Sprint(want) {
				if bad++; bad <= 10 {
					t.Errorf("group %s, message %d: delivered as attempts %v, want %v", g, id, attempts[g][id], want)
				}
			}
		}
		if bad > 10 {
			t.Errorf("group %s: %d messages with wrong deliveries", g, bad)
		}
		b.v2expectEmpty("v2rot", g)
	}
}

// A message sent in a transaction that stays open across a rotation (its
// row in the old slot) and commits after it is delivered, also once the
// old slot has been reclaimed.
func TestV2HeldSendAcrossReclaim(t *testing.T) {
	b := setup(t)
	b.createV2("v2hs", `"rotate_interval": "1 second", "retention": "0 seconds", "slots": 2`)
	before := b.v2sendN("v2hs", 5)
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	held := b.send(tx, "v2hs", `{"held": 1}`)
	if got := b.v2drainAck("v2hs", "default", 10); !v2same(v2ids(got), before) {
		t.Fatalf("first: %s", v2diff(v2ids(got), before))
	}
	time.Sleep(1100 * time.Millisecond)
	b.v2maintain() // rotates: epoch 1 in slot 1
	if e := b.v2epoch("v2hs"); e != 1 {
		t.Fatalf("epoch %d after a rotation, want 1", e)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	after := b.v2sendN("v2hs", 3)
	// the held message comes with the later ones; take them one at a time,
	// reclaiming in between
	var got []int64
	for i := 0; i < 10; i++ {
		ms := b.v2receive("v2hs", "default", 1, "")
		if len(ms) == 0 {
			break
		}
		got = append(got, ms[0].ID)
		b.ack("v2hs", "default", ms[0].Receipt)
		b.v2maintain()
	}
	want := append([]int64{held}, after...)
	t.Logf("reclaimed %d, epoch %d", b.v2reclaims("v2hs"), b.v2epoch("v2hs"))
	if !v2same(got, want) {
		t.Fatalf("after the commit: %s (held message %d)", v2diff(got, want), held)
	}
}

// A redelivery (a lease of a later slot naming a message stored in an
// older one) survives the older slot's reclaim: the message still comes
// back when that lease expires too, and again it can be nacked into a dead
// letter with its body.
func TestV2RedeliveryAcrossReclaim(t *testing.T) {
	b := setup(t)
	b.createV2("v2ra", `"rotate_interval": "1 second", "retention": "0 seconds", "slots": 2, "lanes": 1,
		"max_attempts": 4`)
	id := b.send(b.pool, "v2ra", `{"keep": "me"}`)
	m1 := b.v2receive("v2ra", "default", 1, "1 second")
	if len(m1) != 1 || m1[0].ID != id {
		t.Fatalf("first: %+v", m1)
	}
	time.Sleep(1100 * time.Millisecond)
	// rotate (the slot has a message) and redeliver in the new slot
	b.v2maintain()
	// (a lease that outlasts the loop below on a loaded machine)
	m2 := b.v2receive("v2ra", "default", 1, "4 seconds")
	if len(m2) != 1 || m2[0].ID != id || m2[0].Attempt != 2 {
		t.Fatalf("second: %+v", m2)
	}
	// other traffic, acked, then maintain until the old slot is reclaimed
	for i := 0; i < 4 && b.v2reclaims("v2ra") == 0; i++ {
		b.v2sendN("v2ra", 2)
		for _, m := range b.v2drain("v2ra", "default", 10, "30 seconds") {
			if m.ID == id && time.Now().Before(m2[0].Expires) {
				t.Fatalf("message %d delivered while leased (attempt %d)", id, m.Attempt)
			}
			b.ack("v2ra", "default", m.Receipt)
		}
		time.Sleep(300 * time.Millisecond)
		b.v2maintain()
	}
	// The engine may keep the message's slot while a lease of it is
	// unsettled (it does: the slot holds a position below the lane's
	// low-water mark), or reclaim it and keep the message elsewhere; either
	// way the message must come back.
	t.Logf("epoch %d, reclaimed %d", b.v2epoch("v2ra"), b.v2reclaims("v2ra"))
	time.Sleep(time.Until(m2[0].Expires) + 100*time.Millisecond)
	var m3 []v2msg
	for _, m := range b.v2drain("v2ra", "default", 10, "30 seconds") {
		if m.ID == id {
			m3 = append(m3, m)
		} else {
			b.ack("v2ra", "default", m.Receipt)
		}
	}
	if len(m3) != 1 || m3[0].Attempt != 3 || m3[0].Body != `{"keep": "me"}` {
		t.Fatalf("after the redelivery's lease ended (its message's slot reclaimed): %+v, want message %d attempt 3", m3, id)
	}
	var ok bool
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.nack('v2ra', 'default', $1, '0')", m3[0].Receipt).Scan(&ok); err != nil || !ok {
		t.Fatalf("nack of attempt 3: %v %v", ok, err)
	}
	m4 := b.v2drain("v2ra", "default", 10, "")
	if len(m4) != 1 || m4[0].ID != id || m4[0].Attempt != 4 {
		t.Fatalf("after nack: %+v", m4)
	}
}

// A group that lags across a rotation gets the positions of the older slot
// first: with one lane, 5 messages numbered in slot 0, a rotation, 12 in
// slot 1; another group drains both and maintain() runs (it carries the
// idle group's lane state into slot 1); the lagging group's receive of 10
// must start at the first message, and it gets all 17 once.
func TestV2LaggingGroupAcrossRotation(t *testing.T) {
	b := setup(t)
	b.createV2("v2lag", `"default_group": false, "rotate_interval": "1 second", "retention": "0 seconds",
		"slots": 2, "lanes": 1`)
	b.exec("SELECT sluice.create_group('v2lag', 'fast')")
	b.exec("SELECT sluice.create_group('v2lag', 'slow')")
	old := b.v2sendBatch("v2lag", 5, "")
	b.v2drainAck("v2lag", "fast", 10)
	time.Sleep(1100 * time.Millisecond)
	b.v2maintain()
	if e := b.v2epoch("v2lag"); e != 1 {
		t.Fatalf("epoch %d, want 1 after a rotation", e)
	}
	newer := b.v2sendBatch("v2lag", 12, "")
	b.v2drainAck("v2lag", "fast", 10)
	b.v2maintain()
	got := b.v2drainAck("v2lag", "slow", 10)
	want := append(append([]int64{}, old...), newer...)
	if !v2same(v2ids(got), want) {
		t.Fatalf("lagging group: %s", v2diff(v2ids(got), want))
	}
	b.v2expectEmpty("v2lag", "slow")
}

// A lease that is settled (acked whole, or each of its messages acked)
// holds no slot, although it ends an hour later: the slot of its messages
// is reclaimed once they are completed, not once the lease ends. (Counted
// as unsettled until the expiry scan passed it, every lease kept its
// messages' slot for a lease duration: under steady traffic the queue's
// tables grew with the lease times the rate, and under a held xmin
// TestHeldXminDoesNotDegrade saw them grow from 44 MB to 109 MB in 40 s.)
// One message left unacked holds its slot until it is acked; the settled
// leases truncated with their slot are not delivered again, and their
// receipts ack nothing more.
func TestV2SettledLeasesDoNotHoldReclaim(t *testing.T) {
	b := setup(t)
	b.createV2("v2set", `"rotate_interval": "200 milliseconds", "retention": "0 seconds", "slots": 2, "lanes": 2`)
	first := b.v2sendBatch("v2set", 10, "")
	ms := b.v2receive("v2set", "default", 10, "1 hour")
	if !v2same(v2ids(ms), first) {
		t.Fatalf("first receive: %s", v2diff(v2ids(ms), first))
	}
	var keep v2msg // left unacked for now
	var whole, one []string
	for i, m := range ms {
		switch {
		case i == 0:
			keep = m
		case i%2 == 0:
			whole = append(whole, m.Receipt)
		default:
			one = append(one, m.Receipt)
		}
	}
	if n := b.ack("v2set", "default", whole...); n != len(whole) {
		t.Fatalf("ack of %d counted %d", len(whole), n)
	}
	for _, r := range one {
		if n := b.ack("v2set", "default", r); n != 1 {
			t.Fatalf("ack of %s counted %d", r, n)
		}
	}
	// traffic and maintain: the queue rotates; epoch 0 must stay while keep
	// is leased and not acked
	traffic := func() {
		for i := 0; i < 4; i++ {
			time.Sleep(250 * time.Millisecond)
			b.v2sendN("v2set", 2)
			for _, m := range b.v2drain("v2set", "default", 10, "1 hour") {
				b.ack("v2set", "default", m.Receipt)
			}
			b.v2maintain()
		}
	}
	traffic()
	if e := b.v2epoch("v2set"); e < 1 {
		t.Fatalf("epoch %d after a second of traffic, want a rotation", e)
	}
	if n := b.int64(`SELECT count(*) FROM sluice.reclaim r JOIN sluice.queue q ON q.id = r.queue_id
		WHERE q.name = 'v2set' AND r.epoch = 0`); n != 0 {
		t.Fatalf("epoch 0 reclaimed while message %d of it is leased and not acked", keep.ID)
	}
	if n := b.ack("v2set", "default", keep.Receipt); n != 1 {
		t.Fatalf("ack of the message kept: %d", n)
	}
	traffic()
	if n := b.int64(`SELECT count(*) FROM sluice.reclaim r JOIN sluice.queue q ON q.id = r.queue_id
		WHERE q.name = 'v2set' AND r.epoch = 0`); n != 1 {
		t.Fatalf("epoch 0 not reclaimed once its messages were acked (leases of an hour, settled), epoch now %d",
			b.v2epoch("v2set"))
	}
	if n := b.ack("v2set", "default", append(append(whole, one...), keep.Receipt)...); n != 0 {
		t.Fatalf("acks again after the reclaim counted %d, want 0", n)
	}
	if got := b.v2receive("v2set", "default", 10, ""); len(got) != 0 {
		t.Fatalf("after the reclaim, a receive got %+v, want nothing (every message was acked)", got)
	}
	b.v2expectEmpty("v2set", "default")
}

// A delayed message whose transaction commits after a rotation is stored in
// one slot and listed (pending) in the next: each reclaim moves it on (the
// message into the current slot, its pending row with it), it stays one
// delayed message in status and one stored row, and it is delivered once,
// when due, after two reclaims.
func TestV2DelayedMessageMovesAcrossReclaims(t *testing.T) {
	b := setup(t)
	b.createV2("v2mv", `"rotate_interval": "200 milliseconds", "retention": "0 seconds", "slots": 2, "lanes": 2`)
	qid := b.queueID("v2mv")
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	var id int64
	if err := tx.QueryRow(b.ctx, `SELECT sluice.send('v2mv', '"later"', delay => '5 seconds')`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	sentAt := time.Now()
	b.v2sendN("v2mv", 1)
	time.Sleep(250 * time.Millisecond)
	b.v2maintain()
	if e := b.v2epoch("v2mv"); e != 1 {
		t.Fatalf("epoch %d, want 1", e)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	// epochs 0 and 1 reclaimed while the message waits
	for i := 0; b.int64(`SELECT count(*) FROM sluice.reclaim WHERE queue_id = $1 AND epoch = 1`, qid) == 0; i++ {
		if i == 40 {
			t.Fatalf("epoch 1 not reclaimed after 40 rounds, epoch %d", b.v2epoch("v2mv"))
		}
		b.v2sendN("v2mv", 1)
		for _, m := range b.v2drain("v2mv", "default", 10, "") {
			if m.ID == id {
				t.Fatalf("the delayed message was delivered %v after its send, before it was due", time.Since(sentAt))
			}
			b.ack("v2mv", "default", m.Receipt)
		}
		if st := b.v2status("v2mv", "default"); st.Delayed != 1 {
			t.Fatalf("round %d: status delayed %d, want 1", i, st.Delayed)
		}
		if n := b.int64(fmt.Sprintf(`SELECT count(*) FROM sluice_q%d.msg WHERE body = '"later"'`, qid)); n != 1 {
			t.Fatalf("round %d: %d stored rows of the delayed message, want 1", i, n)
		}
		time.Sleep(100 * time.Millisecond)
		b.v2maintain()
	}
	if time.Since(sentAt) > 4500*time.Millisecond {
		t.Skipf("the reclaims took %v, too near the message's due time to test the move (a loaded machine)", time.Since(sentAt))
	}
	time.Sleep(time.Until(sentAt.Add(5100 * time.Millisecond)))
	var got []v2msg
	for i := 0; i < 3; i++ {
		for _, m := range b.v2drain("v2mv", "default", 10, "") {
			if m.ID == id {
				got = append(got, m)
			}
			b.ack("v2mv", "default", m.Receipt)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(got) != 1 || got[0].Body != `"later"` || got[0].Attempt != 1 {
		t.Fatalf("once due, the delayed message was received %+v, want once, attempt 1", got)
	}
	b.v2expectEmpty("v2mv", "default")
}

// A receive that rotates the queue itself (its epoch older than
// rotate_interval) still gets the message sent just before: the rest of
// the receive runs in the new slot. (Run on in the old slot's copy, it
// spent its eight looks on the lanes the rotation had fenced there and
// never numbered the message: it returned nothing, and status showed the
// message ready.) Every lane's state ends in the current slot. Three
// rounds: each receive reclaims the older slot, then rotates into it.
func TestV2ReceiveThatRotatesGetsTheNewMessage(t *testing.T) {
	b := setup(t)
	b.createV2("v2rr", `"rotate_interval": "100 milliseconds", "retention": "0 seconds", "slots": 2, "lanes": 8`)
	for round := 0; round < 3; round++ {
		b.v2drainAck("v2rr", "default", 10)
		time.Sleep(1100 * time.Millisecond) // (a receive maintains at most once a second per session)
		epoch := b.v2epoch("v2rr")
		id := b.send(b.pool, "v2rr", fmt.Sprintf(`{"round": %d}`, round))
		got := b.v2receive("v2rr", "default", 10, "")
		if e := b.v2epoch("v2rr"); e != epoch+1 {
			t.Fatalf("round %d: epoch %d after the receive, want %d (the receive rotates)", round, e, epoch+1)
		}
		if len(got) != 1 || got[0].ID != id {
			t.Fatalf("round %d: the receive that rotated got %+v, want message %d", round, got, id)
		}
		b.ack("v2rr", "default", got[0].Receipt)
		if n := b.int64(fmt.Sprintf(`SELECT count(*) FROM (SELECT DISTINCT ON (lane) slot FROM sluice_q%d.lease
			ORDER BY lane, lease_no DESC) s WHERE s.slot <> (SELECT slot FROM sluice.epoch WHERE queue_id = $1
			ORDER BY epoch DESC LIMIT 1)`, b.queueID("v2rr")), b.queueID("v2rr")); n != 0 {
			t.Fatalf("round %d: %d lanes' states outside the current slot", round, n)
		}
	}
}

// A queue that holds only a message delayed for a day rotates no more once
// reclaim has moved it into the current slot: a moved message is not
// traffic (else the queue would rotate, and copy it, every
// rotate_interval).
func TestV2DelayedOnlyQueueStopsRotating(t *testing.T) {
	b := setup(t)
	b.createV2("v2still", `"rotate_interval": "100 milliseconds", "retention": "0 seconds", "slots": 2, "lanes": 2`)
	qid := b.queueID("v2still")
	b.exec(`SELECT sluice.send('v2still', '"tomorrow"', delay => '1 day')`)
	b.v2sendN("v2still", 1)                // (traffic: epoch 0 rotates)
	b.v2drainAck("v2still", "default", 10) // (numbers the delayed one: pending)
	// rotations and reclaims until the message was moved at least once
	for i := 0; b.int64(`SELECT count(*) FROM sluice.reclaim WHERE queue_id = $1 AND epoch = 0`, qid) == 0; i++ {
		if i == 30 {
			t.Fatalf("epoch 0 not reclaimed, epoch %d", b.v2epoch("v2still"))
		}
		time.Sleep(150 * time.Millisecond)
		b.v2maintain()
	}
	settled := b.v2epoch("v2still")
	for i := 0; i < 6; i++ {
		time.Sleep(150 * time.Millisecond)
		b.v2maintain()
	}
	if e := b.v2epoch("v2still"); e > settled+1 {
		t.Fatalf("epoch %d after 6 rotate intervals with only a delayed message stored, from %d: it keeps rotating", e, settled)
	}
	if st := b.v2status("v2still", "default"); st.Delayed != 1 {
		t.Fatalf("status delayed %d, want 1", st.Delayed)
	}
	if n := b.int64(fmt.Sprintf(`SELECT count(*) FROM sluice_q%d.msg`, qid)); n != 1 {
		t.Fatalf("%d stored rows, want 1 (the delayed message)", n)
	}
}

// A receive that rotates, on a queue whose every lane has leases that have
// ended since (acked, so settled), gets the messages sent before it. The
// rotation carries each lane's state into the new slot with the old slot's
// ended leases still to pass, so the first look at each lane goes through
// the slow path, which passes them and finds no new position (nothing is
// numbered yet). Counted as looks, those eight lanes used up the receive's
// eight looks before it numbered anything: it returned nothing with 10
// messages ready (found by a consumer loop that sat idle past its lease and
// rotate_interval).
func TestV2ReceiveThatRotatesPastEndedLeases(t *testing.T) {
	b := setup(t)
	b.createV2("v2re", `"rotate_interval": "1 second", "lease": "1 second", "lanes": 8`)
	for round := 0; round < 4; round++ {
		b.exec(`SELECT count(*) FROM sluice.send_batch('v2re', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 16)))`)
		b.v2drainAck("v2re", "default", 8)
	}
	time.Sleep(2200 * time.Millisecond) // (the leases end; a rotation is due)
	epoch := b.v2epoch("v2re")
	b.exec(`SELECT count(*) FROM sluice.send_batch('v2re', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 10)))`)
	got := b.v2receive("v2re", "default", 10, "")
	if e := b.v2epoch("v2re"); e != epoch+1 {
		t.Fatalf("epoch %d after the receive, want %d (the receive rotates)", e, epoch+1)
	}
	if len(got) != 10 {
		t.Fatalf("the receive that rotated got %d messages, want the 10 ready", len(got))
	}
}
