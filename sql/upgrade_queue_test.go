package sqlsrc_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// upgradeQueue upgrades a queue to engine 2 and checks it said so.
func (b *bundle) upgradeQueue(queue string) {
	b.t.Helper()
	var ok bool
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.upgrade_queue($1)", queue).Scan(&ok); err != nil || !ok {
		b.t.Fatalf("upgrade_queue(%s): %v, %v", queue, ok, err)
	}
}

// A queue of engine 1 holding messages ready (keyed and not), delayed,
// leased and dead-lettered, in two groups at different places, is upgraded
// to engine 2: nothing is lost, a receipt of before the upgrade still acks,
// a key's order holds across it (its messages of before first), the dead
// letters stay the queue's, message ids go on from the old ones, and once
// every group has drained the old storage maintain() drops it.
func TestUpgradeQueueKeepsEverything(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("up", `{"engine": 1, "max_attempts": 1, "lanes": 1}`)
	b.exec("SELECT sluice.create_group('up', 'other')")
	d1 := b.sendKeyed("up", `"dies"`, "", 0)
	got := b.receive("up", "default", 1, "")
	wantIDs(t, "d1", got, d1)
	b.nack("up", "default", got[0].Receipt, "0", "poison") // (max_attempts 1: a dead letter)
	k1 := b.sendKeyed("up", `"k1"`, "k", 0)
	leased := b.receive("up", "default", 1, "")
	wantIDs(t, "k1", leased, k1)
	u1 := b.sendKeyed("up", `"u1"`, "", 0)
	delayed := b.int64(`SELECT sluice.send('up', '"later"', delay => '1500 milliseconds')`)
	got = b.receive("up", "other", 10, "")
	wantIDs(t, "other before the upgrade", got, d1, k1, u1)
	b.ack("up", "other", got[0].Receipt)
	b.nack("up", "other", got[2].Receipt, "0", "dies for other") // (k1 stays leased by other)
	otherLease := got[1]

	b.upgradeQueue("up")
	if e := b.int64("SELECT engine FROM sluice.queue WHERE name = 'up'"); e != 2 {
		t.Fatalf("engine %d after the upgrade", e)
	}
	if n := b.int64("SELECT count(*) FROM sluice.list_queues()"); n != 1 {
		t.Fatalf("list_queues lists %d queues during the upgrade, want 1", n)
	}
	for g, want := range map[string]int64{"default": 1, "other": 1} {
		if n := b.int64("SELECT count(*) FROM sluice.dead_letters('up', $1)", g); n != want {
			t.Fatalf("%d dead letters of %s after the upgrade, want %d", n, g, want)
		}
	}
	st := b.status("up")
	if s := st["default"]; s.Ready != 1 || s.InFlight != 1 || s.Delayed != 1 {
		t.Fatalf("status of default during the upgrade: %+v, want 1 ready, 1 in flight, 1 delayed", s)
	}
	k2 := b.sendKeyed("up", `"k2"`, "k", 0)
	if k2 <= delayed {
		t.Fatalf("id %d after the upgrade, not above the old ids (%d)", k2, delayed)
	}
	// default: u1 from the old storage; not k2, k1 being leased there
	got = b.receive("up", "default", 10, "")
	wantIDs(t, "default while k1 is leased", got, u1)
	if n := b.ack("up", "default", leased[0].Receipt, got[0].Receipt); n != 2 {
		t.Fatalf("ack of receipts of the old storage counted %d, want 2", n)
	}
	wantIDs(t, "default, the old storage done but for a delay", b.receive("up", "default", 10, ""), k2)
	time.Sleep(1600 * time.Millisecond)
	got = b.receive("up", "default", 10, "")
	wantIDs(t, "default after the delay", got, delayed)
	b.ack("up", "default", got[0].Receipt)
	// other: k1 is leased there; then its rest
	if got := b.receive("up", "other", 10, ""); len(got) != 1 || got[0].ID != delayed {
		t.Fatalf("other while k1 is leased: %v, want the delayed one only", ids(got))
	} else {
		b.ack("up", "other", got[0].Receipt)
	}
	b.exec("SELECT count(*) FROM sluice.maintain()")
	if n := b.int64("SELECT count(*) FROM sluice.queue"); n != 2 {
		t.Fatalf("%d queue rows while other has not drained the old storage, want 2", n)
	}
	b.ack("up", "other", otherLease.Receipt)
	wantIDs(t, "other at last", b.receive("up", "other", 10, ""), k2)
	b.exec("SELECT count(*) FROM sluice.maintain()")
	if n := b.int64("SELECT count(*) FROM sluice.queue"); n != 1 {
		t.Fatalf("%d queue rows after the drain and maintain(), want 1 (the old storage dropped)", n)
	}
	for g, want := range map[string]int64{"default": 1, "other": 1} {
		if n := b.int64("SELECT count(*) FROM sluice.dead_letters('up', $1)", g); n != want {
			t.Fatalf("%d dead letters of %s after the old storage went, want %d", n, g, want)
		}
	}
	var ok bool
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.upgrade_queue('up')").Scan(&ok); err != nil || ok {
		t.Fatalf("a second upgrade: %v, %v; want false", ok, err)
	}
}

