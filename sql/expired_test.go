package sqlsrc_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// After many leases expire at once (a consumer that died with thousands of
// messages in flight), every message is delivered again exactly once, with
// its next attempt: single leases, a batch of keyed messages whose leases
// all expire at the same instant (more of them than a receive reads in one
// window: e_expiry_window must move past a tie), and a run.
func TestMassExpiryRedeliversEachOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// (a lease long enough for the first round to end before any expires,
	// even on a slow machine)
	b.createQueue("q", `{"lanes": 1, "lease": "8 seconds"}`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 150) g))`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('k', g) FROM generate_series(1, 120) g),
	                                  keys => array(SELECT 'key' || g FROM generate_series(1, 120) g))`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('r', g) FROM generate_series(1, 80) g))`)
	first := map[int64]bool{}
	take := func(n int) {
		for _, m := range b.receive("q", "default", n, "") {
			if first[m.ID] || m.Attempt != 1 {
				t.Fatalf("first round: message %d again or attempt %d", m.ID, m.Attempt)
			}
			first[m.ID] = true
		}
	}
	for i := 0; i < 150; i++ {
		take(1) // single leases, one expiry time each
	}
	take(120) // keyed: a deliveries row each, all expiring together
	take(80)  // unkeyed and consecutive: a run
	if len(first) != 350 {
		t.Fatalf("first round took %d messages, want 350", len(first))
	}
	time.Sleep(8500 * time.Millisecond)
	again := map[int64]int{}
	for i := 0; i < 1000 && len(again) < 350; i++ {
		got := b.receive("q", "default", 1, "1 hour")
		if len(got) == 0 {
			continue
		}
		m := got[0]
		again[m.ID]++
		if again[m.ID] > 1 || m.Attempt != 2 || !first[m.ID] {
			t.Fatalf("redelivery %d: message %d (count %d, attempt %d, first round %v)",
				len(again), m.ID, again[m.ID], m.Attempt, first[m.ID])
		}
	}
	if len(again) != 350 {
		t.Fatalf("redelivered %d of 350", len(again))
	}
	if left := b.receive("q", "default", 10, ""); len(left) != 0 {
		t.Fatalf("a receive after every redelivery got %d messages", len(left))
	}
}

// A receive after n leases expired reads about as much as after a few: it
// reads the leases it redelivers (a window: e_take_expired), not every one
// that expired. Before, 3,000 expired single leases made each receive of one
// message read ~11,000 buffers (the old walk read them all, in order, every
// time). Counted in buffers (EXPLAIN ANALYZE of the call, which counts its
// statements' buffers too), not in time.
// On both engines.
func TestReceiveAfterMassExpiryIsBounded(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			leaseAll(b, engine, 3000, 1)
			time.Sleep(1500 * time.Millisecond)
			reads := receiveBuffers(t, b, "q")
			t.Logf("buffers read by five receives: %v", reads)
			// ~500 measured; the walk of every expired lease read ~9,600-11,000.
			if reads[2] > 3000 {
				t.Fatalf("receives with 3,000 expired leases read %v buffers (median %d), want a bounded window (< 3,000)", reads, reads[2])
			}
		})
	}
}

// The same for leases of runs (a receive of many leases them as runs, a row
// each): a window holds leases of about as many positions as the receive
// needs, not as many runs. Before, with 30 expired runs of 100, each receive
// of one message probed the ~3,000 positions of its window's 33 runs and
// read ~15,700 buffers (~1,200 now, measured), on every receive until they
// were redelivered. On both engines (engine 2 leases a receive's messages
// of one lane with one lease row, as a run).
func TestReceiveAfterRunsExpireIsBounded(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) {
			t.Parallel()
			receiveAfterRunsExpireIsBounded(t, engine)
		})
	}
}

func receiveAfterRunsExpireIsBounded(t *testing.T, engine int) {
	b := setup(t)
	leaseAll(b, engine, 30, 100)
	count := map[int]string{1: "SELECT count(*) FROM sluice_q%d.runs", 2: "SELECT count(*) FROM sluice_q%d.lease WHERE kind = 'r' AND n >= 100"}[engine]
	runs := b.int64(fmt.Sprintf(count, b.int64("SELECT id FROM sluice.queue WHERE name = 'q'")))
	if runs < 25 {
		t.Fatalf("30 receives of 100 leased %d runs, want about 30 (the test is about runs)", runs)
	}
	time.Sleep(1500 * time.Millisecond)
	reads := receiveBuffers(t, b, "q")
	t.Logf("buffers read by five receives: %v", reads)
	if reads[2] > 3000 {
		t.Fatalf("receives with 30 expired runs of 100 read %v buffers (median %d), want a bounded window (< 3,000)", reads, reads[2])
	}
}

// leaseAll makes queue q (of engine, one lane, leases of 1 second) with 3,000
// messages and leases them all in `receives` receives of `batch` each, in
// one call. (Leases may expire while they are being made, on a slow
// machine: then some are redelivered in the loop, which is fine, and
// max_attempts keeps them from going to the dead letters.)
func leaseAll(b *bundle, engine, receives, batch int) {
	b.t.Helper()
	b.createQueue("q", fmt.Sprintf(`{"engine": %d, "lanes": 1, "lease": "1 second", "max_attempts": 1000}`, engine))
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 3000) g))`)
	b.exec(fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP PERFORM sluice.receive('q', 'default', %d); END LOOP; END $$`,
		receives, batch))
}

// receiveBuffers: the buffers five receives of one message from queue (each
// with a lease of an hour, each returning one) read, sorted: counted by
// EXPLAIN ANALYZE of the call, which counts its statements' buffers too. A
// call that plans its statements again (a new session, or after
// maintenance's ANALYZE of a filled partition) reads the catalogs too: take
// the median.
func receiveBuffers(t *testing.T, b *bundle, queue string) []int64 {
	t.Helper()
	var reads []int64
	for i := 0; i < 5; i++ {
		rows, buffers := explainBuffers(t, b.ctx, b.pool, `SELECT * FROM sluice.receive($1, 'default', 1, lease => '1 hour')`, queue)
		if rows != 1 {
			t.Fatalf("a receive after the leases expired returned %v messages, want 1", rows)
		}
		reads = append(reads, buffers)
	}
	slices.Sort(reads)
	return reads
}

// A receive passes the leases of acked messages that ran out (every lease
// does, acked or not) in one read when their positions are below the lane's
// low-water mark, not a window of need + 32 at a time. Keyed messages lease
// a row each, so a lane read by nobody for a while holds thousands: 3,000
// here took 31 windows (an e_expiry_window call and a statement each) in
// one receive on the old engine (measured), and each window's end was found
// by sorting every lease still ahead of it.
func TestReceivePassesAckedExpiredLeasesInOneRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 1, "lease": "3 seconds"}`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 3010) g),
	                                 keys => array(SELECT 'k' || (g % 50) FROM generate_series(1, 3010) g))`)
	for i := 0; i < 30; i++ {
		ms := b.receive("q", "default", 100, "")
		if len(ms) == 0 {
			t.Fatalf("round %d: nothing received", i)
		}
		b.ack("q", "default", receipts(ms)...)
	}
	// The lane stores its low-water mark about once a second: past the
	// acked positions once a receive takes it a second later.
	time.Sleep(1100 * time.Millisecond)
	b.ack("q", "default", receipts(b.receive("q", "default", 1, "1 hour"))...)
	time.Sleep(2500 * time.Millisecond) // every lease of the rounds has run out

	var got []msg
	n := b.calls(func(tx pgx.Tx) {
		var err error
		if got, err = receiveOn(b.ctx, tx, "q", "default", 1, "1 hour"); err != nil {
			t.Fatal(err)
		}
	}, "e_take_expired", "e_expiry_window")
	if len(got) != 1 || got[0].Attempt != 1 {
		t.Fatalf("receive: %+v, want one message delivered for the first time", got)
	}
	t.Logf("calls: %v", n)
	if n["e_take_expired"] > 1 || n["e_expiry_window"] > 2 {
		t.Fatalf("a receive past 3,000 acked expired leases called e_take_expired %d, e_expiry_window %d times: want at most 1 and 2",
			n["e_take_expired"], n["e_expiry_window"])
	}
}

// A lease that expired and was redelivered stays where the lane's scan
// passed it. Scans are inclusive of where they stopped (one receive's
// leases share an expiry time), and one that had looked at a whole window
// stayed at its last lease: while the redelivered message was in flight
// (here held for an hour), every receive of its lane counted that lease as
// work, declined the fast path and read it again (e_take_expired).
func TestRedeliveredLeaseIsPassedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 1, "lease": "300 milliseconds"}`)
	b.send(b.pool, "q", `{"n": "held"}`)
	first := b.receive("q", "default", 1, "")
	time.Sleep(400 * time.Millisecond)
	again := b.receive("q", "default", 1, "1 hour")
	if len(first) != 1 || len(again) != 1 || again[0].ID != first[0].ID || again[0].Attempt != 2 {
		t.Fatalf("redelivery: got %+v after %+v", again, first)
	}
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 40) g))`)
	if got := b.receiveAndAck(b.pool, "default", 1); got != 1 { // numbers the 40
		t.Fatalf("got %d", got)
	}
	const rounds = 20
	n := b.calls(func(tx pgx.Tx) {
		for i := 0; i < rounds; i++ {
			if got := b.receiveAndAck(tx, "default", 1); got != 1 {
				t.Fatalf("round %d: got %d", i, got)
			}
		}
	}, "e_take_expired", "e_pick", "e_take_fast")
	t.Logf("%d receives of 1: %v", rounds, n)
	if n["e_take_expired"] > 1 || n["e_pick"] > 2 {
		t.Fatalf("%d receives beside a redelivered message in flight: e_take_expired %d, e_pick %d",
			rounds, n["e_take_expired"], n["e_pick"])
	}
}
