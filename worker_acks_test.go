package sluice

import (
	"slices"
	"testing"
	"time"
)

// Receipts waiting for acknowledgement stay for the fetch loop's next
// receive until the linger has passed: the acker does not take them as
// they come. (It used to: the first receipt after a quiet moment went to an
// ack call of its own, never riding on a receive.)
func TestAckerLeavesReceiptsForTheNextReceive(t *testing.T) {
	w := &worker{linger: time.Hour, ackWake: make(chan struct{}, 1), ackClose: make(chan struct{})}
	done := make(chan struct{})
	go func() { defer close(done); w.acker() }()

	w.addAck("0.1.1.1")
	time.Sleep(20 * time.Millisecond) // the acker has had time to take it, were it to
	w.addAck("0.2.1.1")
	if got := w.takeAcks(); !slices.Equal(got, []string{"0.1.1.1", "0.2.1.1"}) {
		t.Fatalf("takeAcks = %q, want both receipts, oldest first", got)
	}
	if got := w.takeAcks(); got != nil {
		t.Fatalf("takeAcks again = %q, want nothing", got)
	}
	// Nothing left: the acker ends at close without an ack call (this
	// worker has no pool, so a call would panic).
	close(w.ackClose)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the acker did not end after ackClose")
	}
}

// takeAcks takes at most 1,000 receipts a time, oldest first.
func TestTakeAcksCapsABatch(t *testing.T) {
	w := &worker{ackWake: make(chan struct{}, 1)}
	for range 1500 {
		w.addAck("r")
	}
	if n := len(w.takeAcks()); n != 1000 {
		t.Fatalf("first batch %d receipts, want 1000", n)
	}
	if n := len(w.takeAcks()); n != 500 {
		t.Fatalf("second batch %d receipts, want 500", n)
	}
}
