package server_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// Every queue endpoint, as admin.
func TestQueuesLifecycle(t *testing.T) {
	ts := start(t)
	q := ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "orders", "options": map[string]any{"max_attempts": 3}})
	if q["name"] != "orders" || q["options"].(map[string]any)["max_attempts"].(float64) != 3 {
		t.Fatalf("create: %v", q)
	}
	p := ts.problem(409, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "orders"})
	if p["code"] != "SL004" {
		t.Fatalf("duplicate: %v", p)
	}
	ts.problem(400, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "bad name!"})
	p = ts.problem(422, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "x", "options": map[string]any{"nope": 1}})
	if p["code"] != "SL007" {
		t.Fatalf("bad option: %v", p)
	}
	list := ts.must(200, "GET", "/v1/queues", tokAdmin, nil)
	if qs := list["queues"].([]any); len(qs) != 1 || qs[0].(map[string]any)["name"] != "orders" {
		t.Fatalf("list: %v", list)
	}
	ts.must(201, "POST", "/v1/queues/orders/messages", tokAdmin, map[string]any{"body": map[string]any{"n": 1}})
	got := ts.must(200, "GET", "/v1/queues/orders", tokAdmin, nil)
	st := got["status"].([]any)
	if len(st) != 1 || st[0].(map[string]any)["group"] != "default" || st[0].(map[string]any)["ready"].(float64) != 1 {
		t.Fatalf("get: %v", got)
	}
	ts.problem(404, "GET", "/v1/queues/nope", tokAdmin, nil)
	// sluice.alter_queue returns the options merged with the ones given, as
	// given (the interval string is not normalized), the others kept.
	alt := ts.must(200, "PATCH", "/v1/queues/orders", tokAdmin, map[string]any{"lease": "10 seconds"})
	if o := alt["options"].(map[string]any); alt["name"] != "orders" || o["lease"] != "10 seconds" || o["max_attempts"] != float64(3) {
		t.Fatalf("alter: %v, want lease \"10 seconds\" and max_attempts 3 kept", alt)
	}
	if o := ts.must(200, "GET", "/v1/queues/orders", tokAdmin, nil)["options"].(map[string]any); o["lease"] != "10 seconds" {
		t.Fatalf("get after alter: options %v, want lease \"10 seconds\"", o)
	}
	checkDefaultLease(t, ts, "orders", 10*time.Second)
	ts.problem(404, "PATCH", "/v1/queues/nope", tokAdmin, map[string]any{"lease": "10 seconds"})
	ts.must(201, "POST", "/v1/queues/orders/groups", tokAdmin, map[string]any{"name": "audit", "start_from": "earliest"})
	ts.problem(409, "POST", "/v1/queues/orders/groups", tokAdmin, map[string]any{"name": "audit"})
	stAll := ts.must(200, "GET", "/v1/status", tokAdmin, nil)
	if len(stAll["status"].([]any)) != 2 {
		t.Fatalf("status: %v", stAll)
	}
	ts.must(204, "DELETE", "/v1/queues/orders/groups/audit", tokAdmin, nil)
	ts.problem(404, "DELETE", "/v1/queues/orders/groups/audit", tokAdmin, nil)
	if n := ts.must(200, "POST", "/v1/queues/orders/purge", tokAdmin, nil)["purged"].(float64); n != 1 {
		t.Fatalf("purged %v", n)
	}
	ts.must(204, "DELETE", "/v1/queues/orders", tokAdmin, nil)
	ts.problem(404, "DELETE", "/v1/queues/orders", tokAdmin, nil)
}

// checkDefaultLease receives the one message of queue's default group
// without asking for a lease, and checks that the delivery got want, the
// queue's lease option. The lease is read as lease_expires_at minus
// delivered_at of GET /leases, both from the receive's one clock reading,
// so the check does not depend on how long the requests took.
func checkDefaultLease(t *testing.T, ts *testServer, queue string, want time.Duration) {
	t.Helper()
	msgs := ts.must(200, "POST", "/v1/queues/"+queue+"/groups/default/receive", tokAdmin, map[string]any{})["messages"].([]any)
	if len(msgs) != 1 {
		t.Fatalf("receive from %s: %v, want one message", queue, msgs)
	}
	ls := ts.must(200, "GET", "/v1/queues/"+queue+"/leases", tokAdmin, nil)["leases"].([]any)
	if len(ls) != 1 {
		t.Fatalf("leases of %s: %v, want the one just received", queue, ls)
	}
	l := ls[0].(map[string]any)
	delivered, expires := jsonTime(t, l["delivered_at"]), jsonTime(t, l["lease_expires_at"])
	if got := expires.Sub(delivered); got != want {
		t.Fatalf("lease of a receive without one: %v (delivered %v, expires %v), want the queue's %v", got, delivered, expires, want)
	}
	if got := jsonTime(t, msgs[0].(map[string]any)["lease_expires_at"]); !got.Equal(expires) {
		t.Fatalf("receive says the lease expires at %v, GET /leases at %v", got, expires)
	}
}

