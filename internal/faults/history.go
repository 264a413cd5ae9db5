package faults

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sluicemq/sluice"
)

// ackRec is an ack (in History.acks) or a nack (in History.nacks) of one
// delivery, with its outcome and the history's clock before the call and
// after it returned (the receipts acked in one statement share them; idx
// is the receipt's place in the statement, which acks them in that order).
type ackRec struct {
	d                *Delivery
	outcome          AckOutcome
	seqStart, seqEnd int64
	idx              int
}

// History records what producers and consumers saw. Its logical clock
// (seq) orders calls as the clients saw them: a call whose start is after
// another's end began after that one had returned.
type History struct {
	mu         sync.Mutex
	seq        int64
	committed  map[int64]bool
	failed     map[int64]bool
	uncertain  map[int64]bool
	keys       map[int64]string // the ordering key of each message sent (committed or unknown), "" for none
	deliveries map[string]map[int64][]*Delivery
	acks       map[string]map[int64][]*ackRec
	nacks      map[string]map[int64][]*ackRec
}

func newHistory(groups []string) *History {
	h := &History{committed: map[int64]bool{}, failed: map[int64]bool{}, uncertain: map[int64]bool{},
		keys: map[int64]string{}, deliveries: map[string]map[int64][]*Delivery{},
		acks: map[string]map[int64][]*ackRec{}, nacks: map[string]map[int64][]*ackRec{}}
	for _, g := range groups {
		h.deliveries[g] = map[int64][]*Delivery{}
		h.acks[g] = map[int64][]*ackRec{}
		h.nacks[g] = map[int64][]*ackRec{}
	}
	return h
}

func (h *History) tick() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nextLocked()
}

func (h *History) nextLocked() int64 {
	h.seq++
	return h.seq
}

// sent records the outcome of the send of msgs, whose ids are ids (in the
// same order; none if the send failed before the server returned them).
func (h *History) sent(ids []int64, msgs []sluice.BatchMessage, o sendOutcome) {
	h.mu.Lock()
	defer h.mu.Unlock()
	into := map[sendOutcome]map[int64]bool{sendCommitted: h.committed, sendFailed: h.failed, sendUncertain: h.uncertain}[o]
	for i, id := range ids {
		into[id] = true
		if o != sendFailed && i < len(msgs) {
			// An id of a send that may have committed can be handed out
			// again only after a crash lost that send: the newest is right.
			h.keys[id] = msgs[i].Key
		}
	}
}

// Deliveries returns the deliveries of message id to group, in the order
// they were recorded.
func (h *History) Deliveries(group string, id int64) []Delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Delivery, 0, len(h.deliveries[group][id]))
	for _, d := range h.deliveries[group][id] {
		out = append(out, *d)
	}
	return out
}

// ackedLocked reports whether message id is acked by group: surely
// (sure), or maybe.
func (h *History) ackedLocked(group string, id int64) (sure, maybe bool) {
	for _, a := range h.acks[group][id] {
		switch a.outcome {
		case AckDone:
			sure = true
		case AckMaybe:
			maybe = true
		}
	}
	return sure, maybe
}

// remaining counts the committed messages that group has neither surely
// nor maybe acked yet.
func (h *History) remaining(group string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for id := range h.committed {
		if sure, maybe := h.ackedLocked(group, id); !sure && !maybe {
			n++
		}
	}
	return n
}

// checkResult counts what check found.
type checkResult struct {
	committed, failed, uncertain int
	deliveries, redeliveries     int
	keyedDeliveries, keys        int // deliveries of keyed messages, and their distinct keys
	inRuns                       int // keyed deliveries after an earlier one of their key in the same receive
	acrossKill                   int // redeliveries with a server kill in between
	acksDone, acksStale          int
	acksFailed, acksMaybe        int
	nacksDone, nacksStale        int
	nacksFailed, nacksMaybe      int
	idsReused                    int // message ids of failed sends handed out again after a crash

	lost            int // committed, never acked (or maybe acked while the database still shows work)
	dupInLease      int // delivered again before the previous lease expired, no kill or nack in between
	order           int // per-key order: pairs of positions of a key found out of order (see orderLocked)
	afterAck        int // delivery that started after an ack of the message had committed
	staleCompleted  int // ack counted for a receipt after a newer delivery had been returned
	attemptNotUp    int // redelivery whose attempt is not above the previous one, no kill in between
	failedDelivered int // a send that surely failed was delivered
	unsent          int // delivered, never sent
	wrongKey        int // delivered with another ordering key than it was sent with
	examples        []string
}

// leaseTolerance absorbs rounding in the comparison of two server
// timestamps (both come from clock_timestamp() of the same server).
const leaseTolerance = 10 * time.Millisecond

