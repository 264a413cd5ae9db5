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

// A nack of a later message of a run while an earlier one of its key is
// still in flight (a run handled out of order) keeps the key held by the
// earlier one: the retry and the key's later messages come only once it is
// completed, in order, as on engine 1. (Found by TestV2RandomSemantics: the
// nack replaced the key's hold by the lease with its retry's delay alone,
// so the retry came at once, ahead of the earlier message's completion.)
func TestV2NackOutOfOrderKeepsTheKeyHeld(t *testing.T) {
	onBothEngines(t, `"lanes": 1`, func(b *bundle, engine int) {
		t := b.t.(*testing.T)
		ids := []int64{b.sendKeyed("q", `1`, "k", 0), b.sendKeyed("q", `2`, "k", 0), b.sendKeyed("q", `3`, "k", 0)}
		run := b.receive("q", "default", 3, "30 seconds")
		wantIDs(t, "the run", run, ids...)
		if !b.nack("q", "default", run[1].Receipt, "0", "second fails") {
			t.Fatalf("engine %d: nack of the second: stale", engine)
		}
		wantIDs(t, fmt.Sprintf("engine %d, while the first is in flight", engine), b.receive("q", "default", 3, ""))
		if n := b.ack("q", "default", run[0].Receipt); n != 1 {
			t.Fatalf("engine %d: ack of the first counted %d", engine, n)
		}
		got := b.receive("q", "default", 3, "")
		wantIDs(t, fmt.Sprintf("engine %d, once the first is acked", engine), got, ids[1], ids[2])
		if len(got) == 2 && (got[0].Attempt != 2 || got[1].Attempt != 1) {
			t.Errorf("engine %d: attempts %d, %d; want 2 (the retry), 1 (released)", engine, got[0].Attempt, got[1].Attempt)
		}
	})
}

// Nacks of a run out of order, the later message with a delay and then the
// earlier one with none: the earlier retry comes at once, the later one
// only after its delay and after the earlier is completed, then the rest
// of the run, on both engines. (Found by TestV2RandomSemantics: the second
// nack replaced the first's delay, and the later message came back ~440 ms
// early; the first fix held the key until the later retry was due, so the
// earlier one waited for it too.)
func TestV2KeyedRetriesKeepTheirDelays(t *testing.T) {
	onBothEngines(t, `"lanes": 1`, func(b *bundle, engine int) {
		t := b.t.(*testing.T)
		sent := []int64{b.sendKeyed("q", `1`, "k", 0), b.sendKeyed("q", `2`, "k", 0), b.sendKeyed("q", `3`, "k", 0)}
		run := b.receive("q", "default", 3, "30 seconds")
		wantIDs(t, "the run", run, sent...)
		start := time.Now()
		if !b.nack("q", "default", run[1].Receipt, "800 milliseconds", "second fails") ||
			!b.nack("q", "default", run[0].Receipt, "0", "first fails") {
			t.Fatalf("engine %d: a nack was stale", engine)
		}
		first := b.receive("q", "default", 3, "")
		wantIDs(t, fmt.Sprintf("engine %d, at once", engine), first, sent[0])
		if len(first) == 1 && first[0].Attempt != 2 {
			t.Errorf("engine %d: the first's retry at attempt %d, want 2", engine, first[0].Attempt)
		}
		b.ack("q", "default", receipts(first)...)
		st := b.status("q")["default"]
		if early := b.receive("q", "default", 3, ""); time.Since(start) < 700*time.Millisecond {
			wantIDs(t, fmt.Sprintf("engine %d, the first acked, before the second's delay", engine), early)
			// the second's retry waits for its delay, the third behind it
			if st.Ready != 0 || st.Delayed != 1 || st.InFlight != 0 || st.Lag == nil || *st.Lag != 2 {
				t.Errorf("engine %d: status before the delay: ready %d, delayed %d, in flight %d, lag %v; want 0, 1, 0, 2",
					engine, st.Ready, st.Delayed, st.InFlight, st.Lag)
			}
		} else {
			t.Logf("engine %d: the look before the delay came %v after the nacks: not checked", engine, time.Since(start))
			b.ack("q", "default", receipts(early)...)
			return
		}
		time.Sleep(900*time.Millisecond - time.Since(start))
		got := b.receive("q", "default", 3, "")
		wantIDs(t, fmt.Sprintf("engine %d, after the delay", engine), got, sent[1:]...)
	})
}
