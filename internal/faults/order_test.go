package faults

import (
	"strings"
	"testing"
	"time"
)

// synth builds a synthetic history of group "g" for the checker's tests.
// Each call takes explicit ticks of the history's clock (start, end), so
// that calls can overlap; a message is named by its key and position (its
// id is its position), and the server leases it at base + start * tick for
// a second (tick is a second unless set: each lease expires before the
// next tick).
type synth struct {
	h    *History
	base time.Time
	tick time.Duration
}

func newSynth() *synth {
	return &synth{h: newHistory([]string{"g"}), base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), tick: time.Second}
}

// msg names a message: its key ("" for none) and position.
type msg struct {
	key string
	pos int64
}

// recv records a receive by consumer, from start to end, that returned
// msgs in that order; the messages count as committed sends.
func (s *synth) recv(consumer string, start, end int64, msgs ...msg) []*Delivery {
	ds := make([]*Delivery, len(msgs))
	for i, m := range msgs {
		at := s.base.Add(time.Duration(start) * s.tick)
		ds[i] = &Delivery{Group: "g", ID: m.pos, Attempt: len(s.h.deliveries["g"][m.pos]) + 1, Consumer: consumer,
			Key: m.key, Pos: m.pos, Index: i, At: at, Expires: at.Add(time.Second),
			seqStart: start, seqEnd: end}
		s.h.deliveries["g"][m.pos] = append(s.h.deliveries["g"][m.pos], ds[i])
		s.h.committed[m.pos] = true
		s.h.keys[m.pos] = m.key
	}
	return ds
}

// ack records one ack statement of ds, from start to end, with outcomes o
// (one for all, or one per delivery).
func (s *synth) ack(start, end int64, o []AckOutcome, ds ...*Delivery) {
	for i, d := range ds {
		oc := o[0]
		if len(o) > 1 {
			oc = o[i]
		}
		s.h.acks["g"][d.ID] = append(s.h.acks["g"][d.ID], &ackRec{d: d, outcome: oc, seqStart: start, seqEnd: end, idx: i})
	}
}

// nack records a nack of d, from start to end, with outcome o.
func (s *synth) nack(start, end int64, o AckOutcome, d *Delivery) {
	s.h.nacks["g"][d.ID] = append(s.h.nacks["g"][d.ID], &ackRec{d: d, outcome: o, seqStart: start, seqEnd: end})
}

var (
	done  = []AckOutcome{AckDone}
	maybe = []AckOutcome{AckMaybe}
	stale = []AckOutcome{AckStale}
)

// TestOrderValid: histories a correct engine and consumer can produce,
// including overlapping calls, unknown and stale acks, nacks and unkeyed
// messages, show no order violation.
func TestOrderValid(t *testing.T) {
	s := newSynth()
	// A run acked in one statement, then the next position; a nack retries
	// in place, and the retry comes in a run with the next one; an ack of
	// unknown outcome stops the run, whose rest comes later.
	a := s.recv("c1", 1, 2, msg{"a", 1}, msg{"a", 2})
	s.ack(3, 4, done, a...)
	a3 := s.recv("c2", 5, 6, msg{"a", 3})
	s.nack(7, 8, AckDone, a3[0])
	a = s.recv("c1", 9, 10, msg{"a", 3}, msg{"a", 4})
	s.ack(11, 12, maybe, a[0])
	a4 := s.recv("c2", 13, 14, msg{"a", 4})
	s.ack(15, 16, done, a4...)
	// Overlapping calls: the receive of b2 may have run after b1's ack.
	b1 := s.recv("c1", 1, 3, msg{"b", 10})
	s.ack(20, 30, done, b1...)
	b2 := s.recv("c2", 25, 40, msg{"b", 11})
	s.ack(41, 42, done, b2...)
	// A stale ack (the lease expired) and the redelivery of the run.
	c := s.recv("c1", 1, 2, msg{"c", 20}, msg{"c", 21})
	c2 := s.recv("c2", 45, 52, msg{"c", 20}, msg{"c", 21})
	s.ack(50, 51, stale, c...)
	s.ack(53, 54, done, c2...)
	// An ack of unknown outcome that did not commit: the run comes again.
	d := s.recv("c1", 1, 2, msg{"d", 30}, msg{"d", 31})
	s.ack(3, 4, maybe, d[0])
	d = s.recv("c2", 10, 11, msg{"d", 30}, msg{"d", 31})
	s.ack(12, 13, done, d...)
	// Unkeyed messages have no order.
	u := s.recv("c1", 60, 61, msg{"", 50}, msg{"", 40})
	s.ack(62, 63, done, u[0])
	s.ack(64, 65, done, u[1])
	u = s.recv("c2", 60, 61, msg{"", 45})
	s.ack(70, 71, done, u...)

	if v := s.h.orderLocked("g"); len(v) != 0 {
		t.Errorf("valid history: %d order violations, want 0:\n%s", len(v), strings.Join(v, "\n"))
	}
	if r := s.h.check([]string{"g"}, true, time.Second); r.order != 0 || len(r.examples) != 0 {
		t.Errorf("valid history: check found %d order violations, examples %q", r.order, r.examples)
	}
}

