package sqlsrc_test

import (
	"testing"
)

// The retries one group's nacks make are meant for it alone; the other
// group passes them. With a single lane: group a nacks 30 messages (retry
// at once), then 70 new messages are sent, and a receive numbers the 30
// retries and the 70 in one cut; 20 more in a second cut. Group b, whose
// cursor is before the retries, must still receive each of the 90 new
// messages once (and group a all 120 deliveries).
func TestV2OtherGroupsRetriesDoNotHideMessages(t *testing.T) {
	b := setup(t)
	b.createV2("v2o", `"default_group": false, "lanes": 1`)
	b.exec("SELECT sluice.create_group('v2o', 'a')")
	b.exec("SELECT sluice.create_group('v2o', 'b')")
	first := b.v2sendBatch("v2o", 30, "")
	if got := b.v2drainAck("v2o", "b", 30); !v2same(v2ids(got), first) {
		t.Fatalf("b, first 30: %s", v2diff(v2ids(got), first))
	}
	ms := b.v2drain("v2o", "a", 30, "")
	if !v2same(v2ids(ms), first) {
		t.Fatalf("a, first 30: %s", v2diff(v2ids(ms), first))
	}
	for _, m := range ms {
		if !b.nack("v2o", "a", m.Receipt, "0", "retry") {
			t.Fatalf("nack of %d: false", m.ID)
		}
	}
	second := b.v2sendBatch("v2o", 70, "")
	// a receive of group a numbers the retries and the 70 in one cut
	gotA := b.v2receive("v2o", "a", 1, "")
	third := b.v2sendBatch("v2o", 20, "")
	gotA = append(gotA, b.v2drain("v2o", "a", 10, "")...)
	wantA := append(append(append([]int64{}, first...), second...), third...)
	if !v2same(v2ids(gotA), wantA) {
		t.Errorf("group a (30 retries, 90 new): %s", v2diff(v2ids(gotA), wantA))
	}
	gotB := b.v2drain("v2o", "b", 10, "")
	wantB := append(append([]int64{}, second...), third...)
	if !v2same(v2ids(gotB), wantB) {
		t.Errorf("group b (90 new): %s", v2diff(v2ids(gotB), wantB))
	}
}

// One transaction nacks the same message for two groups: each group gets
// it back once, as attempt 2, and can ack it.
func TestV2NackSameMessageForTwoGroupsInOneTransaction(t *testing.T) {
	b := setup(t)
	b.createV2("v2t", `"default_group": false, "lanes": 1`)
	b.exec("SELECT sluice.create_group('v2t', 'a')")
	b.exec("SELECT sluice.create_group('v2t', 'b')")
	id := b.send(b.pool, "v2t", `{"t": 1}`)
	ma := b.v2receive("v2t", "a", 1, "")
	mb := b.v2receive("v2t", "b", 1, "")
	if len(ma) != 1 || len(mb) != 1 {
		t.Fatalf("receive: %+v %+v", ma, mb)
	}
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct{ g, r string }{{"a", ma[0].Receipt}, {"b", mb[0].Receipt}} {
		var ok bool
		if err := tx.QueryRow(b.ctx, "SELECT sluice.nack('v2t', $1, $2, '0')", x.g, x.r).Scan(&ok); err != nil || !ok {
			t.Fatalf("nack in %s: %v %v", x.g, ok, err)
		}
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"a", "b"} {
		ms, err := v2receiveOn(b.ctx, b.pool, "v2t", g, 10, "")
		if err != nil {
			t.Errorf("group %s, receive after the nacks: %v", g, err)
			continue
		}
		if len(ms) != 1 || ms[0].ID != id || ms[0].Attempt != 2 {
			t.Errorf("group %s after the nacks: %+v, want message %d once, attempt 2", g, ms, id)
		}
		if len(ms) > 0 {
			var ok bool
			if err := b.pool.QueryRow(b.ctx, "SELECT sluice.nack('v2t', $1, $2, '0')", g, ms[0].Receipt).Scan(&ok); err != nil || !ok {
				t.Errorf("group %s: nack of the retry: %v, %v", g, ok, err)
			}
		}
	}
}
