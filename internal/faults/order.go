package faults

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Per-key order.
//
// Within a consumer group, the engine delivers the messages of one ordering
// key in position order (pos, the commit order): no message of a key is
// leased while an earlier one of the key is unfinished, except that one
// receive may return a run of several messages of a key, in order. The
// consumers (see Env.process) handle a batch in order and leave the rest of
// a key alone once one of its messages is not surely completed, so that a
// processing, an ack that completed its message, is the processing of the
// key's next position. orderLocked checks that, per group and key:
//
//  1. one receive returns the messages of a key in increasing position
//     order (a run);
//  2. a position p is not received, in a receive that does not also return
//     the key's previous position q, before q was completed: a violation is
//     reported only when the receive of p had returned before the first ack
//     of q that may have completed it started (an ack whose outcome is
//     unknown counts as one that may have: the connection broke after the
//     server got it, and it may have committed then or later, even after a
//     crash; a stale, refused or nacked one does not);
//  3. no position is completed (by an ack known to have completed it) after
//     a later position of its key had surely been completed (that ack had
//     returned before this one started, or it came earlier in the same
//     statement), and none is delivered after that; the engine gives out p
//     only once q is completed, or in q's run, which the consumer acks in
//     order, in one statement or stopping at the first failure, so a later
//     position is never completed first.
//
// The history's clock orders the calls as the clients saw them, and a
// report needs the order to be certain: a call whose start is after
// another's end ran after it on the server. Calls that overlap, or an
// unknown ack, never cause a report.
//
// PostgreSQL kills need no exception. Leases may be lost in a crash
// (engine 1's are unlogged, engine 2's commit without waiting for the disk),
// but a key's positions are durable before any is handed out (a receive
// that numbers keyed messages commits durably; see
// TestKeyOrderSurvivesACrashAfterAReceive), an ack that returned is
// durable, and an ack of unknown outcome that the engine has seen committed
// (it then gave out the next position) is durable too, as PostgreSQL makes a
// commit visible only once it is flushed. So a
// crash can redeliver a key's unfinished messages, which still come in
// order, but cannot undo the completion of an earlier position behind a
// later one. An unknown ack that in fact did not commit shows later as a
// completing ack of the same position (AckDone): rule 3 compares only such
// acks, and rule 2 uses the earliest ack that may have committed, so the
// uncertainty can only hide a violation, never invent one.

// keyHistory is what a group's history holds about one ordering key.
type keyHistory struct {
	ds   []*Delivery // the deliveries of its messages
	acks []*ackRec   // the acks of those deliveries
}

