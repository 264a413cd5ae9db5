package sqlsrc_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The idle note (engine 1: engine_note.sql; engine 2: e2_receive__s in
// v2_receive.sql): a session whose receive found no lane of
// its group with work does not look at the lanes again while the note
// holds, and nothing that makes work is hidden by it.

// conn takes one connection of the pool for the rest of the test: a note
// belongs to its session.
func (b *bundle) conn() *pgxpool.Conn {
	b.t.Helper()
	c, err := b.pool.Acquire(b.ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(c.Release)
	return c
}

func receiveOnConn(b *bundle, c *pgxpool.Conn, group string, lease string) []msg {
	b.t.Helper()
	ms, err := receiveOn(b.ctx, c, "q", group, 10, lease)
	if err != nil {
		b.t.Fatalf("receive: %v", err)
	}
	return ms
}

// On both engines: engine 1's lane states are group_states, engine 2's
// the lease rows (v2_receive.sql: while the note holds, a receive only
// probes for messages to number).
func TestIdleNoteSkipsTheLanes(t *testing.T) {
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) { idleNoteSkipsTheLanes(t, engine) })
	}
}

func idleNoteSkipsTheLanes(t *testing.T, engine int) {
	b := setup(t)
	b.createQueue("q", fmt.Sprintf(`{"engine": %d}`, engine))
	states := map[int]string{1: "group_states_%", 2: "lease_%"}[engine]
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'q'"))
	b.send(b.pool, "q", `{"n": 1}`)
	b.ack("q", "default", receipts(b.receive("q", "default", 10, ""))...)

	c := b.conn()
	tx, err := c.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	// Index scans of the lane states in this transaction so far (counted by
	// the backend before they are flushed to the statistics).
	scans := func() int64 {
		var n int64
		if err := tx.QueryRow(b.ctx, `
			SELECT coalesce(sum(pg_stat_get_xact_numscans(i.indexrelid)), 0)::bigint
			FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
			WHERE c.relnamespace = $1::regnamespace AND c.relname LIKE $2 AND c.relkind = 'r'`,
			schema, states).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const polls = 20
	skipped := 0
	for i := 0; i < polls; i++ {
		before := scans()
		if ms, err := receiveOn(b.ctx, tx, "q", "default", 10, ""); err != nil || len(ms) != 0 {
			t.Fatalf("poll %d of an empty queue: %d messages, %v", i, len(ms), err)
		}
		if scans() == before {
			skipped++
		}
	}
	var note string
	if err := tx.QueryRow(b.ctx, `SELECT current_setting('sluice.idle_' || q.id || CASE WHEN q.engine = 2 THEN '_' || g.id ELSE '' END)
	                              FROM sluice.queue q JOIN sluice.consumer_group g ON g.queue_id = q.id
	                              WHERE q.name = 'q' AND g.name = 'default'`).Scan(&note); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d polls looked at no lane state; note %q", skipped, polls, note)
	// A note holds 25 ms: all but a few of 20 polls, unless each takes
	// milliseconds. Without the note every poll reads every lane's state.
	if skipped < polls/4 {
		t.Fatalf("only %d of %d idle polls skipped the lanes", skipped, polls)
	}
}

// idleNote reads the idle note of group default of queue q in session c:
// engine 1's sluice.idle_<queue id> ("... idle" when the group was found
// idle), engine 2's sluice.idle_<queue id>_<group id> ("<cut_no>:<until,
// in microseconds>"). It returns the note and whether it says idle.
func idleNote(b *bundle, c *pgxpool.Conn, engine int) (string, bool) {
	b.t.Helper()
	var note string
	if err := c.QueryRow(b.ctx, `SELECT coalesce(current_setting('sluice.idle_' || q.id
	                                    || CASE WHEN q.engine = 2 THEN '_' || g.id ELSE '' END, true), '')
	                             FROM sluice.queue q JOIN sluice.consumer_group g ON g.queue_id = q.id
	                             WHERE q.name = 'q' AND g.name = 'default'`).Scan(&note); err != nil {
		b.t.Fatal(err)
	}
	if engine == 1 {
		return note, strings.HasSuffix(note, " idle")
	}
	cut, until, ok := strings.Cut(note, ":")
	return note, ok && cut != "" && until != ""
}

// Nothing that makes work is hidden by the note, on either engine: new
// messages, a lease that runs out, a cut by another group, nacks here and
// elsewhere (engine 2's note: v2_receive.sql, e2_receive__s).
func TestIdleNoteHidesNoWork(t *testing.T) {
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) { idleNoteHidesNoWork(t, engine) })
	}
}

