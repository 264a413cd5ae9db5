package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// hist builds a synthetic app history; events get their clock from the
// order of the calls.
type hist struct {
	in   appCheckInput
	msgs map[int64]appSend
	fwds map[int64]appForward // by second-queue id
}

func newHist() *hist {
	h := &hist{msgs: map[int64]appSend{}, fwds: map[int64]appForward{}}
	h.in.MaxAttempts = 3
	for g := range h.in.Dead {
		h.in.Dead[g] = map[int64]int{}
	}
	return h
}

// send records a committed send of message id: key k, sequence seq.
func (h *hist) send(id int64, k int32, seq int64, flags ...string) *hist {
	s := appSend{ID: id, Key: k, Seq: seq, At: time.Duration(id) * time.Millisecond}
	for _, f := range flags {
		switch f {
		case "poison":
			s.Poison = true
		case "fwd":
			s.Fwd = true
		case "err":
			s.ID, s.Err = 0, true
		}
	}
	h.in.Sends = append(h.in.Sends, s)
	h.msgs[id] = s
	return h
}

// forward records group A's committed ack+send of src as message id of the
// second queue.
func (h *hist) forward(src, id int64) *hist {
	f := appForward{Src: src, ID: id, At: time.Second}
	h.in.Forwards = append(h.in.Forwards, f)
	h.fwds[id] = f
	return h
}

func (h *hist) ev(kind uint8, g int, id int64, attempt int32) *hist {
	e := appEvent{Kind: kind, Group: uint8(g), Attempt: attempt, ID: id, At: 2 * time.Second}
	if g == appGroupStage2 {
		f := h.fwds[id]
		s := h.msgs[f.Src]
		e.Src, e.Key, e.Seq = f.Src, s.Key, s.Seq
	} else {
		s := h.msgs[id]
		e.Key, e.Seq = s.Key, s.Seq
	}
	h.in.Events = append(h.in.Events, e)
	return h
}

func (h *hist) start(g int, id int64, attempt int32) *hist { return h.ev(evStart, g, id, attempt) }

// ok is a whole successful delivery; fail a whole failed one.
func (h *hist) ok(g int, id int64, attempt int32) *hist {
	return h.start(g, id, attempt).ev(evOK, g, id, attempt)
}

func (h *hist) fail(g int, id int64, attempt int32) *hist {
	return h.start(g, id, attempt).ev(evFail, g, id, attempt)
}

// poison fails id max attempts in g and dead-letters it.
func (h *hist) poison(g int, id int64) *hist {
	for a := int32(1); a <= int32(h.in.MaxAttempts); a++ {
		h.fail(g, id, a)
	}
	h.in.Dead[g][id] = h.in.MaxAttempts
	return h
}

// valid is a correct history: two keys, a transient failure, a poison
// message, a forward through stage 2, in both fan-out groups.
func valid() *hist {
	h := newHist().
		send(1, 7, 1).send(2, 8, 1).send(3, 7, 2, "fwd").send(4, 7, 3, "poison").send(5, 7, 4).send(6, 8, 2)
	for _, g := range []int{appGroupA, appGroupB} {
		h.ok(g, 1, 1).ok(g, 2, 1)
		h.fail(g, 3, 1).ok(g, 3, 2)
		if g == appGroupA {
			h.forward(3, 100)
		}
		h.poison(g, 4)
		h.ok(g, 5, 1).ok(g, 6, 1)
	}
	return h.fail(appGroupStage2, 100, 1).ok(appGroupStage2, 100, 2)
}

func checkOf(t *testing.T, h *hist) *appCheck {
	t.Helper()
	c := checkApp(h.in)
	t.Logf("violations %d: %v", c.violations(), c.Details)
	return c
}

