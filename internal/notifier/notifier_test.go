package notifier_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/notifier"
	"github.com/sluicemq/sluice/internal/pgtest"
)

var server *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(leakCheck{m}, &server) }

type leakCheck struct{ m *testing.M }

// Run fails the run if a notifier's goroutine outlives the tests.
func (l leakCheck) Run() int {
	ignore := goleak.IgnoreCurrent()
	code := l.m.Run()
	if code == 0 {
		if err := goleak.Find(ignore); err != nil {
			println("goroutines leaked:", err.Error())
			return 1
		}
	}
	return code
}

// recorder collects the events of one subscription.
type recorder struct {
	mu     sync.Mutex
	events []notifier.Event
	ch     chan notifier.Event
}

func newRecorder() *recorder { return &recorder{ch: make(chan notifier.Event, 100)} }

func (r *recorder) fn(ev notifier.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	r.ch <- ev
}

// next waits for the next event of kind k (skipping others), failing the
// test after 10 s.
func (r *recorder) next(t *testing.T, k notifier.Kind) notifier.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-r.ch:
			if ev.Kind == k {
				return ev
			}
		case <-timeout:
			t.Fatalf("no event of kind %d within 10s", k)
		}
	}
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// listeners counts, from the server's side, the connections to the test's
// database whose last statement was a LISTEN or UNLISTEN.
func listeners(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ~ '^(UN)?LISTEN '`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// eventually fails the test unless cond holds within 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func notify(t *testing.T, pool *pgxpool.Pool, channel, payload string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
		t.Fatal(err)
	}
}

func TestSubscriptionsShareOneConnection(t *testing.T) {
	t.Parallel()
	pool := server.NewPool(t)
	n := notifier.New(pool)
	var recs []*recorder
	var subs []*notifier.Subscription
	for range 10 {
		r := newRecorder()
		recs = append(recs, r)
		subs = append(subs, n.Listen("sluice", r.fn))
	}
	other := newRecorder()
	otherSub := n.Listen("other channel", other.fn)
	for _, r := range append(recs, other) {
		r.next(t, notifier.Listening)
	}
	if got := listeners(t, pool); got != 1 {
		t.Fatalf("%d LISTEN connections for 11 subscriptions, want 1", got)
	}

	notify(t, pool, "sluice", "q1")
	for _, r := range recs {
		if ev := r.next(t, notifier.Notified); ev.Payload != "q1" {
			t.Fatalf("payload %q, want q1", ev.Payload)
		}
	}
	notify(t, pool, "other channel", "o1")
	if ev := other.next(t, notifier.Notified); ev.Payload != "o1" {
		t.Fatalf("payload %q, want o1", ev.Payload)
	}

	// The last subscription of a channel ends: the connection UNLISTENs it
	// and stays for the others.
	otherSub.Unlisten()
	otherSub.Unlisten() // again: nothing
	before := other.count()
	notify(t, pool, "other channel", "o2")
	notify(t, pool, "sluice", "q2")
	for _, r := range recs {
		r.next(t, notifier.Notified)
	}
	if other.count() != before {
		t.Fatal("an ended subscription received an event")
	}
	if got := listeners(t, pool); got != 1 {
		t.Fatalf("%d LISTEN connections, want 1", got)
	}

	// A subscriber that stops hears nothing more; the last one closes the
	// connection, before Unlisten returns.
	subs[0].Unlisten()
	before = recs[0].count()
	notify(t, pool, "sluice", "q3")
	recs[1].next(t, notifier.Notified)
	if recs[0].count() != before {
		t.Fatal("an ended subscription received an event")
	}
	for _, s := range subs[1:] {
		s.Unlisten()
	}
	eventually(t, "the LISTEN connection closes", func() bool { return listeners(t, pool) == 0 })

	// And a new subscription opens one again.
	r := newRecorder()
	s := n.Listen("sluice", r.fn)
	defer s.Unlisten()
	r.next(t, notifier.Listening)
	notify(t, pool, "sluice", "q4")
	if ev := r.next(t, notifier.Notified); ev.Payload != "q4" {
		t.Fatalf("payload %q, want q4", ev.Payload)
	}
	if got := listeners(t, pool); got != 1 {
		t.Fatalf("%d LISTEN connections, want 1", got)
	}
}

func TestLateSubscriberHearsListening(t *testing.T) {
	t.Parallel()
	pool := server.NewPool(t)
	n := notifier.New(pool)
	first := newRecorder()
	s1 := n.Listen("sluice", first.fn)
	defer s1.Unlisten()
	first.next(t, notifier.Listening)
	late := newRecorder()
	s2 := n.Listen("sluice", late.fn)
	defer s2.Unlisten()
	late.next(t, notifier.Listening)
	notify(t, pool, "sluice", "x")
	late.next(t, notifier.Notified)
	first.next(t, notifier.Notified)
}

func TestSurvivesTerminatedConnection(t *testing.T) {
	t.Parallel()
	pool := server.NewPool(t)
	n := notifier.New(pool)
	r := newRecorder()
	s := n.Listen("sluice", r.fn)
	defer s.Unlisten()
	r.next(t, notifier.Listening)

	var killed int
	err := pool.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ~ '^LISTEN ') k`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d LISTEN connections (%v), want 1", killed, err)
	}
	if ev := r.next(t, notifier.Lost); ev.Err == nil {
		t.Fatal("Lost without its error")
	}
	r.next(t, notifier.Listening)
	notify(t, pool, "sluice", "after")
	if ev := r.next(t, notifier.Notified); ev.Payload != "after" {
		t.Fatalf("payload %q, want after", ev.Payload)
	}
	if got := listeners(t, pool); got != 1 {
		t.Fatalf("%d LISTEN connections after the reconnect, want 1", got)
	}
}

func TestClosedPoolReportsLostAndUnlistenReturns(t *testing.T) {
	t.Parallel()
	pool := server.NewPool(t)
	pool.Close()
	n := notifier.New(pool)
	r := newRecorder()
	s := n.Listen("sluice", r.fn)
	if ev := r.next(t, notifier.Lost); ev.Err == nil {
		t.Fatal("Lost without its error")
	}
	done := make(chan struct{})
	go func() { s.Unlisten(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Unlisten did not return while the notifier retried")
	}
}
