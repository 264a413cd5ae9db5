package sqlsrc_test

import (
	"testing"
	"time"
)

// sluice._xact_lock_within waits for an advisory lock at most as long as it
// is told, without ending the transaction when the wait runs out, puts the
// caller's lock_timeout back either way, and keeps a lock it took until the
// transaction ends (both keys' forms: two keys, and one with p_key2 NULL).
func TestXactLockWithin(t *testing.T) {
	b := setup(t)
	holder, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(b.ctx) //nolint:errcheck
	if _, err := holder.Exec(b.ctx, `SELECT pg_advisory_xact_lock(424242, 7), pg_advisory_xact_lock(4242424242)`); err != nil {
		t.Fatal(err)
	}
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	if _, err := tx.Exec(b.ctx, `SET LOCAL lock_timeout = '7s'`); err != nil {
		t.Fatal(err)
	}
	for _, call := range []string{
		`SELECT sluice._xact_lock_within(424242, 7, '60ms')`,
		`SELECT sluice._xact_lock_within(4242424242::bigint, NULL, '60ms')`,
	} {
		start := time.Now()
		var got bool
		if err := tx.QueryRow(b.ctx, call).Scan(&got); err != nil {
			t.Fatalf("%s: %v", call, err)
		}
		if waited := time.Since(start); got || waited < 50*time.Millisecond {
			t.Errorf("%s with the lock held elsewhere: %v after %s, want false after ~60ms", call, got, waited)
		}
		var timeout string
		if err := tx.QueryRow(b.ctx, `SHOW lock_timeout`).Scan(&timeout); err != nil {
			t.Fatal(err)
		}
		if timeout != "7s" {
			t.Errorf("lock_timeout after %s: %s, want the caller's 7s", call, timeout)
		}
	}
	if err := holder.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	var a, c bool
	if err := tx.QueryRow(b.ctx, `SELECT sluice._xact_lock_within(424242, 7, '60ms'),
		sluice._xact_lock_within(4242424242::bigint, NULL, '60ms')`).Scan(&a, &c); err != nil {
		t.Fatal(err)
	}
	if !a || !c {
		t.Fatalf("with the locks free: %v, %v, want true, true", a, c)
	}
	var free bool
	if err := b.pool.QueryRow(b.ctx, `SELECT pg_try_advisory_xact_lock(424242, 7) OR pg_try_advisory_xact_lock(4242424242)`).Scan(&free); err != nil {
		t.Fatal(err)
	}
	if free {
		t.Error("a lock taken by _xact_lock_within was free for another transaction before its commit")
	}
}
