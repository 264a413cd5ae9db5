package sqlsrc_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// laneOf maps positions of a queue to their lanes (from its batches, an
// internal table: the lane is not part of the API).
func (b *bundle) laneOf(queue string) map[int64]int {
	b.t.Helper()
	qid := b.int64("SELECT id FROM sluice.queue WHERE name = $1", queue)
	rows, err := b.pool.Query(b.ctx, fmt.Sprintf(
		`SELECT p, lane FROM sluice_q%d.batches, generate_series(first_pos, last_pos) AS p`, qid))
	if err != nil {
		b.t.Fatal(err)
	}
	defer rows.Close()
	lanes := map[int64]int{}
	for rows.Next() {
		var p int64
		var l int
		if err := rows.Scan(&p, &l); err != nil {
			b.t.Fatal(err)
		}
		lanes[p] = l
	}
	if err := rows.Err(); err != nil {
		b.t.Fatal(err)
	}
	return lanes
}

// laneFn tells the lane of a message of queue: on engine 1 by its position
// (laneOf, read now), on engine 2 from its receipt
// (slot.pos.lane.lease_no.token: each lane numbers its own positions).
func (b *bundle) laneFn(queue string) func(msg) int {
	b.t.Helper()
	if b.int64("SELECT engine FROM sluice.queue WHERE name = $1", queue) == 1 {
		lanes := b.laneOf(queue)
		return func(m msg) int {
			l, ok := lanes[m.Pos]
			if !ok {
				b.t.Fatalf("position %d is in no batch", m.Pos)
			}
			return l
		}
	}
	return func(m msg) int {
		parts := strings.Split(m.Receipt, ".")
		if len(parts) != 5 {
			b.t.Fatalf("receipt %q of engine 2 has %d parts, want 5", m.Receipt, len(parts))
		}
		l, err := strconv.Atoi(parts[2])
		if err != nil {
			b.t.Fatalf("receipt %q: lane %v", m.Receipt, err)
		}
		return l
	}
}

// The cut spreads unkeyed messages over every lane and keeps each key in one
// lane; every message is delivered once; within a lane positions follow
// commit order, and receives return each lane's messages in that order. On
// both engines.
func TestLanesSpreadMessagesAndKeepOrderPerLane(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) {
			t.Parallel()
			lanesSpreadMessagesAndKeepOrderPerLane(t, engine)
		})
	}
}

