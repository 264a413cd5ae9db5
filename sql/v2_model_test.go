package sqlsrc_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A model check of engine 2's semantics with every feature at once, where
// the crash model (crash_model_test.go) covers crashes with keys, acks,
// unkeyed nacks and expiries. Random histories on one queue with two groups
// (fan-out): sends and send_batch with keys, priorities, delays and dedup
// keys, from one producer and from another's transaction left open over
// other calls; receives of random sizes, some carrying acks; acks (durable or not)
// of random subsets, some with stale receipts among them; sends rolled
// back (never delivered); nacks with no delay, a delay or the backoff, on
// a queue of 3 attempts (dead letters);
// extends; sleeps past leases (expiries, and dead letters by expiry);
// redrives of dead letters by id; maintain; on half the queues a rotation
// each second with nothing retained (reclaims under the history). Then a
// drain of both groups, a redrive of every dead letter and a second drain.
//
// Checked at each call against the model (v2_model_check_test.go): a
// receive delivers no message completed in its group (acked or dead), none
// whose lease surely holds, none before its delay or its nack's delay has
// passed; its attempt is one more than the last delivery's (the same after
// a keyed nack released it, 1 after a redrive); a keyed message comes only
// once every earlier message of its key (sent without a delay) is completed
// or came before it in the same receive; on a queue of one lane, a fresh
// unkeyed message never passes over an earlier one of the same or a higher
// priority class (above 0 by priority, 0, below 0). Acks, nacks and extends
// count exactly the current receipts; a stale receipt counts 0. A dedup key
// sent again returns the first message's id and enqueues nothing. The dead
// letters listed are the model's, with their attempts, and status counts
// them; none is lost. At the end every message is completed in every
// group, and the status says nothing is ready, delayed or in flight.
// Timing only ever relaxes a check (a lease that may have expired);
// SLUICE_MODEL_SEED repeats a run, SLUICE_MODEL_ROUNDS sets the number of
// queues, SLUICE_MODEL_TRACE logs every call.
func TestV2RandomSemantics(t *testing.T) {
	t.Parallel()
	seed, rounds := modelSeed(t)
	rng := rand.New(rand.NewPCG(seed, 11))
	b := setup(t)
	b.v2widen(8) // (each round holds four sessions)
	for round := 0; round < rounds; round++ {
		m := newSemModel(b, rng, fmt.Sprintf("s%d", round))
		start := time.Now()
		for step := 0; step < semSteps && !t.Failed(); step++ {
			m.step()
		}
		if !t.Failed() {
			m.drain()
		}
		m.close()
		t.Logf("round %d: %s, %d messages (%d committed late), %d receives, %d deliveries, %d nacks, %d dead letters, %d redriven, %s",
			round, m.opts, len(m.order), m.late, m.receives, m.deliveries, m.nacks, m.deadLettered, m.redriven,
			time.Since(start).Round(time.Millisecond))
		if t.Failed() {
			t.Fatalf("round %d (%s): see above", round, m.opts)
		}
	}
}

const (
	semSteps       = 160
	semLease       = time.Second // the queue's lease
	semExtend      = 1500 * time.Millisecond
	semMaxAttempts = 3
	semBackoffBase = 100 * time.Millisecond
	semBackoffMax  = 400 * time.Millisecond
	semMargin      = 300 * time.Millisecond // how far from its end a lease is taken for sure valid
)

var semGroups = []string{"default", "g2"}

// semMsg is a message as sent.
type semMsg struct {
	id      int64
	key     string // "" when unkeyed
	prio    int
	delayed bool
	due     time.Time // not deliverable before: the send's start + its delay
	// sent in a transaction left open over other calls: a cut numbers the
	// messages it finds by their transaction's id, so their order against
	// the messages committed while that transaction was open (those of
	// m.order[openFrom:seq]) is not known to the model (semOrdered)
	late     bool
	openFrom int // (late) len(m.order) when its transaction began
	seq      int // its index in m.order (commit order), once committed
}

