package sqlsrc_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// fnCall names a function in the call counts of xactCalls.
type fnCall struct{ schema, name, lang string }

// xactCalls reads the function call counts that pg_stat_xact_user_functions
// shows in tx (with track_functions on). Since PostgreSQL 15 a session's
// counts wait to be flushed for up to a second and that view shows them
// with the current transaction's, so those of its previous transactions may
// be in them; nothing is flushed within a transaction, so the difference of
// two readings in one transaction is exact.
func (b *bundle) xactCalls(tx pgx.Tx) map[fnCall]int64 {
	b.t.Helper()
	rows, err := tx.Query(b.ctx, `
		SELECT f.schemaname, f.funcname, l.lanname, f.calls
		FROM pg_stat_xact_user_functions f
		JOIN pg_proc p ON p.oid = f.funcid
		JOIN pg_language l ON l.oid = p.prolang`)
	if err != nil {
		b.t.Fatal(err)
	}
	calls := map[fnCall]int64{}
	var fn fnCall
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&fn.schema, &fn.name, &fn.lang, &n}, func() error {
		calls[fn] = n
		return nil
	}); err != nil {
		b.t.Fatal(err)
	}
	return calls
}

// calls runs f in a transaction that counts function calls
// (track_functions), and returns how often each of the named engine
// functions (the queues' copies) was called in it.
func (b *bundle) calls(f func(tx pgx.Tx), names ...string) map[string]int64 {
	b.t.Helper()
	return b.callsOn(b.pool, f, names...)
}

// beginner starts a transaction: the pool, or one session of it.
type beginner interface {
	Begin(context.Context) (pgx.Tx, error)
}