// TestOrderViolations: each history breaks per-key order once, and the
// checker reports it once.
func TestOrderViolations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(s *synth)
		want  string
	}{
		{"received before the previous position was acked", func(s *synth) {
			a1 := s.recv("c1", 1, 2, msg{"a", 1})
			a2 := s.recv("c2", 3, 4, msg{"a", 2})
			s.ack(5, 6, done, a1...)
			s.ack(7, 8, done, a2...)
		}, "position 2 (message 2, attempt 1) received by c2 [seq 3-4] before the previous position 1 was completed (its first ack that may have completed it started at seq 5)"},
		{"received before an ack of unknown outcome", func(s *synth) {
			a1 := s.recv("c1", 1, 2, msg{"a", 1})
			s.recv("c2", 3, 4, msg{"a", 2})
			s.ack(5, 6, maybe, a1...)
		}, "before the previous position 1 was completed (its first ack that may have completed it started at seq 5)"},
		{"received while the previous position is never acked", func(s *synth) {
			s.recv("c1", 1, 2, msg{"a", 1})
			s.recv("c2", 3, 4, msg{"a", 2})
		}, "before the previous position 1 was completed (it was never acked)"},
		{"received after a nack of the previous position", func(s *synth) {
			a1 := s.recv("c1", 1, 2, msg{"a", 1})
			s.nack(3, 4, AckDone, a1[0])
			s.recv("c2", 5, 6, msg{"a", 2})
			a1 = s.recv("c2", 7, 8, msg{"a", 1})
			s.ack(9, 10, done, a1...)
		}, "position 2 (message 2, attempt 1) received by c2 [seq 5-6] before the previous position 1 was completed"},
		{"completed out of order", func(s *synth) {
			a := s.recv("c1", 1, 2, msg{"a", 1}, msg{"a", 2})
			s.ack(3, 4, done, a[1])
			s.ack(5, 6, done, a[0])
		}, "position 1 (message 1, attempt 1, c1) completed at seq 5, after position 2 (message 2) had been completed at seq 4"},
		{"redelivered after a later position was completed", func(s *synth) {
			a := s.recv("c1", 1, 2, msg{"a", 1}, msg{"a", 2})
			s.ack(3, 4, []AckOutcome{AckStale, AckDone}, a...)
			a1 := s.recv("c2", 5, 6, msg{"a", 1})
			s.ack(7, 8, done, a1...) // the same pair: not counted again
		}, "position 1 (message 1, attempt 2, c2) delivered at seq 5, after position 2 (message 2) had been completed at seq 4"},
		{"redelivered after an ack of unknown outcome let the next one out", func(s *synth) {
			// a2 was given out, so a1's unknown ack had committed: a1 must
			// not come again.
			a1 := s.recv("c1", 1, 2, msg{"a", 1})
			s.ack(3, 4, maybe, a1...)
			a2 := s.recv("c2", 5, 6, msg{"a", 2})
			s.ack(7, 8, done, a2...)
			s.recv("c1", 9, 10, msg{"a", 1})
		}, "position 1 (message 1, attempt 2, c1) delivered at seq 9, after position 2 (message 2) had been completed at seq 8"},
		{"a run acked out of order in one statement", func(s *synth) {
			a := s.recv("c1", 1, 2, msg{"a", 1}, msg{"a", 2})
			s.ack(3, 4, done, a[1], a[0])
		}, "one ack statement (seq 3-4) completed position 2 (message 2, c1) before position 1 (message 1)"},
		{"a run out of order", func(s *synth) {
			a := s.recv("c1", 1, 2, msg{"a", 2}, msg{"a", 1})
			s.ack(3, 4, done, a...)
		}, "one receive (by c1, seq 1-2) returned position 2 (message 2) before position 1 (message 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSynth()
			tc.build(s)
			// Other keys and unkeyed messages, in order, change nothing.
			o := s.recv("c3", 100, 101, msg{"z", 1000}, msg{"", 999}, msg{"z", 1001})
			s.ack(102, 103, done, o...)
			v := s.h.orderLocked("g")
			if len(v) != 1 || !strings.HasPrefix(v[0], "group g, key a: ") || !strings.Contains(v[0], tc.want) {
				t.Errorf("got %d violations:\n%s\nwant one: group g, key a: %s", len(v), strings.Join(v, "\n"), tc.want)
			}
			if r := s.h.check([]string{"g"}, true, time.Second); r.order != 1 {
				t.Errorf("check counted %d order violations, want 1", r.order)
			}
		})
	}
}