// Producers and consumers run while the queue is upgraded: no call fails,
// every message committed is received and acked exactly once (leases do not
// expire in this test), and each key's messages are processed in send
// order, across the upgrade.
func TestUpgradeQueueUnderLoad(t *testing.T) {
	t.Parallel()
	upgradeUnderLoad(setup(t), `{"engine": 1, "lanes": 4}`)
}

// The same with every session's deadlock_timeout at 60 ms (above the 50 ms
// a reclaim waits for a slot's leaf, below the 100 ms a receive waits for
// the cut lock or a lane: docs/operations.md) and a rotate_interval of 200
// ms, so that the receives' upkeep rotates and reclaims both storages while
// the upgrade runs and drains: a cycle through the waits of the upkeep, the
// upgrade's finish and the receives fails a call with "deadlock detected"
// instead of ending when the waits run out (docs/design.md, "No receive
// waits for another in a cycle", found such cycles by the whole suite run
// with a short deadlock_timeout).
func TestUpgradeQueueUnderLoadShortDeadlockTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pool := poolWithDeadlockTimeout(ctx, t, "60ms", 0)
	upgradeUnderLoad(&bundle{t: t, ctx: ctx, pool: pool}, `{"engine": 1, "lanes": 4, "rotate_interval": "200 milliseconds"}`)
}