func lanesSpreadMessagesAndKeepOrderPerLane(t *testing.T, engine int) {
	b := setup(t)
	b.createQueue("q", fmt.Sprintf(`{"engine": %d, "lanes": 4}`, engine))
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		b.send(tx, "q", fmt.Sprintf(`{"n": %d}`, i))
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('k', g) FROM generate_series(1, 60) g),
		keys => array(SELECT 'key-' || (g % 5) FROM generate_series(1, 60) g))`)

	var got []msg
	for len(got) < 260 {
		ms := b.receive("q", "default", 7, "")
		if len(ms) == 0 {
			t.Fatalf("receive returned nothing after %d of 260 messages", len(got))
		}
		b.ack("q", "default", receipts(ms)...)
		got = append(got, ms...)
	}
	if extra := b.receive("q", "default", 10, ""); len(extra) != 0 {
		t.Fatalf("%d messages after all 260", len(extra))
	}
	laneOf := b.laneFn("q")
	seen := map[int64]bool{}
	perLane := map[int][]msg{}
	keyLane := map[string]int{}
	for _, m := range got {
		if seen[m.ID] {
			t.Fatalf("message %d delivered twice", m.ID)
		}
		seen[m.ID] = true
		l := laneOf(m)
		perLane[l] = append(perLane[l], m)
		if m.Key != nil {
			if kl, ok := keyLane[*m.Key]; ok && kl != l {
				t.Fatalf("key %s in lanes %d and %d", *m.Key, kl, l)
			}
			keyLane[*m.Key] = l
		}
	}
	if len(perLane) != 4 {
		t.Fatalf("messages in %d lanes, want all 4", len(perLane))
	}
	for l, ms := range perLane {
		if len(ms) < 30 {
			t.Errorf("lane %d got only %d of 260 messages", l, len(ms))
		}
		// In delivery order, each lane's positions and ids increase.
		for i := 1; i < len(ms); i++ {
			if ms[i].Pos <= ms[i-1].Pos || ms[i].ID <= ms[i-1].ID {
				t.Fatalf("lane %d delivered position %d (id %d) after %d (id %d)",
					l, ms[i].Pos, ms[i].ID, ms[i-1].Pos, ms[i-1].ID)
			}
		}
	}
}

// A consumer whose receive transaction stays open holds only the lanes it
// took: another consumer of the group drains the other lanes meanwhile, and
// gets the held lane's messages once the first one ends. On both engines.
func TestHeldReceiveBlocksOnlyItsLane(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) {
			t.Parallel()
			heldReceiveBlocksOnlyItsLane(t, engine)
		})
	}
}

func heldReceiveBlocksOnlyItsLane(t *testing.T, engine int) {
	b := setup(t)
	b.createQueue("q", fmt.Sprintf(`{"engine": %d, "lanes": 4}`, engine))
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 400) g))`)
	// Number them (a receive in its own transaction does).
	first := b.receive("q", "default", 1, "")
	b.ack("q", "default", receipts(first)...)

	held, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(b.ctx) //nolint:errcheck
	mine, err := receiveOn(b.ctx, held, "q", "default", 5, "1 hour")
	if err != nil || len(mine) != 5 {
		t.Fatalf("held receive: %d messages, %v", len(mine), err)
	}
	laneOf := b.laneFn("q")
	heldLane := laneOf(mine[0])

	// Each receive gets 5 seconds: one that waited for the held lane fails.
	var other []msg
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		ms, err := receiveOn(ctx, b.pool, "q", "default", 50, "")
		cancel()
		if err != nil {
			t.Fatalf("receive while another was held open: %v", err)
		}
		if len(ms) == 0 {
			break
		}
		b.ack("q", "default", receipts(ms)...)
		other = append(other, ms...)
	}
	for _, m := range other {
		if laneOf(m) == heldLane {
			t.Fatalf("got position %d of the held lane %d while its receive was open", m.Pos, heldLane)
		}
	}
	if len(other) < 250 {
		t.Fatalf("the other consumer got %d messages while one receive was held open, want the other lanes' (>= 250)", len(other))
	}
	if err := held.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.ack("q", "default", receipts(mine)...)
	rest := 0
	for {
		ms := b.receive("q", "default", 100, "")
		if len(ms) == 0 {
			break
		}
		b.ack("q", "default", receipts(ms)...)
		rest += len(ms)
	}
	if total := len(first) + len(other) + len(mine) + rest; total != 400 {
		t.Fatalf("delivered %d in all (1 + %d + %d + %d), want 400", total, len(other), len(mine), rest)
	}
}

// An ack left uncommitted past its lease makes the receive that redelivers
// the message wait for it, holding that lane: the group's other lanes go on.
func TestUncommittedAckPastLeaseStallsOnlyItsLane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 4, "max_attempts": 1}`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 200) g))`)
	stuck := b.receive("q", "default", 1, "300 milliseconds")
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	var n int
	if err := tx.QueryRow(b.ctx, "SELECT sluice.ack('q', 'default', $1)", []string{stuck[0].Receipt}).Scan(&n); err != nil || n != 1 {
		t.Fatalf("ack: %d, %v", n, err)
	}
	time.Sleep(500 * time.Millisecond) // the lease expires; the ack is not committed

	// Receives run in goroutines until the other lanes' messages are out:
	// one may wait on the stuck lane (the redelivery dead-letters it, and
	// its acks row is uncommitted), the others must go on. Every consumer's
	// messages count, whichever of them finishes first.
	const otherLanes = 100 // at least two of the three other lanes' 50 each
	var got atomic.Int64
	stop := make(chan struct{})
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				ms, err := receiveOn(b.ctx, b.pool, "q", "default", 10, "")
				if err != nil {
					errs <- err
					return
				}
				if got.Add(int64(len(ms))) >= otherLanes || len(ms) == 0 {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for got.Load() < otherLanes && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	taken := got.Load()
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	close(stop)
	for i := 0; i < 3; i++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a consumer did not finish after the ack committed")
		}
	}
	if taken < otherLanes {
		t.Fatalf("consumers got %d messages in 20 s while one lane waited, want the other lanes' (>= %d)", taken, otherLanes)
	}
	if dl := b.int64("SELECT count(*) FROM sluice.dead_letters('q')"); dl != 0 {
		t.Fatalf("%d dead letters: the committed ack of the stuck message must win", dl)
	}
}

