package sqlsrc_test

import (
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The calls of TestV2RandomSemantics other than receive, each checked
// against the model and then applied to it.

// send sends 1-4 messages (send or send_batch): keyed over three keys or
// not, of priority 0, 3, 7 or -2, some with a delay, some with a dedup key.
func (m *semModel) send() {
	n := 1 + m.rng.IntN(4)
	bodies, keys, prios := m.draw(n)
	dedups := make([]*string, n)
	for i := range n {
		if m.rng.IntN(10) == 0 {
			s := fmt.Sprintf("d%d", m.rng.IntN(8))
			dedups[i] = &s
		}
	}
	delay, delayArg := m.drawDelay()
	if m.rng.IntN(20) == 0 {
		m.sendRolledBack(bodies, keys, delayArg, prios)
		return
	}
	start := time.Now()
	var ids []int64
	var err error
	if n == 1 && m.rng.IntN(2) == 0 {
		ids = make([]int64, 1)
		err = m.prod.QueryRow(m.b.ctx, `SELECT sluice.send($1, $2::jsonb, NULL, $3, $4::interval, $5, $6)`,
			m.queue, bodies[0], keys[0], delayArg, prios[0], dedups[0]).Scan(&ids[0])
	} else {
		var rows pgx.Rows
		rows, err = m.prod.Query(m.b.ctx, `SELECT * FROM sluice.send_batch($1, $2::text[]::jsonb[], NULL, $3::text[],
			$4::interval, $5::int[], $6::text[])`, m.queue, bodies, keys, delayArg, prios, dedups)
		if err == nil {
			ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
	}
	if err != nil {
		m.b.t.Fatalf("%s: send of %d: %v", m.queue, n, err)
	}
	m.logf("send %v keys %v prios %v dedup %v delay %v", ids, strs(keys), prios, strs(dedups), delay)
	if len(ids) != n {
		m.errorf("send of %d returned %d ids", n, len(ids))
		return
	}
	for i, id := range ids {
		if dedups[i] != nil {
			if first, ok := m.dedup[*dedups[i]]; ok {
				if id != first {
					m.errorf("send with dedup key %s returned %d, want %d (the first sent with it)", *dedups[i], id, first)
				}
				continue
			}
			m.dedup[*dedups[i]] = id
		}
		m.admit(m.sent(id, keys[i], prios[i], delay, start))
	}
}

// draw draws the bodies, keys (three, or none) and priorities (0, 3, 7 or
// -2) of n messages to send.
func (m *semModel) draw(n int) (bodies []string, keys []*string, prios []int32) {
	bodies, keys, prios = make([]string, n), make([]*string, n), make([]int32, n)
	for i := range n {
		bodies[i] = fmt.Sprintf(`{"n": %d}`, len(m.order)+i)
		if k := m.rng.IntN(7); k < 3 {
			s := string(rune('a' + k))
			keys[i] = &s
		}
		prios[i] = []int32{0, 0, 0, 0, 3, 7, -2}[m.rng.IntN(7)]
	}
	return bodies, keys, prios
}

// drawDelay draws a send's delay: none most of the time. It returns it
// also as the delay argument (NULL for none).
func (m *semModel) drawDelay() (time.Duration, any) {
	if m.rng.IntN(100) >= 15 {
		return 0, nil
	}
	delay := time.Duration(100+m.rng.IntN(600)) * time.Millisecond
	return delay, fmt.Sprintf("%d milliseconds", delay.Milliseconds())
}

// sent checks a new message's id (ids increase in the order of the sends,
// committed or not) and returns the message.
func (m *semModel) sent(id int64, key *string, prio int32, delay time.Duration, start time.Time) *semMsg {
	if id <= m.lastID {
		m.errorf("send returned id %d after %d: ids must increase", id, m.lastID)
	}
	m.lastID = id
	msg := &semMsg{id: id, prio: int(prio), delayed: delay > 0, due: start.Add(delay)}
	if key != nil {
		msg.key = *key
	}
	return msg
}

// admit puts a committed message in the model, pending in every group.
func (m *semModel) admit(msg *semMsg) {
	m.msgs[msg.id] = msg
	msg.seq = len(m.order)
	m.order = append(m.order, msg.id)
	for _, g := range semGroups {
		m.group[g][msg.id] = &semDelivery{due: msg.due}
	}
}

// sendLong sends 1-2 messages in a second producer's transaction, which it
// begins when none is open; or it ends that transaction. Its messages are
// invisible until it commits: the other producer's and the consumers'
// calls meanwhile must not wait for it (the first prioritized send of a
// queue notes it in the queue's row; a receive numbers what commits past
// it).
func (m *semModel) sendLong() {
	if m.longTx != nil && m.rng.IntN(3) == 0 {
		m.endLong(m.rng.IntN(4) > 0)
		return
	}
	bodies, keys, prios := m.draw(1 + m.rng.IntN(2))
	delay, delayArg := m.drawDelay()
	m.sendInLong(bodies, keys, prios, delay, delayArg)
}

// sendInLong sends in the second producer's transaction, which it begins
// when none is open.
func (m *semModel) sendInLong(bodies []string, keys []*string, prios []int32, delay time.Duration, delayArg any) {
	if m.longTx == nil {
		tx, err := m.long.Begin(m.b.ctx)
		if err != nil {
			m.b.t.Fatalf("%s: begin: %v", m.queue, err)
		}
		m.longTx, m.longFrom = tx, len(m.order)
	}
	start := time.Now()
	rows, err := m.longTx.Query(m.b.ctx, `SELECT * FROM sluice.send_batch($1, $2::text[]::jsonb[], NULL, $3::text[],
		$4::interval, $5::int[])`, m.queue, bodies, keys, delayArg, prios)
	if err != nil {
		m.b.t.Fatalf("%s: send_batch in the open transaction: %v", m.queue, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		m.b.t.Fatalf("%s: send_batch in the open transaction: %v", m.queue, err)
	}
	m.logf("send %v in the open transaction, keys %v prios %v delay %v", ids, strs(keys), prios, delay)
	for i, id := range ids {
		msg := m.sent(id, keys[i], prios[i], delay, start)
		msg.late, msg.openFrom = true, m.longFrom
		m.longSent = append(m.longSent, msg)
	}
}

// endLong commits the second producer's open transaction (its messages
// join the model, in commit order) or rolls it back (they must never be
// delivered: the model does not know them).
func (m *semModel) endLong(commit bool) {
	if m.longTx == nil {
		return
	}
	var err error
	if commit {
		err = m.longTx.Commit(m.b.ctx)
	} else {
		err = m.longTx.Rollback(m.b.ctx)
	}
	if err != nil {
		m.b.t.Fatalf("%s: end of the open transaction: %v", m.queue, err)
	}
	m.logf("open transaction ended, commit %v: %d messages", commit, len(m.longSent))
	if commit {
		for _, msg := range m.longSent {
			m.admit(msg)
		}
		m.late += len(m.longSent)
	}
	m.longTx, m.longSent = nil, nil
}

// sendRolledBack sends in a transaction that rolls back: its messages must
// never be delivered (the model does not know their ids: a receive of one
// fails the check "never sent").
func (m *semModel) sendRolledBack(bodies []string, keys []*string, delayArg any, prios []int32) {
	tx, err := m.prod.Begin(m.b.ctx)
	if err != nil {
		m.b.t.Fatalf("%s: begin: %v", m.queue, err)
	}
	defer tx.Rollback(m.b.ctx) //nolint:errcheck // (rolled back on purpose)
	rows, err := tx.Query(m.b.ctx, `SELECT * FROM sluice.send_batch($1, $2::text[]::jsonb[], NULL, $3::text[],
		$4::interval, $5::int[])`, m.queue, bodies, keys, delayArg, prios)
	if err != nil {
		m.b.t.Fatalf("%s: send_batch: %v", m.queue, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		m.b.t.Fatalf("%s: send_batch: %v", m.queue, err)
	}
	m.logf("send %v rolled back", ids)
}

func strs(ps []*string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		if p != nil {
			out[i] = *p
		}
	}
	return out
}

// ack acks 1-4 leased messages of a group (or, if their leases all ended,
// surely expired ones: they count 0), sometimes with a stale receipt.
func (m *semModel) ack(g string) {
	ids := m.pick(g, 1+m.rng.IntN(4), true)
	if len(ids) == 0 {
		return
	}
	var stale []string
	if len(m.stale) > 0 && m.rng.IntN(4) == 0 {
		stale = append(stale, m.stale[m.rng.IntN(len(m.stale))])
		m.logf("ack %s with the stale receipt %s", g, stale[0])
	}
	m.ackIDs(g, ids, stale, m.rng.IntN(2) == 0)
}

// ackIDs acks leased messages of a group in its consumer's session, with
// other receipts mixed in (stale ones, which count nothing), and applies
// the count to the model: the messages surely within their lease are
// acked; of the others, all when the count says so, none when it says
// none, else each may have been.
func (m *semModel) ackIDs(g string, ids []int64, others []string, durable bool) {
	ds := make([]*semDelivery, len(ids))
	receipts := make([]string, 0, len(ids)+len(others))
	for i, id := range ids {
		ds[i] = m.group[g][id]
		receipts = append(receipts, ds[i].receipt)
	}
	receipts = append(receipts, others...)
	start := time.Now()
	var n int
	if err := m.cons[g].QueryRow(m.b.ctx, "SELECT sluice.ack($1, $2, $3, $4)", m.queue, g, receipts, durable).
		Scan(&n); err != nil {
		m.b.t.Fatalf("%s: ack: %v", m.queue, err)
	}
	valid, unknown := countSplit(ds, start, time.Now())
	m.logf("ack %s %v (%d receipts): %d (valid %d, unknown %d)", g, ids, len(receipts), n, len(valid), len(unknown))
	switch {
	case n < len(valid) || n > len(valid)+len(unknown):
		m.errorf("ack of %v in %s counted %d: %d receipts surely current, %d maybe", ids, g, n, len(valid), len(unknown))
		return
	case n == len(valid)+len(unknown):
		valid = append(valid, unknown...)
	case n > len(valid):
		for _, d := range unknown {
			d.state = semMaybeAcked
			m.retire(d)
		}
	}
	for _, d := range valid {
		d.state = semAcked
		m.retire(d)
	}
}

// nack nacks one leased message of a group: again at once, after a delay,
// or after the backoff.
func (m *semModel) nack(g string) {
	ids := m.pick(g, 1, false)
	if len(ids) == 0 {
		return
	}
	id := ids[0]
	d := m.group[g][id]
	var delay time.Duration
	var delayArg any
	switch m.rng.IntN(3) {
	case 0:
		delayArg = "0 seconds"
	case 1:
		delay = min(semBackoffBase<<(d.attempt-1), semBackoffMax)
	default:
		delay = time.Duration(150+m.rng.IntN(350)) * time.Millisecond
		delayArg = fmt.Sprintf("%d milliseconds", delay.Milliseconds())
	}
	start := time.Now()
	var ok bool
	if err := m.cons[g].QueryRow(m.b.ctx, "SELECT sluice.nack($1, $2, $3, $4::interval, 'model')",
		m.queue, g, d.receipt, delayArg).Scan(&ok); err != nil {
		m.b.t.Fatalf("%s: nack: %v", m.queue, err)
	}
	end := time.Now()
	m.logf("nack %s %d (attempt %d, delay %v): %v", g, id, d.attempt, delayArg, ok)
	if !ok {
		if end.Before(d.validTo) {
			m.errorf("nack of %d in %s returned false within its lease", id, g)
		}
		return // its lease ended: it stays leased in the model, expired
	}
	m.nacks++
	m.retire(d)
	if d.attempt >= semMaxAttempts {
		d.state = semDead
		m.deadLettered++
	} else {
		d.state, d.due = semPending, start.Add(delay)
	}
	key := m.msgs[id].key
	if key == "" {
		return
	}
	// The later messages of its key still leased (the rest of a run) come
	// back after it with the same attempt; a lease that may have ended
	// meanwhile makes it one more. Later by position: a delayed message
	// takes its place in its key's order when it comes due.
	for _, later := range m.order {
		e := m.group[g][later]
		if m.msgs[later].key != key || e.state != semLeased || e.pos <= d.pos {
			continue
		}
		e.loose = !start.Before(e.validTo)
		e.state = semReleased
		m.retire(e)
	}
}

// extend renews 1-3 leased messages of a group for semExtend. The other
// messages a receive took from the lane of one of them may be held with it
// (on engine 2, when the lease holds keys, the others wait for the last
// extension to end before they are delivered again): their leases may end
// as late, the model does not know lanes.
func (m *semModel) extend(g string) {
	ids := m.pick(g, 1+m.rng.IntN(3), false)
	if len(ids) == 0 {
		return
	}
	ds := make([]*semDelivery, len(ids))
	receipts := make([]string, len(ids))
	for i, id := range ids {
		ds[i] = m.group[g][id]
		receipts[i] = ds[i].receipt
	}
	start := time.Now()
	var n int
	if err := m.cons[g].QueryRow(m.b.ctx, "SELECT sluice.extend($1, $2, $3, $4::interval)", m.queue, g, receipts,
		fmt.Sprintf("%d milliseconds", semExtend.Milliseconds())).Scan(&n); err != nil {
		m.b.t.Fatalf("%s: extend: %v", m.queue, err)
	}
	end := time.Now()
	valid, unknown := countSplit(ds, start, end)
	m.logf("extend %s %v: %d", g, ids, n)
	if n < len(valid) || n > len(valid)+len(unknown) {
		m.errorf("extend of %v in %s counted %d: %d receipts surely current, %d maybe", ids, g, n, len(valid), len(unknown))
	}
	recvs := map[int]bool{}
	for _, d := range append(valid, unknown...) {
		recvs[d.recv] = true
	}
	for _, d := range m.group[g] {
		if d.state != semLeased || !recvs[d.recv] {
			continue
		}
		if d.expireBy.Before(end.Add(semExtend)) {
			d.expireBy = end.Add(semExtend)
		}
		if slices.Contains(valid, d) && d.validTo.Before(start.Add(semExtend)) {
			d.validTo = start.Add(semExtend)
		}
	}
}

// redrive redrives dead letters of a group by id: some, or (all) every one
// the model knows.
func (m *semModel) redrive(g string, all bool) {
	var ids []int64
	for _, id := range m.order {
		if m.group[g][id].state == semDead && (all || m.rng.IntN(2) == 0) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	start := time.Now()
	var n int64
	if err := m.cons[g].QueryRow(m.b.ctx, "SELECT sluice.redrive($1, $2, $3)", m.queue, g, ids).Scan(&n); err != nil {
		m.b.t.Fatalf("%s: redrive: %v", m.queue, err)
	}
	m.logf("redrive %s %v: %d", g, ids, n)
	if n != int64(len(ids)) {
		m.errorf("redrive of dead letters %v in %s redrove %d", ids, g, n)
	}
	for _, id := range ids {
		d := m.group[g][id]
		d.state, d.attempt, d.loose, d.due, d.redriven = semPending, 0, false, start, true
		m.redriven++
	}
}

// checkDeadLetters compares a group's dead letters with the model's. A
// message the model holds leased at its last attempt, whose lease may have
// ended, may be among them (a receive dead-letters it when it finds the
// lease expired): the model learns it here.
func (m *semModel) checkDeadLetters(g string) {
	rows, err := m.cons[g].Query(m.b.ctx, "SELECT id, attempts FROM sluice.dead_letters($1, $2, 10000)", m.queue, g)
	if err != nil {
		m.b.t.Fatalf("%s: dead_letters: %v", m.queue, err)
	}
	listed := map[int64]int{}
	var id int64
	var attempts int
	if _, err := pgx.ForEachRow(rows, []any{&id, &attempts}, func() error {
		if _, dup := listed[id]; dup {
			m.errorf("dead letters of %s list %d twice", g, id)
		}
		listed[id] = attempts
		return nil
	}); err != nil {
		m.b.t.Fatalf("%s: dead_letters: %v", m.queue, err)
	}
	now := time.Now()
	for id, attempts := range listed {
		d, ok := m.group[g][id]
		switch {
		case !ok:
			m.errorf("dead letters of %s list %d, never sent", g, id)
		case d.state == semLeased && d.attempt >= semMaxAttempts && !now.Before(d.validTo):
			d.state = semDead
			m.deadLettered++
			m.retire(d)
		case d.state != semDead:
			m.errorf("dead letters of %s list %d, which is %s (attempt %d)", g, id, d.state, d.attempt)
		}
		if ok && attempts != d.attempt {
			m.errorf("dead letter %d of %s has attempts %d, want %d", id, g, attempts, d.attempt)
		}
	}
	dead := 0
	for id, d := range m.group[g] {
		if _, ok := listed[id]; d.state == semDead && !ok {
			m.errorf("dead letter %d of %s is not listed", id, g)
		}
		if d.state == semDead {
			dead++
		}
	}
	if st := m.b.v2status(m.queue, g); st.Dead != int64(dead) {
		m.errorf("status of %s: dead %d, want %d (the dead letters listed)", g, st.Dead, dead)
	}
}