// jsonTime parses a timestamp of a JSON response (RFC 3339).
func jsonTime(t *testing.T, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("timestamp %v: %v", v, err)
	}
	return tm
}

// Send, receive, ack, nack, extend, dead letters and redrive.
func TestMessagesFlow(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "jobs", "options": map[string]any{"max_attempts": 1}})
	id := ts.must(201, "POST", "/v1/queues/jobs/messages", tokProducer, map[string]any{
		"body": map[string]any{"job": 1}, "headers": map[string]any{"trace": "t1"}, "key": "k", "priority": 0,
		"dedup_key": "d1"})["id"].(float64)
	again := ts.must(201, "POST", "/v1/queues/jobs/messages", tokProducer, map[string]any{"body": 2, "dedup_key": "d1"})["id"].(float64)
	if again != id {
		t.Fatalf("dedup: %v then %v", id, again)
	}
	ids := ts.must(201, "POST", "/v1/queues/jobs/messages/batch", tokProducer, map[string]any{
		"messages": []any{map[string]any{"body": "a"}, map[string]any{"body": "b", "priority": 5}}})["ids"].([]any)
	if len(ids) != 2 {
		t.Fatalf("batch ids: %v", ids)
	}
	ts.must(201, "POST", "/v1/queues/jobs/messages", tokProducer, map[string]any{"body": "later", "delay": "1h"})

	rec := ts.must(200, "POST", "/v1/queues/jobs/groups/default/receive", tokConsumer, map[string]any{"max": 10, "lease": "1m"})
	msgs := rec["messages"].([]any)
	if len(msgs) != 3 {
		t.Fatalf("received %d messages, want 3 (the delayed one waits): %v", len(msgs), rec)
	}
	var receipts []string
	for _, m := range msgs {
		m := m.(map[string]any)
		receipts = append(receipts, m["receipt"].(string))
		if m["id"].(float64) == id {
			h := m["headers"].(map[string]any)
			if h["trace"] != "t1" || h["sluice_sub"] != "producer" {
				t.Fatalf("headers: %v", h)
			}
		}
	}
	if n := ts.must(200, "POST", "/v1/queues/jobs/groups/default/extend", tokConsumer,
		map[string]any{"receipts": receipts, "lease": "2m"})["extended"].(float64); n != 3 {
		t.Fatalf("extended %v", n)
	}
	if n := ts.must(200, "POST", "/v1/queues/jobs/groups/default/ack", tokConsumer,
		map[string]any{"receipts": receipts[:2]})["acked"].(float64); n != 2 {
		t.Fatalf("acked %v", n)
	}
	// Acking again counts nothing.
	if n := ts.must(200, "POST", "/v1/queues/jobs/groups/default/ack", tokConsumer,
		map[string]any{"receipts": receipts[:2]})["acked"].(float64); n != 0 {
		t.Fatalf("acked again %v", n)
	}
	if ok := ts.must(200, "POST", "/v1/queues/jobs/groups/default/nack", tokConsumer,
		map[string]any{"receipt": receipts[2], "error": "boom", "delay": "0s"})["nacked"].(bool); !ok {
		t.Fatal("nack of a current receipt returned false")
	}
	p := ts.problem(422, "POST", "/v1/queues/jobs/groups/default/ack", tokConsumer, map[string]any{"receipts": []string{"forged"}})
	if p["code"] != "SL008" {
		t.Fatalf("forged receipt: %v", p)
	}
	dl := ts.must(200, "GET", "/v1/queues/jobs/dead-letters?group=default", tokConsumer, nil)["dead_letters"].([]any)
	if len(dl) != 1 || dl[0].(map[string]any)["error"] != "boom" {
		t.Fatalf("dead letters: %v", dl)
	}
	// Consumers may list dead letters, only admins redrive them (the
	// database refuses).
	ts.problem(403, "POST", "/v1/queues/jobs/dead-letters/redrive", tokConsumer, map[string]any{})
	if n := ts.must(200, "POST", "/v1/queues/jobs/dead-letters/redrive", tokAdmin, map[string]any{"group": "default"})["redriven"].(float64); n != 1 {
		t.Fatalf("redriven %v", n)
	}
	again2 := ts.must(200, "POST", "/v1/queues/jobs/groups/default/receive", tokConsumer, map[string]any{})["messages"].([]any)
	if len(again2) != 1 || again2[0].(map[string]any)["attempt"].(float64) != 1 {
		t.Fatalf("after redrive: %v", again2)
	}
	ts.problem(404, "POST", "/v1/queues/jobs/groups/nope/receive", tokConsumer, map[string]any{})
	ts.problem(404, "POST", "/v1/queues/nope/messages", tokProducer, map[string]any{"body": 1})
}