// callsOn is calls in a transaction of s.
func (b *bundle) callsOn(s beginner, f func(tx pgx.Tx), names ...string) map[string]int64 {
	b.t.Helper()
	tx, err := s.Begin(b.ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(b.ctx, "SET LOCAL track_functions = 'all'"); err != nil {
		b.t.Fatal(err)
	}
	before := b.xactCalls(tx)
	f(tx)
	got := map[string]int64{}
	for _, name := range names {
		got[name] = 0
	}
	for fn, n := range b.xactCalls(tx) {
		if _, ok := got[fn.name]; ok && strings.HasPrefix(fn.schema, "sluice_q") {
			got[fn.name] += n - before[fn]
		}
	}
	if err := tx.Commit(b.ctx); err != nil {
		b.t.Fatal(err)
	}
	return got
}

// fourLanes makes queue q with four lanes and sends it 400 messages, which
// one cut deals out to the lanes in chunks; it returns the queue's schema.
func fourLanes(b *bundle) string {
	b.t.Helper()
	b.createQueue("q", `{"engine": 1, "lanes": 4}`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 400) g))`)
	return fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'q'"))
}

// lanesWithState counts the lanes of a queue (by its schema) that some
// group has a state of: those taken from at least once.
func lanesWithState(b *bundle, schema string) int64 {
	b.t.Helper()
	return b.int64("SELECT count(DISTINCT lane) FROM " + schema + ".group_states")
}

// lanesWhose counts the lanes of a queue (by its schema) whose newest state
// (any group's) meets cond, an expression over its columns (s.lwm,
// s.cursor, s.lwm_at, ...) with args.
func lanesWhose(b *bundle, schema, cond string, args ...any) int64 {
	b.t.Helper()
	return b.int64(`SELECT count(*) FROM (SELECT DISTINCT ON (lane) * FROM `+schema+`.group_states
	                ORDER BY lane, seq DESC) s WHERE `+cond, args...)
}

// A receive with nothing to number, on lanes that need nothing but taking,
// takes the fast path (e_fast_lane, e_take_fast), not e_pick; an ack that
// names whole runs completes them without looking at each position
// (e_current_deliveries). The results are those of the full path.
func TestFastPathsAreTaken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	schema := fourLanes(b)
	// Warm up: the first receive cuts, and a lane's first receive makes its
	// state; both take the full path.
	var first []msg
	for i := 0; i < 50 && lanesWithState(b, schema) < 4; i++ {
		first = append(first, b.receive("q", "default", 1, "")...)
	}
	b.ack("q", "default", receipts(first)...)

	got := b.takeFromOneLane("fast path", first, map[string]int64{"e_fast_lane": 1, "e_take_fast": 1, "e_pick": 0, "e_cut": 0})
	if rows, positions := b.runRows("q", "acks"); positions != int64(len(first)) || rows != int64(len(first)) {
		t.Fatalf("%d completion rows for %d positions before the run's ack, want %d for %d", rows, positions, len(first), len(first))
	}
	b.ackWholeRun(got, map[string]int64{"e_current_deliveries": 0})
}

// takeFromOneLane receives 25 messages of queue q (group default) and
// returns them, counting the calls of the queue's functions named in want:
// each must be called as many times as want says (the path the receive
// takes, named path). The 25 are consecutive positions of one lane, each
// at its first attempt, none of them received before (in before).
func (b *bundle) takeFromOneLane(path string, before []msg, want map[string]int64) []msg {
	t := b.t
	t.Helper()
	got := b.receiveCounting(b.pool, 25, "the "+path, want)
	if len(got) != 25 {
		t.Fatalf("the %s took %d, want 25 (a lane holds 100)", path, len(got))
	}
	seen := map[int64]bool{}
	for _, m := range before {
		seen[m.ID] = true
	}
	for i, m := range got {
		if seen[m.ID] || m.Attempt != 1 {
			t.Fatalf("message %d: id %d (received before: %v), attempt %d", i, m.ID, seen[m.ID], m.Attempt)
		}
		if i > 0 && m.Pos != got[i-1].Pos+1 {
			t.Fatalf("positions %d then %d: a lane's positions are taken in order", got[i-1].Pos, m.Pos)
		}
	}
	return got
}

// receiveCounting receives up to n messages of group default of queue q in
// a transaction of s, and fails unless each engine function named in want
// (the queue's copy) was called as often as it says; what names the step.
func (b *bundle) receiveCounting(s beginner, n int, what string, want map[string]int64) []msg {
	b.t.Helper()
	names := slices.Sorted(maps.Keys(want))
	var got []msg
	calls := b.callsOn(s, func(tx pgx.Tx) {
		var err error
		if got, err = receiveOn(b.ctx, tx, "q", "default", n, ""); err != nil {
			b.t.Fatal(err)
		}
	}, names...)
	if !maps.Equal(calls, want) {
		b.t.Fatalf("receive called %v, want %v (%s)", calls, want, what)
	}
	return got
}

// ackWholeRun acks all that one receive took from one lane of queue q
// (got): all of it counts, with one completion row for its positions, and
// the queue's functions named in want are called as many times as it
// says; acked again, nothing is current any more, by either path.
func (b *bundle) ackWholeRun(got []msg, want map[string]int64) {
	t := b.t
	t.Helper()
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	rows, positions := b.runRows("q", "acks")
	var acked int
	n := b.calls(func(tx pgx.Tx) {
		if err := tx.QueryRow(b.ctx, "SELECT sluice.ack('q', 'default', $1)", receipts(got)).Scan(&acked); err != nil {
			t.Fatal(err)
		}
	}, names...)
	if acked != len(got) || !maps.Equal(n, want) {
		t.Fatalf("ack of a whole run = %d, calling %v; want %d, calling %v", acked, n, len(got), want)
	}
	if r, p := b.runRows("q", "acks"); r != rows+1 || p != positions+int64(len(got)) {
		t.Fatalf("the ack of a whole run wrote %d completion rows for %d positions, want 1 for %d", r-rows, p-positions, len(got))
	}
	if again := b.ack("q", "default", receipts(got)...); again != 0 {
		t.Fatalf("second ack of the run = %d, want 0", again)
	}
}

// The fast ack declines, and the full path decides, when a receipt is not
// part of a whole run: part of a run, a receipt repeated, a run with one
// message extended (a lease row of its own), or a forged token.
func TestFastAckDeclines(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 1}`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 40) g))`)
	b.receive("q", "default", 1, "") // cuts
	run := b.receive("q", "default", 10, "")
	if len(run) != 10 {
		t.Fatalf("got %d, want 10", len(run))
	}
	rs := receipts(run)
	for _, c := range []struct {
		name     string
		receipts []string
		want     int
	}{
		{"forged token", append(append([]string{}, rs[:9]...), forge(rs[9])), 9},
		{"the last one, left", []string{rs[9]}, 1},
		{"all again, repeated", append(rs, rs...), 0},
	} {
		if got := b.ack("q", "default", c.receipts...); got != c.want {
			t.Fatalf("%s: ack = %d, want %d", c.name, got, c.want)
		}
	}
	ext := b.receive("q", "default", 5, "")
	var n int
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.extend('q', 'default', $1, '1 minute')",
		[]string{ext[2].Receipt}).Scan(&n); err != nil || n != 1 {
		t.Fatalf("extend: %d, %v", n, err)
	}
	if got := b.ack("q", "default", receipts(ext)...); got != 5 {
		t.Fatalf("ack of a run with one message extended (same receipt, a lease of its own) = %d, want 5", got)
	}
	if got := b.int64("SELECT lag FROM sluice.status('q')"); got != 40-10-5 {
		t.Fatalf("lag %d, want %d", got, 40-10-5)
	}
}

// forge changes a receipt's token.
func forge(receipt string) string {
	var slot, pos, attempt, token, first int64
	if _, err := fmt.Sscanf(receipt, "%d.%d.%d.%d.%d", &slot, &pos, &attempt, &token, &first); err != nil {
		return receipt + "x"
	}
	return fmt.Sprintf("%d.%d.%d.%d.%d", slot, pos, attempt, token+1, first)
}

// A lease runs out whether or not its message was acked, so in traffic that
// outlasts the lease every lane keeps finding leases that expired since its
// last receive. Those of completed positions (below the lane's low-water
// mark) keep the fast path: it moves the lane's scan past them, and a lane
// that has nothing else does not count as having work until two of them
// gather. (Before, each of them sent the receive down the full path: a
// batch-1 drain longer than the lease ran at ~60% of its first seconds'
// rate, and a steady run's p99 went from ~20 ms to ~200 ms.) Single leases
// (batch 1) and runs (batch 5, over four lanes).
func TestFastPathGoesOnPastExpiredAckedLeases(t *testing.T) {
	for _, c := range []struct{ lanes, batch int }{{1, 1}, {4, 5}} {
		t.Run(fmt.Sprintf("lanes %d batch %d", c.lanes, c.batch), func(t *testing.T) {
			t.Parallel()
			fastPastExpiredAckedLeases(t, c.lanes, c.batch)
		})
	}
}

func fastPastExpiredAckedLeases(t *testing.T, lanes, batch int) {
	b := setup(t)
	b.createQueue("q", fmt.Sprintf(`{"lanes": %d, "lease": "1500 milliseconds"}`, lanes))
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 5000) g))`)
	receives, got, n := b.pastTheLease(func(db q) int {
		got := b.receiveAndAck(db, "default", batch)
		time.Sleep(5 * time.Millisecond)
		return got
	})
	if got < receives*batch*9/10 {
		t.Fatalf("only %d messages in %d receives of %d", got, receives, batch)
	}
	// The full path still runs for each lane's low-water mark, once a second.
	if n["e_pick"]*4 > int64(receives) {
		t.Fatalf("%d of %d receives took the full path", n["e_pick"], receives)
	}
}