func TestAppCheckValid(t *testing.T) {
	c := checkOf(t, valid())
	if !c.ok() {
		t.Fatalf("valid history: %+v", c)
	}
	if c.Sent != 6 || c.Poison != 1 || c.Forwards != 1 {
		t.Errorf("sent %d, poison %d, forwards %d: want 6, 1, 1", c.Sent, c.Poison, c.Forwards)
	}
	for g, want := range []appGroupCheck{
		{Expected: 6, Completed: 5, Dead: 1, Deliveries: 9, Redeliveries: 3, Failures: 4},
		{Expected: 6, Completed: 5, Dead: 1, Deliveries: 9, Redeliveries: 3, Failures: 4},
		{Expected: 1, Completed: 1, Deliveries: 2, Redeliveries: 1, Failures: 1},
	} {
		got := c.Groups[g]
		got.Latency = Latency{}
		if got != want {
			t.Errorf("group %s: %+v, want %+v", appGroupNames[g], got, want)
		}
	}
	if c.Groups[0].Latency.Count != 6 {
		t.Errorf("latency samples of group A: %d, want 6", c.Groups[0].Latency.Count)
	}
}

// wantOnly checks that the check found violations of one kind only.
func wantOnly(t *testing.T, c *appCheck, kind string, counter int64, detail string) {
	t.Helper()
	if counter == 0 {
		t.Fatalf("no %s violation found: %+v", kind, c)
	}
	if c.violations() != counter {
		t.Errorf("%d violations, of which %d %s: want only %s ones: %v", c.violations(), counter, kind, kind, c.Details)
	}
	if !strings.Contains(strings.Join(c.Details, "\n"), detail) {
		t.Errorf("details %q: want one with %q", c.Details, detail)
	}
}

func TestAppCheckLoss(t *testing.T) {
	h := valid()
	h.send(7, 9, 1)
	h.ok(appGroupA, 7, 1) // never finished in group B
	c := checkOf(t, h)
	wantOnly(t, c, "loss", c.Lost, "message 7 (key 9, seq 1) never finished")
	if c.Groups[appGroupB].Lost != 1 || c.Groups[appGroupA].Lost != 0 {
		t.Errorf("lost per group: %+v", c.Groups)
	}

	// The same with the engine still holding one message of group B: not
	// drained, not lost.
	h.in.Pending[appGroupB] = 1
	c = checkOf(t, h)
	if !c.ok() || c.Groups[appGroupB].Unfinished != 1 {
		t.Errorf("pending message: %+v", c)
	}

	// A lost forward: stage 2 never completes it.
	h = valid()
	h.send(7, 9, 1, "fwd").ok(appGroupB, 7, 1).forward(7, 101).ok(appGroupA, 7, 1)
	c = checkOf(t, h)
	wantOnly(t, c, "loss", c.Lost, "group stage2: message 101")
}

// TestAppCheckBehind checks that messages of a hot key the drain had not
// reached, all still held by the engine, are not drained, not lost, and
// that the check names the keys behind, the most messages first.
func TestAppCheckBehind(t *testing.T) {
	h := valid()
	for seq := int64(1); seq <= 6; seq++ {
		h.send(10+seq, 1, seq) // key 1, the hot key
	}
	h.send(20, 2, 1).send(21, 3, 1).ok(appGroupA, 21, 1).ok(appGroupB, 21, 1)
	h.ok(appGroupA, 11, 1).ok(appGroupA, 12, 1)
	h.in.Pending = [appGroups]int64{5, 7, 0} // a: 4 of key 1 and key 2; b: 6 of key 1 and key 2
	c := checkOf(t, h)
	if !c.ok() {
		t.Fatalf("hot key not drained: %+v", c)
	}
	for g, want := range [][]appKeyCount{{{1, 4}, {2, 1}}, {{1, 6}, {2, 1}}, nil} {
		if got := c.Behind[g]; !slices.Equal(got, want) || c.BehindKeys[g] != len(want) {
			t.Errorf("group %s: behind %v (%d keys), want %v", appGroupNames[g], got, c.BehindKeys[g], want)
		}
		if gc := c.Groups[g]; gc.Lost != 0 || gc.Unfinished != gc.Pending {
			t.Errorf("group %s: %+v: want as many unfinished as pending, none lost", appGroupNames[g], gc)
		}
	}
	note := behindNote(c)
	for _, want := range []string{"fanout_a: 5 messages of 2 keys (key 1: 4, key 2: 1), 80% of them of key 1", "fanout_b: 7 messages of 2 keys (key 1: 6, key 2: 1), 86% of them of key 1", "stage2: none"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q: want %q in it", note, want)
		}
	}

	// The engine holding fewer than are unfinished: the rest are lost.
	h.in.Pending[appGroupB] = 1
	c = checkOf(t, h)
	wantOnly(t, c, "loss", c.Lost, "7 messages unfinished, the engine holds 1: 6 lost")

	// More keys than the check names.
	h = newHist()
	for k := int32(1); k <= maxAppBehind+2; k++ {
		h.send(int64(k), k, 1)
	}
	h.in.Pending = [appGroups]int64{maxAppBehind + 2, maxAppBehind + 2, 0}
	c = checkOf(t, h)
	if len(c.Behind[appGroupA]) != maxAppBehind || c.BehindKeys[appGroupA] != maxAppBehind+2 || c.Behind[appGroupA][0] != (appKeyCount{1, 1}) {
		t.Errorf("behind %v of %d keys: want the first %d of %d, by key", c.Behind[appGroupA], c.BehindKeys[appGroupA], maxAppBehind, maxAppBehind+2)
	}
	if note := behindNote(c); !strings.Contains(note, "key 5: 1, 2 more keys)") {
		t.Errorf("note %q: want the keys left out counted", note)
	}
}

