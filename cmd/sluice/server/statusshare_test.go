package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// lockWaiters counts the database's backends waiting on a lock, on a
// connection of the test's own.
func (ts *testServer) lockWaiters() int {
	ts.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, ts.pool.Config().ConnString())
	if err != nil {
		ts.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
	  WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
		ts.t.Fatal(err)
	}
	return n
}

// waitFor polls cond every 20ms for up to 20s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
	}
}

// statusQueues returns the queues of a GET /v1/status answer, sorted.
func statusQueues(body map[string]any) []string {
	var qs []string
	for _, row := range body["status"].([]any) {
		if q := row.(map[string]any)["queue"].(string); !slices.Contains(qs, q) {
			qs = append(qs, q)
		}
	}
	sort.Strings(qs)
	return qs
}

// 64 concurrent GET /v1/status calls of one token share readings: while
// the first waits on a lock, the others wait for the one reading that
// follows it, holding no connection (each made its own reading, 12 of them
// at once through the gate, and took the CPUs that other tokens' sends
// needed). Another scope's status is not held up meanwhile, and every call
// gets the token's queues once the lock goes.
func TestStatusBurstSharesReadings(t *testing.T) {
	ts, rt := tracedServer(t, poolSize(t, 16))
	for _, q := range []string{"orders", "orders.eu", "secret"} {
		ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": q})
	}
	// One reading of the orders token's scope, alone: its round trips.
	rt.reset()
	ts.must(200, "GET", "/v1/status", tokOrders, nil)
	one := rt.queries.Load() + rt.batches.Load()

	release := ts.lockQueue("orders")
	rt.reset()
	answers := make(chan response, 64)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers <- ts.do("GET", "/v1/status", tokOrders, nil)
		}()
	}
	waitFor(t, "64 status calls waiting", func() bool { return ts.srv.StatusWaiting() == 64 })
	waitFor(t, "a reading on the lock", func() bool { return ts.lockWaiters() > 0 })
	// (a second reading, had one started, would be on the lock by now)
	time.Sleep(500 * time.Millisecond)
	if n := ts.lockWaiters(); n != 1 {
		t.Errorf("%d backends wait on the lock with 64 status calls of one token in, want 1 (one reading)", n)
	}
	if got := ts.doWithin(5*time.Second, "GET", "/v1/status?queue=secret", tokConsumer); got != 200 {
		t.Errorf("status of another scope while the orders scope's reading waits: %d (0: no answer in 5s)", got)
	}
	release()
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.status != 200 {
			t.Fatalf("status: %d %s", a.status, a.body)
		}
		if qs := statusQueues(a.json(t)); fmt.Sprint(qs) != "[orders orders.eu]" {
			t.Fatalf("the orders token's status lists %v", qs)
		}
	}
	// The 64 calls made two readings (the one that waited, the one the
	// others joined), where each made its own before; the other scope's
	// call one more.
	if n := rt.queries.Load() + rt.batches.Load(); n > 3*one+2 {
		t.Errorf("64 status calls of one token took %d round trips, one alone %d: want at most 2 readings' worth (and the other scope's)", n, one)
	}
}

// A status call answers with every write that completed before it was
// made: it never joins a reading that started before it. Here a reading of
// the orders token's scope has read queue orders and waits on a lock on
// orders.eu when a message is sent to orders; the status call made after
// the send waits for a reading of its own, which counts the message.
func TestStatusSeesEveryEarlierSend(t *testing.T) {
	ts := start(t)
	for _, q := range []string{"orders", "orders.eu"} {
		ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": q})
	}
	release := ts.lockQueue("orders.eu")
	before := make(chan response, 1)
	go func() { before <- ts.do("GET", "/v1/status", tokOrders, nil) }()
	waitFor(t, "a reading on the lock", func() bool { return ts.lockWaiters() > 0 })
	ts.must(201, "POST", "/v1/queues/orders/messages", tokProducer, map[string]any{"body": 1})
	after := make(chan response, 1)
	go func() { after <- ts.do("GET", "/v1/status", tokOrders, nil) }()
	waitFor(t, "the second call waiting", func() bool { return ts.srv.StatusWaiting() == 2 })
	release()
	ready := func(r response) any {
		if r.status != 200 {
			t.Fatalf("status: %d %s", r.status, r.body)
		}
		for _, row := range r.json(t)["status"].([]any) {
			if m := row.(map[string]any); m["queue"] == "orders" {
				return m["ready"]
			}
		}
		return nil
	}
	if got := ready(<-before); got != float64(0) {
		t.Errorf("the call made before the send: ready %v, want 0 (its reading read orders before the send)", got)
	}
	if got := ready(<-after); got != float64(1) {
		t.Errorf("the call made after the send: ready %v, want 1", got)
	}
}

// Readings are shared within a scope only: tokens of other queue patterns,
// or of the same patterns and another role, calling at once, each get
// their own answer.
func TestStatusScopesApart(t *testing.T) {
	ts := start(t)
	for _, q := range []string{"orders", "orders.eu", "secret"} {
		ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": q})
	}
	callers := []struct {
		token  string
		status int
		queues string
	}{
		{tokOrders, 200, "[orders orders.eu]"},
		{ts.eddsa(claims("p", server.RoleProducer, "orders", "orders.*")), 403, ""},
		{ts.eddsa(claims("c", server.RoleConsumer, "orders.*", "orders")), 200, "[orders orders.eu]"},
		{ts.eddsa(claims("s", server.RoleConsumer, "secret")), 200, "[secret]"},
		{tokAdmin, 200, "[orders orders.eu secret]"},
	}
	errs := make(chan error, 1000)
	var wg sync.WaitGroup
	for _, c := range callers {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					r := ts.do("GET", "/v1/status", c.token, nil)
					if r.status != c.status {
						errs <- fmt.Errorf("status %d, want %d: %s", r.status, c.status, r.body)
						continue
					}
					var body map[string]any
					if r.status == 200 && json.Unmarshal(r.body, &body) == nil {
						if qs := fmt.Sprint(statusQueues(body)); qs != c.queues {
							errs <- fmt.Errorf("a token of queues %s sees %s", c.queues, qs)
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
