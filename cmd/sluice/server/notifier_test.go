package server

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// pending reports whether w has a wake-up to take.
func pending(w *waiter) bool { return len(w.C) == 1 }

// take takes w's wake-up, as a long poll does when it receives again.
func take(t *testing.T, w *waiter) {
	t.Helper()
	select {
	case <-w.C:
	default:
		t.Fatal("no wake-up to take")
	}
}

// try is one receive of w's long poll, with what it got.
func try(n *notifier, w *waiter, res tryResult) {
	n.begin(w)
	n.tried(w, res)
}

// The notifier's hand-off of wake-ups within a group: the longest waiting
// long poll first, one receive at a time, a wake-up during a receive kept for
// the next, a long poll leaving with its wake-up passing it on; other groups
// and queues untouched.
func TestNotifierWakesOneAtATime(t *testing.T) {
	n := newNotifier(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a, b, c := n.subscribe("q", "g"), n.subscribe("q", "g"), n.subscribe("q", "g")
	other := n.subscribe("q", "h")
	elsewhere := n.subscribe("r", "g")
	if got := n.waiting(); got != 5 {
		t.Fatalf("waiting %d, want 5", got)
	}

	n.wake("q", map[string]bool{"g": true}, false)
	if !pending(a) || pending(b) || pending(c) || pending(other) || pending(elsewhere) {
		t.Fatal("the wake-up did not go to the first waiter of the group alone")
	}
	take(t, a)
	// Two more sends while a receives: kept, not given to b and c at once.
	n.wake("q", nil, false)
	n.wake("q", nil, false)
	if pending(b) || pending(c) {
		t.Fatal("a second receive of the group started while one runs")
	}
	if !pending(other) {
		t.Fatal("group h was not woken")
	}
	// a got nothing: it waits again, at the back, and b gets the kept
	// wake-up.
	try(n, a, tryEmpty)
	if !pending(b) || pending(a) || pending(c) {
		t.Fatal("the kept wake-up did not go to b when a was done")
	}
	// b leaves without receiving (timeout, client gone): its wake-up goes
	// to c.
	n.unsubscribe(b)
	if !pending(c) {
		t.Fatal("the wake-up of a waiter that left was lost")
	}
	// A wake-up that arrives during c's receive is kept for the next
	// receive, after it: that receive may have read the queue before the
	// send.
	take(t, c)
	n.begin(c)
	n.wake("q", map[string]bool{"g": true}, false)
	if pending(a) {
		t.Fatal("a second receive started during c's")
	}
	n.tried(c, tryEmpty)
	if !pending(a) || pending(c) {
		t.Fatal("the wake-up during c's receive was not given on when it was done")
	}
	take(t, a)
	try(n, a, tryEmpty)
	if got := n.waiting(); got != 4 {
		t.Fatalf("waiting %d, want 4 (a, c, other, elsewhere)", got)
	}
	n.wake("", nil, true) // the listener reconnected: every group
	if !pending(elsewhere) || !pending(c) {
		t.Fatal("wake all missed a group")
	}
	for _, w := range []*waiter{a, c, other, elsewhere} {
		n.unsubscribe(w)
	}
	if got := n.waiting(); got != 0 || len(n.groups) != 0 {
		t.Fatalf("waiting %d, %d queues left after every long poll left", got, len(n.groups))
	}
}

// Full receives say messages wait: more woken long polls receive at once,
// doubling up to maxTries; a receive that does not fill up sets it back to
// one. A failed receive passes its wake-up on.
func TestNotifierBacklog(t *testing.T) {
	n := newNotifier(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	n.maxTries = 4
	var ws []*waiter
	for range 10 {
		ws = append(ws, n.subscribe("q", "g"))
	}
	woken := func() (out []*waiter) {
		for _, w := range ws {
			if pending(w) {
				out = append(out, w)
			}
		}
		return out
	}
	n.wake("q", nil, false)
	first := woken()
	if len(first) != 1 {
		t.Fatalf("%d woken by one notification", len(first))
	}
	take(t, first[0])
	try(n, first[0], tryFull) // it leaves with its messages
	n.unsubscribe(first[0])
	ws = ws[1:]
	if got := len(woken()); got != 2 {
		t.Fatalf("%d woken after a full receive, want 2", got)
	}
	for _, w := range woken() {
		take(t, w)
		try(n, w, tryFull)
		n.unsubscribe(w)
	}
	ws = ws[2:]
	if got := len(woken()); got != 4 {
		t.Fatalf("%d woken after two full receives, want 4 (maxTries)", got)
	}
	// Caught up: a partial receive sets it back to one at a time.
	now := woken()
	for _, w := range now {
		take(t, w)
		n.begin(w)
	}
	n.tried(now[0], tryPartial)
	n.unsubscribe(now[0])
	for _, w := range now[1:] {
		n.tried(w, tryEmpty)
	}
	n.wake("q", nil, false)
	if got := len(woken()); got != 1 {
		t.Fatalf("%d woken by a notification after a partial receive, want 1", got)
	}
	// A failed receive (the queue was dropped) passes the wake-up on.
	w := woken()[0]
	take(t, w)
	try(n, w, tryFailed)
	n.unsubscribe(w)
	if got := len(woken()); got != 1 {
		t.Fatalf("%d woken after a failed receive, want 1", got)
	}
}

// After a notification, a queue's groups are woken every hotInterval for
// hotPeriod (a later send may have committed without notifying), and no
// more afterwards.
func TestNotifierHotQueue(t *testing.T) {
	n := newNotifier(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	w := n.subscribe("q", "g")
	idle := n.subscribe("r", "g")
	t0 := time.Now()
	n.notified("q", t0)
	take(t, w)
	try(n, w, tryEmpty)
	n.hotTick(t0.Add(hotInterval / 2))
	if pending(w) {
		t.Fatal("woken again right after the notification")
	}
	n.hotTick(t0.Add(hotInterval + time.Millisecond))
	take(t, w)
	try(n, w, tryEmpty)
	n.hotTick(t0.Add(hotInterval + 2*time.Millisecond))
	if pending(w) {
		t.Fatal("woken twice within hotInterval")
	}
	n.hotTick(t0.Add(2*hotInterval + 2*time.Millisecond))
	take(t, w)
	try(n, w, tryEmpty)
	n.hotTick(t0.Add(hotPeriod + time.Second))
	if pending(w) || len(n.hot) != 0 {
		t.Fatal("still hot after hotPeriod")
	}
	if pending(idle) {
		t.Fatal("a queue never notified was woken")
	}
}

// A woken receive that finds nothing while another receive of the group is
// in progress (which may hold the lane with the message) passes the
// wake-up on when that one ends, not at once.
func TestNotifierEmptyWhileOthersReceive(t *testing.T) {
	n := newNotifier(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a, b, c := n.subscribe("q", "g"), n.subscribe("q", "g"), n.subscribe("q", "g")
	n.begin(c) // c's first receive, in progress
	n.wake("q", nil, false)
	take(t, a)
	try(n, a, tryEmpty)
	if pending(a) || pending(b) {
		t.Fatal("woken again while c still receives")
	}
	n.tried(c, tryEmpty) // c is done: the wake-up goes on
	if !pending(b) {
		t.Fatal("the wake-up was not passed on when c was done")
	}
}

// A new long poll waits behind idle ones that found the group empty,
// without a receive of its own, unless a wake-up is pending; it is woken
// after them.
func TestNotifierJoinBehind(t *testing.T) {
	n := newNotifier(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a := n.subscribe("q", "g")
	if n.joinBehind(a) {
		t.Fatal("the first long poll skipped its receive")
	}
	try(n, a, tryEmpty)
	b := n.subscribe("q", "g")
	if !n.joinBehind(b) {
		t.Fatal("a long poll behind one that found the group empty received")
	}
	other := n.subscribe("q", "h")
	if n.joinBehind(other) {
		t.Fatal("a long poll of another group skipped its receive")
	}
	n.wake("q", map[string]bool{"g": true}, false)
	take(t, a)
	// a receives: a wake-up meanwhile is pending, and the new long poll
	// then receives for itself.
	n.begin(a)
	n.wake("q", map[string]bool{"g": true}, false)
	c := n.subscribe("q", "g")
	if n.joinBehind(c) {
		t.Fatal("a long poll skipped its receive while a wake-up was pending")
	}
	n.tried(a, tryPartial)
	n.unsubscribe(a)
	if !pending(b) {
		t.Fatal("the long poll that joined behind was not woken next")
	}
	take(t, b)
	try(n, b, tryEmpty)
	try(n, c, tryEmpty)
	for _, w := range []*waiter{b, c, other} {
		n.unsubscribe(w)
	}
	if len(n.groups) != 0 {
		t.Fatal("groups left")
	}
}
