package server_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/cmd/sluice/server"
)

type pollResult struct {
	r       response
	elapsed time.Duration
}

func (ts *testServer) poll(path string, body any) <-chan pollResult {
	ch := make(chan pollResult, 1)
	go func() {
		start := time.Now()
		r := ts.do("POST", path, tokAdmin, body)
		ch <- pollResult{r, time.Since(start)}
	}()
	return ch
}

// A long poll returns as soon as a send commits (woken by NOTIFY: the poll
// interval is longer than the test), and empty at the end of its wait.
func TestLongPoll(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.PollInterval = time.Minute })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "other"})
	ts.waitMetric("sluice_listener_up 1")

	start := time.Now()
	empty := ts.must(200, "POST", "/v1/queues/q/groups/default/receive", tokAdmin, map[string]any{"wait": "300ms"})
	if d := time.Since(start); len(empty["messages"].([]any)) != 0 || d < 300*time.Millisecond || d > 3*time.Second {
		t.Fatalf("empty long poll: %v after %s", empty, d)
	}

	ch := ts.poll("/v1/queues/q/groups/default/receive", map[string]any{"wait": "20s", "max": 5})
	ts.waitMetric("sluice_long_polls_waiting 1")
	// A send to another queue does not end it.
	ts.must(201, "POST", "/v1/queues/other/messages", tokAdmin, map[string]any{"body": "x"})
	time.Sleep(100 * time.Millisecond)
	select {
	case res := <-ch:
		t.Fatalf("woken by another queue's send: %d %s", res.r.status, res.r.body)
	default:
	}
	sent := time.Now()
	ts.must(201, "POST", "/v1/queues/q/messages", tokAdmin, map[string]any{"body": "wake"})
	select {
	case res := <-ch:
		msgs := res.r.json(t)["messages"].([]any)
		if res.r.status != 200 || len(msgs) != 1 || msgs[0].(map[string]any)["body"] != "wake" {
			t.Fatalf("long poll: %d %s", res.r.status, res.r.body)
		}
		t.Logf("woken %s after the send", time.Since(sent))
	case <-time.After(5 * time.Second):
		t.Fatal("the long poll was not woken by the send")
	}
	// Many waiting long polls share the one listener connection.
	for range 20 {
		ts.poll("/v1/queues/q/groups/default/receive", map[string]any{"wait": "1s"})
	}
	ts.waitMetric("sluice_long_polls_waiting 20")
	var backends int
	if err := ts.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'listen%'`).Scan(&backends); err != nil {
		t.Fatal(err)
	}
	if backends != 1 {
		t.Fatalf("%d LISTEN connections, want 1", backends)
	}
}

// Without notifications (a queue with notify off) the poll interval finds
// the message.
func TestLongPollFallback(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.PollInterval = 200 * time.Millisecond })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q", "options": map[string]any{"notify": false}})
	ch := ts.poll("/v1/queues/q/groups/default/receive", map[string]any{"wait": "10s"})
	ts.waitMetric("sluice_long_polls_waiting 1")
	ts.must(201, "POST", "/v1/queues/q/messages", tokAdmin, map[string]any{"body": 1})
	select {
	case res := <-ch:
		if len(res.r.json(t)["messages"].([]any)) != 1 {
			t.Fatalf("%s", res.r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("polling did not find the message")
	}
	// A delayed message that comes due sends no notification either.
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "later"})
	ts.must(201, "POST", "/v1/queues/later/messages", tokAdmin, map[string]any{"body": 1, "delay": "700ms"})
	ch = ts.poll("/v1/queues/later/groups/default/receive", map[string]any{"wait": "10s"})
	select {
	case res := <-ch:
		if len(res.r.json(t)["messages"].([]any)) != 1 || res.elapsed < 500*time.Millisecond {
			t.Fatalf("after %s: %s", res.elapsed, res.r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the sweep did not find the delayed message")
	}
}

// Shutdown: long polls return empty at once, a request in progress ends,
// new connections are refused, and Serve returns nil.
func TestGracefulShutdown(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	var polls []<-chan pollResult
	for range 3 {
		polls = append(polls, ts.poll("/v1/queues/q/groups/default/receive", map[string]any{"wait": "30s"}))
	}
	ts.waitMetric("sluice_long_polls_waiting 3")
	start := time.Now()
	if err := ts.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %s", d)
	}
	for _, ch := range polls {
		res := <-ch
		if res.r.status != 200 || len(res.r.json(t)["messages"].([]any)) != 0 || res.elapsed > 10*time.Second {
			t.Fatalf("long poll at shutdown: %d %s after %s", res.r.status, res.r.body, res.elapsed)
		}
	}
	if _, err := http.Get(ts.url + "/healthz"); err == nil {
		t.Fatal("the server still accepts connections")
	}
}

// When the LISTEN connection dies (its backend terminated), long polls
// still get their messages (the sweep polls every 500ms meanwhile) and the
// listener comes back.
func TestListenerReconnects(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.PollInterval = time.Minute })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	ts.waitMetric("sluice_listener_up 1")
	var killed bool
	if err := ts.pool.QueryRow(context.Background(), `SELECT bool_or(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query ILIKE 'listen%'`).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminating the listener: %v %v", killed, err)
	}
	ch := ts.poll("/v1/queues/q/groups/default/receive", map[string]any{"wait": "10s"})
	ts.waitMetric("sluice_long_polls_waiting 1")
	ts.must(201, "POST", "/v1/queues/q/messages", tokAdmin, map[string]any{"body": "after"})
	select {
	case res := <-ch:
		if len(res.r.json(t)["messages"].([]any)) != 1 {
			t.Fatalf("%s", res.r.body)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the long poll did not get the message sent while the listener was down or reconnecting")
	}
	ts.waitMetric("sluice_listener_up 1")
}

// A queue dropped while long polls wait on it: they end with 404.
func TestLongPollQueueDropped(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.PollInterval = 200 * time.Millisecond })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "gone"})
	ch := ts.poll("/v1/queues/gone/groups/default/receive", map[string]any{"wait": "20s"})
	ts.waitMetric("sluice_long_polls_waiting 1")
	ts.must(204, "DELETE", "/v1/queues/gone", tokAdmin, nil)
	select {
	case res := <-ch:
		if res.r.status != 404 {
			t.Fatalf("%d %s", res.r.status, res.r.body)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the long poll on a dropped queue did not end")
	}
}

// Many long polls of one group, woken one receive at a time: sends one
// after the other, and a batch that one notification stands for, each reach
// a long poll at once (the poll interval is longer than the test), every
// message once.
func TestLongPollsShareWakeUps(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.PollInterval = time.Minute })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	ts.waitMetric("sluice_listener_up 1")
	const polls = 20
	results := make(chan pollResult, polls)
	for range polls {
		go func() {
			results <- <-ts.poll("/v1/queues/q/groups/default/receive", map[string]any{"wait": "20s", "max": 1})
		}()
	}
	ts.waitMetric(fmt.Sprintf("sluice_long_polls_waiting %d", polls))
	seen := map[float64]bool{}
	collect := func(n int) {
		t.Helper()
		for range n {
			select {
			case res := <-results:
				msgs := res.r.json(t)["messages"].([]any)
				if res.r.status != 200 || len(msgs) != 1 {
					t.Fatalf("long poll: %d %s", res.r.status, res.r.body)
				}
				id := msgs[0].(map[string]any)["id"].(float64)
				if seen[id] {
					t.Fatalf("message %v received twice", id)
				}
				seen[id] = true
			case <-time.After(5 * time.Second):
				t.Fatalf("%d messages sent, %d received", n, len(seen))
			}
		}
	}
	for i := range 5 {
		ts.must(201, "POST", "/v1/queues/q/messages", tokAdmin, map[string]any{"body": i})
	}
	collect(5)
	// One transaction, one notification, four messages for long polls of
	// max 1: each full receive wakes the next long poll.
	ts.must(201, "POST", "/v1/queues/q/messages/batch", tokAdmin, map[string]any{"messages": []any{
		map[string]any{"body": 1}, map[string]any{"body": 2}, map[string]any{"body": 3}, map[string]any{"body": 4}}})
	collect(4)
	ts.waitMetric(fmt.Sprintf("sluice_long_polls_waiting %d", polls-9))
	select {
	case res := <-results:
		t.Fatalf("a long poll returned with nothing to receive: %s", res.r.body)
	case <-time.After(200 * time.Millisecond):
	}
}

// Concurrent senders and long polls (that receive, ack and poll again),
// with long polls that give up: every message is received, and acked, once.
func TestLongPollsUnderConcurrentSends(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.PollInterval = 200 * time.Millisecond })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	ts.waitMetric("sluice_listener_up 1")
	const senders, perSender, pollers = 4, 25, 12
	var mu sync.Mutex
	got := map[float64]int{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pw sync.WaitGroup
	for i := range pollers {
		pw.Add(1)
		go func() {
			defer pw.Done()
			for ctx.Err() == nil {
				wait := "2s"
				if i%3 == 0 {
					wait = "30ms" // gives up often
				}
				r := ts.do("POST", "/v1/queues/q/groups/default/receive", tokAdmin, map[string]any{"wait": wait, "max": 1 + i%3})
				if r.status != 200 {
					t.Errorf("receive: %d %s", r.status, r.body)
					return
				}
				var receipts []string
				for _, m := range r.json(t)["messages"].([]any) {
					m := m.(map[string]any)
					receipts = append(receipts, m["receipt"].(string))
					mu.Lock()
					got[m["body"].(float64)]++
					mu.Unlock()
				}
				if len(receipts) > 0 {
					ts.must(200, "POST", "/v1/queues/q/groups/default/ack", tokAdmin, map[string]any{"receipts": receipts})
				}
			}
		}()
	}
	var sw sync.WaitGroup
	for s := range senders {
		sw.Add(1)
		go func() {
			defer sw.Done()
			for i := range perSender {
				ts.must(201, "POST", "/v1/queues/q/messages", tokAdmin, map[string]any{"body": s*perSender + i})
			}
		}()
	}
	sw.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == senders*perSender || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	pw.Wait()
	for i := range senders * perSender {
		if got[float64(i)] != 1 {
			t.Errorf("message %d received %d times", i, got[float64(i)])
		}
	}
}

// The engine notifies once among concurrent sends (the first to take its
// gate): a send that commits after that notification notifies nobody. The
// long polls of a queue notified within the last second are woken often
// meanwhile, so such a message does not wait for the poll interval.
func TestLongPollAfterSkippedNotification(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.PollInterval = time.Minute })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	ts.waitMetric("sluice_listener_up 1")
	// The sweep's first round comes after 500ms (the listener was not up
	// when it started); the next after a minute.
	time.Sleep(600 * time.Millisecond)
	ctx := context.Background()
	a, err := ts.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback(ctx)
	b, err := ts.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback(ctx)
	if _, err := a.Exec(ctx, `SELECT sluice.send('q', '"a"')`); err != nil { // takes the gate: notifies at commit
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, `SELECT sluice.send('q', '"b"')`); err != nil { // leaves it to a
		t.Fatal(err)
	}
	ch := ts.poll("/v1/queues/q/groups/default/receive", map[string]any{"wait": "20s"})
	ts.waitMetric("sluice_long_polls_waiting 1")
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if res := <-ch; len(res.r.json(t)["messages"].([]any)) != 1 {
		t.Fatalf("first long poll: %s", res.r.body)
	}
	ch = ts.poll("/v1/queues/q/groups/default/receive", map[string]any{"wait": "20s"})
	ts.waitMetric("sluice_long_polls_waiting 1")
	committed := time.Now()
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-ch:
		msgs := res.r.json(t)["messages"].([]any)
		if len(msgs) != 1 || msgs[0].(map[string]any)["body"] != "b" {
			t.Fatalf("second long poll: %s", res.r.body)
		}
		t.Logf("the unnotified message came %s after its commit", time.Since(committed))
	case <-time.After(5 * time.Second):
		t.Fatal("a message whose send did not notify waited for the poll interval")
	}
}

// Long polls that arrive while others of their group wait idle join them
// without a receive of their own (it would find nothing); the next send
// still reaches the one that waited longest.
func TestLongPollsJoinBehind(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	receives := &statementCalls{match: "sluice.receive("}
	cfg.ConnConfig.Tracer = receives
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ts := start(t, func(c *server.Config) { c.Pool = pool; c.PollInterval = time.Minute })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	ts.waitMetric("sluice_listener_up 1")
	ts.must(201, "POST", "/v1/queues/q/messages", tokAdmin, map[string]any{"body": "leased"})
	leased := ts.must(200, "POST", "/v1/queues/q/groups/default/receive", tokAdmin, map[string]any{})["messages"].([]any)
	receipt := leased[0].(map[string]any)["receipt"]
	first := ts.poll("/v1/queues/q/groups/default/receive", map[string]any{"wait": "20s"})
	// Until the first long poll has received and waits (the notification
	// of the send above may wake it once more).
	quiet := func() int64 {
		last, same := receives.n.Load(), 0
		for deadline := time.Now().Add(10 * time.Second); same < 5 && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			if n := receives.n.Load(); n != last || n < 2 {
				last, same = n, 0
			} else {
				same++
			}
		}
		return last
	}
	before := quiet()
	var later []<-chan pollResult
	for range 10 {
		later = append(later, ts.poll("/v1/queues/q/groups/default/receive", map[string]any{"wait": "20s"}))
	}
	ts.waitMetric("sluice_long_polls_waiting 11")
	if n := receives.n.Load() - before; n != 0 {
		t.Fatalf("%d receives by long polls that arrived behind an idle one", n)
	}
	// A long poll that brings acks receives at once.
	ts.must(200, "POST", "/v1/queues/q/groups/default/receive", tokAdmin, map[string]any{"wait": "100ms", "ack": []any{receipt}})
	if n := receives.n.Load() - before; n < 1 {
		t.Fatal("a long poll with acks did not receive")
	}
	// Two sends, one after the other: each reaches a waiting long poll.
	polls := append(later, first)
	for _, body := range []string{"x", "y"} {
		ts.must(201, "POST", "/v1/queues/q/messages", tokAdmin, map[string]any{"body": body})
		deadline := time.After(5 * time.Second)
	wait:
		for {
			for i, ch := range polls {
				select {
				case res := <-ch:
					msgs := res.r.json(t)["messages"].([]any)
					if len(msgs) != 1 || msgs[0].(map[string]any)["body"] != body {
						t.Fatalf("a long poll returned %s, want %q", res.r.body, body)
					}
					polls = append(polls[:i], polls[i+1:]...)
					break wait
				default:
				}
			}
			select {
			case <-deadline:
				t.Fatalf("no waiting long poll got %q", body)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}
