package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// poolSize gives the server a pool of n connections (the command's
// default is 16; pgxpool's, 4 on this machine).
func poolSize(t *testing.T, n int32) option {
	return func(c *server.Config) {
		pc := c.Pool.Config()
		pc.MaxConns = n
		p, err := pgxpool.NewWithConfig(context.Background(), pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		c.Pool = p
	}
}

// lockQueue takes an ACCESS EXCLUSIVE lock on every table of queue's
// storage, in a transaction of its own held until the function it returns
// is called (or the test ends): whatever reads that queue's tables waits,
// holding its connection.
func (ts *testServer) lockQueue(queue string) func() {
	ts.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, ts.pool.Config().ConnString())
	if err != nil {
		ts.t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		ts.t.Fatal(err)
	}
	var tables []string
	err = tx.QueryRow(ctx, `SELECT array_agg(format('%I.%I', n.nspname, c.relname))
	  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	 WHERE n.nspname = (SELECT 'sluice_q' || id FROM sluice.queue WHERE name = $1) AND c.relkind IN ('r', 'p')`,
		queue).Scan(&tables)
	if err != nil || len(tables) == 0 {
		ts.t.Fatalf("the tables of queue %s: %v %v", queue, tables, err)
	}
	for _, tb := range tables {
		if _, err := tx.Exec(ctx, "LOCK TABLE "+tb+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			ts.t.Fatal(err)
		}
	}
	var once sync.Once
	release := func() { once.Do(func() { _ = tx.Rollback(ctx); _ = conn.Close(ctx) }) }
	ts.t.Cleanup(release)
	return release
}

// doWithin is do with a deadline: it reports the status, or 0 if the
// request did not finish in time.
func (ts *testServer) doWithin(d time.Duration, method, path, token string) int {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, ts.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// GET /v1/status of a token limited to some queues reads only those: a
// lock on another queue's tables does not hold it up (it read every
// queue, then dropped the rows it may not see).
func TestStatusReadsOnlyTheTokensQueues(t *testing.T) {
	ts := start(t)
	for _, q := range []string{"orders", "orders.eu", "secret"} {
		ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": q})
	}
	release := ts.lockQueue("secret")
	if got := ts.doWithin(5*time.Second, "GET", "/v1/status", tokOrders); got != 200 {
		t.Fatalf("status of the orders token with queue secret locked: %d (0: no answer in 5s)", got)
	}
	release()
	var queues []string
	for _, row := range ts.must(200, "GET", "/v1/status", tokOrders, nil)["status"].([]any) {
		if q := row.(map[string]any)["queue"].(string); !slices.Contains(queues, q) {
			queues = append(queues, q)
		}
	}
	sort.Strings(queues)
	if fmt.Sprint(queues) != "[orders orders.eu]" {
		t.Fatalf("the orders token's status lists %v", queues)
	}
}

// A new event stream's first event is the shared feed's latest reading:
// streams connecting while sluice.status is slow (here: waiting on a lock)
// get it at once instead of each reading the status first.
func TestEventsFirstEventFromTheFeed(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	first, _ := ts.openEvents(tokAdmin)
	if first == nil {
		t.Fatal("no stream")
	}
	defer first.cancel()
	if ev, ok := first.next(t, 10*time.Second); !ok || ev.name != "status" {
		t.Fatalf("first event %v", ev)
	}
	ts.lockQueue("q")
	var wg sync.WaitGroup
	late := make(chan int, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// (the answer's headers come with the first event)
			late <- ts.doWithin(5*time.Second, "GET", "/v1/events", tokAdmin)
		}()
	}
	wg.Wait()
	close(late)
	for got := range late {
		if got == 0 {
			t.Fatal("a stream got no first event within 5s while sluice.status waited")
		}
	}
}

// With every connection that gated requests may use stuck in the
// database, other tokens' sends, receives and acks still get through: the
// pool keeps connections for them (64 status calls of one token held all
// 16; status calls now share readings, TestStatusBurstSharesReadings, so
// the test fills the gate with peeks).
func TestPoolReservedForMessages(t *testing.T) {
	ts := start(t, poolSize(t, 16))
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "orders"})
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "slow"})
	release := ts.lockQueue("slow")
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts.doWithin(20*time.Second, "GET", "/v1/queues/slow/messages", tokAdmin)
		}()
	}
	defer wg.Wait()
	defer release()
	// Wait for the peeks to be stuck on the lock (looking on a connection
	// of the test's own: the server's pool may be full, which is what the
	// test is about).
	watch, err := pgx.Connect(context.Background(), ts.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting int
		if err := watch.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		  WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= 12 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d peeks wait on the lock", waiting)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		send, _ := postWithin(ctx, ts.url+"/v1/queues/orders/messages", tokProducer, `{"body": 1}`)
		recv, got := postWithin(ctx, ts.url+"/v1/queues/orders/groups/default/receive", tokConsumer, `{"max": 1}`)
		var ack int
		if recv == 200 {
			var m struct {
				Messages []struct {
					Receipt string `json:"receipt"`
				} `json:"messages"`
			}
			if err := json.Unmarshal(got, &m); err != nil || len(m.Messages) != 1 {
				t.Fatalf("received %s", got)
			}
			ack, _ = postWithin(ctx, ts.url+"/v1/queues/orders/groups/default/ack", tokConsumer,
				`{"receipts": ["`+m.Messages[0].Receipt+`"]}`)
		}
		cancel()
		if send != 201 || recv != 200 || ack != 200 {
			t.Fatalf("round %d with the peeks stuck: send %d, receive %d, ack %d (0: no answer in 5s)", i, send, recv, ack)
		}
	}
}

// postWithin posts body with token and returns the status and body (0 if
// ctx ended first).
func postWithin(ctx context.Context, url, token, body string) (int, []byte) {
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, nil
	}
	return res.StatusCode, b
}
