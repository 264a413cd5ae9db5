package sqlsrc_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The first receive of a new group returns what is committed (no tick, no
// second call needed), whatever the number of lanes.
func TestV2FirstReceiveDelivers(t *testing.T) {
	b := setup(t)
	for _, lanes := range []string{"1", "2", "8", "16"} {
		name := "v2first" + lanes
		b.createV2(name, `"lanes": `+lanes)
		id := b.send(b.pool, name, `{}`)
		ms := b.v2receive(name, "default", 1, "")
		if len(ms) != 1 || ms[0].ID != id {
			t.Errorf("lanes %s: first receive after a committed send returned %v, want [%d]", lanes, v2ids(ms), id)
		}
	}
}

// Once the leases of every lane have ended (all acked), a receive still
// returns messages committed since: passing settled leases does not use up
// the receive.
func TestV2ReceiveAfterSettledLeasesEnded(t *testing.T) {
	b := setup(t)
	b.createV2("v2settled", `"lanes": 8`)
	b.v2sendBatch("v2settled", 16, "")
	got := 0
	for i := 0; i < 50 && got < 16; i++ {
		ms := b.v2receive("v2settled", "default", 10, "200 milliseconds")
		if len(ms) > 0 && b.ack("v2settled", "default", v2receipts(ms)...) != len(ms) {
			t.Fatal("ack did not count")
		}
		got += len(ms)
	}
	if got != 16 {
		t.Fatalf("received %d of 16", got)
	}
	time.Sleep(300 * time.Millisecond) // every lease has ended, all settled
	ids := b.v2sendN("v2settled", 4)
	ms := b.v2receive("v2settled", "default", 10, "")
	if !v2same(v2ids(ms), ids) {
		t.Errorf("one receive after the settled leases ended: %s", v2diff(v2ids(ms), ids))
	}
}

// A session whose receive had to number before it took anything numbers
// first on its next receive of the group (e2_before_look_<slot>, the note
// n): in steady traffic each receive takes what was sent since the last,
// and does not look at every lane for nothing before it numbers. More than
// a few new messages are not numbered that way (a backlog is numbered as
// it is taken): the note goes, and the receive takes what its lanes hold;
// unless the receive takes all of them.
func TestV2ReceiveNumbersFirstAfterItHadTo(t *testing.T) {
	b := setup(t)
	b.createV2("q", `"lanes": 4`)
	c, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	note := func() string {
		var v string
		if err := c.QueryRow(b.ctx, `SELECT coalesce(current_setting('sluice.idle_' || q.id || '_' || g.id, true), '')
		                             FROM sluice.queue q JOIN sluice.consumer_group g ON g.queue_id = q.id
		                             WHERE q.name = 'q' AND g.name = 'default'`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'q'"))
	cuts := func() int64 { return b.int64("SELECT count(*) FROM " + schema + ".cut") }
	receive := func(step string, want map[string]int64) []msg {
		t.Helper()
		return b.receiveCounting(c, 1, step, want)
	}
	body := func(m msg) string {
		var v struct{ N string }
		if err := json.Unmarshal([]byte(m.Body), &v); err != nil {
			t.Fatal(err)
		}
		return v.N
	}

	b.send(b.pool, "q", `{"n": "first"}`)
	if got := receive("no note", map[string]int64{"e2_number_0": 1, "e2_cut_now_0": 1}); len(got) != 1 || body(got[0]) != "first" {
		t.Fatalf("no note: got %v", got)
	}
	if v := note(); v != "n" {
		t.Fatalf("after a receive that had to number: note %q, want n", v)
	}
	for i := range 3 {
		want := fmt.Sprintf("steady %d", i)
		b.send(b.pool, "q", fmt.Sprintf(`{"n": %q}`, want))
		got := receive(want, map[string]int64{"e2_number_0": 0, "e2_cut_now_0": 1, "e2_cut_store": 0})
		if len(got) != 1 || body(got[0]) != want {
			t.Fatalf("%s: got %v", want, got)
		}
		if v := note(); v != "n" {
			t.Fatalf("%s: note %q, want n", want, v)
		}
	}

	// Ten sent are a few: numbered first, one taken; then twenty more
	// sent: the next receive takes one of the nine, and numbers nothing.
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', 'ten') FROM generate_series(1, 10)))`)
	if got := receive("ten", map[string]int64{"e2_number_0": 0, "e2_cut_now_0": 1, "e2_cut_store": 0}); len(got) != 1 || body(got[0]) != "ten" {
		t.Fatalf("ten: got %v", got)
	}
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', 'twenty') FROM generate_series(1, 20)))`)
	before := cuts()
	if got := receive("a backlog", map[string]int64{"e2_number_0": 0, "e2_cut_store": 0}); len(got) != 1 || body(got[0]) != "ten" {
		t.Fatalf("a backlog: got %v, want one of the ten numbered", got)
	}
	if n := cuts(); n != before {
		t.Fatalf("a backlog: %d cuts made, want none (it is numbered as it is taken)", n-before)
	}
	if v := note(); v != "" {
		t.Fatalf("a backlog: note %q, want none", v)
	}

	// More than a few that the receive takes all of are numbered first too
	// (a send of 40, a receive of 50): no look at the lanes, no probe.
	for _, m := range b.receiveCounting(c, 50, "the rest", map[string]int64{"e2_number_0": 1}) {
		b.ack("q", "default", m.Receipt)
	}
	b.send(b.pool, "q", `{"n": "one"}`)
	if got := receive("one", map[string]int64{"e2_number_0": 1}); len(got) != 1 || note() != "n" {
		t.Fatalf("one: got %v, note %q", got, note())
	}
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', 'forty') FROM generate_series(1, 40)))`)
	got := b.receiveCounting(c, 50, "forty", map[string]int64{"e2_number_0": 0, "e2_cut_store": 1})
	if len(got) != 40 || body(got[0]) != "forty" {
		t.Fatalf("forty: got %d messages, want the 40", len(got))
	}
}

// A receive that finds nothing to take looks no further than it must: it
// waits for a lane only when one with positions was held by another
// receive (e2_wait_lane_<slot>), and looks at the lanes whose leases ended
// only when one had (TestReceiveWaitsForABusyLane and the redelivery tests
// check that it still does both when there is something).
func TestV2EmptyReceiveWaitsForNoLane(t *testing.T) {
	b := setup(t)
	b.createV2("q", `"lanes": 4`)
	for i := range 3 {
		if got := b.receiveCounting(b.pool, 1, fmt.Sprintf("empty %d", i), map[string]int64{"e2_wait_lane_0": 0}); len(got) != 0 {
			t.Fatalf("empty %d: got %v", i, got)
		}
	}
}

// One consumer gets unkeyed messages in the order they were numbered when
// they were dealt to fewer lanes than the queue has: a receive that did not
// number them itself looks at the lanes from the one the next cut deals to,
// that is from the lane dealt to longest ago, not from a random one. (A
// pooled client's receives run on any connection: the order must not hang
// on the session.) Here eight messages, numbered by the first receive, one
// a lane; seven receives after it, each its own transaction. With a random
// first lane, seven in order came one time in eight per receive.
func TestV2OneConsumerTakesTheLanesInTheOrderDealt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for round := 0; round < 3; round++ {
		queue := fmt.Sprintf("v2order%d", round)
		b.createV2(queue, `"lanes": 8`)
		ids := append([]int64{b.send(b.pool, queue, `{"n": 0}`)}, b.v2sendBatch(queue, 7, "")...)
		var got []int64
		for i := 0; i < 8; i++ {
			ms := b.v2receive(queue, "default", 1, "")
			if len(ms) != 1 {
				t.Fatalf("round %d, receive %d: %d messages", round, i, len(ms))
			}
			got = append(got, ms[0].ID)
		}
		if fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Fatalf("round %d: one consumer received %v, want the order sent %v", round, got, ids)
		}
		if lanes := b.int64(fmt.Sprintf(`SELECT count(DISTINCT lane) FROM sluice_q%d.batch`,
			b.int64("SELECT id FROM sluice.queue WHERE name = $1", queue))); lanes < 2 {
			t.Fatalf("round %d: the messages went to %d lane(s), want several (the test's premise)", round, lanes)
		}
	}
}

// A queue made and sent to in one transaction delivers the message when
// another transaction, begun after it, committed before the create: the
// first cut's snapshot then has this transaction below its xmax and not in
// progress, and took its messages for numbered (they were never
// delivered; pgmqcompat's TestInstallAsDatabaseOwner lost its message so
// once in CI, under the parallel tests' transactions).
func TestV2CreateAndSendInOneTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	var own int64
	if err := tx.QueryRow(b.ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&own); err != nil {
		t.Fatal(err)
	}
	// a later transaction commits first
	b.exec("CREATE TEMP TABLE later_xid (x int); DROP TABLE later_xid")
	var later int64
	if err := b.pool.QueryRow(b.ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&later); err != nil || later <= own {
		t.Fatalf("the later transaction's xid %d, this one's %d: %v", later, own, err)
	}
	if _, err := tx.Exec(b.ctx, `SELECT sluice.create_queue('v2onetx', '{"engine": 2}')`); err != nil {
		t.Fatal(err)
	}
	id := b.send(tx, "v2onetx", `{"n": 1}`)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	ms := b.v2receive("v2onetx", "default", 10, "")
	if len(ms) != 1 || ms[0].ID != id {
		t.Fatalf("received %v, want message %d, sent in the transaction that made the queue", v2ids(ms), id)
	}
}