func idleNoteHidesNoWork(t *testing.T, engine int) {
	b := setup(t)
	b.createQueue("q", fmt.Sprintf(`{"engine": %d, "backoff_base": "0 seconds"}`, engine))
	c := b.conn()
	// idle polls until the session has a note that the group is idle (a
	// lane that was never taken from counts as work until a receive has
	// written its state).
	idle := func(what string) {
		t.Helper()
		var note string
		noted := false
		for i := 0; i < 3 && !noted; i++ {
			if ms := receiveOnConn(b, c, "default", ""); len(ms) != 0 {
				t.Fatalf("%s: got %d messages from an idle queue", what, len(ms))
			}
			note, noted = idleNote(b, c, engine)
		}
		if !noted {
			t.Fatalf("%s: no idle note after empty receives (%q)", what, note)
		}
	}
	one := func(what string, ms []msg) msg {
		t.Helper()
		if len(ms) != 1 {
			t.Fatalf("%s: got %d messages, want 1", what, len(ms))
		}
		return ms[0]
	}

	// A new message: numbered by this receive.
	idle("start")
	b.send(b.pool, "q", `{"n": "new"}`)
	m := one("new message", receiveOnConn(b, c, "default", "300 milliseconds"))

	// A lease that runs out while the session polls: a note lasts at most
	// 25 ms, so the first receive 25 ms after the lease ran out redelivers.
	idle("holding a lease")
	time.Sleep(350 * time.Millisecond)
	if r := one("expired lease", receiveOnConn(b, c, "default", "")); r.ID != m.ID || r.Attempt != 2 {
		t.Fatalf("expired lease: got id %d attempt %d, want %d attempt 2", r.ID, r.Attempt, m.ID)
	}

	// Numbered by a receive of another group: a newer batch than the note's.
	b.exec("SELECT sluice.create_group('q', 'other', 'latest')")
	idle("before the other group's cut")
	b.send(b.pool, "q", `{"n": "cut elsewhere"}`)
	one("other group", b.receive("q", "other", 10, ""))
	one("cut by the other group", receiveOnConn(b, c, "default", ""))

	// An unkeyed nack elsewhere is a retry message: numbered by the next cut.
	b.send(b.pool, "q", `{"n": "nacked elsewhere"}`)
	n := one("to nack", b.receive("q", "default", 10, ""))
	idle("before a nack elsewhere")
	b.nack("q", "default", n.Receipt, "0 seconds", "")
	one("nacked elsewhere", receiveOnConn(b, c, "default", ""))

	// A keyed nack in this session: its own note goes at once.
	b.exec(`SELECT sluice.send('q', '{"n": "keyed"}', key => 'k')`)
	k := one("keyed", receiveOnConn(b, c, "default", ""))
	idle("holding a keyed message")
	var ok bool
	if err := c.QueryRow(b.ctx, "SELECT sluice.nack('q', 'default', $1, '0 seconds')", k.Receipt).Scan(&ok); err != nil || !ok {
		t.Fatalf("nack: %v %v", ok, err)
	}
	r := one("keyed nack in this session", receiveOnConn(b, c, "default", ""))
	if r.ID != k.ID {
		t.Fatalf("keyed nack: got id %d, want %d", r.ID, k.ID)
	}

	// A keyed nack in another session: seen once a note runs out (25 ms; a
	// second here, for a busy machine). (A lane whose key has a message in
	// flight counts as work, so there may be no note here.)
	if ms := receiveOnConn(b, c, "default", ""); len(ms) != 0 {
		t.Fatalf("holding the keyed message: got %d more", len(ms))
	}
	other, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	if err := other.QueryRow(b.ctx, "SELECT sluice.nack('q', 'default', $1, '0 seconds')", r.Receipt).Scan(&ok); err != nil || !ok {
		t.Fatalf("nack elsewhere: %v %v", ok, err)
	}
	var got []msg
	waitFor(t, time.Second, "the keyed nack of another session", func() bool {
		got = receiveOnConn(b, c, "default", "")
		return len(got) > 0
	})
	if got[0].ID != k.ID || got[0].Attempt != 3 {
		t.Fatalf("keyed nack elsewhere: got id %d attempt %d, want %d attempt 3", got[0].ID, got[0].Attempt, k.ID)
	}

	// A note that is not one of sluice's is ignored.
	if _, err := c.Exec(b.ctx, `SELECT set_config('sluice.idle_' || q.id || CASE WHEN q.engine = 2 THEN '_' || g.id ELSE '' END,
	                                              'not a note', false)
	                            FROM sluice.queue q JOIN sluice.consumer_group g ON g.queue_id = q.id
	                            WHERE q.name = 'q' AND g.name = 'default'`); err != nil {
		t.Fatal(err)
	}
	b.send(b.pool, "q", `{"n": "after a bad note"}`)
	one("after a bad note", receiveOnConn(b, c, "default", ""))
}

