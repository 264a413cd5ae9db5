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
func try(n *notifier, w *waiter, got, full bool) {
	n.begin(w)
	n.tried(w, got, full)
}

// The notifier's hand-off of wake-ups within a group: the longest waiting
// long poll first, one receive at a time, a wake-up during a receive kept for
// the next, a full receive or a long poll leaving with its wake-up passing
// it on; other groups and queues untouched.
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
	try(n, a, false, false)
	if !pending(b) || pending(a) || pending(c) {
		t.Fatal("the kept wake-up did not go to b when a was done")
	}
	take(t, b)
	// b got a full batch and leaves: c is woken (there may be more).
	try(n, b, true, true)
	n.unsubscribe(b)
	if !pending(c) {
		t.Fatal("a full receive did not wake the next waiter")
	}
	// c leaves without receiving (timeout, client gone): its wake-up goes
	// to a.
	n.unsubscribe(c)
	if !pending(a) {
		t.Fatal("the wake-up of a waiter that left was lost")
	}
	// A wake-up that arrives during a's receive stays pending on a: that
	// receive may have read the queue before the send.
	take(t, a)
	try(n, a, false, false) // done, nothing kept: a waits
	n.wake("q", map[string]bool{"g": true}, false)
	take(t, a)
	n.wake("q", map[string]bool{"g": true}, false) // during a's receive
	try(n, a, false, false)
	if !pending(a) {
		t.Fatal("a wake-up during the receive was dropped")
	}
	if got := n.waiting(); got != 3 {
		t.Fatalf("waiting %d, want 3 (a, other, elsewhere)", got)
	}
	n.wake("", nil, true) // the listener reconnected: every group
	if !pending(elsewhere) {
		t.Fatal("wake all missed a queue")
	}
	for _, w := range []*waiter{a, other, elsewhere} {
		n.unsubscribe(w)
	}
	if got := n.waiting(); got != 0 || len(n.groups) != 0 {
		t.Fatalf("waiting %d, %d queues left after every long poll left", got, len(n.groups))
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
	try(n, w, false, false)
	n.hotTick(t0.Add(hotInterval / 2))
	if pending(w) {
		t.Fatal("woken again right after the notification")
	}
	n.hotTick(t0.Add(hotInterval + time.Millisecond))
	take(t, w)
	try(n, w, false, false)
	n.hotTick(t0.Add(hotInterval + 2*time.Millisecond))
	if pending(w) {
		t.Fatal("woken twice within hotInterval")
	}
	n.hotTick(t0.Add(2*hotInterval + 2*time.Millisecond))
	take(t, w)
	try(n, w, false, false)
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
	try(n, a, false, false)
	if pending(a) || pending(b) {
		t.Fatal("woken again while c still receives")
	}
	n.tried(c, false, false) // c is done: the wake-up goes on
	if !pending(b) {
		t.Fatal("the wake-up was not passed on when c was done")
	}
}
