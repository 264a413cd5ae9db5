package sqlsrc_test

import (
	"fmt"
	"io/fs"
	"testing"

	"github.com/jackc/pgx/v5"

	sqlsrc "github.com/sluicemq/sluice/sql"
)

// Engine 1's checkpoints and "ahead" (docs/design.md, "What must be
// durable"): these tests pin {"engine": 1}. Engine 2 has no counterpart to
// them: its lane states and leases are logged, so a crash never resumes a
// lane from a checkpoint behind completed positions; what a crash can lose
// there (uncommitted and the newest asynchronous commits) is checked by
// TestRandomCrashesLoseNothingEngine2.
//
// A crash loses the unlogged lane states and leases (group_states,
// deliveries, runs) but keeps the logged completions: the lanes resume
// from their checkpoints, behind positions already acked. Those must not be
// delivered again, and everything else must be, once. The test empties the
// unlogged tables as crash recovery does, with acks scattered ahead of the
// lanes' checkpoints, keyed and unkeyed, then drains the queue; the second
// drain after it shows that the lanes, once past the highest completed
// position (ahead), take the fast path again.
func TestLostLaneStatesSkipCompleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"engine": 1, "lanes": 2}`)
	b.exec("SELECT sluice.create_group('q', 'g')")
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'q'"))
	sent := b.int64s(`
		SELECT sluice.send_batch('q', array_agg(jsonb_build_object('n', i)),
		                         keys => array_agg(CASE WHEN i % 4 = 0 THEN 'k' || (i % 3) END))
		FROM generate_series(1, 400) i`)
	if len(sent) != 400 {
		t.Fatalf("sent %d", len(sent))
	}

	acked := map[int64]bool{}
	for i := 0; i < 30; i++ {
		ms := b.receive("q", "g", 10, "1 hour")
		var done []string
		for _, m := range ms {
			if m.ID%3 != 0 {
				done = append(done, m.Receipt)
				acked[m.ID] = true
			}
		}
		if len(done) > 0 {
			b.ack("q", "g", done...)
		}
	}
	if len(acked) < 150 {
		t.Fatalf("only %d acked before the crash", len(acked))
	}
	b.exec(fmt.Sprintf("TRUNCATE %[1]s.group_states, %[1]s.deliveries, %[1]s.runs", schema))

	delivered := map[int64]int{}
	for i := 0; i < 200; i++ {
		ms := b.receive("q", "g", 10, "1 hour")
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			delivered[m.ID]++
		}
		b.ack("q", "g", receipts(ms)...)
	}
	for _, id := range sent {
		switch {
		case acked[id] && delivered[id] > 0:
			t.Errorf("message %d was acked before the crash and delivered %d times after it", id, delivered[id])
		case !acked[id] && delivered[id] != 1:
			t.Errorf("message %d was not acked before the crash and delivered %d times after it, want 1", id, delivered[id])
		}
	}
	// Each lane resumed with ahead at the highest position completed then.
	if n := b.int64(fmt.Sprintf("SELECT count(*) FROM %s.group_states WHERE ahead IS NULL", schema)); n != 0 {
		t.Errorf("%d lane states without ahead", n)
	}

	// Past ahead, a drain takes the fast path again (no e_take).
	b.exec(`SELECT sluice.send_batch('q', array_agg(jsonb_build_object('n', i))) FROM generate_series(1, 100) i`)
	b.receive("q", "g", 1, "1 hour") // (cuts)
	got := b.calls(func(tx pgx.Tx) {
		for i := 0; i < 5; i++ {
			if _, err := receiveOn(b.ctx, tx, "q", "g", 5, "1 hour"); err != nil {
				t.Fatal(err)
			}
		}
	}, "e_take_fast", "e_take")
	if got["e_take_fast"] == 0 {
		t.Errorf("no fast-path receive after the lanes passed ahead: calls %v", got)
	}
}

// After a crash a lane's fast path must not pass over a batch that holds
// completed positions ahead of the cursor: it used to leave that batch out
// and take from the next one, moving the cursor past the batch's positions
// that were not completed, which then were never delivered (status counted
// them ready, receive returned nothing, the lane's low-water mark stayed
// at them). One lane, two batches (positions 1-10 and 11-20); 3-5 acked;
// the crash; a receive of one (the full path: 1) and one of 100 (the fast
// path) must between them, and the drain after, deliver every message but
// 3-5 exactly once.
func TestLostLaneStatesDoNotSkipABatchWithCompletions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"engine": 1, "lanes": 1}`)
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'q'"))
	b.exec(`SELECT sluice.send_batch('q', array_agg(jsonb_build_object('n', i))) FROM generate_series(1, 10) i`)
	if ms := b.receive("q", "default", 1, "1 hour"); len(ms) != 1 { // cuts the first batch
		t.Fatalf("first receive: %d messages", len(ms))
	}
	b.exec(`SELECT sluice.send_batch('q', array_agg(jsonb_build_object('n', i))) FROM generate_series(11, 20) i`)
	ms := b.receive("q", "default", 9, "1 hour") // cuts the second batch, takes 2-10
	var done []string
	acked := map[int64]bool{}
	for _, m := range ms {
		if m.Pos >= 3 && m.Pos <= 5 {
			done = append(done, m.Receipt)
			acked[m.Pos] = true
		}
	}
	if len(done) != 3 || b.ack("q", "default", done...) != 3 {
		t.Fatalf("want positions 3-5 acked, received %d messages", len(ms))
	}
	if n := b.int64(fmt.Sprintf("SELECT count(*) FROM %s.batches WHERE first_pos <= 10 AND last_pos >= 11", schema)); n != 0 {
		t.Fatalf("positions 10 and 11 are in one batch (%d), want two batches", n)
	}
	b.exec(fmt.Sprintf("TRUNCATE %[1]s.group_states, %[1]s.deliveries, %[1]s.runs", schema))

	delivered := map[int64]int{}
	for _, n := range []int{1, 100, 100} {
		for _, m := range b.receive("q", "default", n, "1 hour") {
			delivered[m.Pos]++
		}
	}
	for pos := int64(1); pos <= 20; pos++ {
		want := 1
		if acked[pos] {
			want = 0
		}
		if delivered[pos] != want {
			t.Errorf("position %d delivered %d times after the crash, want %d", pos, delivered[pos], want)
		}
	}
}