// check verifies the history:
//   - every committed message is acked by every group (an ack with an
//     unknown outcome counts when the database shows nothing left: clean);
//   - no failed send is delivered, nothing unsent is delivered;
//   - no delivery starts after an ack of the same message committed;
//   - each redelivery starts at or after the previous lease's expiry and
//     has a higher attempt, unless the server was killed in between (leases
//     are unlogged: a crash ends them) or the delivery was given back: by
//     its nack, or, for a keyed message, by the nack of an earlier message
//     of its key in the same receive (which releases the rest of the run:
//     they come again with the same attempt);
//   - no ack completes a message through a receipt older than a delivery
//     that had already been returned when the ack started;
//   - every message is delivered with the key it was sent with, and the
//     messages of a key in position order (see orderLocked).
func (h *History) check(groups []string, clean bool, lease time.Duration) checkResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := checkResult{committed: len(h.committed), failed: len(h.failed), uncertain: len(h.uncertain)}
	shown := map[*int]int{} // examples kept per kind of violation
	bad := func(counter *int, format string, args ...any) {
		*counter++
		if shown[counter] < 5 {
			shown[counter]++
			r.examples = append(r.examples, fmt.Sprintf(format, args...))
		}
	}
	keys := map[string]bool{}
	for _, g := range groups {
		givenBack := h.givenBackLocked(g)
		type callKey struct {
			call int64
			key  string
		}
		runs := map[callKey]bool{}
		for id := range h.committed {
			sure, maybe := h.ackedLocked(g, id)
			if !sure && !(maybe && clean) {
				bad(&r.lost, "group %s: committed message %d never acked (lost)", g, id)
			}
		}
		for id, ds := range h.deliveries[g] {
			if h.failed[id] && (h.committed[id] || h.uncertain[id]) {
				// The id was handed out again: a crash loses the sequence
				// advances of transactions that had not written durable WAL.
				r.idsReused++
			} else if h.failed[id] {
				bad(&r.failedDelivered, "group %s: message %d delivered although its send failed", g, id)
			}
			if !h.committed[id] && !h.uncertain[id] {
				bad(&r.unsent, "group %s: message %d delivered but never sent", g, id)
			}
			r.deliveries += len(ds)
			r.redeliveries += len(ds) - 1
			for _, d := range ds {
				if d.Key != "" {
					r.keyedDeliveries++
					keys[d.Key] = true
					if runs[callKey{d.seqEnd, d.Key}] {
						r.inRuns++
					}
					runs[callKey{d.seqEnd, d.Key}] = true
				}
				if sent, ok := h.keys[id]; ok && d.Key != sent && h.committed[id] && !h.uncertain[id] && !h.failed[id] {
					bad(&r.wrongKey, "group %s: message %d delivered with key %q, sent with %q", g, id, d.Key, sent)
				}
			}
			// Delivered after a committed ack.
			for _, a := range h.acks[g][id] {
				if a.outcome != AckDone {
					continue
				}
				for _, d := range ds {
					if d.seqStart > a.seqEnd {
						bad(&r.afterAck, "group %s: message %d delivered (attempt %d, to %s) after its ack committed",
							g, id, d.Attempt, d.Consumer)
					}
				}
			}
			// Redeliveries only after the lease expired.
			sorted := append([]*Delivery(nil), ds...)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i].At.Before(sorted[j].At) })
			for i := 1; i < len(sorted); i++ {
				a, b := sorted[i-1], sorted[i]
				if b.genEnd != a.genStart {
					r.acrossKill++
					continue
				}
				nacked, released := givenBack.before(a, b.seqEnd)
				if b.At.Before(a.Expires.Add(-leaseTolerance)) && !nacked && !released {
					bad(&r.dupInLease, "group %s: message %d delivered to %s (attempt %d) at %s, within the lease of attempt %d (to %s) until %s [seq %d-%d gen %d-%d, then seq %d-%d gen %d-%d; receipts %s then %s]",
						g, id, b.Consumer, b.Attempt, b.At.Format("15:04:05.000000"), a.Attempt, a.Consumer,
						a.Expires.Format("15:04:05.000000"), a.seqStart, a.seqEnd, a.genStart, a.genEnd,
						b.seqStart, b.seqEnd, b.genStart, b.genEnd, a.Receipt, b.Receipt)
				}
				if b.Attempt < a.Attempt || (b.Attempt == a.Attempt && !released) {
					bad(&r.attemptNotUp, "group %s: message %d delivered with attempt %d after attempt %d, no kill in between",
						g, id, b.Attempt, a.Attempt)
				}
			}
		}
		for id, as := range h.acks[g] {
			for _, a := range as {
				switch a.outcome {
				case AckDone:
					r.acksDone++
				case AckStale:
					r.acksStale++
				case AckFailed:
					r.acksFailed++
				case AckMaybe:
					r.acksMaybe++
				}
				if a.outcome != AckDone {
					continue
				}
				for _, d := range h.deliveries[g][id] {
					if d != a.d && d.At.After(a.d.At) && d.seqEnd < a.seqStart {
						bad(&r.staleCompleted, "group %s: message %d completed by the receipt of attempt %d (%s) after attempt %d had been delivered to %s",
							g, id, a.d.Attempt, a.d.Consumer, d.Attempt, d.Consumer)
					}
				}
			}
		}
		for _, as := range h.nacks[g] {
			for _, a := range as {
				switch a.outcome {
				case AckDone:
					r.nacksDone++
				case AckStale:
					r.nacksStale++
				case AckFailed:
					r.nacksFailed++
				case AckMaybe:
					r.nacksMaybe++
				}
			}
		}
		for _, v := range h.orderLocked(g) {
			bad(&r.order, "%s", v)
		}
	}
	r.keys = len(keys)
	return r
}

