// Package faults drives sluice through faults against a real PostgreSQL and
// checks the history afterwards (the scenarios are its tests).
//
// A scenario runs on a private server of its own (own data directory, fixed
// port, so that it can be killed and restarted): producers send through the
// Go library, most messages with an ordering key, and record which sends
// committed, failed or have an unknown outcome; consumers receive, process
// each batch in order as an ordered consumer does (see Env.process), and
// record every delivery (with its key, position and lease, by the server's
// clock) and every ack and nack with its outcome; an injector adds faults
// while they run; then the faults stop, the queue is drained and the history
// is checked (see History.check, and History.orderLocked for per-key order).
package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/internal/pgserver"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

// Long reports whether the long versions of the scenarios run
// (SLUICE_FAULTS_LONG=1, as make test-faults sets).
func Long() bool { return os.Getenv("SLUICE_FAULTS_LONG") == "1" }

// ShortOrLong returns short, or long under SLUICE_FAULTS_LONG=1.
func ShortOrLong(short, long int) int {
	if Long() {
		return long
	}
	return short
}

// queue is the name of the queue every scenario uses.
const queue = "q"

// Scenario describes one fault run.
type Scenario struct {
	Name string
	// Groups are the consumer groups (default g1, g2).
	Groups []string
	// Lease is the lease of every receive (default 2 s).
	Lease time.Duration
	// Producers (default 2) and Consumers per group (default 2).
	Producers, Consumers int
	// Proxy puts a Proxy between every client and the server.
	Proxy bool
	// StatementTimeout, if set, gives consumer i of a group a session
	// statement_timeout (0: none) while faults are injected; the drain
	// runs without.
	StatementTimeout func(i int) time.Duration
	// Inject adds the faults while producers and consumers run, and returns
	// when it is done.
	Inject func(e *Env)
	// MinCommitted is the least number of committed messages for the run to
	// mean anything (default 100).
	MinCommitted int
}

// Env is a running scenario: the server, the clients, the history.
type Env struct {
	T    *testing.T
	Ctx  context.Context
	Sc   *Scenario
	Hist *History
	Rng  *rand.Rand // for the injector goroutine only
	// Proxy is the proxy between the clients and the server, if any.
	Proxy *Proxy

	cfg   pgserver.Config
	srvMu sync.Mutex
	srv   *pgserver.Server
	gen   atomic.Int64 // server incarnation: incremented before each kill
	admin *pgxpool.Pool
	seed  uint64

	faultMu sync.Mutex
	faults  map[string]int
	dead    map[*Delivery]bool // deliveries held by consumers when they died

	producing, consuming, faulting atomic.Bool
	deathsWanted                   atomic.Int64
	wg                             sync.WaitGroup
}

// Fault counts one injected fault of kind.
func (e *Env) Fault(kind string) {
	e.faultMu.Lock()
	e.faults[kind]++
	e.faultMu.Unlock()
}

// Faults returns the count of kind so far.
func (e *Env) Faults(kind string) int {
	e.faultMu.Lock()
	defer e.faultMu.Unlock()
	return e.faults[kind]
}

// Faulting reports whether faults are still being injected (false during
// the drain).
func (e *Env) Faulting() bool { return e.faulting.Load() }

// Sleep waits d, or less if the scenario's context ends.
func (e *Env) Sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-e.Ctx.Done():
	}
}

// SleepRandom sleeps between min and max.
func (e *Env) SleepRandom(min, max time.Duration) {
	e.Sleep(min + time.Duration(e.Rng.Int64N(int64(max-min)+1)))
}

// Go runs f in a goroutine the scenario waits for before its checks.
func (e *Env) Go(f func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f()
	}()
}

