package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// deadLetters makes n dead letters in queue's default group (a queue of
// max_attempts 1) and returns their ids.
func (ts *testServer) deadLetters(queue string, n int) []float64 {
	ts.t.Helper()
	var ids []float64
	for i := range n {
		ids = append(ids, ts.must(201, "POST", "/v1/queues/"+queue+"/messages", tokAdmin, map[string]any{"body": map[string]any{"n": i}})["id"].(float64))
	}
	for _, m := range ts.must(200, "POST", "/v1/queues/"+queue+"/groups/default/receive", tokAdmin, map[string]any{"max": n})["messages"].([]any) {
		ts.must(200, "POST", "/v1/queues/"+queue+"/groups/default/nack", tokAdmin, map[string]any{"receipt": m.(map[string]any)["receipt"], "error": "poison"})
	}
	return ids
}

func (ts *testServer) dead(queue string) (dead, deadLettered float64) {
	ts.t.Helper()
	st := ts.must(200, "GET", "/v1/queues/"+queue, tokAdmin, nil)["status"].([]any)[0].(map[string]any)
	return st["dead"].(float64), st["dead_lettered"].(float64)
}

// Dead letters are discarded by ids or all of a group's, by an admin only;
// bad input is refused with the engine's code and discards nothing; purge
// leaves dead letters unless asked (?dead_letters=true).
func TestDiscardDeadLetters(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "jobs", "options": map[string]any{"max_attempts": 1}})
	ids := ts.deadLetters("jobs", 3)
	path := "/v1/queues/jobs/dead-letters/discard"
	// The consumer may read them, not discard them (the database refuses).
	ts.problem(403, "POST", path, tokConsumer, map[string]any{"group": "default"})
	ts.problem(403, "POST", path, tokProducer, map[string]any{"group": "default"})
	// Bad input: the engine's code, nothing discarded.
	for _, c := range []struct {
		body   any
		status int
		code   string
	}{
		{map[string]any{}, 422, "SL006"},
		{map[string]any{"group": "default", "ids": []any{}}, 422, "SL006"},
		{map[string]any{"group": "nope"}, 404, "SL003"},
		{map[string]any{"group": "bad name!"}, 400, "SL001"},
		{map[string]any{"group": "default", "ids": "7"}, 400, ""},
	} {
		p := ts.problem(c.status, "POST", path, tokAdmin, c.body)
		if c.code != "" && p["code"] != c.code {
			t.Errorf("%v: code %v, want %s", c.body, p["code"], c.code)
		}
	}
	ts.problem(404, "POST", "/v1/queues/nope/dead-letters/discard", tokAdmin, map[string]any{"group": "default"})
	if d, _ := ts.dead("jobs"); d != 3 {
		t.Fatalf("dead %v after the refusals, want 3", d)
	}
	if n := ts.must(200, "POST", path, tokAdmin, map[string]any{"ids": []any{ids[0]}})["discarded"].(float64); n != 1 {
		t.Fatalf("discarded %v by id, want 1", n)
	}
	if d, total := ts.dead("jobs"); d != 2 || total != 3 {
		t.Fatalf("dead %v, dead_lettered %v; want 2 and 3", d, total)
	}
	// purge leaves dead letters...
	ts.must(201, "POST", "/v1/queues/jobs/messages", tokAdmin, map[string]any{"body": 1})
	if r := ts.must(200, "POST", "/v1/queues/jobs/purge", tokAdmin, nil); r["purged"].(float64) < 1 || r["dead_letters_discarded"] != nil {
		t.Fatalf("purge: %v", r)
	}
	if d, _ := ts.dead("jobs"); d != 2 {
		t.Fatalf("dead %v after a purge, want 2 (purge leaves them)", d)
	}
	ts.problem(400, "POST", "/v1/queues/jobs/purge?dead_letters=maybe", tokAdmin, nil)
	// ...unless asked.
	if r := ts.must(200, "POST", "/v1/queues/jobs/purge?dead_letters=true", tokAdmin, nil); r["dead_letters_discarded"].(float64) != 2 {
		t.Fatalf("purge with dead letters: %v", r)
	}
	if d, total := ts.dead("jobs"); d != 0 || total != 3 {
		t.Fatalf("dead %v, dead_lettered %v; want 0 and 3", d, total)
	}
	if n := ts.must(200, "POST", path, tokAdmin, map[string]any{"group": "default"})["discarded"].(float64); n != 0 {
		t.Fatalf("discarded %v of an empty group, want 0", n)
	}
}

