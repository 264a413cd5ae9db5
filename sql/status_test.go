package sqlsrc_test

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// statusRow is every column of sluice.status that can be checked exactly,
// with the oldest pending age reduced to whether there is one.
type statusRow struct {
	Ready, Delayed, InFlight, Dead, Lag int64
	Lwm, Head                           int64
	Pending                             bool
}

func (b *bundle) statusRow(queue string) statusRow {
	b.t.Helper()
	var r statusRow
	if err := b.pool.QueryRow(b.ctx, `SELECT ready, delayed, in_flight, dead, lag, lwm, head,
		oldest_pending_age IS NOT NULL FROM sluice.status($1) WHERE group_name = 'default'`, queue).Scan(
		&r.Ready, &r.Delayed, &r.InFlight, &r.Dead, &r.Lag, &r.Lwm, &r.Head, &r.Pending); err != nil {
		b.t.Fatalf("status: %v", err)
	}
	return r
}

func (b *bundle) wantStatus(what, queue string, want statusRow) {
	b.t.Helper()
	if got := b.statusRow(queue); got != want {
		b.t.Fatalf("status %s:\n got %+v\nwant %+v", what, got, want)
	}
}

// status is exact at every step, without a receive in between to refresh
// it: nothing stale once every message is acked, parked retries count as
// delayed (not in flight) and in lag, a delayed send counts as delayed and
// not in lag, and the low-water mark is the first position not completed.
//
// Positions are an engine's: engine 1 numbers every lane in one sequence,
// engine 2 numbers each lane (and the priority lane) apart, and its cursor,
// head and lwm are sums over the lanes (lwm: 1 + the positions before each
// lane's first one not completed; docs/sql.md, sluice.status). So where a
// position not completed is not the last of all, engine 2's lwm is worked
// out from the lanes of the receipts (lane2Lwm), and after the prioritized
// message is completed, its lane's position counts as passed.
func TestStatusIsExactAtEveryStep(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		statusIsExactAtEveryStep(t, opts, strings.Contains(opts(""), `"engine": 2`))
	})
}