func TestAppCheckDuplicates(t *testing.T) {
	h := valid()
	h.ok(appGroupB, 6, 2)
	c := checkOf(t, h)
	wantOnly(t, c, "duplicate", c.Duplicates, "no failed ack")
	if c.Groups[appGroupB].Duplicates != 1 {
		t.Errorf("duplicates of group B: %d, want 1", c.Groups[appGroupB].Duplicates)
	}
	// With a failed ack reported by the worker, the duplicate is counted
	// but allowed.
	h.in.WorkerErrors[appGroupB] = 1
	c = checkOf(t, h)
	if !c.ok() || c.Groups[appGroupB].Duplicates != 1 {
		t.Errorf("duplicate after an uncertain ack: %+v", c)
	}
}

func TestAppCheckOverlap(t *testing.T) {
	h := valid()
	h.send(7, 9, 1)
	h.ok(appGroupA, 7, 1)
	h.start(appGroupB, 7, 1).start(appGroupB, 7, 2).ev(evOK, appGroupB, 7, 1).ev(evOK, appGroupB, 7, 2)
	h.in.WorkerErrors[appGroupB] = 1 // the duplicate success alone would be allowed
	c := checkOf(t, h)
	wantOnly(t, c, "overlap", c.Overlap, "while its previous delivery was still running")
}

