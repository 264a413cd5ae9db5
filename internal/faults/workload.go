package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
)

const opTimeout = 10 * time.Second

// The workload's ordering keys: keyedPercent of the messages carry one of
// keyCount keys, drawn with a Zipf(1.1) skew (the hottest key gets about a
// fifth of them, most keys a handful); the others are unkeyed.
const (
	keyCount     = 300
	keyedPercent = 80
)

// keyGen draws the ordering keys of one producer's messages.
type keyGen struct {
	rng  *rand.Rand
	zipf *rand.Zipf
}

func newKeyGen(seed, stream uint64) *keyGen {
	rng := rand.New(rand.NewPCG(seed, stream))
	return &keyGen{rng: rng, zipf: rand.NewZipf(rng, 1.1, 1, keyCount-1)}
}

// next returns the key of the next message, "" for none.
func (k *keyGen) next() string {
	if k.rng.IntN(100) >= keyedPercent {
		return ""
	}
	return "k" + strconv.FormatUint(k.zipf.Uint64(), 10)
}

// producer sends 1 to 20 messages per transaction, most of them keyed (see
// keyGen), a tenth of the transactions rolled back, and records the
// outcomes and keys.
func (e *Env) producer(pool *pgxpool.Pool, n uint64) {
	rng := rand.New(rand.NewPCG(e.seed, n))
	keys := newKeyGen(e.seed, 100+n)
	client := sluice.NewClient(pool)
	for e.producing.Load() && e.Ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(e.Ctx, opTimeout)
		e.produceOnce(ctx, pool, client, rng, keys)
		cancel()
		time.Sleep(2 * time.Millisecond)
	}
}

func (e *Env) produceOnce(ctx context.Context, pool *pgxpool.Pool, client *sluice.Client, rng *rand.Rand, keys *keyGen) {
	h := e.Hist
	n := 1 + rng.IntN(20)
	msgs := make([]sluice.BatchMessage, n)
	for i := range msgs {
		msgs[i].Body = json.RawMessage(fmt.Sprintf(`{"i": %d}`, i))
		msgs[i].Key = keys.next()
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		time.Sleep(20 * time.Millisecond) // the server is down
		return
	}
	ids, err := client.SendBatchTx(ctx, tx, queue, msgs, nil)
	if err != nil || rng.IntN(10) == 0 {
		tx.Rollback(ctx) //nolint:errcheck
		h.sent(ids, msgs, sendFailed)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		// The commit may or may not have happened.
		h.sent(ids, msgs, sendUncertain)
		return
	}
	h.sent(ids, msgs, sendCommitted)
}