func statusIsExactAtEveryStep(t *testing.T, opts func(string) string, v2 bool) {
	b := setup(t)
	b.createQueue("s", opts(`{"lanes": 4, "max_attempts": 5}`))
	b.exec(`SELECT sluice.send_batch('s', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 100) g))`)
	keyed := b.sendKeyed("s", `{"k": 1}`, "k", 0)
	b.exec(`SELECT sluice.send('s', '{"later": true}', delay => '1 hour')`)
	b.wantStatus("before any receive", "s", statusRow{Ready: 101, Delayed: 1, Lag: 101, Lwm: 1, Head: 0, Pending: true})

	got := b.receive("s", "default", 200, "")
	if len(got) != 101 {
		t.Fatalf("received %d, want 101", len(got))
	}
	b.wantStatus("all leased", "s", statusRow{Delayed: 1, InFlight: 101, Lag: 101, Lwm: 1, Head: 101, Pending: true})

	var rest []string
	var keyedPos, keyedLwm int64
	for _, m := range got {
		if m.ID == keyed {
			keyedPos, keyedLwm = m.Pos, m.Pos
			if v2 {
				keyedLwm = lane2Lwm(t, got, m)
			}
			if !b.nack("s", "default", m.Receipt, "1 hour", "later") {
				t.Fatal("nack")
			}
			continue
		}
		rest = append(rest, m.Receipt)
	}
	b.wantStatus("one keyed message parked for an hour", "s",
		statusRow{Delayed: 2, InFlight: 100, Lag: 101, Lwm: 1, Head: 101, Pending: true})
	if n := b.ack("s", "default", rest...); n != 100 {
		t.Fatalf("acked %d", n)
	}
	b.wantStatus(fmt.Sprintf("all acked but the parked one (position %d)", keyedPos), "s",
		statusRow{Delayed: 2, Lag: 1, Lwm: keyedLwm, Head: 101, Pending: true})

	b.createQueue("d", opts(`{"lanes": 3}`))
	b.exec(`SELECT sluice.send_batch('d', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 50) g))`)
	for {
		ms := b.receive("d", "default", 7, "")
		if len(ms) == 0 {
			break
		}
		b.ack("d", "default", receipts(ms)...)
	}
	b.wantStatus("drained", "d", statusRow{Lwm: 51, Head: 50})

	// A message taken out of order for its priority counts as in flight,
	// then completed, not as ready; a retry meant for another group is not
	// this group's.
	b.createQueue("p", opts(`{"lanes": 1}`))
	b.exec("SELECT sluice.create_group('p', 'other')")
	b.exec(`SELECT sluice.send_batch('p', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 10) g))`)
	b.exec(`SELECT sluice.send('p', '"urgent"', priority => 5)`)
	urgent := b.receive("p", "default", 1, "")
	if len(urgent) != 1 || urgent[0].Priority != 5 {
		t.Fatalf("receive: %+v", urgent)
	}
	b.wantStatus("the prioritized one leased", "p", statusRow{Ready: 10, InFlight: 1, Lag: 11, Lwm: 1, Head: 11, Pending: true})
	b.ack("p", "default", urgent[0].Receipt)
	// (engine 2: the priority lane's one position is completed, lane 0's
	// first is not: 1 + 1 + 0)
	lwm := map[bool]int64{false: 1, true: 2}[v2]
	b.wantStatus("the prioritized one acked", "p", statusRow{Ready: 10, Lag: 10, Lwm: lwm, Head: 11, Pending: true})
	other := b.receive("p", "other", 1, "")
	if !b.nack("p", "other", other[0].Receipt, "0 seconds", "retry") {
		t.Fatal("nack")
	}
	// 'other' receives until it gets the retry copy (meant for 'other'
	// only): numbered by then
	for i := 0; ; i++ {
		ms := b.receive("p", "other", 1, "")
		if i > 11 || len(ms) == 0 {
			t.Fatalf("other never got its retry: %+v", ms)
		}
		if ms[0].Attempt == 2 {
			break
		}
	}
	b.wantStatus("with a retry of another group numbered", "p", statusRow{Ready: 10, Lag: 10, Lwm: lwm, Head: 12, Pending: true})

	// A retry with a backoff is delayed and in lag (the group has not
	// completed it); a delayed send is delayed and not in lag.
	ms := b.receive("p", "default", 1, "")
	if len(ms) != 1 || !b.nack("p", "default", ms[0].Receipt, "1 hour", "later") {
		t.Fatalf("receive and nack: %+v", ms)
	}
	b.exec(`SELECT sluice.send('p', '"later"', delay => '1 hour')`)
	b.wantStatus("with a retry backed off and a delayed send", "p",
		statusRow{Ready: 9, Delayed: 2, Lag: 10, Lwm: lwm + 1, Head: 12, Pending: true})
}

// lane2Lwm is engine 2's lwm when every message of got (one receive) is
// completed but m: 1 + the positions of the other lanes + those before m's
// in its lane. A receipt of engine 2 is slot.pos.lane.lease.token.
func lane2Lwm(t *testing.T, got []msg, m msg) int64 {
	t.Helper()
	lane := func(r string) string {
		parts := strings.Split(r, ".")
		if len(parts) != 5 {
			t.Fatalf("receipt %q is not of engine 2", r)
		}
		return parts[2]
	}
	lwm := int64(1)
	for _, x := range got {
		if lane(x.Receipt) != lane(m.Receipt) || x.Pos < m.Pos {
			lwm++
		}
	}
	return lwm
}