// Priorities hold across lanes: a receive serves the lanes holding messages
// of a higher priority first.
func TestPriorityAcrossLanes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 8}`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 300) g))`)
	var ids []int64
	for p := 1; p <= 3; p++ {
		var id int64
		if err := b.pool.QueryRow(b.ctx, "SELECT sluice.send('q', $1::jsonb, priority => $2)", fmt.Sprintf(`{"p": %d}`, p), p).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var got []int64
	for i := 0; i < 3; i++ {
		ms := b.receive("q", "default", 1, "")
		if len(ms) != 1 {
			t.Fatalf("receive %d: %d messages", i, len(ms))
		}
		got = append(got, ms[0].ID)
	}
	want := []int64{ids[2], ids[1], ids[0]}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("first three receives got %v, want the prioritized ones, highest first: %v", got, want)
	}
}

// The lanes option: validated, fixed at creation, listed with the others.
func TestLanesOption(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, bad := range []string{`{"lanes": 0}`, `{"lanes": 257}`, `{"lanes": "4"}`, `{"lanes": 1.5}`} {
		_, err := b.pool.Exec(b.ctx, "SELECT sluice.create_queue('bad', $1::jsonb)", bad)
		if sqlstate(err) != "SL007" {
			t.Errorf("create_queue with %s: %v, want SL007", bad, err)
		}
	}
	b.createQueue("q", `{"lanes": 3}`)
	if n := b.int64(`SELECT (options->>'lanes')::int FROM sluice.list_queues() WHERE queue = 'q'`); n != 3 {
		t.Fatalf("list_queues shows lanes %d, want 3", n)
	}
	_, err := b.pool.Exec(b.ctx, `SELECT sluice.alter_queue('q', '{"lanes": 4}')`)
	if sqlstate(err) != "SL007" {
		t.Fatalf("alter_queue lanes: %v, want SL007", err)
	}
	b.exec(`SELECT sluice.alter_queue('q', '{"lanes": 3, "max_attempts": 2}')`) // the same value is fine
	b.createQueue("d", "")
	if n := b.int64(`SELECT (options->>'lanes')::int FROM sluice.list_queues() WHERE queue = 'd'`); n != 8 {
		t.Fatalf("default lanes %d, want 8", n)
	}
}

// receive's ack completes a consumer loop's previous batch in the same
// call; stale receipts in it are ignored, malformed ones raise SL008 and
// change nothing.
func TestReceiveAcksThePreviousBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 30) g))`)
	var prev []string
	seen := map[int64]bool{}
	for i := 0; i < 20; i++ {
		rows, err := b.pool.Query(b.ctx, `SELECT id, receipt FROM sluice.receive('q', 'default', 4, ack => $1::text[])`, prev)
		if err != nil {
			t.Fatal(err)
		}
		prev = nil
		for rows.Next() {
			var id int64
			var r string
			if err := rows.Scan(&id, &r); err != nil {
				t.Fatal(err)
			}
			if seen[id] {
				t.Fatalf("message %d delivered twice", id)
			}
			seen[id] = true
			prev = append(prev, r)
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
	}
	if len(seen) != 30 {
		t.Fatalf("got %d messages, want 30", len(seen))
	}
	// The last batch was acked by the last (empty) receive: nothing is left.
	if s := b.statusRow("q"); s.InFlight != 0 || s.Lag != 0 {
		t.Fatalf("after the loop: %+v", s)
	}
	_, err := b.pool.Exec(b.ctx, `SELECT * FROM sluice.receive('q', 'default', 1, ack => ARRAY['1.2.3'])`)
	if sqlstate(err) != "SL008" {
		t.Fatalf("receive with a malformed ack: %v, want SL008", err)
	}
	// A stale receipt is ignored; the message it names is not completed twice.
	b.send(b.pool, "q", `{"last": true}`)
	got := b.receive("q", "default", 1, "")
	if len(got) != 1 {
		t.Fatalf("got %d", len(got))
	}
	ms, err := receiveOn(b.ctx, b.pool, "q", "default", 1, "")
	if err != nil || len(ms) != 0 {
		t.Fatalf("while leased: %v, %v", ms, err)
	}
	if n := b.ack("q", "default", got[0].Receipt); n != 1 {
		t.Fatalf("ack: %d", n)
	}
	if _, err := b.pool.Exec(b.ctx, `SELECT * FROM sluice.receive('q', 'default', 1, ack => ARRAY[$1])`, got[0].Receipt); err != nil {
		t.Fatalf("receive acking a stale receipt: %v", err)
	}
}

// A lane's messages of priority 0 never go before another lane's higher
// ones (found in review: the first lane taken used to run all its steps).
func TestPriorityZeroWaitsForHigherInOtherLanes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 2}`)
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []int{0, 10, 9, 9} {
		if _, err := tx.Exec(b.ctx, "SELECT sluice.send('q', $1::jsonb, priority => $2)", fmt.Sprint(i), p); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	var prios []int
	for _, m := range b.receive("q", "default", 2, "") {
		prios = append(prios, m.Priority)
	}
	if fmt.Sprint(prios) != "[10 9]" {
		t.Fatalf("a receive of 2 got priorities %v, want [10 9]", prios)
	}
}