func TestAppCheckOrder(t *testing.T) {
	// Seq 2 starts before seq 1 finished.
	h := newHist().send(1, 7, 1).send(2, 7, 2)
	h.ok(appGroupA, 1, 1).ok(appGroupA, 2, 1)
	h.start(appGroupB, 1, 1).ok(appGroupB, 2, 1).ev(evOK, appGroupB, 1, 1)
	c := checkOf(t, h)
	wantOnly(t, c, "order", c.Order, "group fanout_b, key 7: seq 2 (message 2) started at clock")
	if c.Groups[appGroupB].Order == 0 || c.Groups[appGroupA].Order != 0 {
		t.Errorf("order per group: A %d, B %d", c.Groups[appGroupA].Order, c.Groups[appGroupB].Order)
	}

	// Seq 1 fails, seq 2 runs, then seq 1's retry: the retry must come
	// first.
	h = newHist().send(1, 7, 1).send(2, 7, 2)
	h.ok(appGroupA, 1, 1).ok(appGroupA, 2, 1)
	h.fail(appGroupB, 1, 1).ok(appGroupB, 2, 1).ok(appGroupB, 1, 2)
	c = checkOf(t, h)
	wantOnly(t, c, "order", c.Order, "seq 2 (message 2) started")

	// A later message delivered while an earlier one never finished (and
	// the engine still holds it).
	h = newHist().send(1, 7, 1).send(2, 7, 2)
	h.ok(appGroupA, 1, 1).ok(appGroupA, 2, 1).ok(appGroupB, 2, 1)
	h.in.Pending[appGroupB] = 1
	c = checkOf(t, h)
	wantOnly(t, c, "order", c.Order, "never finished")

	// A success after a later one: a duplicate of seq 1 after seq 2
	// (allowed as a duplicate, not as an order).
	h = newHist().send(1, 7, 1).send(2, 7, 2)
	h.ok(appGroupA, 1, 1).ok(appGroupA, 2, 1)
	h.ok(appGroupB, 1, 1).ok(appGroupB, 2, 1).ok(appGroupB, 1, 2)
	h.in.WorkerErrors[appGroupB] = 1
	c = checkOf(t, h)
	wantOnly(t, c, "order", c.Order, "succeeded at clock")

	// Keys are independent, and a poison message finishes with its last
	// failure.
	h = newHist().send(1, 7, 1, "poison").send(2, 8, 1).send(3, 7, 2)
	for _, g := range []int{appGroupA, appGroupB} {
		h.start(g, 1, 1).ok(g, 2, 1).ev(evFail, g, 1, 1)
		h.fail(g, 1, 2).fail(g, 1, 3).ok(g, 3, 1)
		h.in.Dead[g][1] = 3
	}
	if c := checkOf(t, h); !c.ok() {
		t.Errorf("two keys interleaved, poison then its successor: %+v", c)
	}
}

func TestAppCheckDeadLetters(t *testing.T) {
	// A poison message not dead-lettered in group B, though it failed max
	// attempts: a dead-letter violation, and a loss.
	h := valid()
	delete(h.in.Dead[appGroupB], 4)
	c := checkOf(t, h)
	if c.DeadLetter != 1 || c.Lost != 1 {
		t.Errorf("poison not dead: dead-letter violations %d, lost %d: want 1 and 1: %v", c.DeadLetter, c.Lost, c.Details)
	}

	// Dead after the wrong number of attempts.
	h = valid()
	h.in.Dead[appGroupA][4] = 2
	c = checkOf(t, h)
	wantOnly(t, c, "dead-letter", c.DeadLetter, "dead-lettered after 2 attempts, want 3")

	// A poison message whose last failure was not at max attempts.
	h = newHist().send(1, 7, 1, "poison")
	for _, g := range []int{appGroupA, appGroupB} {
		h.fail(g, 1, 1).fail(g, 1, 2)
		h.in.Dead[g][1] = 3
	}
	c = checkOf(t, h)
	wantOnly(t, c, "dead-letter", c.DeadLetter, "the last at attempt 2, want attempt 3")

	// A delivery never handled that came back by lease expiry spends an
	// attempt: allowed, and counted.
	h = newHist().send(1, 7, 1, "poison").send(2, 7, 2)
	for _, g := range []int{appGroupA, appGroupB} {
		h.fail(g, 1, 2).fail(g, 1, 3)
		h.in.Dead[g][1] = 3
		h.ok(g, 2, 2)
	}
	c = checkOf(t, h)
	if !c.ok() || c.Groups[appGroupA].Unhandled != 2 {
		t.Errorf("attempts spent by lease expiry: unhandled %d, want 2: %+v", c.Groups[appGroupA].Unhandled, c)
	}

	// A message that is not poison in the dead-letter table.
	h = valid()
	h.in.Dead[appGroupA][5] = 3
	c = checkOf(t, h)
	wantOnly(t, c, "dead-letter", c.DeadLetter, "but it is not poison")

	// A dead letter no send accounts for.
	h = valid()
	h.in.Dead[appGroupB][99] = 3
	c = checkOf(t, h)
	wantOnly(t, c, "dead-letter", c.DeadLetter, "dead letter 99")
}