// A lease is dated from when the receive holds the lane, not from when the
// receive began: what it waited for before (here the queue's upkeep, whose
// rotation waits up to 100 ms for the cut lock another transaction holds)
// neither shortens the lease nor dates it before the previous holder of the
// lane let go (a nack, a keyed retry). The fault harness orders deliveries
// by these dates, and saw a delivery dated before the nack that freed it.
func TestV2LeaseIsDatedFromWhenTheLaneIsHeld(t *testing.T) {
	b := setup(t)
	b.createV2("dated", `"lanes": 2, "rotate_interval": "1 second"`)
	b.v2sendN("dated", 2)
	first := b.v2receive("dated", "default", 1, "30 seconds") // (numbers both; the second waits in a lane)
	if len(first) != 1 {
		t.Fatalf("first receive: %d messages, want 1", len(first))
	}
	b.ack("dated", "default", first[0].Receipt)
	time.Sleep(1100 * time.Millisecond) // (the epoch is due to rotate)

	holder, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(b.ctx)
	if _, err := holder.Exec(b.ctx, `SELECT pg_advisory_xact_lock(sluice._lock_ns('cut'), id) FROM sluice.queue WHERE name = 'dated'`); err != nil {
		t.Fatal(err)
	}
	// a new session: its first receive of the queue runs the upkeep
	conn, err := pgx.ConnectConfig(b.ctx, b.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(b.ctx)
	var began time.Time
	if err := conn.QueryRow(b.ctx, `SELECT clock_timestamp()`).Scan(&began); err != nil {
		t.Fatal(err)
	}
	ms, err := v2receiveOn(b.ctx, conn, "dated", "default", 1, "30 seconds")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 {
		t.Fatalf("receive after the upkeep's wait: %d messages, want 1", len(ms))
	}
	if dated := ms[0].Expires.Add(-30 * time.Second); dated.Before(began.Add(90 * time.Millisecond)) {
		t.Errorf("the lease is dated %s after the receive began, before its upkeep's 100 ms wait ended",
			dated.Sub(began))
	}
	if e := b.v2epoch("dated"); e != 0 {
		t.Errorf("epoch %d: the upkeep rotated while the cut lock was held", e)
	}
}