// The transaction endpoint acks and sends atomically.
func TestTransaction(t *testing.T) {
	ts := start(t)
	for _, q := range []string{"in", "out"} {
		ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": q})
	}
	ts.must(201, "POST", "/v1/queues/in/messages", tokAdmin, map[string]any{"body": "task"})
	m := ts.must(200, "POST", "/v1/queues/in/groups/default/receive", tokAdmin, map[string]any{})["messages"].([]any)[0].(map[string]any)
	receipt := m["receipt"].(string)
	// A failing send rolls the ack back.
	ts.problem(404, "POST", "/v1/transaction", tokAdmin, map[string]any{
		"ack":  []any{map[string]any{"queue": "in", "group": "default", "receipts": []string{receipt}}},
		"send": []any{map[string]any{"queue": "out", "body": "ok"}, map[string]any{"queue": "missing", "body": "x"}}})
	if st := ts.must(200, "GET", "/v1/queues/in", tokAdmin, nil)["status"].([]any)[0].(map[string]any); st["in_flight"].(float64) != 1 {
		t.Fatalf("the failed transaction acked: %v", st)
	}
	if st := ts.must(200, "GET", "/v1/queues/out", tokAdmin, nil)["status"].([]any)[0].(map[string]any); st["lag"].(float64) != 0 {
		t.Fatalf("the failed transaction sent: %v", st)
	}
	res := ts.must(200, "POST", "/v1/transaction", tokAdmin, map[string]any{
		"ack":  []any{map[string]any{"queue": "in", "group": "default", "receipts": []string{receipt}}},
		"send": []any{map[string]any{"queue": "out", "body": "ok", "key": "k"}}})
	if res["acked"].([]any)[0].(float64) != 1 || len(res["ids"].([]any)) != 1 {
		t.Fatalf("transaction: %v", res)
	}
	out := ts.must(200, "POST", "/v1/queues/out/groups/default/receive", tokAdmin, map[string]any{})["messages"].([]any)
	if len(out) != 1 || out[0].(map[string]any)["body"] != "ok" {
		t.Fatalf("out: %v", out)
	}
}

// Health, readiness, the OpenAPI document and unknown paths.
func TestHealthAndUnknown(t *testing.T) {
	ts := start(t)
	ts.must(200, "GET", "/healthz", "", nil)
	if r := ts.must(200, "GET", "/readyz", "", nil); r["status"] != "ready" {
		t.Fatalf("readyz: %v", r)
	}
	ts.must(200, "GET", "/v1/openapi.json", "", nil)
	ts.problem(404, "GET", "/v1/nothing", tokAdmin, nil)
	r := ts.do("PUT", "/v1/queues", tokAdmin, nil)
	if r.status != http.StatusMethodNotAllowed {
		t.Fatalf("PUT /v1/queues: %d", r.status)
	}
	_ = fmt.Sprint()
}