// TestCheckNacks: a nack may give a delivery back before its lease ends,
// and releases the rest of its key's run, which comes again with the same
// attempt; without the nack, the same history is a duplicate within a
// valid lease and a redelivery whose attempt did not go up.
func TestCheckNacks(t *testing.T) {
	for _, nacked := range []bool{true, false} {
		s := newSynth()
		s.tick = time.Millisecond // every redelivery within the lease
		a := s.recv("c1", 1, 2, msg{"a", 1}, msg{"a", 2}, msg{"", 3})
		if nacked {
			s.nack(3, 4, AckDone, a[0])
			s.nack(5, 6, AckMaybe, a[2])
		}
		again := s.recv("c2", 7, 8, msg{"a", 1}, msg{"a", 2}, msg{"", 3})
		again[1].Attempt = 1 // released: the same attempt
		s.ack(9, 10, done, again...)
		r := s.h.check([]string{"g"}, true, time.Second)
		if nacked && (r.dupInLease != 0 || r.attemptNotUp != 0 || r.order != 0 || r.nacksDone != 1 || r.nacksMaybe != 1) {
			t.Errorf("with nacks: %d dup. within a lease, %d attempts not up, %d order violations (want 0), nacks %d given back, %d unknown (want 1, 1): %q",
				r.dupInLease, r.attemptNotUp, r.order, r.nacksDone, r.nacksMaybe, r.examples)
		}
		if !nacked && (r.dupInLease != 3 || r.attemptNotUp != 1) {
			t.Errorf("without nacks: %d dup. within a lease (want 3), %d attempts not up (want 1)", r.dupInLease, r.attemptNotUp)
		}
	}
}

// TestCheckWrongKey: a message delivered with another key than it was sent
// with is a violation.
func TestCheckWrongKey(t *testing.T) {
	s := newSynth()
	a := s.recv("c1", 1, 2, msg{"a", 1})
	s.ack(3, 4, done, a...)
	s.h.keys[1] = "b"
	if r := s.h.check([]string{"g"}, true, time.Second); r.wrongKey != 1 {
		t.Errorf("%d deliveries with a wrong key, want 1 (%q)", r.wrongKey, r.examples)
	}
}