// GET /v1/whoami says what the token may do, as the database's grants say.
func TestWhoAmI(t *testing.T) {
	ts := start(t)
	for _, c := range []struct {
		token, role   string
		may, mayNot   []string
		queuePatterns int
	}{
		{tokAdmin, server.RoleAdmin, []string{"create_queue", "discard_dead_letters", "redrive", "status", "peek"}, nil, 0},
		{tokConsumer, server.RoleConsumer, []string{"status", "peek", "leases", "dead_letters", "receive"}, []string{"create_queue", "discard_dead_letters", "redrive", "purge_queue"}, 0},
		{tokProducer, server.RoleProducer, []string{"send"}, []string{"status", "peek", "discard_dead_letters"}, 0},
		{tokOrders, server.RoleAdmin, []string{"discard_dead_letters"}, nil, 2},
	} {
		w := ts.must(200, "GET", "/v1/whoami", c.token, nil)
		fns := map[string]bool{}
		for _, f := range w["functions"].([]any) {
			fns[f.(string)] = true
		}
		if w["role"] != c.role || len(w["queues"].([]any)) != c.queuePatterns {
			t.Errorf("%s: %v", c.role, w)
		}
		for _, f := range c.may {
			if !fns[f] {
				t.Errorf("%s may not call %s: %v", c.role, f, w["functions"])
			}
		}
		for _, f := range c.mayNot {
			if fns[f] {
				t.Errorf("%s may call %s: %v", c.role, f, w["functions"])
			}
		}
	}
	ts.problem(401, "GET", "/v1/whoami", "", nil)
}

// The server samples the status by itself and serves the samples: a client
// that comes later sees what happened before it came; a token sees only
// its queues, and only if it may read the status.
func TestStatusHistory(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.HistoryInterval = 100 * time.Millisecond })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "orders"})
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "other"})
	for i := range 3 {
		ts.must(201, "POST", "/v1/queues/orders/messages", tokAdmin, map[string]any{"body": i})
		time.Sleep(300 * time.Millisecond)
	}
	h := ts.must(200, "GET", "/v1/status/history", tokAdmin, nil)
	times := h["times"].([]any)
	if len(times) < 5 || h["interval_seconds"].(float64) != 0.1 || h["window_seconds"].(float64) != 3600 {
		t.Fatalf("history: %d samples, %v", len(times), h)
	}
	var lags []any
	for _, s := range h["series"].([]any) {
		s := s.(map[string]any)
		if s["queue"] == "orders" && s["group"] == "default" {
			lags = s["lag"].([]any)
		}
	}
	if len(lags) != len(times) {
		t.Fatalf("orders/default lag %v: want one value per time (%d)", lags, len(times))
	}
	// The lag grew from 0 or 1 to 3 over the samples (null before the
	// queue was created).
	i := 0
	for i < len(lags)-1 && lags[i] == nil {
		i++
	}
	first, last := lags[i], lags[len(lags)-1]
	if first == nil || first.(float64) > 1 || last == nil || last.(float64) != 3 {
		t.Fatalf("lag from %v to %v, want from at most 1 to 3: %v", first, last, lags)
	}
	// since and queue limit it; the orders-only token sees orders only.
	since := int64(times[len(times)-2].(float64))
	later := ts.must(200, "GET", fmt.Sprintf("/v1/status/history?since=%d", since), tokAdmin, nil)["times"].([]any)
	if len(later) == 0 || len(later) >= len(times) || int64(later[0].(float64)) <= since {
		t.Fatalf("since the last but one sample (%d): %v", since, later)
	}
	for _, s := range ts.must(200, "GET", "/v1/status/history", tokOrders, nil)["series"].([]any) {
		if q := s.(map[string]any)["queue"]; q != "orders" {
			t.Fatalf("the orders token sees queue %v", q)
		}
	}
	ts.problem(403, "GET", "/v1/status/history?queue=other", tokOrders, nil)
	ts.problem(403, "GET", "/v1/status/history", tokProducer, nil)
	ts.must(200, "GET", "/v1/status/history?queue=orders", tokConsumer, nil)
	ts.problem(400, "GET", "/v1/status/history?since=soon", tokConsumer, nil)
}