// deadCounts is each group's dead and dead_lettered in sluice.status.
func (b *bundle) deadCounts(queue string) map[string][2]int64 {
	b.t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT coalesce(group_name, ''), dead, dead_lettered FROM sluice.status($1)`, queue)
	if err != nil {
		b.t.Fatalf("status: %v", err)
	}
	defer rows.Close()
	out := map[string][2]int64{}
	for rows.Next() {
		var g string
		var dead, total *int64
		if err := rows.Scan(&g, &dead, &total); err != nil {
			b.t.Fatalf("status: %v", err)
		}
		if dead == nil || total == nil {
			out[g] = [2]int64{-1, -1}
			continue
		}
		out[g] = [2]int64{*dead, *total}
	}
	if err := rows.Err(); err != nil {
		b.t.Fatalf("status: %v", err)
	}
	return out
}

func (b *bundle) wantDead(what, queue string, want map[string][2]int64) {
	b.t.Helper()
	if got := b.deadCounts(queue); !maps.Equal(got, want) {
		b.t.Fatalf("status %s: (dead, dead_lettered) by group %v, want %v", what, got, want)
	}
}

// dead_lettered counts every dead letter of a group, redriven ones
// included: a nack and an expired lease past max_attempts add one, a
// redrive leaves it (dead goes down), another group's and another queue's
// are apart, a seek keeps it, and a group dropped and created again starts
// from 0.
func TestStatusDeadLetteredCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("dl", `{"max_attempts": 2}`)
	b.createQueue("dl2", `{"max_attempts": 1}`)
	b.exec("SELECT sluice.create_group('dl', 'other')")
	b.exec(`SELECT sluice.send('dl2', '1')`)
	b.wantDead("before any failure", "dl", map[string][2]int64{"default": {0, 0}, "other": {0, 0}})

	// A nack at the last attempt dead-letters; one before it retries.
	m1 := b.send(b.pool, "dl", `{"n": 1}`)
	m := b.receive("dl", "default", 10, "")
	if len(m) != 1 || m[0].ID != m1 || !b.nack("dl", "default", m[0].Receipt, "0 seconds", "first") {
		t.Fatalf("receive and nack: %+v", m)
	}
	b.wantDead("after a retry", "dl", map[string][2]int64{"default": {0, 0}, "other": {0, 0}})
	m = b.receive("dl", "default", 10, "")
	if len(m) != 1 || m[0].ID != m1 || m[0].Attempt != 2 || !b.nack("dl", "default", m[0].Receipt, "", "second") {
		t.Fatalf("the retry: %+v", m)
	}
	b.wantDead("after a nack at the last attempt", "dl", map[string][2]int64{"default": {1, 1}, "other": {0, 0}})

	// An expired lease at the last attempt: the next receive dead-letters it.
	m2 := b.send(b.pool, "dl", `{"n": 2}`)
	for attempt := 1; attempt <= 2; attempt++ {
		m = b.receive("dl", "default", 10, "100 milliseconds")
		if len(m) != 1 || m[0].ID != m2 || m[0].Attempt != attempt {
			t.Fatalf("attempt %d: %+v", attempt, m)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if m = b.receive("dl", "default", 10, ""); len(m) != 0 {
		t.Fatalf("delivered past max_attempts: %+v", m)
	}
	b.wantDead("after a lease expired at the last attempt", "dl", map[string][2]int64{"default": {2, 2}, "other": {0, 0}})

	// Another group's and another queue's dead letters are theirs.
	o := b.receive("dl", "other", 10, "")
	if len(o) != 2 || b.ack("dl", "other", o[1].Receipt) != 1 || !b.nack("dl", "other", o[0].Receipt, "0 seconds", "x") {
		t.Fatalf("other: %+v", o)
	}
	o = b.receive("dl", "other", 10, "")
	if len(o) != 1 || o[0].Attempt != 2 || !b.nack("dl", "other", o[0].Receipt, "", "x") {
		t.Fatalf("other's retry: %+v", o)
	}
	m = b.receive("dl2", "default", 1, "")
	if len(m) != 1 || !b.nack("dl2", "default", m[0].Receipt, "", "x") {
		t.Fatalf("dl2: %+v", m)
	}
	b.wantDead("with a dead letter of another group", "dl", map[string][2]int64{"default": {2, 2}, "other": {1, 1}})
	b.wantDead("of another queue", "dl2", map[string][2]int64{"default": {1, 1}})

	// A redrive: dead goes down, dead_lettered stays; a redriven copy
	// dead-lettered again counts once more.
	if n := b.int64("SELECT sluice.redrive('dl', 'default', NULL)"); n != 2 {
		t.Fatalf("redrove %d, want 2", n)
	}
	b.wantDead("after a redrive", "dl", map[string][2]int64{"default": {0, 2}, "other": {1, 1}})
	again := b.receive("dl", "default", 10, "")
	if len(again) != 2 || b.ack("dl", "default", again[1].Receipt) != 1 ||
		!b.nack("dl", "default", again[0].Receipt, "0 seconds", "x") {
		t.Fatalf("the redriven copies: %+v", again)
	}
	m = b.receive("dl", "default", 10, "")
	if len(m) != 1 || m[0].Attempt != 2 || !b.nack("dl", "default", m[0].Receipt, "", "x") {
		t.Fatalf("the redriven copy's retry: %+v", m)
	}
	b.wantDead("after a redriven copy died again", "dl", map[string][2]int64{"default": {1, 3}, "other": {1, 1}})

	// A seek keeps the group's dead letters; a drop forgets them.
	b.exec("SELECT sluice.seek_group('dl', 'default', 'earliest')")
	b.wantDead("after a seek", "dl", map[string][2]int64{"default": {1, 3}, "other": {1, 1}})
	b.exec("SELECT sluice.drop_group('dl', 'other')")
	b.exec("SELECT sluice.create_group('dl', 'other')")
	b.wantDead("after other was dropped and created again", "dl", map[string][2]int64{"default": {1, 3}, "other": {0, 0}})
	// A queue without groups: NULL, as dead.
	b.exec("SELECT sluice.drop_group('dl2', 'default')")
	b.wantDead("of a queue without groups", "dl2", map[string][2]int64{"": {-1, -1}})
}

// status() of every queue reads each queue in a subtransaction that it then
// rolls back, so that the locks of one queue's read (its partitions and
// indexes, ~80) are not all held until the caller's transaction ends: the
// lock table is shared, and enough queues made status() fail with "out of
// shared memory". After it, the transaction holds no lock on any queue's
// tables, and the rows are those of status(queue), queue by queue.
func TestStatusOfEveryQueueReleasesLocks(t *testing.T) {
	b := setup(t)
	for _, name := range []string{"sa", "sb", "sc"} {
		b.createQueue(name, "")
		b.send(b.pool, name, `{}`)
		b.exec(fmt.Sprintf("SELECT sluice.create_group('%s', 'other')", name))
	}
	b.receive("sb", "default", 1, "")
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	all := map[string]string{}
	rows, err := tx.Query(b.ctx, `SELECT queue, group_name, s::text FROM sluice.status() s WHERE queue IN ('sa', 'sb', 'sc')`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var q, g, row string
		if err := rows.Scan(&q, &g, &row); err != nil {
			t.Fatal(err)
		}
		all[q+"/"+g] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var held int64
	if err := tx.QueryRow(b.ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
	                               JOIN pg_namespace n ON n.oid = c.relnamespace
	                               WHERE l.pid = pg_backend_pid() AND n.nspname LIKE 'sluice\_q%'`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Fatalf("after status(), the transaction holds %d locks on the queues' tables, want 0", held)
	}
	if len(all) != 6 {
		t.Fatalf("status() gave %d rows for the 3 queues, want 6: %v", len(all), all)
	}
	for _, name := range []string{"sa", "sb", "sc"} {
		one, err := tx.Query(b.ctx, `SELECT group_name, s::text FROM sluice.status($1) s`, name)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for one.Next() {
			var g, row string
			if err := one.Scan(&g, &row); err != nil {
				t.Fatal(err)
			}
			n++
			// (oldest_pending_age moves with the clock: compare the rest)
			if strip(all[name+"/"+g]) != strip(row) {
				t.Fatalf("%s/%s: status() %s, status(queue) %s", name, g, all[name+"/"+g], row)
			}
		}
		if err := one.Err(); err != nil || n != 2 {
			t.Fatalf("status(%s): %d rows, %v", name, n, err)
		}
	}
}