// upgradeUnderLoad makes queue upl with the options given (engine 1), sends
// keyed messages from two producers and consumes from four consumers while
// it upgrades the queue to engine 2, then checks that no call failed, each
// message came once, each key in order, and that maintain() dropped the
// old storage.
func upgradeUnderLoad(b *bundle, options string) {
	t := b.t
	b.createQueue("upl", options)
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	const keys = 20
	var (
		mu       sync.Mutex
		sent     = map[int64]int{} // id -> key index
		order    = map[int][]int64{}
		seen     = map[int64]int{}
		failures atomic.Int64
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	fail := func(what string, err error) {
		if failures.Add(1) <= 5 {
			t.Errorf("%s: %v", what, err)
		}
	}
	for p := 0; p < 2; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				k := (2*i + p) % keys // (each key one producer's: its sends commit in order)
				var id int64
				if err := b.pool.QueryRow(ctx, "SELECT sluice.send('upl', $1::jsonb, key => $2)",
					fmt.Sprint(i), fmt.Sprintf("k%d", k)).Scan(&id); err != nil {
					fail("send", err)
					return
				}
				mu.Lock()
				sent[id] = k
				order[k] = append(order[k], id)
				mu.Unlock()
			}
		}(p)
	}
	var processed []int64
	consume := func() {
		defer wg.Done()
		for {
			ms, err := receiveOn(ctx, b.pool, "upl", "default", 5, "")
			if err != nil {
				fail("receive", err)
				return
			}
			if len(ms) == 0 {
				if stop.Load() {
					return
				}
				time.Sleep(5 * time.Millisecond)
				continue
			}
			mu.Lock()
			for _, m := range ms {
				seen[m.ID]++
				processed = append(processed, m.ID)
			}
			mu.Unlock()
			var n int
			if err := b.pool.QueryRow(ctx, "SELECT sluice.ack('upl', 'default', $1)", receipts(ms)).Scan(&n); err != nil {
				fail("ack", err)
				return
			} else if n != len(ms) {
				fail("ack", fmt.Errorf("acked %d of %d", n, len(ms)))
			}
		}
	}
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go consume()
	}
	time.Sleep(1500 * time.Millisecond)
	b.upgradeQueue("upl")
	boundary := b.int64(`SELECT s.last_value FROM pg_sequences s, sluice.queue q
		WHERE q.name = 'upl' AND format('%I.%I', s.schemaname, s.sequencename)::regclass = q.id_seq`)
	time.Sleep(1500 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	// what is left after the producers stopped
	for i := 0; i < 50; i++ {
		ms := b.receive("upl", "default", 100, "")
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			seen[m.ID]++
			processed = append(processed, m.ID)
		}
		b.ack("upl", "default", receipts(ms)...)
	}
	if failures.Load() > 0 {
		t.Fatalf("%d calls failed", failures.Load())
	}
	for id := range sent {
		if seen[id] != 1 {
			t.Errorf("message %d received %d times", id, seen[id])
		}
	}
	// per key: processed in send order (a receive's run of one key is in order)
	pos := map[int64]int{}
	for i, id := range processed {
		pos[id] = i
	}
	for k, idsOfKey := range order {
		for i := 1; i < len(idsOfKey); i++ {
			if pos[idsOfKey[i]] < pos[idsOfKey[i-1]] {
				t.Fatalf("key %d: %d processed before %d (ids after about %d went to the new storage)", k, idsOfKey[i], idsOfKey[i-1], boundary)
			}
		}
	}
	b.exec("SELECT count(*) FROM sluice.maintain()")
	if n := b.int64("SELECT count(*) FROM sluice.queue"); n != 1 {
		t.Fatalf("%d queue rows after the drain, want 1", n)
	}
	t.Logf("%d messages over %d keys, upgraded while flowing", len(sent), keys)
}

// With no sluice.maintain() at all, the receives' own upkeep (once per
// rotate_interval) drops the predecessor once every group has drained it.
func TestUpgradeFinishedByReceives(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("upr", `{"engine": 1, "rotate_interval": "100 milliseconds"}`)
	old := b.sendKeyed("upr", `1`, "", 0)
	b.upgradeQueue("upr")
	got := b.receive("upr", "default", 10, "")
	wantIDs(t, "the old message", got, old)
	b.ack("upr", "default", got[0].Receipt)
	for i := 0; i < 20 && b.int64("SELECT count(*) FROM sluice.queue") > 1; i++ {
		time.Sleep(150 * time.Millisecond)
		b.sendKeyed("upr", `2`, "", 0)
		for _, m := range b.receive("upr", "default", 10, "") {
			b.ack("upr", "default", m.Receipt)
		}
	}
	if n := b.int64("SELECT count(*) FROM sluice.queue"); n != 1 {
		t.Fatalf("%d queue rows after 20 rounds of receives, want 1 (the old storage dropped)", n)
	}
}

