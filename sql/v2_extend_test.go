package sqlsrc_test

import (
	"strings"
	"testing"
	"time"
)

// An extension of receipts of two leases in one call, in one statement
// (e2_extend, e2_current_lease inlined): every receipt of one lease extends
// it whole, some of the other's extend those positions only; a receipt
// acked, one of another token, one redelivered since and a duplicate count
// nothing. Past the old end, only what was not extended comes back, to the
// first receive (the lease extended whole, before them in the lane, is put
// off, and the lane looked at again); the extended receipts still ack.
func TestV2ExtendOfABatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createV2("q", `"lanes": 1`)
	b.v2sendN("q", 20)
	whole := b.v2receive("q", "default", 10, "3 seconds")
	part := b.v2receive("q", "default", 10, "3 seconds")
	if len(whole) != 10 || len(part) != 10 {
		t.Fatalf("received %d and %d, want 10 and 10", len(whole), len(part))
	}
	if n := b.ack("q", "default", part[0].Receipt); n != 1 {
		t.Fatalf("ack counted %d", n)
	}
	given := append(v2receipts(whole), v2receipts(part[:5])...) // (part[0] acked)
	forged := v2forge(part[9].Receipt, 4, "12345")
	extend := func(receipts []string) int {
		t.Helper()
		var n int
		if err := b.pool.QueryRow(b.ctx, "SELECT sluice.extend('q', 'default', $1, '30 seconds')", receipts).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := extend(append(append(given, forged), part[3].Receipt)); n != 14 {
		t.Fatalf("extend counted %d, want 14 (10 whole, 4 of the other lease)", n)
	}

	// past the old end: the 5 receipts not given come back, nothing else
	time.Sleep(time.Until(part[0].Expires) + 300*time.Millisecond)
	again := b.v2drain("q", "default", 20, "")
	if want := v2ids(part[5:]); !v2same(v2ids(again), want) {
		t.Fatalf("after the old end: %s", v2diff(v2ids(again), want))
	}
	for _, m := range again {
		if m.Attempt != 2 {
			t.Errorf("message %d came back with attempt %d, want 2", m.ID, m.Attempt)
		}
	}
	// (the receipts of the deliveries before: stale now)
	if n := extend(v2receipts(part[5:])); n != 0 {
		t.Errorf("extend of receipts delivered again since counted %d, want 0", n)
	}
	if n := b.ack("q", "default", given...); n != 14 {
		t.Errorf("ack of the extended receipts counted %d, want 14", n)
	}
	if n := b.ack("q", "default", v2receipts(again)...); n != 5 {
		t.Errorf("ack counted %d, want 5", n)
	}
	b.v2expectEmpty("q", "default")
}

// An extension of a batch runs a few statements, not one a receipt.
func TestV2ExtendOfABatchRunsAFewStatements(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createV2("q", `"lanes": 1`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 100) g))`)
	ms := b.v2receive("q", "default", 100, "")
	if len(ms) != 100 {
		t.Fatalf("received %d, want 100", len(ms))
	}
	l := b.statementLog()
	sql := `SELECT sluice.extend('q', 'default', '{` + strings.Join(v2receipts(ms), ",") + `}', '1 minute')`
	var ran []string
	for i := 0; i < 3; i++ { // (the last, once the session's plans are made)
		ran = l.nested(b, sql)
	}
	t.Logf("an extension of 100 receipts ran %d statements", len(ran))
	if len(ran) > 12 {
		t.Fatalf("an extension of 100 receipts ran %d statements:\n  %s", len(ran), strings.Join(ran, "\n  "))
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, sql).Scan(&n); err != nil || n != 100 {
		t.Fatalf("extend counted %d, want 100 (%v)", n, err)
	}
}