// strip drops the interval column (oldest_pending_age) from a queue_status
// row's text.
func strip(row string) string {
	return regexp.MustCompile(`"?\d+ days? \d\d:\d\d:\d\d[.\d]*"?|"?\d\d:\d\d:\d\d[.\d]*"?`).ReplaceAllString(row, "")
}

// Engine 2 counts delayed messages by a partial index on msg (due): a queue
// made before it gets it when the functions are loaded (_instantiate_v2),
// and status counts the same.
func TestStatusV2DelayedIndexForOlderQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("old", `{"engine": 2}`)
	b.exec(`SELECT sluice.send('old', '1', delay => '1 hour')`)
	b.exec(`SELECT sluice.send('old', '2')`)
	qid := b.queueID("old")
	index := func() bool {
		t.Helper()
		var ok bool
		if err := b.pool.QueryRow(b.ctx, "SELECT to_regclass($1) IS NOT NULL",
			fmt.Sprintf("sluice_q%d.msg_due_idx", qid)).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !index() {
		t.Fatal("a new queue of engine 2 has no msg_due_idx")
	}
	b.exec(fmt.Sprintf("DROP INDEX sluice_q%d.msg_due_idx", qid))
	b.exec("SELECT sluice._instantiate_v2($1)", qid)
	if !index() {
		t.Fatal("_instantiate_v2 did not make msg_due_idx")
	}
	b.wantStatus("one delayed, one not", "old", statusRow{Ready: 1, Delayed: 1, Lag: 1, Lwm: 1, Pending: true})
}