// A receive that numbers new messages while its session's idle note holds
// looks only at the lanes of the batches newer than the note's
// (e_note_lanes), not at every lane (e_work_lanes), and takes all the cut
// numbered; the note then moves on to the newest batch, so the next such
// receive does the same.
func TestIdleNoteNarrowsTheLookAfterACut(t *testing.T) {
	// A note holds 25 ms and a round takes a few on a machine with a core
	// to spare; on a loaded one a round can outlast the note, which then
	// ends as it should. So the rounds are timed, and the check is made on
	// an attempt whose rounds took under 15 ms each on average (three
	// tries, then a skip that says why).
	const rounds = 12
	for attempt := 1; attempt <= 3; attempt++ {
		b := setup(t)
		q := fmt.Sprintf("q%d", attempt)
		b.createQueue(q, `{"engine": 1}`)
		var took time.Duration
		calls := b.calls(func(tx pgx.Tx) {
			// Empty polls: every lane gets a state, then the session a note.
			for i := 0; i < 3; i++ {
				if ms, err := receiveOn(b.ctx, tx, q, "default", 10, ""); err != nil || len(ms) != 0 {
					t.Fatalf("poll %d of an empty queue: %d messages, %v", i, len(ms), err)
				}
			}
			start := time.Now()
			for i := 0; i < rounds; i++ {
				b.send(b.pool, q, fmt.Sprintf(`{"n": %d}`, 2*i))
				b.send(b.pool, q, fmt.Sprintf(`{"n": %d}`, 2*i+1))
				ms, err := receiveOn(b.ctx, tx, q, "default", 10, "")
				if err != nil {
					t.Fatal(err)
				}
				if len(ms) != 2 || ms[0].Body != fmt.Sprintf(`{"n": %d}`, 2*i) || ms[1].Body != fmt.Sprintf(`{"n": %d}`, 2*i+1) {
					t.Fatalf("round %d: got %+v, want the two messages just sent, in order", i, ms)
				}
			}
			took = time.Since(start)
		}, "e_work_lanes", "e_note_lanes", "e_cut")
		t.Logf("attempt %d: %d rounds in %s: %v", attempt, rounds, took, calls)
		if calls["e_cut"] < rounds {
			t.Fatalf("%d cuts in %d rounds of new messages", calls["e_cut"], rounds)
		}
		if took > rounds*15*time.Millisecond {
			continue // (rounds too slow for a 25 ms note to show anything)
		}
		// Without notes on this path every round looks at every lane.
		if calls["e_note_lanes"] == 0 || calls["e_work_lanes"] > rounds/2 {
			t.Fatalf("rounds that numbered looked at every lane %d times in %d rounds (e_note_lanes %d)",
				calls["e_work_lanes"], rounds, calls["e_note_lanes"])
		}
		return
	}
	t.Skip("three attempts whose rounds took over 15 ms each on average: the machine is too loaded for a 25 ms note")
}