// Peek (GET .../messages) and leases: what is stored and what is in
// flight, read by a consumer or an admin, refused to a producer; bad
// parameters and unknown names get their problem.
func TestPeekAndLeases(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "jobs"})
	var ids []float64
	for i := range 5 {
		ids = append(ids, ts.must(201, "POST", "/v1/queues/jobs/messages", tokProducer,
			map[string]any{"body": map[string]any{"n": i}, "key": fmt.Sprint("k", i)})["id"].(float64))
	}
	page := ts.must(200, "GET", "/v1/queues/jobs/messages?max=3", tokConsumer, nil)["messages"].([]any)
	if len(page) != 3 || page[0].(map[string]any)["id"] != ids[0] || page[2].(map[string]any)["id"] != ids[2] {
		t.Fatalf("first page: %v", page)
	}
	if m := page[1].(map[string]any); m["key"] != "k1" || m["body"].(map[string]any)["n"] != float64(1) {
		t.Fatalf("peeked message: %v", m)
	}
	next := ts.must(200, "GET", fmt.Sprintf("/v1/queues/jobs/messages?max=3&after_id=%d", int64(ids[2])), tokAdmin, nil)["messages"].([]any)
	if len(next) != 2 || next[0].(map[string]any)["id"] != ids[3] {
		t.Fatalf("second page: %v", next)
	}
	if ls := ts.must(200, "GET", "/v1/queues/jobs/leases", tokConsumer, nil)["leases"].([]any); len(ls) != 0 {
		t.Fatalf("leases before a receive (peek leases nothing): %v", ls)
	}

	msgs := ts.must(200, "POST", "/v1/queues/jobs/groups/default/receive", tokConsumer,
		map[string]any{"max": 2, "lease": "1m", "consumer": "w1"})["messages"].([]any)
	if len(msgs) != 2 {
		t.Fatalf("received %v", msgs)
	}
	ls := ts.must(200, "GET", "/v1/queues/jobs/leases?group=default&max=10", tokConsumer, nil)["leases"].([]any)
	if len(ls) != 2 {
		t.Fatalf("leases: %v", ls)
	}
	l := ls[0].(map[string]any)
	if l["group"] != "default" || l["consumer"] != "w1" || l["attempt"] != float64(1) || l["lease_expires_at"] == nil ||
		(l["id"] != msgs[0].(map[string]any)["id"] && l["id"] != msgs[1].(map[string]any)["id"]) {
		t.Fatalf("lease: %v (received %v)", l, msgs)
	}
	if _, ok := l["receipt"]; ok {
		t.Fatalf("a lease shows its receipt: %v", l)
	}
	ts.must(200, "POST", "/v1/queues/jobs/groups/default/ack", tokConsumer,
		map[string]any{"receipts": []string{msgs[0].(map[string]any)["receipt"].(string)}})
	if ls := ts.must(200, "GET", "/v1/queues/jobs/leases", tokAdmin, nil)["leases"].([]any); len(ls) != 1 {
		t.Fatalf("leases after an ack: %v", ls)
	}

	// Roles and tokens.
	p := ts.problem(403, "GET", "/v1/queues/jobs/messages", tokProducer, nil)
	if p["code"] != "42501" {
		t.Fatalf("producer peek: %v", p)
	}
	ts.problem(403, "GET", "/v1/queues/jobs/leases", tokProducer, nil)
	ts.problem(403, "GET", "/v1/queues/jobs/messages", tokOrders, nil) // a token for queues orders*
	ts.problem(401, "GET", "/v1/queues/jobs/messages", "", nil)
	ts.problem(401, "GET", "/v1/queues/jobs/leases", "wrong-token-0123456789", nil)

	// Bad parameters and unknown names.
	for _, c := range []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/queues/jobs/messages?max=x", 400, ""},
		{"/v1/queues/jobs/messages?after_id=1.5", 400, ""},
		{"/v1/queues/jobs/leases?max=ten", 400, ""},
		{"/v1/queues/jobs/messages?max=0", 422, "SL006"},
		{"/v1/queues/jobs/leases?max=1001", 422, "SL006"},
		{"/v1/queues/nope/messages", 404, "SL002"},
		{"/v1/queues/nope/leases", 404, "SL002"},
		{"/v1/queues/jobs/leases?group=nope", 404, "SL003"},
		{"/v1/queues/jobs/leases?group=bad%20name", 400, "SL001"},
	} {
		p := ts.problem(c.status, "GET", c.path, tokAdmin, nil)
		if p["code"] != nil && p["code"] != c.code || c.code != "" && p["code"] != c.code {
			t.Errorf("GET %s: %v, want code %q", c.path, p, c.code)
		}
		if c.status == 400 && c.code == "" && p["field"] == nil {
			t.Errorf("GET %s: %v, want the field named", c.path, p)
		}
	}
}

