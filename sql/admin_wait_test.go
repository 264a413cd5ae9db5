package sqlsrc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// drop_queue, purge_queue and upgrade_queue take the queue's lock
// exclusively, and every new call on the queue waits behind a waiting
// exclusive request. With a transaction left open on the queue (here a
// receive whose transaction has not ended), such a call used to wait until
// that transaction ended, and every send and receive of the queue with it.
// Now, once a holder has held it for a second, it waits in short tries,
// between which the queue's calls go on, for lock_timeout at most, then
// fails with 55P03 naming the holder's pid, having changed nothing; once
// that transaction ends it goes through.
func TestAdminCallsDoNotHoldTheQueueUpBehindAnOpenTransaction(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		call    string
		engine  int
		changed string // a count that the call changes when it is done
	}{
		{"SELECT sluice.purge_queue('aw')", 2, "SELECT count(*) FROM sluice.peek('aw', 10)"},
		{"SELECT sluice.drop_queue('aw')", 2, "SELECT count(*) FROM sluice.queue WHERE name = 'aw'"},
		{"SELECT sluice.upgrade_queue('aw')", 1, "SELECT count(*) FROM sluice.queue"},
	} {
		t.Run(strings.Fields(c.call)[1], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.createQueue("aw", fmt.Sprintf(`{"engine": %d}`, c.engine))
			b.send(b.pool, "aw", `1`)

			holder, err := b.pool.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback(b.ctx) //nolint:errcheck
			var pid int
			if err := holder.QueryRow(b.ctx, "SELECT pg_backend_pid() FROM sluice.receive('aw', 'default', 1)").Scan(&pid); err != nil {
				t.Fatalf("the receive left open: %v", err)
			}

			admin, err := b.pool.Acquire(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Release()
			if _, err := admin.Exec(b.ctx, "SET lock_timeout = '5s'"); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := admin.Exec(b.ctx, c.call)
				done <- err
			}()
			// (its first try waits up to a second, as PostgreSQL would; the
			// short tries come once the holder has held the lock that long)
			time.Sleep(1500 * time.Millisecond)
			// a send while the call waits, the holder still open: it goes on
			// (before, it waited for the call, which waited for the holder)
			ctx, cancel := context.WithTimeout(b.ctx, 1500*time.Millisecond)
			defer cancel()
			if _, err := b.pool.Exec(ctx, "SELECT sluice.send('aw', '2')"); err != nil {
				t.Fatalf("a send while %s waited for an open transaction: %v", c.call, err)
			}
			select {
			case err := <-done:
				t.Fatalf("%s returned (%v) before its wait was up", c.call, err)
			default:
			}
			before := b.int64(c.changed)

			err = <-done
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "55P03" ||
				!strings.Contains(pgErr.Message, fmt.Sprintf("the transaction of pid %d", pid)) {
				t.Fatalf("%s with a transaction open on the queue: %v, want 55P03 naming pid %d", c.call, err, pid)
			}
			if n := b.int64(c.changed); n != before {
				t.Fatalf("%s changed the queue though it failed: %s = %d, was %d", c.call, c.changed, n, before)
			}
			if n := b.int64("SELECT count(*) FROM sluice.queue WHERE name = 'aw' AND engine = $1", c.engine); n != 1 {
				t.Fatalf("queue aw of engine %d: %d rows after the failed %s", c.engine, n, c.call)
			}

			if err := holder.Commit(b.ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.Exec(b.ctx, c.call); err != nil {
				t.Fatalf("%s once the transaction ended: %v", c.call, err)
			}
			if n := b.int64(c.changed); n == before {
				t.Fatalf("%s did nothing once the transaction ended: %s = %d", c.call, c.changed, n)
			}
		})
	}
}

// On a queue whose transactions overlap (here producers that each keep a
// transaction open around their send, as an outbox does, 300 ms, or 1.5 s:
// longer than the second after which a holder counts as stuck), a purge
// waits as PostgreSQL would and goes through: the short tries, which only
// holders that all end within 100 ms let through, are for a holder open
// longer than the queue's transactions last.
func TestPurgeGoesThroughOnAQueueOfShortTransactions(t *testing.T) {
	t.Parallel()
	for _, hold := range []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond} {
		t.Run(hold.String(), func(t *testing.T) {
			t.Parallel()
			purgeUnderHolds(t, hold)
		})
	}
}