// A receive of several keyed messages leases each with a row of its own,
// all with the same expiry. Once they have run out, acked, the group is
// idle: its polls note so and skip the lanes. The scans of expired leases
// were inclusive of where they stopped, so a lane whose scan had passed two
// leases tied at that time counted them as work ("two of any",
// e_lanes_with_work) on every poll, which then took the full path and never
// noted the group idle.
//
// On both engines (engine 2: its lane state passes the ended leases, then
// its polls note the group idle; counted, its calls of the keyed take).
func TestIdleNoteOnceTiedKeyedLeasesRanOut(t *testing.T) {
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) { idleNoteOnceTiedKeyedLeasesRanOut(t, engine) })
	}
}

func idleNoteOnceTiedKeyedLeasesRanOut(t *testing.T, engine int) {
	b := setup(t)
	b.createQueue("q", fmt.Sprintf(`{"engine": %d, "lanes": 1, "lease": "200 milliseconds"}`, engine))
	b.exec(`SELECT sluice.send_batch('q', array_fill('{}'::jsonb, ARRAY[4]), keys => ARRAY['a', 'b', 'c', 'd'])`)
	ms := b.receive("q", "default", 10, "")
	if len(ms) != 4 {
		t.Fatalf("got %d keyed messages, want 4", len(ms))
	}
	if n := b.ack("q", "default", receipts(ms)...); n != 4 {
		t.Fatalf("acked %d of 4", n)
	}
	// past the lease, and past the second after which the lane's
	// low-water mark is due again (so that it is past the leases)
	time.Sleep(1100 * time.Millisecond)
	const polls = 10
	var note string
	full := map[int]string{1: "e_pick", 2: "e2_take_keyed_0"}[engine]
	n := b.calls(func(tx pgx.Tx) {
		for i := 0; i < polls; i++ {
			if ms, err := receiveOn(b.ctx, tx, "q", "default", 10, ""); err != nil || len(ms) != 0 {
				t.Fatalf("poll %d of an idle group: %d messages, %v", i, len(ms), err)
			}
		}
		if err := tx.QueryRow(b.ctx, `SELECT coalesce(current_setting('sluice.idle_' || q.id
		                                  || CASE WHEN q.engine = 2 THEN '_' || g.id ELSE '' END, true), '')
		                              FROM sluice.queue q JOIN sluice.consumer_group g ON g.queue_id = q.id
		                              WHERE q.name = 'q' AND g.name = 'default'`).Scan(&note); err != nil {
			t.Fatal(err)
		}
	}, full)
	t.Logf("%d polls: %s %d, note %q", polls, full, n[full], note)
	// the first polls pass the leases and move the low-water mark (the full
	// path); from then on the group is idle
	idle := strings.HasSuffix(note, " idle")
	if engine == 2 {
		idle = strings.Contains(note, ":")
	}
	if !idle || n[full] > 3 {
		t.Fatalf("%d of %d polls of an idle group took the full path (%s); note %q", n[full], polls, full, note)
	}
}

// While a session's idle note of a group holds, sluice.receive probes the
// queue's copy itself and returns, without calling the receive's copy
// (e2_receive_<slot>): an idle group's poll is the lookups and the probe.
func TestV2IdlePollIsTheProbeAlone(t *testing.T) {
	b := setup(t)
	b.createV2("q", `"lanes": 2`)
	b.send(b.pool, "q", `{"n": 1}`)
	b.ack("q", "default", receipts(b.receive("q", "default", 10, ""))...)
	c := b.conn()
	for i := 0; i < 3; i++ {
		receiveOnConn(b, c, "default", "")
	}
	if note, ok := idleNote(b, c, 2); !ok {
		t.Fatalf("no idle note after empty receives (%q)", note)
	}
	const polls = 20
	calls := b.callsOn(c, func(tx pgx.Tx) {
		for i := 0; i < polls; i++ {
			if ms, err := receiveOn(b.ctx, tx, "q", "default", 10, ""); err != nil || len(ms) != 0 {
				t.Fatalf("poll %d of an empty queue: %d messages, %v", i, len(ms), err)
			}
		}
	}, "e2_receive_0", "e2_receive_1")
	n := calls["e2_receive_0"] + calls["e2_receive_1"]
	t.Logf("%d of %d idle polls called the receive's copy", n, polls)
	// A note holds 25 ms, renewed by each poll that finds the group idle,
	// and the upkeep is due once a second: a few polls at most call the
	// copy, unless each takes milliseconds; before, every poll did.
	if n > polls/2 {
		t.Fatalf("%d of %d idle polls called the receive's copy", n, polls)
	}
}

