package server_test

import (
	"slices"
	"testing"
)

// POST /v1/queues/{queue}/upgrade moves a queue of engine 1 to engine 2 in
// place, by an admin only: {"upgraded": true}, then false; the message sent
// before it is received and acked after it. Bad input is refused with the
// engine's code and upgrades nothing.
func TestUpgradeQueue(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "jobs", "options": map[string]any{"engine": 1, "lanes": 1}})
	ts.must(201, "POST", "/v1/queues/jobs/messages", tokAdmin, map[string]any{"body": map[string]any{"n": 1}})
	engine := func() float64 {
		t.Helper()
		return ts.must(200, "GET", "/v1/queues/jobs", tokAdmin, nil)["options"].(map[string]any)["engine"].(float64)
	}
	path := "/v1/queues/jobs/upgrade"
	// Only an admin may (the database refuses the others).
	for _, tok := range []string{tokConsumer, tokProducer} {
		if p := ts.problem(403, "POST", path, tok, nil); p["code"] != "42501" {
			t.Errorf("not refused by the database: %v", p)
		}
	}
	ts.problem(403, "POST", path, tokOrders, nil) // an admin token for queues orders*
	// Bad input: the engine's code.
	for _, c := range []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/queues/nope/upgrade", 404, "SL002"},
		{"/v1/queues/bad!name/upgrade", 400, "SL001"},
	} {
		if p := ts.problem(c.status, "POST", c.path, tokAdmin, nil); p["code"] != c.code {
			t.Errorf("%s: code %v, want %s", c.path, p["code"], c.code)
		}
	}
	if e := engine(); e != 1 {
		t.Fatalf("engine %v after the refusals, want 1", e)
	}
	if r := ts.must(200, "POST", path, tokAdmin, nil); r["upgraded"] != true || len(r) != 1 {
		t.Fatalf("upgrade: %v", r)
	}
	if e := engine(); e != 2 {
		t.Fatalf("engine %v after the upgrade, want 2", e)
	}
	if r := ts.must(200, "POST", path, tokAdmin, nil); r["upgraded"] != false || len(r) != 1 {
		t.Fatalf("second upgrade: %v", r)
	}
	msgs := ts.must(200, "POST", "/v1/queues/jobs/groups/default/receive", tokAdmin, map[string]any{"max": 10})["messages"].([]any)
	if len(msgs) != 1 || msgs[0].(map[string]any)["body"].(map[string]any)["n"] != float64(1) {
		t.Fatalf("received %v after the upgrade, want the message sent before it", msgs)
	}
	r := ts.must(200, "POST", "/v1/queues/jobs/groups/default/ack", tokAdmin, map[string]any{"receipts": []any{msgs[0].(map[string]any)["receipt"]}})
	if r["acked"] != float64(1) {
		t.Fatalf("ack across the upgrade: %v", r)
	}
	// The admin's whoami lists it, the consumer's does not.
	for _, c := range []struct {
		token, role string
		may         bool
	}{{tokAdmin, "admin", true}, {tokConsumer, "consumer", false}} {
		fns := ts.must(200, "GET", "/v1/whoami", c.token, nil)["functions"].([]any)
		if slices.Contains(fns, any("upgrade_queue")) != c.may {
			t.Errorf("the %s's whoami lists upgrade_queue: %v, want %v", c.role, !c.may, c.may)
		}
	}
}
