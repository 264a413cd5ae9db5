package sqlsrc_test

import (
	"testing"
	"time"
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
