package sqlsrc_test

import (
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The receive of TestV2RandomSemantics, the checks of what it returns, and
// the drain at the end of a history.

// semRow is a row of sluice.receive.
type semRow struct {
	id      int64
	pos     int64
	key     *string
	prio    int
	attempt int
	receipt string
}

// receive receives up to n messages for a group in its consumer's session,
// a fifth of the time carrying acks of leased messages, checks them and
// leases them in the model. It returns their ids.
func (m *semModel) receive(g string, n int) []int64 {
	var ride []*semDelivery
	var ackArg any
	if m.rng.IntN(5) == 0 {
		var receipts []string
		for _, id := range m.pick(g, 1+m.rng.IntN(3), false) {
			ride = append(ride, m.group[g][id])
			receipts = append(receipts, m.group[g][id].receipt)
		}
		if len(receipts) > 0 {
			ackArg = receipts
		}
	}
	// (whether the queue's receives look at its priority lane first: set
	// by a prioritized send, or by a receive, unless an open transaction
	// holds the queue's row; see checkPriorityLane)
	flagged := m.b.int64(`SELECT prioritized::int FROM sluice.queue WHERE name = $1`, m.queue) == 1
	start := time.Now()
	rows, err := m.cons[g].Query(m.b.ctx, `SELECT id, pos, key, priority, attempt, receipt
		FROM sluice.receive($1, $2, $3, NULL, NULL, $4::text[])`, m.queue, g, n, ackArg)
	if err != nil {
		m.b.t.Fatalf("%s: receive: %v", m.queue, err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (semRow, error) {
		var s semRow
		return s, r.Scan(&s.id, &s.pos, &s.key, &s.prio, &s.attempt, &s.receipt)
	})
	if err != nil {
		m.b.t.Fatalf("%s: receive: %v", m.queue, err)
	}
	end := time.Now()
	m.receives++
	m.deliveries += len(got)
	// The acks it carried come first: those surely within their lease
	// count; the others may have.
	valid, unknown := countSplit(ride, start, end)
	for _, d := range valid {
		d.state = semAcked
		m.retire(d)
	}
	for _, d := range unknown {
		d.state = semMaybeAcked
		m.retire(d)
	}
	ids := make([]int64, len(got))
	for i, r := range got {
		ids[i] = r.id
	}
	m.logf("receive %s %d (acking %d): %v", g, n, len(ride), ids)
	for _, r := range got {
		m.logf("  %d: %s", r.id, r.receipt)
	}
	mustBeDead := m.checkReceive(g, got, end)
	if flagged {
		m.checkPriorityLane(g, got)
	}
	for _, r := range got {
		d := m.group[g][r.id]
		if d == nil {
			continue
		}
		m.retire(d)
		d.state, d.attempt, d.loose, d.receipt, d.recv, d.pos = semLeased, r.attempt, false, r.receipt, m.receives, r.pos
		d.validTo, d.expireBy, d.delivered = start.Add(semLease), end.Add(semLease), true
	}
	if len(mustBeDead) > 0 {
		m.checkDeadLetters(g)
		for _, id := range mustBeDead {
			if m.group[g][id].state != semDead {
				m.errorf("receive in %s delivered a later message of the key of %d, which is %s at its last attempt and no dead letter",
					g, id, m.group[g][id].state)
			}
		}
	}
	return ids
}

// checkReceive checks the rows of a receive of a group that ended at end
// against the model before it. It returns the messages that the receive
// must have dead-lettered (a key's message at its last attempt whose lease
// may have ended, with a later message of the key delivered).
func (m *semModel) checkReceive(g string, rows []semRow, end time.Time) (mustBeDead []int64) {
	seen := map[int64]bool{}
	for _, r := range rows {
		d, ok := m.group[g][r.id]
		if !ok {
			m.errorf("receive in %s returned %d, never sent", g, r.id)
			continue
		}
		msg := m.msgs[r.id]
		if seen[r.id] {
			m.errorf("receive in %s returned %d twice", g, r.id)
		}
		if strs([]*string{r.key})[0] != msg.key || r.prio != msg.prio {
			m.errorf("receive in %s returned %d (%s, attempt %d) with key %q priority %d, sent with %q, %d",
				g, r.id, d.state, r.attempt, strs([]*string{r.key})[0], r.prio, msg.key, msg.prio)
		}
		switch {
		case d.state == semAcked || d.state == semDead:
			m.errorf("receive in %s delivered %d, which is %s", g, r.id, d.state)
		case d.state == semLeased && end.Before(d.validTo):
			m.errorf("receive in %s delivered %d while its lease (attempt %d) holds", g, r.id, d.attempt)
		}
		want := d.attempt + 1
		if d.state == semReleased && !(d.loose && r.attempt == want) {
			want = d.attempt
		}
		if r.attempt != want || r.attempt > semMaxAttempts {
			m.errorf("receive in %s delivered %d (%s) at attempt %d, want %d (of at most %d)", g, r.id, d.state, r.attempt, want, semMaxAttempts)
		}
		if end.Before(d.due) {
			m.errorf("receive in %s delivered %d (%s) %v before it was due", g, r.id, d.state, d.due.Sub(end))
		}
		if msg.key != "" && !d.redriven {
			mustBeDead = append(mustBeDead, m.checkKeyOrder(g, msg, seen, end)...)
		}
		seen[r.id] = true
	}
	if m.lanes == 1 {
		m.checkPriorities(g, rows)
	}
	return mustBeDead
}

// checkKeyOrder checks that every earlier message of msg's key, sent
// without a delay (a delayed one takes its place in the key's order when
// it comes due) and not redriven, is completed in the group or came before
// it in this receive (seen). An earlier one at its last attempt whose lease
// may have ended must then be a dead letter: it is returned.
func (m *semModel) checkKeyOrder(g string, msg *semMsg, seen map[int64]bool, end time.Time) (mustBeDead []int64) {
	for _, pid := range m.order {
		if pid == msg.id {
			break
		}
		p, pd := m.msgs[pid], m.group[g][pid]
		if p.key != msg.key || p.delayed || !semOrdered(p, msg) || pd.redriven || pd.completed() || seen[pid] {
			continue
		}
		if pd.state == semLeased && pd.attempt >= semMaxAttempts && !end.Before(pd.validTo) {
			mustBeDead = append(mustBeDead, pid)
			continue
		}
		m.errorf("receive in %s delivered %d of key %s while the earlier %d is %s (attempt %d)", g, msg.id, msg.key, pid, pd.state, pd.attempt)
	}
	return mustBeDead
}

// checkPriorityLane checks, on a queue of any number of lanes whose
// receives look at the priority lane first (sluice.queue.prioritized), that
// a receive returned nothing of a lower class than an unkeyed message above
// 0 that was ready and not returned (sent without a delay, never delivered
// in the group, not redriven): each such message is numbered first, into
// the priority lane, whatever it was sent after or with, and the lane's
// levels above 0 are taken before any other lane. A row of another lane
// (its receipt names the lane) is of class 0: a keyed message keeps its
// key's order whatever its priority. A delivery again of a priority lane's
// lease that ended is left out: those come first, whatever their levels,
// as any lane's ended leases come before its new positions.
func (m *semModel) checkPriorityLane(g string, rows []semRow) {
	low, returned := 1<<30, map[int64]bool{}
	for _, r := range rows {
		returned[r.id] = true
		msg, d := m.msgs[r.id], m.group[g][r.id]
		if msg == nil || d == nil {
			continue
		}
		switch prioLane := strings.Split(r.receipt, ".")[2] == strconv.Itoa(m.lanes); {
		case !prioLane:
			low = min(low, 0)
		case !d.delivered:
			low = min(low, semClass(msg.prio))
		}
	}
	for _, xid := range m.order {
		x, xd := m.msgs[xid], m.group[g][xid]
		if returned[xid] || x.key != "" || x.prio <= 0 || x.delayed || xd.delivered || xd.redriven ||
			xd.state != semPending || semClass(x.prio) <= low {
			continue
		}
		m.errorf("receive in %s returned a message of class %d and not %d (priority %d), ready and never delivered",
			g, low, xid, x.prio)
	}
}

// semOrdered says whether the model knows the order in which the engine
// numbers a and b: their commit order (m.order), but for a message sent in
// a transaction left open (late) and one committed while that transaction
// was open: a cut that finds both numbers the older transaction's first.
// (Two late messages: one transaction's, in id order, or one transaction's
// after another's, begun after it ended.)
func semOrdered(a, b *semMsg) bool {
	if a.late == b.late {
		return true
	}
	l, o := a, b
	if b.late {
		l, o = b, a
	}
	return o.seq < l.openFrom || o.seq > l.seq
}

// semClass orders unkeyed messages: above 0 by priority, then 0, then below.
func semClass(prio int) int {
	if prio < 0 {
		return -1
	}
	return prio
}

// checkPriorities checks, on a queue of one lane, that no fresh unkeyed
// message returned passed over an earlier one (so numbered no later) of the
// same or a higher class that was ready and not returned: never delivered
// in the group, not redriven, sent without a delay.
func (m *semModel) checkPriorities(g string, rows []semRow) {
	returned := map[int64]bool{}
	for _, r := range rows {
		returned[r.id] = true
	}
	for _, r := range rows {
		msg, d := m.msgs[r.id], m.group[g][r.id]
		if msg == nil || msg.key != "" || d.delivered || d.redriven {
			continue
		}
		for _, xid := range m.order {
			if xid == r.id {
				break
			}
			x, xd := m.msgs[xid], m.group[g][xid]
			if returned[xid] || x.key != "" || x.delayed || !semOrdered(x, msg) || xd.delivered || xd.redriven ||
				xd.state != semPending {
				continue
			}
			if semClass(x.prio) >= semClass(msg.prio) {
				m.errorf("receive in %s returned %d (priority %d) and not the earlier %d (priority %d), ready and never delivered",
					g, r.id, msg.prio, xid, x.prio)
			}
		}
	}
}

// drain lets every lease and delay run out, then receives and acks each
// group until nothing is left; redrives every dead letter and does it
// again. Every message must then be completed in every group, with no dead
// letter left and a status of nothing ready, delayed or in flight.
func (m *semModel) drain() {
	m.endLong(true)
	m.drainOnce()
	for _, g := range semGroups {
		m.redrive(g, true)
	}
	m.drainOnce()
	for _, g := range semGroups {
		for _, id := range m.order {
			if d := m.group[g][id]; d.state != semAcked && d.state != semMaybeAcked {
				m.errorf("after the drains %d is %s in %s (attempt %d)", id, d.state, g, d.attempt)
			}
		}
		st := m.b.v2status(m.queue, g)
		if st.Ready != 0 || st.Delayed != 0 || st.InFlight != 0 || st.Dead != 0 || st.Lag == nil || *st.Lag != 0 {
			m.errorf("status of %s after the drains: ready %d, delayed %d, in flight %d, dead %d, lag %v; want 0",
				g, st.Ready, st.Delayed, st.InFlight, st.Dead, st.Lag)
		}
	}
}

func (m *semModel) drainOnce() {
	last := time.Now()
	for _, g := range semGroups {
		for _, d := range m.group[g] {
			for _, t := range []time.Time{d.due, d.expireBy} {
				if t.After(last) {
					last = t
				}
			}
		}
	}
	time.Sleep(time.Until(last) + 50*time.Millisecond)
	for _, g := range semGroups {
		empty := 0
		for i := 0; empty < 2 && !m.b.t.Failed(); i++ {
			ids := m.receive(g, 10)
			if len(ids) == 0 {
				empty++
				time.Sleep(30 * time.Millisecond) // past a session's note that the group is idle
				continue
			}
			empty = 0
			m.ackIDs(g, ids, nil, true)
			if i > 10000 {
				m.b.t.Fatalf("%s: drain of %s does not end", m.queue, g)
			}
		}
		m.checkDeadLetters(g)
		for _, id := range m.order {
			if d := m.group[g][id]; !d.completed() {
				m.errorf("after a drain %d is %s in %s (attempt %d): stranded", id, d.state, g, d.attempt)
			}
		}
	}
}