// TakeDeath reports whether a consumer should die now (the injector asked
// for one, see WantDeath): each request is taken once.
func (e *Env) TakeDeath() bool {
	for {
		n := e.deathsWanted.Load()
		if n <= 0 {
			return false
		}
		if e.deathsWanted.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// WantDeath asks for one consumer death, and waits (up to 10 s) until a
// consumer holding messages has died.
func (e *Env) WantDeath() {
	e.deathsWanted.Add(1)
	deadline := time.Now().Add(10 * time.Second)
	for e.deathsWanted.Load() > 0 && time.Now().Before(deadline) && e.Ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
}

// consumer is consumer c of group: it receives up to 20 messages and
// processes them (see process), or, when asked (TakeDeath), dies between
// receive and ack: it closes its connection without acking, and a new
// consumer takes its place. rng is its own random source.
func (e *Env) consumer(group string, c int, rng *rand.Rand) {
	var stmt time.Duration
	if e.Sc.StatementTimeout != nil {
		stmt = e.Sc.StatementTimeout(c)
	}
	for life := 0; e.consuming.Load() && e.Ctx.Err() == nil; life++ {
		pool, err := e.NewPool(1, stmt)
		if err != nil {
			e.T.Errorf("consumer pool: %v", err)
			return
		}
		name := fmt.Sprintf("%s-c%d.%d", group, c, life)
		for e.consuming.Load() && e.Ctx.Err() == nil {
			if stmt > 0 && !e.faulting.Load() {
				// Statement timeouts are a fault: the drain runs without.
				stmt = 0
				break
			}
			msgs, ds, err := e.Receive(pool, group, name, 20)
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			if len(msgs) == 0 {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if e.faulting.Load() && e.TakeDeath() {
				e.Fault("consumer-death")
				e.faultMu.Lock()
				for _, d := range ds {
					e.dead[d] = true
				}
				e.faultMu.Unlock()
				break
			}
			e.process(pool, group, ds, rng)
		}
		pool.Close()
	}
}

// nackOneIn makes the consumers give back (nack) one delivery in nackOneIn,
// as after a failure of their handler.
const nackOneIn = 50

// process handles ds, the deliveries of one receive, as a correct ordered
// consumer does: in the order received, acking the successes between two
// failures in one statement (one transaction: they complete together, in
// that order) and nacking a failure (one delivery in nackOneIn, retried at
// once or after up to 30 ms). Once a keyed message is not surely completed
// (nacked, or its ack was stale, refused or of unknown outcome), the rest of
// its key in ds is left alone: a nack released them, and otherwise they
// would be processed before it, which is what per-key order forbids. Their
// leases expire, or have ended, and they come again after it.
func (e *Env) process(pool *pgxpool.Pool, group string, ds []*Delivery, rng *rand.Rand) {
	skip := map[string]bool{} // keys whose messages are left alone from here on
	var pending []*Delivery   // handled successfully, not acked yet
	flush := func() {
		if len(pending) == 0 {
			return
		}
		for i, o := range e.Ack(pool, group, pending) {
			if o != AckDone && pending[i].Key != "" {
				skip[pending[i].Key] = true
			}
		}
		pending = nil
	}
	for _, d := range ds {
		if d.Key != "" && skip[d.Key] {
			continue
		}
		if rng.IntN(nackOneIn) != 0 {
			pending = append(pending, d)
			continue
		}
		// A failure: what succeeded before it is acked first.
		flush()
		if d.Key != "" && skip[d.Key] {
			continue
		}
		var delay time.Duration
		if rng.IntN(2) == 0 {
			delay = time.Duration(1+rng.IntN(30)) * time.Millisecond
		}
		e.Nack(pool, group, d, delay)
		if d.Key != "" {
			skip[d.Key] = true
		}
	}
	flush()
}

// Receive receives up to max messages of group on pool, with the
// scenario's lease, and records the deliveries.
func (e *Env) Receive(pool *pgxpool.Pool, group, consumer string, max int) ([]sluice.Message, []*Delivery, error) {
	h := e.Hist
	seq0, gen0 := h.tick(), e.gen.Load()
	ctx, cancel := context.WithTimeout(e.Ctx, opTimeout)
	defer cancel()
	msgs, err := sluice.NewClient(pool).Receive(ctx, queue, group,
		&sluice.ReceiveOptions{Max: max, Lease: e.Sc.Lease, Consumer: consumer})
	if err != nil {
		e.noteError(err)
		return nil, nil, err
	}
	gen1 := e.gen.Load()
	ds := make([]*Delivery, len(msgs))
	h.mu.Lock()
	seq1 := h.nextLocked()
	for i, m := range msgs {
		ds[i] = &Delivery{Group: group, ID: m.ID, Attempt: m.Attempt, Consumer: consumer, Receipt: m.Receipt,
			Key: m.Key, Pos: m.Pos, Index: i,
			At: m.LeaseExpiresAt.Add(-e.Sc.Lease), Expires: m.LeaseExpiresAt,
			seqStart: seq0, seqEnd: seq1, genStart: gen0, genEnd: gen1}
		h.deliveries[group][m.ID] = append(h.deliveries[group][m.ID], ds[i])
	}
	h.mu.Unlock()
	return msgs, ds, nil
}

// Ack acks each delivery of ds (in one statement, one ack per receipt, in
// the order of ds), records each outcome and returns them, in the order of
// ds.
func (e *Env) Ack(pool *pgxpool.Pool, group string, ds []*Delivery) []AckOutcome {
	h := e.Hist
	receipts := make([]string, len(ds))
	for i, d := range ds {
		receipts[i] = d.Receipt
	}
	seq0 := h.tick()
	ctx, cancel := context.WithTimeout(e.Ctx, opTimeout)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT r FROM unnest($3::text[]) r WHERE sluice.ack($1, $2, ARRAY[r]) = 1`,
		queue, group, receipts)
	var done []string
	if err == nil {
		done, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	outcome := map[string]AckOutcome{}
	switch {
	case err == nil:
		for _, r := range receipts {
			outcome[r] = AckStale
		}
		for _, r := range done {
			outcome[r] = AckDone
		}
	case isServerError(err):
		// The server refused the statement: its transaction rolled back.
		e.noteError(err)
		for _, r := range receipts {
			outcome[r] = AckFailed
		}
	default:
		// The connection broke or the call timed out: the ack may have
		// committed, or the messages come again.
		for _, r := range receipts {
			outcome[r] = AckMaybe
		}
	}
	out := make([]AckOutcome, len(ds))
	h.mu.Lock()
	seq1 := h.nextLocked()
	for i, d := range ds {
		out[i] = outcome[d.Receipt]
		h.acks[group][d.ID] = append(h.acks[group][d.ID], &ackRec{d: d, outcome: out[i], seqStart: seq0, seqEnd: seq1, idx: i})
	}
	h.mu.Unlock()
	return out
}

// Nack gives delivery d back, as after a failure of its handler, to be
// retried after delay (0: at once), and records and returns the outcome:
// AckDone if it gave the message back, AckStale if the receipt was stale.
func (e *Env) Nack(pool *pgxpool.Pool, group string, d *Delivery, delay time.Duration) AckOutcome {
	h := e.Hist
	seq0 := h.tick()
	ctx, cancel := context.WithTimeout(e.Ctx, opTimeout)
	defer cancel()
	ok, err := sluice.NewClient(pool).Nack(ctx, queue, group, d.Receipt,
		&sluice.NackOptions{Delay: delay, Now: delay == 0, Error: "simulated handler failure"})
	var o AckOutcome
	switch {
	case err == nil && ok:
		o = AckDone
	case err == nil:
		o = AckStale
	case isServerError(err):
		e.noteError(err)
		o = AckFailed
	default:
		o = AckMaybe
	}
	h.mu.Lock()
	h.nacks[group][d.ID] = append(h.nacks[group][d.ID], &ackRec{d: d, outcome: o, seqStart: seq0, seqEnd: h.nextLocked()})
	h.mu.Unlock()
	return o
}

// noteError counts the faults a client call's error shows.
func (e *Env) noteError(err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "57014" {
		e.Fault("stmt-timeout")
	}
}

// isServerError reports whether err is an error the server sent about the
// statement (its transaction then surely rolled back). Errors of a server
// that is crashing or shutting down (class 57P) or of the connection (08)
// do not say whether a commit got through.
func isServerError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && !strings.HasPrefix(pgErr.Code, "57P") && !strings.HasPrefix(pgErr.Code, "08")
}

// sendOutcome is what a producer learnt about a send.
type sendOutcome int

const (
	sendCommitted sendOutcome = iota
	sendFailed
	sendUncertain
)

// AckOutcome is what a consumer learnt about the ack of one receipt (or
// its nack: then AckDone means that the nack gave the message back).
type AckOutcome int

const (
	AckDone   AckOutcome = iota // committed, and counted: it completed the message
	AckStale                    // committed, not counted: the receipt was stale
	AckFailed                   // the server refused the statement: nothing changed
	AckMaybe                    // unknown: the connection broke
)

// mayHaveCommitted reports whether an ack (or nack) with outcome o may have
// changed the message: surely (AckDone) or maybe (AckMaybe).
func (o AckOutcome) mayHaveCommitted() bool { return o == AckDone || o == AckMaybe }

// Delivery is one message handed to a consumer.
type Delivery struct {
	Group    string
	ID       int64
	Attempt  int
	Consumer string
	Receipt  string
	// Key is the message's ordering key ("" for none) and Pos its position
	// in the group's delivery order, as the receive returned them; Index is
	// its place in the receive's result (0 first).
	Key   string
	Pos   int64
	Index int
	// At is when the server leased it and Expires when the lease ends, both
	// by the server's clock.
	At, Expires time.Time

	// seqStart and seqEnd are the history's clock before the receive and
	// after it returned; seqEnd is unique to the receive call (the
	// deliveries of one call share it).
	seqStart, seqEnd int64
	genStart, genEnd int64 // the server incarnation before the receive and after it returned
}

// clientOf returns a sluice client on pool.
func clientOf(pool *pgxpool.Pool) *sluice.Client { return sluice.NewClient(pool) }
