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
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
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
		if st.Pending() != 0 || st.Dead != 0 {
			t.Errorf("group %s at the end: %+v, want nothing ready, waiting, delayed, in flight or dead", st.Group, st)
		}
	}
	clean := len(sts) == len(sc.Groups)
	for _, st := range sts {
		clean = clean && st.Pending() == 0 && st.Dead == 0
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