// In steady traffic most lanes have nothing new: small cuts go to one lane
// each. Their leases of acked messages keep running out; a lane with only
// those is not worth the full path (it counts as having work once two
// gather, and then the fast path moves its scan past them and goes on to the
// next lane). Here another group's receives do the cutting, so that the
// counted receives have nothing to number.
func TestLanesWithOnlyExpiredAckedLeasesKeepTheFastPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rounds, n := b.threesPastTheLease(true)
	if n["e_pick"]*4 > int64(rounds) {
		t.Fatalf("%d of %d receives took the full path", n["e_pick"], rounds)
	}
}

// The full path passes over expired leases of completed messages too: in
// traffic longer than the lease, receives that number new messages (and so
// take the full path) must not call e_take_expired for them.
func TestFullPathPassesOverExpiredAckedLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rounds, n := b.threesPastTheLease(false)
	if n["e_pick"]*2 < int64(rounds) {
		t.Fatalf("only %d of %d receives took the full path: the test tests nothing", n["e_pick"], rounds)
	}
	if n["e_take_expired"]*4 > n["e_pick"] {
		t.Fatalf("e_take_expired ran %d times in %d full-path receives", n["e_take_expired"], n["e_pick"])
	}
}

// threesPastTheLease makes queue q (4 lanes, a lease of 1.5 s) and runs
// rounds of 3 messages sent and then received and acked by the default
// group, past the lease (pastTheLease); with a cutter, another group's
// receive numbers each round's messages first, so that the default group's
// receives have nothing to number. Returns the counted rounds and calls.
func (b *bundle) threesPastTheLease(cutter bool) (int, map[string]int64) {
	b.t.Helper()
	b.createQueue("q", `{"engine": 1, "lanes": 4, "lease": "1500 milliseconds"}`)
	if cutter {
		b.exec("SELECT sluice.create_group('q', 'cutter', 'latest')")
	}
	rounds, got, n := b.pastTheLease(func(db q) int {
		b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 3) g))`)
		if cutter {
			b.receiveAndAck(b.pool, "cutter", 10)
		}
		return b.receiveAndAck(db, "default", 10)
	})
	if got < rounds*3*9/10 {
		b.t.Fatalf("only %d messages in %d rounds of 3", got, rounds)
	}
	return rounds, n
}

// receiveAndAck receives up to n messages of a group of queue q on db and
// acks them there.
func (b *bundle) receiveAndAck(db q, group string, n int) int {
	b.t.Helper()
	ms, err := receiveOn(b.ctx, db, "q", group, n, "")
	if err != nil {
		b.t.Fatal(err)
	}
	if len(ms) > 0 {
		var acked int
		if err := db.QueryRow(b.ctx, "SELECT sluice.ack('q', $1, $2)", group, receipts(ms)).Scan(&acked); err != nil || acked != len(ms) {
			b.t.Fatalf("ack of %d: %d, %v", len(ms), acked, err)
		}
	}
	return len(ms)
}

// pastTheLease runs step for 1.7 s, longer than the 1.5-second lease of the
// tests above, so that leases run out during what follows: a second more of
// it in a transaction that counts the fast and full paths' calls. Returns
// how often step ran in that second, the messages it got, and the calls.
func (b *bundle) pastTheLease(step func(db q) int) (steps, got int, n map[string]int64) {
	b.t.Helper()
	for start := time.Now(); time.Since(start) < 1700*time.Millisecond; {
		step(b.pool)
	}
	n = b.calls(func(tx pgx.Tx) {
		for start := time.Now(); time.Since(start) < time.Second; steps++ {
			got += step(tx)
		}
	}, "e_take_fast", "e_pick", "e_take_expired")
	b.t.Logf("%d steps (%d messages): e_take_fast %d, e_pick %d, e_take_expired %d",
		steps, got, n["e_take_fast"], n["e_pick"], n["e_take_expired"])
	return steps, got, n
}

// A lane a group first takes from in the middle of a drain, after other
// lanes' messages were acked, has nothing of its own completed: its takes
// never look for completions ahead of the cursor (e_has_completed,
// e_is_completed), which with the group's highest completed position as its
// bound they did until the lane's cursor got there.
func TestFreshLanesLookForNoCompletions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	schema := fourLanes(b)
	taken := map[int64]bool{}
	for i := 0; i < 100 && lanesWithState(b, schema) < 4; i++ {
		ms := b.receive("q", "default", 1, "")
		for _, m := range ms {
			taken[m.ID] = true
		}
		b.ack("q", "default", receipts(ms)...)
	}
	n := b.calls(func(tx pgx.Tx) {
		for i := 0; i < 40; i++ {
			ms, err := receiveOn(b.ctx, tx, "q", "default", 1, "")
			if err != nil || len(ms) != 1 {
				t.Fatalf("receive %d: %d messages, %v", i, len(ms), err)
			}
			if taken[ms[0].ID] {
				t.Fatalf("receive %d: message %d again", i, ms[0].ID)
			}
			taken[ms[0].ID] = true
			if _, err := tx.Exec(b.ctx, "SELECT sluice.ack('q', 'default', $1)", receipts(ms)); err != nil {
				t.Fatal(err)
			}
		}
	}, "e_has_completed", "e_is_completed", "e_take_fast")
	t.Logf("40 receives of 1, each acked: %v", n)
	if n["e_has_completed"] != 0 || n["e_is_completed"] != 0 {
		t.Fatalf("takes looked for completions ahead of the cursor: e_has_completed %d, e_is_completed %d times, want 0",
			n["e_has_completed"], n["e_is_completed"])
	}
}

// A queue whose prioritized messages the group has completed takes the fast
// path again once the group's low-water mark is past them (e_prio_pending),
// not only once their slot is reclaimed (an hour by default), and still
// delivers a prioritized message sent after that first. A message of
// priority below 0 that the cursor passed keeps the full path until taken.
func TestFastPathOnceThePrioritiesAreCompleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"engine": 1, "lanes": 2}`)
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'q'"))
	b.exec("SELECT sluice.send('q', '{\"urgent\": 1}', priority => 5)")
	first := b.receive("q", "default", 1, "")
	if len(first) != 1 || first[0].Priority != 5 {
		t.Fatalf("first receive: %+v", first)
	}
	b.ack("q", "default", receipts(first)...)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 400) g))`)

	// Drain until both lanes store a low-water mark past the prioritized
	// position (a lane stores it about once a second while it is taken from).
	for deadline := time.Now().Add(20 * time.Second); lanesWhose(b, schema, "s.lwm > $1", first[0].Pos) < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("the lanes' stored low-water marks did not pass position %d", first[0].Pos)
		}
		b.ack("q", "default", receipts(b.receive("q", "default", 5, ""))...)
		time.Sleep(50 * time.Millisecond)
	}
	// The sessions' marks (kept a second) are read again after this; then
	// each lane is taken from once more, which stores its mark again (one
	// due would send the next take down the full path).
	time.Sleep(1100 * time.Millisecond)
	since := time.Now()
	for deadline := time.Now().Add(20 * time.Second); lanesWhose(b, schema, "s.lwm_at >= $1", since) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the lanes' low-water marks were not stored again")
		}
		b.ack("q", "default", receipts(b.receive("q", "default", 5, ""))...)
	}

	n := b.calls(func(tx pgx.Tx) {
		ms, err := receiveOn(b.ctx, tx, "q", "default", 5, "")
		if err != nil || len(ms) != 5 {
			t.Fatalf("receive: %d messages, %v", len(ms), err)
		}
		if _, err := tx.Exec(b.ctx, "SELECT sluice.ack('q', 'default', $1)", receipts(ms)); err != nil {
			t.Fatal(err)
		}
	}, "e_fast_lane", "e_take_fast", "e_pick", "e_prio_pending")
	if n["e_fast_lane"] != 1 || n["e_take_fast"] != 1 || n["e_pick"] != 0 || n["e_prio_pending"] != 1 {
		t.Fatalf("receive with completed priorities only called e_fast_lane %d, e_take_fast %d, e_pick %d, e_prio_pending %d times: want 1, 1, 0, 1",
			n["e_fast_lane"], n["e_take_fast"], n["e_pick"], n["e_prio_pending"])
	}

	// A prioritized message sent now goes first, whatever the sessions'
	// marks say (they are at most the last numbered position + 1).
	b.exec("SELECT sluice.send('q', '{\"urgent\": 2}', priority => 9)")
	if got := b.receive("q", "default", 1, ""); len(got) != 1 || got[0].Priority != 9 {
		t.Fatalf("receive after a new prioritized message: %+v, want it", got)
	}

	// A message below 0 waits until nothing else is ready: it is delivered
	// after every other message (its prio row is at or after the mark).
	b.exec("SELECT sluice.send('q', '{\"later\": 1}', priority => -1)")
	var last msg
	for deadline := time.Now().Add(20 * time.Second); ; {
		ms := b.receive("q", "default", 50, "")
		if len(ms) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queue did not drain")
		}
		last = ms[len(ms)-1]
		b.ack("q", "default", receipts(ms)...)
	}
	if last.Priority != -1 {
		t.Fatalf("the last message delivered had priority %d, want the one of -1", last.Priority)
	}
}

// A group that keeps up in steady traffic numbers a small batch with each
// receive; a group that falls behind it reads those batches. The fast path
// looked at four batches a receive, so that group got four messages a
// receive of 100 while hundreds were ready; it now looks once more, at about
// as many batches as the four it took say it still needs.
func TestFastPathTakesManySmallBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.smallBatchesBehind(1, "batches WHERE last_pos >= first_pos")
	var got int
	n := b.calls(func(tx pgx.Tx) {
		got = b.receiveAndAck(tx, "behind", 100)
	}, "e_take_fast", "e_pick")
	t.Logf("a receive of 100 over small batches: %d messages; %v", got, n)
	if got != 100 || n["e_take_fast"] != 1 {
		t.Fatalf("a receive of 100 over 1-message batches got %d (e_take_fast %d, e_pick %d), want 100 by the fast path",
			got, n["e_take_fast"], n["e_pick"])
	}
}

// Engine 2's counterpart of TestFastPathsAreTaken: a receive with nothing to
// number, on lanes that need nothing but taking, takes by its hot statement
// (e2_take__s's, spliced into the copy e2_receive_<slot>: docs/design.md,
// "The path of a receive"; no other function takes), not the slow path,
// the keyed take or a cut; it takes consecutive positions of one
// lane; an ack of all it took completes them with one row (pos 0).
func TestV2HotPathIsTaken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"engine": 2, "lanes": 4}`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 400) g))`)
	// The first receive numbers them (a cut).
	first := b.receive("q", "default", 1, "")
	b.ack("q", "default", receipts(first)...)

	got := b.takeFromOneLane("hot path", first, map[string]int64{"e2_receive_0": 1, "e2_take": 0, "e2_slow": 0, "e2_take_keyed_0": 0, "e2_number_0": 0, "e2_cut_store": 0})
	b.ackWholeRun(got, nil)
}

// Engine 2's counterpart of TestFastPathTakesManySmallBatches: a group that
// falls behind one that numbers a small batch with each receive takes 100
// of those batches' messages in one receive, by its hot statement (which
// reads four batches a time: the receive looks at the lane again while it
// gives less than asked and more than nothing), not the slow path or the
// keyed take (no other function takes: the hot statement is in the copy).
func TestV2HotPathTakesManySmallBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.smallBatchesBehind(2, "batch")
	var got int
	n := b.calls(func(tx pgx.Tx) {
		got = b.receiveAndAck(tx, "behind", 100)
	}, "e2_take", "e2_take_keyed_0", "e2_slow")
	t.Logf("a receive of 100 over small batches: %d messages; %v", got, n)
	if got != 100 || n["e2_take"] != 0 || n["e2_take_keyed_0"] != 0 || n["e2_slow"] != 0 {
		t.Fatalf("a receive of 100 over 1-message batches got %d (%v), want 100 by the hot statement", got, n)
	}
}

// smallBatchesBehind makes queue q (the engine given, one lane) with a group
// "behind" that starts at the latest message, sends 300 messages one by one
// while the default group receives each (a small batch numbered per
// receive, at least 250 of them counted in the queue's table batches, e.g.
// "batch" or "batches WHERE ..."), then gives "behind" its first receive
// (by the full path), so that its next receive is the one to measure.
func (b *bundle) smallBatchesBehind(engine int, batches string) {
	b.t.Helper()
	b.createQueue("q", fmt.Sprintf(`{"engine": %d, "lanes": 1}`, engine))
	b.exec("SELECT sluice.create_group('q', 'behind', 'latest')")
	for i := 0; i < 300; i++ {
		b.send(b.pool, "q", `{"n": 1}`)
		if got := b.receiveAndAck(b.pool, "default", 10); got != 1 {
			b.t.Fatalf("round %d: the default group got %d", i, got)
		}
	}
	if n := b.int64(fmt.Sprintf("SELECT count(*) FROM sluice_q%d.%s", b.queueID("q"), batches)); n < 250 {
		b.t.Fatalf("only %d batches for 300 messages: the test tests nothing", n)
	}
	b.receiveAndAck(b.pool, "behind", 100)
}
