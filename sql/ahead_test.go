package sqlsrc_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

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
	b.createQueue("q", `{"lanes": 2}`)
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