// POST .../groups/{group}/seek moves the group with sluice.seek_group: it
// receives again what it acked and keeps its dead letters; a consumer may
// not seek; bad input is a problem with the engine's code.
func TestSeekGroup(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "jobs", "options": map[string]any{"max_attempts": 1}})
	ts.must(201, "POST", "/v1/queues/jobs/messages/batch", tokProducer, map[string]any{
		"messages": []any{map[string]any{"body": "dies"}, map[string]any{"body": "fine"}}})
	msgs := ts.must(200, "POST", "/v1/queues/jobs/groups/default/receive", tokConsumer, map[string]any{"max": 10})["messages"].([]any)
	if len(msgs) != 2 {
		t.Fatalf("receive: %v", msgs)
	}
	receipt := func(i int) string { return msgs[i].(map[string]any)["receipt"].(string) }
	ts.must(200, "POST", "/v1/queues/jobs/groups/default/nack", tokConsumer, map[string]any{"receipt": receipt(0), "error": "boom"})
	ts.must(200, "POST", "/v1/queues/jobs/groups/default/ack", tokConsumer, map[string]any{"receipts": []string{receipt(1)}})

	ts.problem(403, "POST", "/v1/queues/jobs/groups/default/seek", tokConsumer, map[string]any{"to_position": "earliest"})
	got := ts.must(200, "POST", "/v1/queues/jobs/groups/default/seek", tokAdmin, map[string]any{"to_position": "earliest"})
	if got["group"] != "default" || got["to_position"] != "earliest" {
		t.Fatalf("seek: %v", got)
	}
	again := ts.must(200, "POST", "/v1/queues/jobs/groups/default/receive", tokConsumer, map[string]any{"max": 10})["messages"].([]any)
	if len(again) != 2 {
		t.Fatalf("receive after the seek: %v, want both messages again", again)
	}
	dl := ts.must(200, "GET", "/v1/queues/jobs/dead-letters", tokConsumer, nil)["dead_letters"].([]any)
	if len(dl) != 1 || dl[0].(map[string]any)["error"] != "boom" {
		t.Fatalf("dead letters after the seek: %v", dl)
	}
	if p := ts.problem(404, "POST", "/v1/queues/jobs/groups/nope/seek", tokAdmin, map[string]any{"to_position": "latest"}); p["code"] != "SL003" {
		t.Errorf("unknown group: %v", p)
	}
	if p := ts.problem(422, "POST", "/v1/queues/jobs/groups/default/seek", tokAdmin, map[string]any{"to_position": "soon"}); p["code"] != "SL006" {
		t.Errorf("bad position: %v", p)
	}
	if p := ts.problem(400, "POST", "/v1/queues/jobs/groups/default/seek", tokAdmin, map[string]any{}); p["field"] != "to_position" {
		t.Errorf("no position: %v", p)
	}
}

// A batch send keeps nothing of the batch before it (the server reuses a
// batch's memory for the next): messages sent without delay, key,
// priority, headers or dedup_key have none, after a batch that had them.
func TestBatchSendInheritsNothing(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	full, plain := map[float64]bool{}, map[float64]bool{}
	for round := range 5 {
		var msgs []any
		for i := range 3 {
			msgs = append(msgs, map[string]any{"body": i, "key": fmt.Sprintf("k%d-%d", round, i), "priority": 7,
				"headers": map[string]any{"trace": "t"}, "dedup_key": fmt.Sprintf("d%d-%d", round, i)})
		}
		// (delayed: a plain message that kept the delay would not be received)
		for _, id := range ts.must(201, "POST", "/v1/queues/q/messages/batch", tokProducer,
			map[string]any{"messages": msgs, "delay": "1h"})["ids"].([]any) {
			full[id.(float64)] = true
		}
		for _, id := range ts.must(201, "POST", "/v1/queues/q/messages/batch", tokProducer, map[string]any{
			"messages": []any{map[string]any{"body": "a"}, map[string]any{"body": "b"}, map[string]any{"body": "c"}}})["ids"].([]any) {
			if full[id.(float64)] || plain[id.(float64)] {
				t.Fatalf("round %d: a plain message got the id %v of an earlier one (a dedup_key kept)", round, id)
			}
			plain[id.(float64)] = true
		}
	}
	for seen, tries := 0, 0; seen < len(plain); tries++ {
		if tries == 10 {
			t.Fatalf("received %d of the %d plain messages (a delay kept?)", seen, len(plain))
		}
		msgs := ts.must(200, "POST", "/v1/queues/q/groups/default/receive", tokConsumer,
			map[string]any{"max": 100, "wait": "1s"})["messages"].([]any)
		for _, m := range msgs {
			m := m.(map[string]any)
			if !plain[m["id"].(float64)] {
				t.Fatalf("received a message of a delayed batch: %v", m)
			}
			seen++
			h, _ := m["headers"].(map[string]any)
			if m["key"] != nil || m["priority"].(float64) != 0 || len(h) != 1 || h["sluice_sub"] != "producer" {
				t.Errorf("a plain message has members of the batch before it: %v", m)
			}
		}
	}
}