// givenBack tells, for the deliveries of a group, when a nack may have
// given each back: the earliest start of a nack of the delivery itself, and
// of a nack that may have released it (of an earlier message of its key, in
// the same receive), among the nacks that may have committed.
type givenBack struct {
	nacked, released map[*Delivery]int64
}

// givenBackLocked returns the givenBack of group g (h.mu held).
func (h *History) givenBackLocked(g string) givenBack {
	gb := givenBack{nacked: map[*Delivery]int64{}, released: map[*Delivery]int64{}}
	calls := map[int64][]*Delivery{} // the deliveries of each receive call
	for _, ds := range h.deliveries[g] {
		for _, d := range ds {
			calls[d.seqEnd] = append(calls[d.seqEnd], d)
		}
	}
	earliest := func(m map[*Delivery]int64, d *Delivery, seq int64) {
		if s, ok := m[d]; !ok || seq < s {
			m[d] = seq
		}
	}
	for _, ns := range h.nacks[g] {
		for _, n := range ns {
			if !n.outcome.mayHaveCommitted() {
				continue
			}
			earliest(gb.nacked, n.d, n.seqStart)
			if n.d.Key == "" {
				continue
			}
			for _, d := range calls[n.d.seqEnd] {
				if d.Key == n.d.Key && d.Pos > n.d.Pos {
					earliest(gb.released, d, n.seqStart)
				}
			}
		}
	}
	return gb
}

// before reports whether delivery d may have been given back before seq:
// by its own nack (nacked), or released by the nack of an earlier message
// of its key (released).
func (gb givenBack) before(d *Delivery, seq int64) (nacked, released bool) {
	s, ok := gb.nacked[d]
	nacked = ok && s < seq
	s, ok = gb.released[d]
	released = ok && s < seq
	return nacked, released
}

// Takeovers checks what became of the messages held by the consumers when
// they died: each such delivery must be followed by a delivery to another
// consumer, with the next attempt, at or after the lease's expiry, unless
// the server was killed in between. It returns how many deliveries the
// dead consumers held, how many were taken over so, and examples of the
// others.
func (e *Env) Takeovers() (held, takenOver int, bad []string) {
	e.faultMu.Lock()
	dead := make(map[*Delivery]bool, len(e.dead))
	for k, v := range e.dead {
		dead[k] = v
	}
	e.faultMu.Unlock()
	h := e.Hist
	h.mu.Lock()
	defer h.mu.Unlock()
	for g, byID := range h.deliveries {
		for id, ds := range byID {
			sorted := append([]*Delivery(nil), ds...)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i].At.Before(sorted[j].At) })
			for i, d := range sorted {
				if !dead[d] {
					continue
				}
				held++
				if i+1 == len(sorted) {
					bad = append(bad, fmt.Sprintf("group %s: message %d held by %s (attempt %d) never delivered again", g, id, d.Consumer, d.Attempt))
					continue
				}
				n := sorted[i+1]
				switch {
				case n.genEnd != d.genStart:
					takenOver++ // a kill ended the lease
				case n.Consumer != d.Consumer && n.Attempt == d.Attempt+1 && !n.At.Before(d.Expires.Add(-leaseTolerance)):
					takenOver++
				default:
					bad = append(bad, fmt.Sprintf("group %s: message %d held by %s (attempt %d, lease until %s) next delivered to %s with attempt %d at %s",
						g, id, d.Consumer, d.Attempt, d.Expires.Format("15:04:05.000"), n.Consumer, n.Attempt, n.At.Format("15:04:05.000")))
				}
			}
		}
	}
	return held, takenOver, bad
}

// acksOf returns the outcomes of the acks of delivery d.
func (h *History) acksOf(d *Delivery) []AckOutcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []AckOutcome
	for _, a := range h.acks[d.Group][d.ID] {
		if a.d == d {
			out = append(out, a.outcome)
		}
	}
	return out
}