// A receive that waits for another group's cut, which numbers the group's
// first pending prioritized message, takes it before the priority-0 ones of
// the same cut in other lanes: it looks again at priorities after the wait
// (found in review: it used what it knew before the wait, so its second look
// took the lanes in turn, priority 0 first about half the time; the group's
// earlier prioritized message is completed, so nothing was pending before).
//
// On both engines; engine 1's lanes first store a low-water mark past the
// earlier prioritized message (engine 2 has no such mark: its priority lane
// keeps a floor, docs/design.md, "Priorities").
func TestPriorityAfterWaitingForAnotherGroupsCut(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) {
			t.Parallel()
			priorityAfterWaitingForAnotherGroupsCut(t, engine)
		})
	}
}

func priorityAfterWaitingForAnotherGroupsCut(t *testing.T, engine int) {
	b := setup(t)
	bad, checked := 0, 0
	const trials = 6
	for trial := 0; trial < trials; trial++ {
		qn := fmt.Sprintf("q%d", trial)
		b.createQueue(qn, fmt.Sprintf(`{"engine": %d, "lanes": 2}`, engine))
		schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = $1", qn))
		b.exec(`SELECT sluice.send($1, '{"old": 1}', priority => 5)`, qn)
		first := b.receive(qn, "default", 1, "")
		b.ack(qn, "default", receipts(first)...)
		// A key with a message in flight and one waiting: the group is never
		// drained, so no idle note narrows the look after the wait.
		b.exec(`SELECT sluice.send_batch($1, array['{"k": 1}'::jsonb, '{"k": 2}'::jsonb], keys => array['k', 'k'])`, qn)
		b.receive(qn, "default", 1, "1 hour")
		// Both lanes store a low-water mark past the prioritized message.
		for deadline := time.Now().Add(10 * time.Second); engine == 1 && lanesWhose(b, schema, "s.lwm > $1 OR s.lwm > s.cursor", first[0].Pos) < 2; {
			if time.Now().After(deadline) {
				t.Fatalf("the lanes' low-water marks did not pass position %d", first[0].Pos)
			}
			b.receive(qn, "default", 1, "1 hour")
			time.Sleep(100 * time.Millisecond)
		}
		b.exec("SELECT sluice.create_group($1, 'other', 'latest')", qn)
		b.exec(`SELECT sluice.send_batch($1, array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 17) g),
		        priorities => array(SELECT CASE WHEN g = 17 THEN 9 ELSE 0 END FROM generate_series(1, 17) g))`, qn)
		time.Sleep(1100 * time.Millisecond) // the sessions' marks and notes run out
		cutter, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := receiveOn(b.ctx, cutter, qn, "other", 1, ""); err != nil {
			t.Fatal(err)
		}
		done := make(chan []msg, 1)
		go func() {
			ms, err := receiveOn(b.ctx, b.pool, qn, "default", 1, "")
			if err != nil {
				t.Error(err)
			}
			done <- ms
		}()
		time.Sleep(40 * time.Millisecond) // (it waits for the cut: up to 100 ms)
		if err := cutter.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		ms := <-done
		if len(ms) == 0 {
			// (the commit came after the wait's 100 ms: a loaded machine)
			t.Logf("trial %d: the receive returned before the cut committed", trial)
			continue
		}
		checked++
		if ms[0].Priority != 9 {
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d receives took a priority-0 message before the ready priority-9 one", bad, checked)
	}
	if checked == 0 {
		t.Skip("every receive returned before the cut it waited for committed (a slow machine): nothing checked")
	}
}

// Group ids of any size work (the lane lock key is a bigint).
func TestLaneLockOfALargeGroupID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec("ALTER TABLE sluice.consumer_group ALTER COLUMN id RESTART WITH 2147483000")
	b.createQueue("q", "")
	id := b.send(b.pool, "q", `{}`)
	got := b.receive("q", "default", 1, "")
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("receive: %+v", got)
	}
	if !b.nack("q", "default", got[0].Receipt, "0 seconds", "again") {
		t.Fatal("nack")
	}
}