func TestAppCheckForwards(t *testing.T) {
	// Completed in group A without its forward.
	h := newHist().send(1, 7, 1, "fwd")
	h.ok(appGroupA, 1, 1).ok(appGroupB, 1, 1)
	c := checkOf(t, h)
	wantOnly(t, c, "forward", c.Forward, "without its atomic forward")

	// Forwarded twice.
	h = newHist().send(1, 7, 1, "fwd")
	h.ok(appGroupA, 1, 1).ok(appGroupB, 1, 1).forward(1, 100).forward(1, 101)
	h.ok(appGroupStage2, 100, 1).ok(appGroupStage2, 101, 1)
	c = checkOf(t, h)
	wantOnly(t, c, "forward", c.Forward, "forwarded 2 times")

	// A forward of a message not flagged for it.
	h = newHist().send(1, 7, 1)
	h.ok(appGroupA, 1, 1).ok(appGroupB, 1, 1).forward(1, 100).ok(appGroupStage2, 100, 1)
	c = checkOf(t, h)
	wantOnly(t, c, "forward", c.Forward, "not flagged")

	// A forward of unknown outcome that committed: stage 2 received it,
	// group A's handler saw an error (the worker's nack found the message
	// completed); it counts once.
	h = newHist().send(1, 7, 1, "fwd")
	h.ok(appGroupB, 1, 1).fail(appGroupA, 1, 1)
	h.in.Forwards = append(h.in.Forwards, appForward{Src: 1, Err: true})
	h.in.Events = append(h.in.Events, appEvent{Kind: evStart, Group: appGroupStage2, Attempt: 1, ID: 100, Src: 1, Key: 7, Seq: 1},
		appEvent{Kind: evOK, Group: appGroupStage2, Attempt: 1, ID: 100, Src: 1, Key: 7, Seq: 1})
	c = checkOf(t, h)
	if !c.ok() || c.Groups[appGroupA].Completed != 1 || c.Groups[appGroupStage2].Completed != 1 || c.ForwardErrors != 1 {
		t.Errorf("forward of unknown outcome: %+v", c)
	}
}

func TestAppCheckPhantomsAndUncertainSends(t *testing.T) {
	// A message delivered that nobody sent.
	h := valid()
	h.msgs[50] = appSend{ID: 50, Key: 3, Seq: 1}
	h.ok(appGroupA, 50, 1)
	c := checkOf(t, h)
	wantOnly(t, c, "phantom", c.Phantom, "no committed send accounts for it")

	// A send of unknown outcome that committed: both groups must finish
	// it.
	h = valid()
	h.send(50, 9, 1, "err")
	h.ok(appGroupA, 50, 1).ok(appGroupB, 50, 1)
	c = checkOf(t, h)
	if !c.ok() || c.SendErrors != 1 || c.Recovered != 1 || c.Groups[appGroupB].Expected != 7 {
		t.Errorf("send of unknown outcome, delivered: %+v", c)
	}
	h = valid()
	h.send(50, 9, 1, "err")
	h.ok(appGroupA, 50, 1)
	c = checkOf(t, h)
	wantOnly(t, c, "loss", c.Lost, "group fanout_b: message 50")

	// One that did not commit: nothing expected.
	h = valid()
	h.send(50, 9, 1, "err")
	if c := checkOf(t, h); !c.ok() || c.Recovered != 0 {
		t.Errorf("send of unknown outcome, never delivered: %+v", c)
	}
}

func TestZipfKey(t *testing.T) {
	const n = 5000
	counts := map[int32]int{}
	const draws = 200000
	for i := range draws {
		k := zipfKey((float64(i)+0.5)/draws, n, 1.1)
		if k < 1 || k > n {
			t.Fatalf("key %d out of [1, %d]", k, n)
		}
		counts[k]++
	}
	share := float64(counts[1]) / draws
	if want := zipfShare(n, 1.1); share < want-0.002 || share > want+0.002 {
		t.Errorf("share of key 1: %.4f, want %.4f", share, want)
	}
	if want := 0.117; zipfShare(n, 1.1) < want-0.001 || zipfShare(n, 1.1) > want+0.001 {
		t.Errorf("zipfShare(5000, 1.1) = %.4f, want about %.3f (the keyed scenario's note)", zipfShare(n, 1.1), want)
	}
}