// A lane whose first take found nothing still gets a checkpoint, so that
// after a crash it is not taken for a lane the group never took from (whose
// state starts with nothing completed ahead of its cursor): an ack made
// before the crash must hold. Migration 0014 gives one to such lanes of a
// database made by an earlier version (whose first empty take wrote a state
// and no checkpoint).
func TestEmptyFirstTakeCheckpointsTheLane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"engine": 1, "lanes": 1}`)
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'q'"))
	checkpoints := func() int64 { return b.int64("SELECT count(*) FROM " + schema + ".checkpoints") }

	if ms := b.receive("q", "default", 1, ""); len(ms) != 0 {
		t.Fatalf("empty queue: %d messages", len(ms))
	}
	if n := checkpoints(); n != 1 {
		t.Fatalf("after an empty first take: %d checkpoints, want 1", n)
	}

	// As an earlier version left it: the state and no checkpoint; the
	// migration adds it.
	b.exec("DELETE FROM " + schema + ".checkpoints")
	migration, err := fs.ReadFile(sqlsrc.FS, "tables/0014_lane_checkpoints.sql")
	if err != nil {
		t.Fatal(err)
	}
	b.exec(string(migration))
	if n := checkpoints(); n != 1 {
		t.Fatalf("after migration 0014: %d checkpoints, want 1", n)
	}

	// Within a second of that take (no low-water mark checkpoint yet): a
	// message taken and acked, a crash, then nothing comes again.
	b.send(b.pool, "q", `{"n": 1}`)
	ms := b.receive("q", "default", 1, "")
	if len(ms) != 1 || b.ack("q", "default", receipts(ms)...) != 1 {
		t.Fatalf("take and ack: %d messages", len(ms))
	}
	b.exec(fmt.Sprintf("TRUNCATE %[1]s.group_states, %[1]s.deliveries, %[1]s.runs", schema))
	if again := b.receive("q", "default", 10, ""); len(again) != 0 {
		t.Fatalf("after the crash: message %d delivered again after its ack", again[0].ID)
	}
}