// Run runs scenario sc and checks its history; it fails t on any violation
// and records a row of the summary table. It returns the finished scenario
// for further checks.
func Run(t *testing.T, sc Scenario) *Env {
	if sc.Groups == nil {
		sc.Groups = []string{"g1", "g2"}
	}
	if sc.Lease == 0 {
		sc.Lease = 2 * time.Second
	}
	if sc.Producers == 0 {
		sc.Producers = 2
	}
	if sc.Consumers == 0 {
		sc.Consumers = 2
	}
	if sc.MinCommitted == 0 {
		sc.MinCommitted = 100
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	e := &Env{T: t, Ctx: ctx, Sc: &sc, Hist: newHistory(sc.Groups), faults: map[string]int{}, dead: map[*Delivery]bool{}}
	e.seed = uint64(time.Now().UnixNano())
	if v := os.Getenv("SLUICE_FAULT_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SLUICE_FAULT_SEED=%q: %v", v, err)
		}
		e.seed = s
	}
	t.Logf("seed %d (SLUICE_FAULT_SEED repeats the random choices, not the timing)", e.seed)
	e.Rng = rand.New(rand.NewPCG(e.seed, 99))
	e.startServer()
	defer e.stopServer()
	if sc.Proxy {
		p, err := NewProxy(fmt.Sprintf("127.0.0.1:%d", e.cfg.Port))
		if err != nil {
			t.Fatal(err)
		}
		e.Proxy = p
		defer p.Close()
	}
	e.setupQueue()

	e.producing.Store(true)
	e.consuming.Store(true)
	e.faulting.Store(true)
	prodPool := e.newPool(8, 0)
	defer prodPool.Close()
	for p := 0; p < sc.Producers; p++ {
		e.Go(func() { e.producer(prodPool, uint64(p)) })
	}
	for gi, g := range sc.Groups {
		for c := 0; c < sc.Consumers; c++ {
			rng := rand.New(rand.NewPCG(e.seed, uint64(1000+100*gi+c)))
			e.Go(func() { e.consumer(g, c, rng) })
		}
	}
	if sc.Inject != nil {
		sc.Inject(e)
	}
	e.faulting.Store(false)
	e.deathsWanted.Store(0)
	e.Sleep(500 * time.Millisecond)
	e.producing.Store(false)

	drained := e.drain(2 * time.Minute)
	e.consuming.Store(false)
	e.wg.Wait()
	if !drained {
		t.Errorf("the queue did not drain within 2 minutes")
		if os.Getenv("SLUICE_FAULT_DEBUG") != "" {
			for _, g := range sc.Groups {
				for i := 0; i < 3; i++ {
					t0 := time.Now()
					var n int
					err := e.admin.QueryRow(ctx, `SELECT count(*) FROM sluice.receive($1, $2, 20, '1 s')`, queue, g).Scan(&n)
					t.Logf("debug: group %s: receive without timeout: %d messages in %s (%v)", g, n, time.Since(t0), err)
				}
			}
		}
	}
	sts := e.status()
	for _, st := range sts {
		if st.Ready != 0 || st.InFlight != 0 || st.Dead != 0 || st.Delayed != 0 {
			t.Errorf("group %s at the end: %+v, want nothing ready, delayed, in flight or dead", st.Group, st)
		}
	}
	clean := len(sts) == len(sc.Groups)
	for _, st := range sts {
		clean = clean && st.Ready == 0 && st.InFlight == 0 && st.Dead == 0 && st.Delayed == 0
	}

	r := e.Hist.check(sc.Groups, clean, sc.Lease)
	for _, v := range r.examples {
		t.Error(v)
	}
	if r.committed < sc.MinCommitted {
		t.Errorf("only %d messages committed: the run did too little to mean anything", r.committed)
	}
	row := SummaryRow{Scenario: sc.Name, Faults: e.faultText(), Committed: r.committed, Lost: r.lost,
		DupInLease: r.dupInLease, Order: r.order, Redeliveries: r.redeliveries,
		Other:    r.failedDelivered + r.unsent + r.afterAck + r.staleCompleted + r.attemptNotUp + r.wrongKey,
		Duration: time.Since(start).Round(100 * time.Millisecond)}
	t.Logf("%d committed, %d failed, %d unknown (%d ids of failed sends reused after a crash); %d deliveries (%d keyed, over %d keys; "+
		"%d in runs), %d redeliveries (%d across a kill); acks: %d completed, %d stale (counted 0), %d failed, %d unknown outcome; "+
		"nacks: %d given back, %d stale, %d failed, %d unknown outcome",
		r.committed, r.failed, r.uncertain, r.idsReused, r.deliveries, r.keyedDeliveries, r.keys, r.inRuns, r.redeliveries, r.acrossKill,
		r.acksDone, r.acksStale, r.acksFailed, r.acksMaybe, r.nacksDone, r.nacksStale, r.nacksFailed, r.nacksMaybe)
	t.Logf("violations: lost %d, duplicates within a valid lease %d, per-key order %d, delivered after a committed ack %d, "+
		"stale receipt completed a message held by a newer delivery %d, attempt not increasing %d, "+
		"failed send delivered %d, delivered but never sent %d, delivered with another key %d",
		r.lost, r.dupInLease, r.order, r.afterAck, r.staleCompleted, r.attemptNotUp, r.failedDelivered, r.unsent, r.wrongKey)
	t.Log("\n" + FormatSummary([]SummaryRow{row}))
	recordSummary(row)
	return e
}