// A session that only polls an idle group still runs the queue's upkeep
// about once a second (e2_before_look__s): the idle polls' probe is not
// taken while it is due, so the queue rotates with no other call on it.
func TestV2IdlePollsKeepTheUpkeep(t *testing.T) {
	b := setup(t)
	b.createV2("q", `"rotate_interval": "1 second", "retention": "0 seconds", "slots": 2`)
	b.send(b.pool, "q", `{"n": 1}`)
	b.ack("q", "default", receipts(b.receive("q", "default", 10, ""))...)
	epoch := func() int64 {
		return b.int64("SELECT max(e.epoch) FROM sluice.epoch e JOIN sluice.queue q ON q.id = e.queue_id WHERE q.name = 'q'")
	}
	first := epoch()
	c := b.conn()
	waitFor(t, 10*time.Second, "a rotation by the upkeep of idle polls", func() bool {
		for i := 0; i < 10; i++ { // (a burst: the note holds through most of it)
			if ms := receiveOnConn(b, c, "default", ""); len(ms) != 0 {
				t.Fatalf("got %d messages from an idle queue", len(ms))
			}
		}
		return epoch() > first
	})
}

// A message stored in a slot before a rotation, by a transaction that
// commits after it, is not seen by the idle poll's probe (e2_idle_probe_<slot>
// reads the current slot only) while the session's idle note holds; the
// first receive after the note (a second at most) probes every slot and takes it, with
// no other traffic on the queue.
func TestV2IdlePollSeesAMessageStoredBeforeARotation(t *testing.T) {
	b := setup(t)
	b.createV2("q", `"rotate_interval": "1 second", "slots": 2, "lanes": 2`)
	b.send(b.pool, "q", `{"n": 1}`)
	b.ack("q", "default", receipts(b.receive("q", "default", 10, ""))...)
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	held := b.send(tx, "q", `{"held": 1}`)
	time.Sleep(1100 * time.Millisecond)
	b.v2maintain()
	if e := b.v2epoch("q"); e != 1 {
		t.Fatalf("epoch %d after a rotation, want 1", e)
	}
	c := b.conn()
	var note string
	noted := false
	for i := 0; i < 3 && !noted; i++ {
		if ms := receiveOnConn(b, c, "default", ""); len(ms) != 0 {
			t.Fatalf("got %d messages before the held send committed", len(ms))
		}
		note, noted = idleNote(b, c, 2)
	}
	if !noted {
		t.Fatalf("no idle note after empty receives (%q)", note)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'q'"))
	if slot := b.int64(fmt.Sprintf("SELECT slot FROM %s.msg WHERE id = $1", schema), held); slot != 0 {
		t.Fatalf("the held message is in slot %d, want 0 (the slot before the rotation)", slot)
	}
	start, polls := time.Now(), 0
	waitFor(t, 5*time.Second, "the held message", func() bool {
		polls++
		ms := receiveOnConn(b, c, "default", "")
		if len(ms) > 1 || len(ms) == 1 && ms[0].ID != held {
			t.Fatalf("got %+v, want the held message %d", ms, held)
		}
		return len(ms) == 1
	})
	t.Logf("the held message came after %d polls, %v", polls, time.Since(start))
}

// Engine 2's note holds until a lease of the group may end, a second at
// most (e2_idle_until__s): polls spaced past 25 ms look at no lane while
// nothing is in flight; a lease in flight bounds the note, so the first
// poll after it ends delivers it again; a lane holding a key (which a
// keyed nack of another session retries, unseen by any probe) bounds it
// to 25 ms.
func TestV2IdleNoteLastsUntilALeaseMayEnd(t *testing.T) {
	b := setup(t)
	b.createV2("q", `"lanes": 2`)
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'q'"))
	b.send(b.pool, "q", `{"n": 1}`)
	b.ack("q", "default", receipts(b.receive("q", "default", 10, ""))...)
	c := b.conn()
	// noted polls until the session has a note and returns until when it
	// holds and how long that is past the time read right after it (nil:
	// not noted).
	var until time.Time
	noted := func(what string) *time.Duration {
		t.Helper()
		for i := 0; i < 3; i++ {
			if ms := receiveOnConn(b, c, "default", ""); len(ms) != 0 {
				t.Fatalf("%s: got %d messages from an idle group", what, len(ms))
			}
			var us, left *float64
			if err := c.QueryRow(b.ctx, `
				SELECT split_part(n, ':', 2)::float8,
				       split_part(n, ':', 2)::numeric / 1000 - extract(epoch FROM clock_timestamp()) * 1000
				FROM (SELECT current_setting(sluice._idle_note_name(q.id, g.id), true) AS n
				      FROM sluice.queue q JOIN sluice.consumer_group g ON g.queue_id = q.id
				      WHERE q.name = 'q' AND g.name = 'default') s
				WHERE n ~ '^[0-9]+:[0-9]+$'`).Scan(&us, &left); err != nil && err != pgx.ErrNoRows {
				t.Fatal(err)
			}
			if left != nil {
				until = time.UnixMicro(int64(*us))
				d := time.Duration(*left * float64(time.Millisecond))
				return &d
			}
		}
		return nil
	}

	// Nothing in flight: a second at most, and polls 40 ms apart look at
	// no lane state while it holds.
	left := noted("idle")
	if left == nil || *left < 500*time.Millisecond || *left > time.Second {
		t.Fatalf("idle with nothing in flight: the note holds %v more, want most of a second", left)
	}
	scans := func() int64 {
		var n int64
		if err := c.QueryRow(b.ctx, `
			SELECT coalesce(sum(pg_stat_get_numscans(i.indexrelid) + pg_stat_get_xact_numscans(i.indexrelid)), 0)::bigint
			FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
			WHERE c.relnamespace = $1::regnamespace AND c.relname LIKE 'lease_%' AND c.relkind = 'r'`,
			schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	skipped := 0
	for i := 0; i < 10; i++ {
		time.Sleep(40 * time.Millisecond)
		before := scans()
		if ms := receiveOnConn(b, c, "default", ""); len(ms) != 0 {
			t.Fatalf("poll %d: got %d messages from an idle group", i, len(ms))
		}
		if scans() == before {
			skipped++
		}
	}
	t.Logf("%d of 10 polls 40 ms apart looked at no lane state", skipped)
	if skipped < 5 {
		t.Fatalf("only %d of 10 polls 40 ms apart skipped the lanes", skipped)
	}

	// A lease in flight bounds it: the first poll after the lease ends
	// delivers the message again.
	b.send(b.pool, "q", `{"n": 2}`)
	var id int64
	var ends time.Time
	if err := b.pool.QueryRow(b.ctx, `SELECT id, lease_expires_at FROM sluice.receive('q', 'default', 1, '400 milliseconds')`).
		Scan(&id, &ends); err != nil {
		t.Fatal(err)
	}
	// (the note's end and the lease's, both the server's times)
	if left = noted("a lease in flight"); left == nil || until.After(ends) {
		t.Fatalf("a lease in flight ending at %v: the note holds until %v (%v more)", ends, until, left)
	}
	time.Sleep(time.Until(ends) + 10*time.Millisecond)
	ms := receiveOnConn(b, c, "default", "")
	if len(ms) != 1 || ms[0].ID != id || ms[0].Attempt != 2 {
		t.Fatalf("the first poll after the lease ended: got %+v, want message %d again", ms, id)
	}
	b.ack("q", "default", ms[0].Receipt)

	// A key held (its message in flight): 25 ms at most, or no note.
	b.exec(`SELECT sluice.send('q', '{"n": 3}', key => 'k')`)
	if ms := b.receive("q", "default", 1, ""); len(ms) != 1 {
		t.Fatalf("keyed: got %d messages", len(ms))
	}
	if left := noted("a key held"); left != nil && *left > 25*time.Millisecond {
		t.Fatalf("a key held: the note holds %v more, want 25 ms at most", left)
	}
}