// purgeUnderHolds runs TestPurgeGoesThroughOnAQueueOfShortTransactions with
// producers that each hold their transaction for hold.
func purgeUnderHolds(t *testing.T, hold time.Duration) {
	b := setup(t)
	b.createQueue("ap", "")
	ctx, stop := context.WithCancel(b.ctx)
	defer stop()
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			// (their transactions spread over the hold: there is no moment
			// of 100 ms in which every holder of the moment ends)
			time.Sleep(time.Duration(i) * hold / 4)
			for ctx.Err() == nil {
				tx, err := b.pool.Begin(ctx)
				if err == nil {
					if _, err = tx.Exec(ctx, "SELECT sluice.send('ap', '1')"); err == nil {
						time.Sleep(hold)
						err = tx.Commit(ctx)
					}
					tx.Rollback(b.ctx) //nolint:errcheck
				}
				if err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	time.Sleep(hold + 200*time.Millisecond)
	admin, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Release()
	if _, err := admin.Exec(b.ctx, "SET lock_timeout = '20s'"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(b.ctx, "SELECT sluice.purge_queue('ap')"); err != nil {
		t.Fatalf("purge_queue of a queue of %v transactions: %v", hold, err)
	}
	stop()
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("a producer: %v", err)
		}
	}
}

// A purge that waits for a holder of the queue which in turn waits for a
// lock the purge's transaction holds is a deadlock, which the purge's short
// tries would keep PostgreSQL from seeing (neither wait lasts
// deadlock_timeout while the other waits): one of the two fails with 40P01
// and the other goes on, as before those tries, even with no lock_timeout.
func TestPurgeInADeadlockFailsWith40P01(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("ad", "")
	b.exec("CREATE TABLE public.ad_other (x int)")
	holder, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(b.ctx) //nolint:errcheck
	// (PostgreSQL's own check, which a wait of a second runs, finds the
	// cycle when it runs while the purge waits: put off, so that the purge's
	// check is what is tested)
	if _, err := holder.Exec(b.ctx, "SET LOCAL deadlock_timeout = '60s'"); err != nil {
		t.Skipf("cannot set deadlock_timeout (not a superuser?): %v", err)
	}
	if _, err := holder.Exec(b.ctx, "SELECT sluice.send('ad', '1')"); err != nil {
		t.Fatal(err)
	}
	admin, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Rollback(b.ctx) //nolint:errcheck
	if _, err := admin.Exec(b.ctx, "SET LOCAL deadlock_timeout = '60s'"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(b.ctx, "LOCK TABLE public.ad_other IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	purged := make(chan error, 1)
	go func() {
		_, err := admin.Exec(b.ctx, "SELECT sluice.purge_queue('ad')")
		purged <- err
	}()
	time.Sleep(1500 * time.Millisecond) // (the purge in its short tries)
	locked := make(chan error, 1)
	go func() {
		_, err := holder.Exec(b.ctx, "LOCK TABLE public.ad_other IN ACCESS SHARE MODE")
		locked <- err
	}()
	var errPurge, errHolder error
	select {
	case errPurge = <-purged:
		if errPurge == nil {
			t.Fatal("purge_queue went through while the queue's holder was still open")
		}
		// the purge gave up: its transaction ends, and the holder goes on
		if err := admin.Rollback(b.ctx); err != nil {
			t.Fatal(err)
		}
		errHolder = <-locked
	case errHolder = <-locked:
		// the holder failed (PostgreSQL's deadlock check): the purge goes on
		if err := holder.Rollback(b.ctx); err != nil {
			t.Fatal(err)
		}
		errPurge = <-purged
	case <-time.After(30 * time.Second):
		t.Fatal("neither the purge nor the holder's lock ended in 30 s: a deadlock nobody saw")
	}
	if sqlstate(errPurge) != "40P01" && sqlstate(errHolder) != "40P01" {
		t.Fatalf("purge: %v; holder: %v; want one of them 40P01 and the other through", errPurge, errHolder)
	}
	if (errPurge == nil) == (errHolder == nil) {
		t.Fatalf("purge: %v; holder: %v; want exactly one of them to fail", errPurge, errHolder)
	}
}

// The same cycle through a third transaction: the holder waits for X,
// which waits for the purge's transaction. The holder does not wait for
// the purge itself, so the purge follows the blockers from each holder:
// one of the three fails with 40P01. (PostgreSQL's own check is put off
// with deadlock_timeout, as in TestPurgeInADeadlockFailsWith40P01.)
func TestPurgeInADeadlockThroughAnotherFailsWith40P01(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("a3", "")
	begin := func() pgx.Tx {
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck
		return tx
	}
	holder, x, admin := begin(), begin(), begin()
	for _, tx := range []pgx.Tx{holder, x, admin} {
		// (PostgreSQL's own check, which a wait of a second runs, may find
		// the cycle when it runs while the purge waits: kept out of the way)
		if _, err := tx.Exec(b.ctx, "SET LOCAL deadlock_timeout = '60s'"); err != nil {
			t.Skipf("cannot set deadlock_timeout (not a superuser?): %v", err)
		}
	}
	for _, s := range []struct {
		tx  pgx.Tx
		sql string
	}{
		{holder, "SELECT sluice.send('a3', '1')"},
		{x, "SELECT pg_advisory_xact_lock(7001)"},
		{admin, "SELECT pg_advisory_xact_lock(7002)"},
	} {
		if _, err := s.tx.Exec(b.ctx, s.sql); err != nil {
			t.Fatal(err)
		}
	}
	type ended struct {
		sql string
		err error
	}
	done := make(chan ended, 3)
	run := func(tx pgx.Tx, sql string) {
		go func() {
			_, err := tx.Exec(b.ctx, sql)
			done <- ended{sql, err}
		}()
	}
	run(admin, "SELECT sluice.purge_queue('a3')")
	time.Sleep(1500 * time.Millisecond) // (the purge in its short tries)
	run(holder, "SELECT pg_advisory_xact_lock(7001)")
	time.Sleep(100 * time.Millisecond)
	run(x, "SELECT pg_advisory_xact_lock(7002)")
	// (the one that fails ends its transaction's locks with it: another may
	// go through just before its error is seen)
	timeout := time.After(30 * time.Second)
	for {
		select {
		case e := <-done:
			if e.err == nil {
				continue
			}
			if sqlstate(e.err) != "40P01" {
				t.Fatalf("%s: %v, want 40P01", e.sql, e.err)
			}
			return
		case <-timeout:
			t.Fatal("none of the three failed in 30 s: a deadlock nobody saw")
		}
	}
}

// A request only queued ahead of another is no lock held: H, holding queue
// aq, asks for aq2, and waits behind C's purge of aq2, which waits for A;
// A's purge of aq then waits for H. pg_blocking_pids(H) names C, and C's
// names A, but C holds nothing H needs: C's try ends by itself, H goes on,
// and A's purge goes through once H commits. (Following every blocker, the
// purge raised a false 40P01 at once, a reviewer saw.)
func TestPurgeBehindAQueuedRequestIsNoDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("aq", "")
	b.createQueue("aq2", "")
	begin := func() pgx.Tx {
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck
		return tx
	}
	h, a, c := begin(), begin(), begin()
	if _, err := h.Exec(b.ctx, "SELECT sluice.send('aq', '1')"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(b.ctx, "SELECT sluice.send('aq2', '1')"); err != nil {
		t.Fatal(err)
	}
	cDone := make(chan error, 1)
	go func() {
		_, err := c.Exec(b.ctx, "SELECT sluice.purge_queue('aq2')")
		cDone <- err
	}()
	time.Sleep(200 * time.Millisecond) // (C in its first try, behind A)
	hDone := make(chan error, 1)
	go func() {
		_, err := h.Exec(b.ctx, "SELECT sluice.send('aq2', '2')") // (queued behind C)
		hDone <- err
	}()
	time.Sleep(100 * time.Millisecond)
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Exec(b.ctx, "SELECT sluice.purge_queue('aq')")
		aDone <- err
	}()
	select {
	case err := <-hDone:
		if err != nil {
			t.Fatalf("H's send to aq2: %v", err)
		}
	case err := <-aDone:
		t.Fatalf("A's purge of aq ended (%v) while H, which holds aq, was open", err)
	case <-time.After(20 * time.Second):
		t.Fatal("H's send to aq2 did not go through in 20 s")
	}
	if err := h.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-aDone; err != nil {
		t.Fatalf("A's purge of aq once H committed: %v", err)
	}
	if err := a.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-cDone; err != nil {
		t.Fatalf("C's purge of aq2 once A committed: %v", err)
	}
}