// semState is where a message stands in one group.
type semState int

const (
	semPending    semState = iota // deliverable once due: new, retried, redriven
	semLeased                     // delivered; the lease may since have expired (see validTo, expireBy)
	semReleased                   // given back by a keyed nack of an earlier message of its key
	semAcked                      // completed
	semMaybeAcked                 // acked with a receipt whose lease was ending: either acked or expired
	semDead                       // a dead letter, not redriven
)

var semStateNames = []string{"pending", "leased", "released", "acked", "maybe acked", "dead"}

func (s semState) String() string { return semStateNames[s] }

// semDelivery is what the model knows of one message in one group.
type semDelivery struct {
	state     semState
	attempt   int // of the last delivery (0: none since the send or a redrive)
	loose     bool
	receipt   string
	recv      int       // the receive that leased it: its lane's messages share the lease
	pos       int64     // its position, as that receive returned it
	validTo   time.Time // the lease surely holds until then
	expireBy  time.Time // and surely ends by then
	due       time.Time // not deliverable before (a nack's delay)
	delivered bool      // ever delivered in this group
	redriven  bool
}

// completed tells whether the message is done in its group (or may be).
func (d *semDelivery) completed() bool {
	return d.state == semAcked || d.state == semMaybeAcked || d.state == semDead
}

// semModel is one queue of TestV2RandomSemantics and what it should hold.
type semModel struct {
	b     *bundle
	rng   *rand.Rand
	queue string
	opts  string
	lanes int
	trace bool

	prod *pgxpool.Conn            // the producer's session
	long *pgxpool.Conn            // a second producer's, which sends in a transaction left open
	cons map[string]*pgxpool.Conn // each group's consumer session

	msgs  map[int64]*semMsg
	order []int64 // ids in commit order
	// the second producer's open transaction and what it sent
	longTx   pgx.Tx
	longSent []*semMsg
	longFrom int              // len(order) when longTx began
	lastID   int64            // the id the last send returned
	dedup    map[string]int64 // dedup key -> the id first sent with it
	group    map[string]map[int64]*semDelivery
	stale    []string // receipts that no longer count

	receives, deliveries, nacks, deadLettered, redriven, late int
}

func newSemModel(b *bundle, rng *rand.Rand, queue string) *semModel {
	m := &semModel{b: b, rng: rng, queue: queue, lanes: []int{1, 1, 2, 4}[rng.IntN(4)],
		trace: os.Getenv("SLUICE_MODEL_TRACE") != "", cons: map[string]*pgxpool.Conn{},
		msgs: map[int64]*semMsg{}, dedup: map[string]int64{}, group: map[string]map[int64]*semDelivery{}}
	m.opts = fmt.Sprintf(`"lanes": %d, "lease": "%d ms", "max_attempts": %d, "backoff_base": "%d ms", "backoff_max": "%d ms"`,
		m.lanes, semLease.Milliseconds(), semMaxAttempts, semBackoffBase.Milliseconds(), semBackoffMax.Milliseconds())
	if rng.IntN(2) == 0 {
		m.opts += fmt.Sprintf(`, "rotate_interval": "1 second", "retention": "0 seconds", "slots": %d`, 2+rng.IntN(3))
	}
	b.createV2(queue, m.opts)
	b.t.Cleanup(m.close)
	b.exec("SELECT sluice.create_group($1, 'g2')", queue)
	m.prod, m.long = m.acquire(), m.acquire()
	for _, g := range semGroups {
		m.cons[g] = m.acquire()
		m.group[g] = map[int64]*semDelivery{}
	}
	if rng.IntN(2) == 0 {
		// the queue's first prioritized message, in the open transaction:
		// the first prioritized send notes it in the queue's row, and the
		// producer's must not wait for that row until it commits
		m.sendInLong([]string{`{"first": true}`}, []*string{nil}, []int32{3}, 0, nil)
	}
	return m
}

