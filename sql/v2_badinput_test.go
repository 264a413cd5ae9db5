package sqlsrc_test

import (
	"strings"
	"testing"
)

// Receipts that pass the public API's form check (sluice._receipt_ok: four
// or five parts of digits, the slot and third part up to 9 digits) but name
// nothing of an engine 2 queue are stale: ack and extend count 0, nack is
// false, nothing changes. Engine 2 casts the slot and the lane to smallint
// and reads a fifth part (token) always, so a 9-digit slot or lane, or a
// receipt of four parts (engine 1's form), must not raise.
func TestV2ForgedReceiptsOutOfRange(t *testing.T) {
	b := setup(t)
	b.createV2("v2bad2", `"lanes": 2`)
	b.v2sendN("v2bad2", 2)
	// (both: a receive with forged receipts to ack then has nothing to
	// take, and writes nothing of its own)
	ms := b.v2receive("v2bad2", "default", 2, "")
	if len(ms) != 2 {
		t.Fatalf("receive: %+v", ms)
	}
	rc := ms[0].Receipt
	parts := strings.Split(rc, ".")
	forged := map[string]string{
		"slot of 9 digits": v2forge(rc, 0, "999999999"),
		"slot 40000":       v2forge(rc, 0, "40000"),
		"lane of 9 digits": v2forge(rc, 2, "999999999"),
		"four parts":       strings.Join(parts[:4], "."),
		"engine 1's form":  "0.1.1.123",
	}
	before := b.dataFingerprint()
	for what, r := range forged {
		var n int
		err := b.pool.QueryRow(b.ctx, "SELECT sluice.ack('v2bad2', 'default', $1)", []string{r}).Scan(&n)
		if err != nil || n != 0 {
			t.Errorf("ack of a forged receipt (%s) %q: %d, %v; want 0, no error", what, r, n, err)
		}
		var ok bool
		err = b.pool.QueryRow(b.ctx, "SELECT sluice.nack('v2bad2', 'default', $1, '0')", r).Scan(&ok)
		if err != nil || ok {
			t.Errorf("nack of a forged receipt (%s) %q: %v, %v; want false, no error", what, r, ok, err)
		}
		err = b.pool.QueryRow(b.ctx, "SELECT sluice.extend('v2bad2', 'default', $1, '1 hour')", []string{r}).Scan(&n)
		if err != nil || n != 0 {
			t.Errorf("extend of a forged receipt (%s) %q: %d, %v; want 0, no error", what, r, n, err)
		}
		// in a receive's ack argument, too
		if _, err := b.pool.Exec(b.ctx, "SELECT * FROM sluice.receive('v2bad2', 'default', 1, ack => $1)",
			[]string{r}); err != nil {
			t.Errorf("receive with a forged receipt (%s) %q to ack: %v", what, r, err)
		}
	}
	if after := b.dataFingerprint(); after != before {
		t.Errorf("forged receipts changed the data:\nbefore %s\nafter  %s", before, after)
	}
	if n := b.ack("v2bad2", "default", rc); n != 1 {
		t.Errorf("the real receipt counted %d after the forged ones, want 1", n)
	}
}

// Malformed receipts raise SL008 and change nothing, alone, beside a
// current receipt, and in a receive's ack argument: engine 2 checks them as
// it acks (e2_ack tells one receipt's slot by the expression that checks
// its form, and compares a batch's whole leases with the receipts it makes),
// where the public API checked them before.
func TestV2MalformedReceiptsRaise(t *testing.T) {
	b := setup(t)
	b.createV2("v2bad3", `"lanes": 2`)
	b.v2sendN("v2bad3", 3)
	ms := b.v2receive("v2bad3", "default", 2, "")
	if len(ms) != 2 {
		t.Fatalf("receive: %+v", ms)
	}
	rc := ms[0].Receipt
	malformed := map[string]string{
		"not a receipt":           "x.y",
		"empty":                   "",
		"a letter in a position":  v2forge(rc, 1, "1a"),
		"a position past bigint":  v2forge(rc, 1, "99999999999999999999"),
		"a token past bigint":     v2forge(rc, 4, "99999999999999999999"),
		"a slot past int":         v2forge(rc, 0, "99999999999"),
		"six parts":               rc + ".1",
		"SQL after it":            rc + "; DROP TABLE x",
		"a space before it":       " " + rc,
		"a negative lease number": v2forge(rc, 3, "-1"),
	}
	before := b.dataFingerprint()
	for what, r := range malformed {
		for _, rs := range [][]string{{r}, {r, rc}, {rc, r}, {ms[1].Receipt, rc, r}} {
			for _, sql := range []string{"SELECT sluice.ack('v2bad3', 'default', $1)",
				"SELECT * FROM sluice.receive('v2bad3', 'default', 1, ack => $1)"} {
				if _, err := b.pool.Exec(b.ctx, sql, rs); sqlstate(err) != "SL008" {
					t.Errorf("%s in %q: %s: want SQLSTATE SL008, got %v", what, rs, sql, err)
				}
			}
		}
	}
	for _, sql := range []string{
		"SELECT sluice.ack('v2bad3', 'default', ARRAY[NULL]::text[])",
		"SELECT sluice.ack('v2bad3', 'default', ARRAY[$1, NULL])",
		"SELECT * FROM sluice.receive('v2bad3', 'default', 1, ack => ARRAY[NULL, $1])",
	} {
		if strings.Contains(sql, "$1") {
			b.v2expectState("SL008", sql, rc)
		} else {
			b.v2expectState("SL008", sql)
		}
	}
	if after := b.dataFingerprint(); after != before {
		t.Errorf("malformed receipts changed the data:\nbefore %s\nafter  %s", before, after)
	}
	if n := b.ack("v2bad3", "default", rc, ms[1].Receipt); n != 2 {
		t.Errorf("the real receipts counted %d after the malformed ones, want 2", n)
	}
}