// A receive that finds nothing numbered while another receive of the queue
// is cutting waits for that cut (up to 100 ms) and takes what it numbered,
// rather than return nothing; a cutter whose transaction stays open delays
// it by that bound only.
func TestReceiveWaitsForACutInProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// A receive of group other cuts 20 messages and keeps its transaction
	// open until the receive of group default waits for its cut lock. (A
	// commit that comes later than the wait's bound, as on a loaded machine,
	// makes that receive return empty after the bound, rightly: then the
	// round proves nothing and runs again, on a queue of its own.)
	var queue string
	for round := 1; ; round++ {
		queue = fmt.Sprintf("q%d", round)
		b.createQueue(queue, `{"lanes": 4}`)
		b.exec("SELECT sluice.create_group($1, 'other', 'earliest')", queue)
		b.exec(`SELECT sluice.send_batch($1, array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 20) g))`, queue)
		n, took := receiveDuringACut(b, queue)
		if n == 5 {
			break
		}
		if n != 0 || took < 100*time.Millisecond {
			t.Fatalf("receive during a cut got %d messages after %v, want the 5 the cut numbered", n, took)
		}
		if round == 5 {
			t.Fatalf("receive during a cut: in each of %d rounds the cutter's commit came after the wait's bound", round)
		}
		t.Logf("round %d: the cutter's commit came after the wait's bound (%v); again", round, took)
	}

	// A cutter that stays open delays others by the bound, not until it ends.
	// (Group other takes the rest of the 20 first, so that its next receive
	// has nothing numbered and cuts: engine 2 takes what is numbered first.)
	for left := 19; left > 0; {
		got, err := receiveOn(b.ctx, b.pool, queue, "other", left, "")
		if err != nil || len(got) == 0 {
			t.Fatalf("group other taking the numbered rest: %d messages, %v", len(got), err)
		}
		left -= len(got)
	}
	b.exec(`SELECT sluice.send_batch($1, array(SELECT jsonb_build_object('n', g) FROM generate_series(21, 40) g))`, queue)
	held, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(b.ctx) //nolint:errcheck
	if _, err := receiveOn(b.ctx, held, queue, "other", 1, ""); err != nil {
		t.Fatal(err)
	}
	// group default still has 15 numbered before; take them first
	for left := 15; left > 0; {
		got, err := receiveOn(b.ctx, b.pool, queue, "default", left, "")
		if err != nil || len(got) == 0 {
			t.Fatalf("taking the numbered rest: %d messages, %v", len(got), err)
		}
		left -= len(got)
	}
	start := time.Now()
	got, err := receiveOn(b.ctx, b.pool, queue, "default", 5, "")
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); len(got) != 0 || took > 2*time.Second {
		t.Fatalf("receive while a cutter stays open: %d messages after %v, want 0 within the wait bound", len(got), took)
	}
	// A receive cancelled while it waits leaves no lock behind (the bench
	// once saw a session-level lock outlive a cancelled wait and block
	// drop_queue).
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Millisecond)
	_, err = receiveOn(ctx, b.pool, queue, "default", 5, "")
	cancel()
	if err == nil {
		t.Log("the receive ended before its cancel (a slow machine?); checking for leftover locks anyway")
	}
	var heldPID int
	if err := held.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&heldPID); err != nil {
		t.Fatal(err)
	}
	// (The cancelled backend ends its transaction when it has read the
	// cancel request, a moment after the client gave up on it.)
	others := func() int64 {
		return b.int64(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid <> $1
		                  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, heldPID)
	}
	for deadline := time.Now().Add(2 * time.Second); others() != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := others(); n != 0 {
		t.Fatalf("%d advisory locks held by sessions other than the open cutter after the waits", n)
	}
	if err := held.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.receive(queue, "default", 20, ""); len(got) != 20 {
		t.Fatalf("after the open cutter rolled back: %d messages, want 20", len(got))
	}
}

