package sqlsrc_test

import (
	"fmt"
	"testing"
	"time"
)

// A key held and a tail waiting are carried across a rotation (the lane's
// state moves to the new slot) and through a reclaim of the old one: the
// key's later messages come in order once its first is acked, and a
// message of another key sent meanwhile is not held back.
func TestV2KeysAcrossRotation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createV2("v2kr", `"rotate_interval": "1 second", "retention": "0 seconds", "slots": 2, "lanes": 1`)
	k1 := b.sendKeyed("v2kr", `1`, "k", 0)
	first := b.receive("v2kr", "default", 1, "30 seconds")
	wantIDs(t, "first", first, k1)
	k2 := b.sendKeyed("v2kr", `2`, "k", 0)
	k3 := b.sendKeyed("v2kr", `3`, "k", 0)
	if got := b.receive("v2kr", "default", 10, ""); len(got) != 0 {
		t.Fatalf("k is leased, yet got %v", ids(got))
	}
	time.Sleep(1100 * time.Millisecond)
	b.v2maintain()
	o1 := b.sendKeyed("v2kr", `4`, "other", 0)
	wantIDs(t, "another key, after the rotation", b.receive("v2kr", "default", 10, ""), o1)
	if got := b.receive("v2kr", "default", 10, ""); len(got) != 0 {
		t.Fatalf("k is still leased, yet got %v", ids(got))
	}
	b.ack("v2kr", "default", first[0].Receipt)
	rest := b.receive("v2kr", "default", 10, "")
	wantIDs(t, "k's tail after its first is acked", rest, k2, k3)
	b.ack("v2kr", "default", receipts(rest)...)
	if got := b.receive("v2kr", "default", 10, ""); len(got) != 0 {
		t.Fatalf("got %v after everything was acked", ids(got))
	}
}

// A key's tail longer than one receive's room is delivered run by run, in
// order, and the key stays held between runs.
func TestV2KeyTailInRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createV2("v2kt", `"lanes": 2`)
	k0 := b.sendKeyed("v2kt", `0`, "k", 0)
	first := b.receive("v2kt", "default", 1, "")
	wantIDs(t, "first", first, k0)
	var want []int64
	for i := 1; i <= 7; i++ {
		want = append(want, b.sendKeyed("v2kt", `1`, "k", 0))
	}
	if got := b.receive("v2kt", "default", 10, ""); len(got) != 0 {
		t.Fatalf("k is leased, yet got %v", ids(got))
	}
	b.ack("v2kt", "default", first[0].Receipt)
	var got []int64
	for len(got) < len(want) {
		run := b.receive("v2kt", "default", 3, "")
		if len(run) == 0 {
			t.Fatalf("got %v, then nothing; want %v", got, want)
		}
		if more := b.receive("v2kt", "default", 3, ""); len(more) != 0 {
			t.Fatalf("a run of k is leased, yet got %v", ids(more))
		}
		got = append(got, ids(run)...)
		b.ack("v2kt", "default", receipts(run)...)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tail delivered as %v, want %v", got, want)
	}
}