// acquire holds a session of the round. A call that waits for another
// session's transaction (the open one of sendLong) fails after 20 s.
func (m *semModel) acquire() *pgxpool.Conn {
	c, err := m.b.pool.Acquire(m.b.ctx)
	if err != nil {
		m.b.t.Fatal(err)
	}
	if _, err := c.Exec(m.b.ctx, "SET statement_timeout = '20s'"); err != nil {
		m.b.t.Fatal(err)
	}
	return c
}

// close ends the round's open transaction and releases its sessions, once
// (again at the test's cleanup, after a round that failed: the pool's
// close waits for every session held).
func (m *semModel) close() {
	if m.longTx != nil {
		m.longTx.Rollback(m.b.ctx) //nolint:errcheck // (a failed round's)
		m.longTx = nil
	}
	for _, c := range append([]*pgxpool.Conn{m.prod, m.long}, slices.Collect(maps.Values(m.cons))...) {
		if c != nil {
			c.Release()
		}
	}
	m.prod, m.long, m.cons = nil, nil, nil
}

func (m *semModel) logf(format string, args ...any) {
	if m.trace {
		m.b.t.Logf(format, args...)
	}
}

// errorf reports a violation, naming the queue.
func (m *semModel) errorf(format string, args ...any) {
	m.b.t.Helper()
	m.b.t.Errorf("%s: %s", m.queue, fmt.Sprintf(format, args...))
}

func (m *semModel) step() {
	g := semGroups[m.rng.IntN(len(semGroups))]
	switch r := m.rng.IntN(100); {
	case r < 24:
		m.send()
	case r < 28:
		m.sendLong()
	case r < 62:
		m.receive(g, 1+m.rng.IntN(6))
	case r < 75:
		m.ack(g)
	case r < 84:
		m.nack(g)
	case r < 88:
		m.extend(g)
	case r < 92:
		d := time.Duration(200+m.rng.IntN(1000)) * time.Millisecond
		m.logf("sleep %v", d)
		time.Sleep(d)
	case r < 95:
		m.redrive(g, false)
	case r < 98:
		m.checkDeadLetters(g)
	default:
		m.logf("maintain")
		m.b.exec("SELECT count(*) FROM sluice.maintain()")
	}
}

// leased returns the group's deliveries whose lease may hold, in id order.
func (m *semModel) leased(g string) []int64 {
	var ids []int64
	for id, d := range m.group[g] {
		if d.state == semLeased {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// pick returns up to n of the group's leased messages that are surely valid
// for semMargin yet, or (with sureExpired) surely expired, in random order.
func (m *semModel) pick(g string, n int, sureExpired bool) []int64 {
	now := time.Now()
	var ids []int64
	for _, id := range m.leased(g) {
		d := m.group[g][id]
		if now.Add(semMargin).Before(d.validTo) || (sureExpired && now.After(d.expireBy)) {
			ids = append(ids, id)
		}
	}
	m.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids[:min(n, len(ids))]
}

// retire makes a delivery's receipt stale (the model keeps the last 64 to
// try them again).
func (m *semModel) retire(d *semDelivery) {
	if d.receipt == "" {
		return
	}
	m.stale = append(m.stale, d.receipt)
	if len(m.stale) > 64 {
		m.stale = m.stale[1:]
	}
	d.receipt = ""
}

// countSplit sorts the receipts of a call made from start to end: those
// surely current throughout, those surely expired before it, and the rest.
func countSplit(ds []*semDelivery, start, end time.Time) (valid, unknown []*semDelivery) {
	for _, d := range ds {
		switch {
		case end.Before(d.validTo):
			valid = append(valid, d)
		case start.After(d.expireBy):
		default:
			unknown = append(unknown, d)
		}
	}
	return valid, unknown
}