// receiveDuringACut has a receive of group other of queue cut its 20
// messages and commit only once a receive of 5 by group default waits for
// the cut lock, and returns what that receive got and how long it took.
func receiveDuringACut(b *bundle, queue string) (int, time.Duration) {
	t := b.t
	cutter, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cutter.Rollback(b.ctx) //nolint:errcheck
	if ms, err := receiveOn(b.ctx, cutter, queue, "other", 1, ""); err != nil || len(ms) != 1 {
		t.Fatalf("cutter's receive: %d messages, %v", len(ms), err)
	}
	done := make(chan error, 1)
	go func() {
		// (at most 2 s: a receive that does not wait ends the test's look)
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			var waits bool
			if err := b.pool.QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
			        AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).
				Scan(&waits); err != nil {
				done <- err
				return
			}
			if waits {
				break
			}
		}
		done <- cutter.Commit(b.ctx)
	}()
	start := time.Now()
	ms, err := receiveOn(b.ctx, b.pool, queue, "default", 5, "")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return len(ms), took
}

// A receive that finds every lane with work held by other receives waits
// for one (at most 100 ms) and takes from it once its holder commits,
// rather than return nothing at once: more consumers than lanes then wait
// instead of polling. A holder that stays open delays it by the bound only,
// and the wait leaves no lock behind.
func TestReceiveWaitsForABusyLane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 2}`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 200) g))`)
	// (a receive that commits numbers the 200 first: an open receive that
	// cut would keep them from the others until it commits)
	if got := b.receive("q", "default", 1, ""); len(got) != 1 {
		t.Fatalf("first receive: %d messages, want 1", len(got))
	}

	// Two open receives hold both lanes, each with messages left after it.
	hold := func() pgx.Tx {
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(b.ctx) }) //nolint:errcheck
		if ms, err := receiveOn(b.ctx, tx, "q", "default", 1, ""); err != nil || len(ms) != 1 {
			t.Fatalf("holder's receive: %d messages, %v", len(ms), err)
		}
		return tx
	}
	// (lane locks are advisory locks on one bigint: objsubid 1)
	laneLocks := func() int64 {
		return b.int64(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
		                  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	}
	first, second := hold(), hold()
	if n := laneLocks(); n != 2 {
		t.Fatalf("%d lane locks held by the two receives, want 2", n)
	}

	// Released during the wait (both: the waiter waits for one of the two,
	// the first with work from a random lane on): it gets messages of that
	// lane.
	done := make(chan error, 1)
	go func() {
		time.Sleep(30 * time.Millisecond)
		done <- errors.Join(first.Commit(b.ctx), second.Commit(b.ctx))
	}()
	start := time.Now()
	got, err := receiveOn(b.ctx, b.pool, "q", "default", 5, "")
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 && took < 90*time.Millisecond {
		t.Fatalf("receive while both lanes were held returned nothing after %v, without waiting for a lane", took)
	}
	if len(got) == 0 {
		// (on a machine so slow that the 100 ms ran out before the commits,
		// the receive returns nothing: say so rather than fail)
		t.Skip("the wait ran out before the holders committed (a loaded machine)")
	}
	if len(got) != 5 {
		t.Fatalf("receive while both lanes were held, released during the wait: %d messages, want 5", len(got))
	}

	// Held past the bound: nothing, after about the bound, not after the
	// holders.
	second, third := hold(), hold()
	if n := laneLocks(); n != 2 {
		t.Fatalf("%d lane locks held by the two new receives, want 2", n)
	}
	start = time.Now()
	got, err = receiveOn(b.ctx, b.pool, "q", "default", 5, "")
	if err != nil {
		t.Fatal(err)
	}
	took = time.Since(start)
	if len(got) != 0 {
		t.Fatalf("receive while both lanes stay held: %d messages, want 0", len(got))
	}
	if took < 90*time.Millisecond || took > 5*time.Second {
		t.Fatalf("receive while both lanes stay held returned after %v, want the 100 ms wait", took)
	}
	var pids []int
	for _, tx := range []pgx.Tx{second, third} {
		var pid int
		if err := tx.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if n := b.int64(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND NOT pid = ANY ($1)
	                  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, pids); n != 0 {
		t.Fatalf("%d advisory locks held by sessions other than the two holders after the wait", n)
	}
}