// An upkeep that holds a lock receives may wait for does not wait for the
// queue's lock to drop a drained predecessor: receives hold that lock
// shared while they wait, and the two would wait for each other until the
// upkeep's wait ran out (50 ms), or a receive would fail with "deadlock
// detected" under a deadlock_timeout below that (seen in
// TestUpgradeQueueUnderLoadShortDeadlockTimeout, for both locks below).
// Built step by step: R holds the queue's lock shared, as every receive
// does; U takes the cut lock as a rotation does (noted in
// sluice.holds_lock), or a lane's, as the receive an upkeep runs in does;
// R waits for it with deadlock_timeout = 40ms; then U's _finish_upgrade,
// with every group drained. It must not wait: R gets the lock once U
// ends, and the predecessor stays for a later upkeep.
func TestFinishUpgradeDoesNotWaitHoldingALockReceivesWaitFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, lock string }{
		{"cut", "SELECT pg_advisory_xact_lock(sluice._lock_ns('cut'), q.id), set_config('sluice.holds_lock', 'y', true) FROM sluice.queue q WHERE q.name = 'fu'"},
		{"lane", "SELECT pg_advisory_xact_lock(sluice._lane_lock(g.id, 0)) FROM sluice.consumer_group g JOIN sluice.queue q ON q.id = g.queue_id WHERE q.name = 'fu'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			finishHoldingALock(t, c.lock)
		})
	}
}

// finishHoldingALock runs TestFinishUpgradeDoesNotWaitHoldingALockReceivesWaitFor
// with U's lock taken by the statement given (its first column the lock
// call), which R then waits for.
func finishHoldingALock(t *testing.T, lock string) {
	b := setup(t)
	b.createQueue("fu", `{"engine": 1}`)
	b.upgradeQueue("fu")
	// (the first call marks the drained groups and stops there)
	b.exec("SELECT sluice._finish_upgrade(q) FROM sluice.queue q WHERE q.name = 'fu'")
	if n := b.int64("SELECT count(*) FROM sluice.consumer_group g JOIN sluice.queue q ON q.id = g.queue_id WHERE q.name <> 'fu' AND NOT g.drained"); n != 0 {
		t.Fatalf("%d groups of the predecessor not marked drained", n)
	}
	conns := make([]*pgxpool.Conn, 2)
	for i := range conns {
		c, err := b.pool.Acquire(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		conns[i] = c
	}
	txR, err := conns[0].Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txR.Rollback(b.ctx) //nolint:errcheck
	txU, err := conns[1].Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txU.Rollback(b.ctx) //nolint:errcheck
	var pidR int
	if err := txR.QueryRow(b.ctx, `SELECT pg_backend_pid() FROM (SELECT set_config('deadlock_timeout', '40ms', true),
		pg_advisory_xact_lock_shared(sluice._lock_ns('queue'), hashtext('fu'))) x`).Scan(&pidR); err != nil {
		t.Skipf("cannot set deadlock_timeout (not a superuser?): %v", err)
	}
	if _, err := txU.Exec(b.ctx, lock); err != nil {
		t.Fatal(err)
	}
	doneR := make(chan error, 1)
	go func() {
		_, err := txR.Exec(b.ctx, lock)
		doneR <- err
	}()
	// (polled without waitFor's sleep: U must start within R's 40 ms)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if b.int64("SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted", pidR) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("R never waited for U's lock")
		}
	}
	var dropped bool
	if err := txU.QueryRow(b.ctx, "SELECT sluice._finish_upgrade(q) FROM sluice.queue q WHERE q.name = 'fu'").Scan(&dropped); err != nil {
		t.Fatalf("_finish_upgrade: %v", err)
	}
	if err := txU.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-doneR; err != nil {
		t.Fatalf("the receive's wait for U's lock: %v", err)
	}
	if dropped {
		t.Fatal("_finish_upgrade dropped the predecessor while a receive held the queue's lock")
	}
	if err := txR.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	// the next call, holding nothing, drops it
	b.exec("SELECT sluice._finish_upgrade(q) FROM sluice.queue q WHERE q.name = 'fu'")
	if n := b.int64("SELECT count(*) FROM sluice.queue"); n != 1 {
		t.Fatalf("%d queue rows after the last call, want 1", n)
	}
}