// status read while producers and consumers run never reports a count
// below zero, nor a head behind the cursor: it reads the newest cut, the
// messages not numbered yet and each group's lanes in statements of their
// own, and a cut committed between them (and taken at once) moves a
// lane's cursor past the head status read. The mix has what status counts
// apart: keys (tails waiting behind a message in flight), priorities (a
// lane of their own), delayed sends, nacks (keyed retries in place, parked
// while their backoff runs; unkeyed retry copies), leases left to expire,
// and two groups.
func TestStatusUnderLoadNeverNegative(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createV2("busy", `"lanes": 2, "max_attempts": 1000, "backoff_base": "20 milliseconds", "backoff_max": "40 milliseconds"`)
	b.exec("SELECT sluice.create_group('busy', 'other')")
	ctx, cancel := context.WithTimeout(b.ctx, 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := f(); err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
			}
		}()
	}
	var sent atomic.Int64
	run(func() error {
		n := sent.Add(1)
		var key any
		if n%3 != 0 {
			key = fmt.Sprint("k", n%7)
		}
		delay := "0"
		if n%9 == 0 {
			delay = "30 milliseconds"
		}
		_, err := b.pool.Exec(ctx, "SELECT sluice.send('busy', '{}', key => $1, priority => $2, delay => $3::interval)",
			key, n%5/4, delay) // every fifth prioritized
		return err
	})
	var taken atomic.Int64
	for _, group := range []string{"default", "default", "other"} {
		run(func() error {
			ms, err := v2receiveOn(ctx, b.pool, "busy", group, 3, "200 milliseconds")
			if err != nil || len(ms) == 0 {
				time.Sleep(5 * time.Millisecond) // (no spinning on an empty group)
				return err
			}
			var acks []string
			for _, m := range ms {
				switch n := taken.Add(1); {
				case n%11 == 0: // left to expire
				case n%6 == 0:
					if _, err := b.pool.Exec(ctx, "SELECT sluice.nack('busy', $1, $2)", group, m.Receipt); err != nil {
						return err
					}
				default:
					acks = append(acks, m.Receipt)
				}
			}
			if len(acks) > 0 {
				_, err = b.pool.Exec(ctx, "SELECT sluice.ack('busy', $1, $2)", group, acks)
			}
			return err
		})
	}
	reads := 0
	for ctx.Err() == nil {
		rows, err := b.pool.Query(ctx, `SELECT group_name, ready, waiting, delayed, in_flight, lag, cursor, head, lwm
			FROM sluice.status('busy')`)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatalf("status: %v", err)
		}
		reads++
		type row struct {
			g                                                         string
			ready, waiting, delayed, inFlight, lag, cursor, head, lwm int64
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			err := r.Scan(&x.g, &x.ready, &x.waiting, &x.delayed, &x.inFlight, &x.lag, &x.cursor, &x.head, &x.lwm)
			return x, err
		})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatalf("status: %v", err)
		}
		for _, x := range got {
			if x.ready < 0 || x.waiting < 0 || x.delayed < 0 || x.inFlight < 0 || x.lag < 0 || x.head < x.cursor || x.lwm > x.head+1 {
				t.Fatalf("status read %d: %+v", reads, x)
			}
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if reads < 20 || sent.Load() < 100 || taken.Load() < 100 {
		t.Fatalf("%d status reads, %d sends, %d taken: too few to tell", reads, sent.Load(), taken.Load())
	}
}