func (e *Env) faultText() string {
	e.faultMu.Lock()
	defer e.faultMu.Unlock()
	kinds := make([]string, 0, len(e.faults))
	for k := range e.faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, e.faults[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// startServer starts a cluster of the scenario's own: killing it must not
// disturb other tests.
func (e *Env) startServer() {
	t := e.T
	dir, err := os.MkdirTemp("", "sluice-faults-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the server may run as another user
		t.Fatal(err)
	}
	e.cfg = pgserver.Config{Version: os.Getenv("SLUICE_PG_VERSION"), DataDir: filepath.Join(dir, "data")}
	srv, err := pgserver.Start(e.Ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.Port, e.cfg.Password = srv.Port(), srv.Password()
	e.srv = srv
}

func (e *Env) stopServer() {
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	if e.admin != nil {
		e.admin.Close()
	}
	if e.srv != nil {
		if err := e.srv.Stop(); err != nil {
			e.T.Errorf("stopping the server: %v", err)
		}
		e.srv = nil
	}
}

// KillPostgres kills every process of the server with SIGKILL, waits a
// random moment and starts it again on the same data directory and port.
func (e *Env) KillPostgres() {
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	// The incarnation changes before the kill and again once every process
	// is gone: a backend can still answer for a moment after the kill
	// starts, and what it committed may not survive.
	e.gen.Add(1)
	err := e.srv.Kill()
	e.gen.Add(1)
	if err != nil {
		e.T.Fatal(err)
	}
	e.srv = nil
	e.Fault("pg-kill")
	e.Sleep(time.Duration(e.Rng.IntN(300)) * time.Millisecond)
	var srv *pgserver.Server
	srv, err = pgserver.Start(e.Ctx, e.cfg)
	if err != nil {
		e.T.Fatalf("restart after kill %d: %v", e.Faults("pg-kill"), err)
	}
	e.srv = srv
}

func (e *Env) directURL() string {
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", e.cfg.Password, e.cfg.Port)
}

// newPool returns a pool for the clients: through the proxy if there is
// one, with a session statement_timeout if stmtTimeout > 0.
func (e *Env) newPool(maxConns int32, stmtTimeout time.Duration) *pgxpool.Pool {
	pool, err := e.NewPool(maxConns, stmtTimeout)
	if err != nil {
		e.T.Fatal(err)
	}
	return pool
}

// NewPool is newPool, returning the error.
func (e *Env) NewPool(maxConns int32, stmtTimeout time.Duration) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(e.directURL())
	if err != nil {
		return nil, err
	}
	if e.Proxy != nil {
		pcfg.ConnConfig.Port = uint16(e.Proxy.Port())
	}
	pcfg.MaxConns = maxConns
	pcfg.ConnConfig.ConnectTimeout = 3 * time.Second
	if stmtTimeout > 0 {
		pcfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(stmtTimeout.Milliseconds(), 10)
	}
	return pgxpool.NewWithConfig(e.Ctx, pcfg)
}

// setupQueue migrates and creates the queue and its groups, directly on the
// server; e.admin stays open for the drain's status checks.
func (e *Env) setupQueue() {
	t := e.T
	conn, err := pgx.Connect(e.Ctx, e.directURL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Apply(e.Ctx, conn, sqlsrc.FS); err != nil {
		t.Fatal(err)
	}
	conn.Close(e.Ctx)
	pcfg, err := pgxpool.ParseConfig(e.directURL())
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 2
	if e.admin, err = pgxpool.NewWithConfig(e.Ctx, pcfg); err != nil {
		t.Fatal(err)
	}
	client := sluice.NewClient(e.admin)
	if err := client.CreateQueue(e.Ctx, queue, &sluice.QueueOptions{NoDefaultGroup: true, MaxAttempts: 1000,
		RotateInterval: time.Second, Retention: time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	for _, g := range e.Sc.Groups {
		if err := client.CreateGroup(e.Ctx, queue, g, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// status returns the queue's status, retrying while the server restarts.
func (e *Env) status() []sluice.Status {
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(e.Ctx, 30*time.Second)
		sts, err := sluice.NewClient(e.admin).Status(ctx, queue)
		cancel()
		if err == nil {
			return sts
		}
		if i == 20 || e.Ctx.Err() != nil {
			e.T.Errorf("status: %v", err)
			return nil
		}
		e.Sleep(250 * time.Millisecond)
	}
}

// drain waits until every committed message is acked (surely or maybe) by
// every group and the database shows nothing left for any group.
func (e *Env) drain(limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && e.Ctx.Err() == nil {
		left := 0
		for _, g := range e.Sc.Groups {
			left += e.Hist.remaining(g)
		}
		if left == 0 {
			sts := e.status()
			done := len(sts) == len(e.Sc.Groups)
			for _, st := range sts {
				done = done && st.Ready == 0 && st.InFlight == 0 && st.Delayed == 0
			}
			if done {
				return true
			}
		}
		e.Sleep(100 * time.Millisecond)
	}
	return false
}

// opTimeout bounds every client call: a call cut off by it has an unknown
// outcome, as one whose connection broke.
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
					bad(&r.dupInLease, "group %s: message %d delivered to %s (attempt %d) at %s, within the lease of attempt %d (to %s) until %s [seq %d-%d gen %d-%d, then seq %d-%d gen %d-%d]",
						g, id, b.Consumer, b.Attempt, b.At.Format("15:04:05.000000"), a.Attempt, a.Consumer,
						a.Expires.Format("15:04:05.000000"), a.seqStart, a.seqEnd, a.genStart, a.genEnd,
						b.seqStart, b.seqEnd, b.genStart, b.genEnd)
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

// SummaryRow is one line of the summary table.
type SummaryRow struct {
	Scenario     string
	Faults       string
	Committed    int
	Lost         int
	DupInLease   int
	Order        int // per-key order violations
	Redeliveries int
	Other        int // other violations (failed send delivered, delivery after ack, ...)
	Duration     time.Duration
}

var (
	summaryMu   sync.Mutex
	summaryRows []SummaryRow
)

func recordSummary(r SummaryRow) {
	summaryMu.Lock()
	defer summaryMu.Unlock()
	summaryRows = append(summaryRows, r)
}

// Summary returns the rows recorded by the scenarios run so far.
func Summary() []SummaryRow {
	summaryMu.Lock()
	defer summaryMu.Unlock()
	return append([]SummaryRow(nil), summaryRows...)
}

// FormatSummary renders rows as a Markdown table.
func FormatSummary(rows []SummaryRow) string {
	var b strings.Builder
	b.WriteString("| scenario | faults injected | committed | losses | dup. within a valid lease | order violations | redeliveries | other violations | time |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %s |\n",
			r.Scenario, r.Faults, r.Committed, r.Lost, r.DupInLease, r.Order, r.Redeliveries, r.Other, r.Duration)
	}
	return b.String()
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

// clientOf returns a sluice client on pool.
func clientOf(pool *pgxpool.Pool) *sluice.Client { return sluice.NewClient(pool) }