// A finish that fails for anything but a lock (here an event trigger that
// refuses the drop of the old queue's sequence, as a DDL policy might) is a
// WARNING, not an error: the call that ran it goes on, nothing of the
// finish stays (the old storage and its row are kept, lock_timeout is the
// caller's again), the queue keeps working, and that session does not try
// again for a minute. Another session finishes it once the cause is gone.
func TestFinishUpgradeWarnsOnAFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("fw", `{"engine": 1}`)
	b.upgradeQueue("fw")
	// (the first call marks the drained groups and stops there)
	b.exec("SELECT sluice._finish_upgrade(q) FROM sluice.queue q WHERE q.name = 'fw'")
	b.exec(`CREATE FUNCTION public.refuse_drop() RETURNS event_trigger LANGUAGE plpgsql
		AS $$ BEGIN RAISE EXCEPTION 'drops are refused here'; END $$`)
	b.exec(`CREATE EVENT TRIGGER refuse_drop ON ddl_command_start WHEN TAG IN ('DROP SEQUENCE')
		EXECUTE FUNCTION public.refuse_drop()`)

	var warnings []*pgconn.Notice
	var mu sync.Mutex
	cfg := b.pool.Config().ConnConfig.Copy()
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		warnings = append(warnings, n)
		mu.Unlock()
	}
	conn, err := pgx.ConnectConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(b.ctx)
	finish := func(c *pgx.Conn) bool {
		t.Helper()
		var dropped bool
		if err := c.QueryRow(b.ctx, "SELECT sluice._finish_upgrade(q) FROM sluice.queue q WHERE q.name = 'fw'").Scan(&dropped); err != nil {
			t.Fatalf("_finish_upgrade: %v", err)
		}
		return dropped
	}
	if _, err := conn.Exec(b.ctx, "SET lock_timeout = '7s'"); err != nil {
		t.Fatal(err)
	}
	if finish(conn) {
		t.Fatal("_finish_upgrade dropped the predecessor while its drop was refused")
	}
	mu.Lock()
	if len(warnings) != 1 || warnings[0].Severity != "WARNING" ||
		!strings.Contains(warnings[0].Message, "could not finish: drops are refused here (SQLSTATE P0001)") {
		t.Fatalf("notices %+v, want one WARNING that the upgrade could not finish, with the cause", warnings)
	}
	mu.Unlock()
	if n := b.int64("SELECT count(*) FROM sluice.queue"); n != 2 {
		t.Fatalf("%d queue rows after the failed finish, want 2 (the old one kept)", n)
	}
	var timeout string
	if err := conn.QueryRow(b.ctx, "SHOW lock_timeout").Scan(&timeout); err != nil || timeout != "7s" {
		t.Fatalf("lock_timeout %q (%v) after the failed finish, want the session's 7s", timeout, err)
	}
	// the queue works, on that session too, and its upkeep does not fail
	id := b.sendKeyed("fw", `1`, "", 0)
	got, err := receiveOn(b.ctx, conn, "fw", "default", 10, "")
	if err != nil {
		t.Fatalf("receive on the session whose finish failed: %v", err)
	}
	wantIDs(t, "after the failed finish", got, id)
	b.ack("fw", "default", got[0].Receipt)
	if _, err := conn.Exec(b.ctx, "SELECT * FROM sluice.maintain()"); err != nil {
		t.Fatalf("maintain on the session whose finish failed: %v", err)
	}

	b.exec("DROP EVENT TRIGGER refuse_drop")
	// that session waits a minute before it tries again; another one finishes
	if finish(conn) {
		t.Fatal("_finish_upgrade tried again at once in the session whose finish failed")
	}
	other, err := pgx.ConnectConfig(b.ctx, b.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(b.ctx)
	if !finish(other) {
		t.Fatal("_finish_upgrade of another session did not drop the predecessor once the drop was allowed")
	}
	if n := b.int64("SELECT count(*) FROM sluice.queue"); n != 1 {
		t.Fatalf("%d queue rows after the finish, want 1", n)
	}
}