// orderLocked checks the per-key order of group g's history (see the rules
// above; h.mu is held) and returns a description of each violation: each
// pair of positions of a key found out of order counts once.
func (h *History) orderLocked(g string) []string {
	byKey := map[string]*keyHistory{}
	get := func(key string) *keyHistory {
		kh := byKey[key]
		if kh == nil {
			kh = &keyHistory{}
			byKey[key] = kh
		}
		return kh
	}
	for id, ds := range h.deliveries[g] {
		for _, d := range ds {
			if d.Key != "" {
				get(d.Key).ds = append(get(d.Key).ds, d)
			}
		}
		for _, a := range h.acks[g][id] {
			if a.d.Key != "" {
				get(a.d.Key).acks = append(get(a.d.Key).acks, a)
			}
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		out = append(out, byKey[k].violations(g, k)...)
	}
	return out
}

// violations checks the history of key of group g.
func (kh *keyHistory) violations(g, key string) []string {
	var out []string
	reported := map[[2]int64]bool{} // (earlier, later) positions found out of order
	report := func(earlier, later int64, format string, args ...any) {
		if reported[[2]int64{earlier, later}] {
			return
		}
		reported[[2]int64{earlier, later}] = true
		out = append(out, fmt.Sprintf("group %s, key %s: ", g, key)+fmt.Sprintf(format, args...))
	}
	ds := append([]*Delivery(nil), kh.ds...)
	sort.Slice(ds, func(i, j int) bool {
		if ds[i].seqEnd != ds[j].seqEnd {
			return ds[i].seqEnd < ds[j].seqEnd
		}
		return ds[i].Index < ds[j].Index
	})

	// 1. Each receive returns a key's messages in position order.
	for i := 1; i < len(ds); i++ {
		a, b := ds[i-1], ds[i]
		if a.seqEnd == b.seqEnd && b.Pos <= a.Pos {
			report(b.Pos, a.Pos, "one receive (by %s, seq %d-%d) returned position %d (message %d) before position %d (message %d)",
				a.Consumer, a.seqStart, a.seqEnd, a.Pos, a.ID, b.Pos, b.ID)
		}
	}

	// 2. No position is received before the previous one was completed,
	// unless in the same receive.
	var positions []int64
	seen := map[int64]bool{}
	inCall := map[[2]int64]bool{} // (receive call, position)
	for _, d := range ds {
		inCall[[2]int64{d.seqEnd, d.Pos}] = true
		if !seen[d.Pos] {
			seen[d.Pos] = true
			positions = append(positions, d.Pos)
		}
	}
	sort.Slice(positions, func(i, j int) bool { return positions[i] < positions[j] })
	prev := map[int64]int64{} // the key's previous position (of those delivered)
	for i := 1; i < len(positions); i++ {
		prev[positions[i]] = positions[i-1]
	}
	// mayDone: the earliest start of an ack of a position that may have
	// completed it (math.MaxInt64 if none).
	mayDone := map[int64]int64{}
	for _, a := range kh.acks {
		if !a.outcome.mayHaveCommitted() {
			continue
		}
		if s, ok := mayDone[a.d.Pos]; !ok || a.seqStart < s {
			mayDone[a.d.Pos] = a.seqStart
		}
	}
	for _, d := range ds {
		q, ok := prev[d.Pos]
		if !ok || inCall[[2]int64{d.seqEnd, q}] {
			continue
		}
		s, acked := mayDone[q]
		if !acked {
			s = math.MaxInt64
		}
		if d.seqEnd < s {
			when := fmt.Sprintf("its first ack that may have completed it started at seq %d", s)
			if !acked {
				when = "it was never acked"
			}
			report(q, d.Pos, "position %d (message %d, attempt %d) received by %s [seq %d-%d] before the previous position %d was completed (%s); position %d: %s",
				d.Pos, d.ID, d.Attempt, d.Consumer, d.seqStart, d.seqEnd, q, when, q, describe(ds, q))
		}
	}

	// 3. Nothing is completed, or delivered, after a later position was
	// surely completed: a sweep over the calls by start, keeping the highest
	// position whose completing ack had returned by then.
	var done []*ackRec
	for _, a := range kh.acks {
		if a.outcome == AckDone {
			done = append(done, a)
		}
	}
	// Within one statement (its acks share seqStart), in the statement's order.
	sort.Slice(done, func(i, j int) bool {
		if done[i].seqStart != done[j].seqStart {
			return done[i].seqStart < done[j].seqStart
		}
		return done[i].idx < done[j].idx
	})
	for i := 1; i < len(done); i++ {
		a, b := done[i-1], done[i]
		if a.seqStart == b.seqStart && b.d.Pos < a.d.Pos {
			report(b.d.Pos, a.d.Pos, "one ack statement (seq %d-%d) completed position %d (message %d, %s) before position %d (message %d)",
				a.seqStart, a.seqEnd, a.d.Pos, a.d.ID, a.d.Consumer, b.d.Pos, b.d.ID)
		}
	}
	// Across statements, by the history's clock.
	sort.Slice(done, func(i, j int) bool { return done[i].seqEnd < done[j].seqEnd })
	type probe struct {
		start int64
		d     *Delivery
		ack   bool // the completing ack of d, else the delivery d
	}
	probes := make([]probe, 0, len(ds)+len(done))
	for _, d := range ds {
		probes = append(probes, probe{start: d.seqStart, d: d})
	}
	for _, a := range done {
		probes = append(probes, probe{start: a.seqStart, d: a.d, ack: true})
	}
	sort.SliceStable(probes, func(i, j int) bool { return probes[i].start < probes[j].start })
	var top *ackRec // the highest position surely completed so far
	j := 0
	for _, p := range probes {
		for ; j < len(done) && done[j].seqEnd < p.start; j++ {
			if top == nil || done[j].d.Pos > top.d.Pos {
				top = done[j]
			}
		}
		if top == nil || top.d.Pos <= p.d.Pos {
			continue
		}
		what := "delivered"
		if p.ack {
			what = "completed"
		}
		report(p.d.Pos, top.d.Pos, "position %d (message %d, attempt %d, %s) %s at seq %d, after position %d (message %d) had been completed at seq %d",
			p.d.Pos, p.d.ID, p.d.Attempt, p.d.Consumer, what, p.start, top.d.Pos, top.d.ID, top.seqEnd)
	}
	return out
}

// describe lists the deliveries of position pos among ds (message, attempt,
// consumer, the receive's seq), for a report.
func describe(ds []*Delivery, pos int64) string {
	var parts []string
	for _, d := range ds {
		if d.Pos == pos {
			parts = append(parts, fmt.Sprintf("message %d attempt %d to %s [seq %d-%d]", d.ID, d.Attempt, d.Consumer, d.seqStart, d.seqEnd))
		}
	}
	return strings.Join(parts, "; ")
}
