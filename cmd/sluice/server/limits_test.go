package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// Bad JSON, wrong types and unknown members get a 400 naming the field,
// and change nothing.
func TestBadInput(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	for _, c := range []struct {
		path, body, field string
		status            int
	}{
		{"/v1/queues/q/messages", `{"body": 1,`, "", 400},
		{"/v1/queues/q/messages", `{"body": 1} {}`, "", 400},
		{"/v1/queues/q/messages", ``, "", 400},
		{"/v1/queues/q/messages", `[1]`, "", 400},
		{"/v1/queues/q/messages", `{"bdy": 1}`, "bdy", 400},
		{"/v1/queues/q/messages", `{}`, "body", 400},
		{"/v1/queues/q/messages", `{"body": 1, "priority": "high"}`, "priority", 400},
		{"/v1/queues/q/messages", `{"body": 1, "priority": 1.5}`, "priority", 400},
		{"/v1/queues/q/messages", `{"body": 1, "delay": "soon"}`, "delay", 400},
		{"/v1/queues/q/messages", `{"body": 1, "delay": "-1s"}`, "delay", 400},
		{"/v1/queues/q/messages", `{"body": 1, "headers": [1]}`, "headers", 400},
		{"/v1/queues/q/messages", `{"body": 1, "key": 7}`, "key", 400},
		{"/v1/queues/q/messages", `{"Body": 1}`, "Body", 400},            // names match exactly
		{"/v1/queues/q/messages", `{"body": 1, "body": 2}`, "body", 400}, // a member twice
		{"/v1/queues/q/messages", "{\"body\": \"\xff\"}", "body", 400},   // not UTF-8
		{"/v1/queues/q/messages/batch", `{"messages": [{"body": 1, "extra": 2}]}`, "messages[0].extra", 400},
		{"/v1/queues/q/messages/batch", `{"messages": [{"body": 1}, {"body": 2, "priority": "x"}]}`, "messages[1].priority", 400},
		{"/v1/queues/q/messages/batch", `{"messages": [{"body": 1}, {}]}`, "messages[1].body", 400},
		{"/v1/queues/q/messages/batch", `{"messages": []}`, "messages", 400},
		{"/v1/queues/q/groups/default/receive", `{"max": "ten"}`, "max", 400},
		{"/v1/queues/q/groups/default/receive", `{"wait": "31s"}`, "wait", 400},
		{"/v1/queues/q/groups/default/receive", `{"max": 0.5}`, "max", 400},
		{"/v1/queues/q/groups/default/ack", `{"receipts": "r"}`, "receipts", 400},
		{"/v1/queues/q/groups/default/ack", `{}`, "receipts", 400},
		{"/v1/queues/q/groups/default/nack", `{"receipt": ""}`, "receipt", 400},
		{"/v1/queues/q/groups/default/extend", `{"receipts": []}`, "lease", 400},
		{"/v1/transaction", `{"send": [{"body": 1}]}`, "send[0].queue", 400},
		{"/v1/transaction", `{"ack": [{"queue": "q", "receipts": []}]}`, "ack[0].group", 400},
		{"/v1/transaction", `{}`, "", 400},
		{"/v1/queues", `{"name": "x", "options": [1]}`, "options", 400},
		// The engine's own checks: 422 with the SL code.
		{"/v1/queues/q/groups/default/receive", `{"max": 0}`, "max", 400},
		{"/v1/queues/q/groups/default/receive", `{"consumer": "` + strings.Repeat("c", 300) + `"}`, "", 422},
		{"/v1/queues/q/groups/default/extend", `{"receipts": [], "lease": "200h"}`, "", 422},
		{"/v1/queues/q/messages", `{"body": 1, "key": "` + strings.Repeat("k", 600) + `"}`, "", 422},
	} {
		p := ts.problem(c.status, "POST", c.path, tokAdmin, c.body)
		if got, _ := p["field"].(string); got != c.field {
			t.Errorf("%s %s: field %q, want %q (%v)", c.path, c.body, got, c.field, p["detail"])
		}
		if d, _ := p["detail"].(string); d == "" || strings.Contains(d, "jsontext") || strings.Contains(d, "Go ") {
			t.Errorf("%s %s: detail %q does not say what is wrong in the request's terms", c.path, c.body, d)
		}
		if c.status == 422 && p["code"] == nil {
			t.Errorf("%s %s: no code: %v", c.path, c.body, p)
		}
	}
	st := ts.must(200, "GET", "/v1/queues/q", tokAdmin, nil)["status"].([]any)[0].(map[string]any)
	if st["lag"].(float64) != 0 || st["in_flight"].(float64) != 0 {
		t.Fatalf("bad requests changed the queue: %v", st)
	}
}

// Body size, batch size and payload limits: 413.
func TestSizeLimits(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.MaxBody = 1000; c.MaxBatch = 3 })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q", "options": map[string]any{"max_payload": 100}})
	p := ts.problem(413, "POST", "/v1/queues/q/messages", tokAdmin, map[string]any{"body": strings.Repeat("x", 2000)})
	if p["type"] != "urn:sluice:problem:request_too_large" {
		t.Fatalf("body limit: %v", p)
	}
	p = ts.problem(413, "POST", "/v1/queues/q/messages", tokAdmin, map[string]any{"body": strings.Repeat("x", 200)})
	if p["code"] != "SL009" {
		t.Fatalf("payload limit: %v", p)
	}
	msgs := []any{}
	for range 4 {
		msgs = append(msgs, map[string]any{"body": 1})
	}
	p = ts.problem(413, "POST", "/v1/queues/q/messages/batch", tokAdmin, map[string]any{"messages": msgs})
	if p["field"] != "messages" {
		t.Fatalf("batch limit: %v", p)
	}
	ts.problem(413, "POST", "/v1/queues/q/groups/default/receive", tokAdmin, map[string]any{"max": 4})
	ts.must(201, "POST", "/v1/queues/q/messages/batch", tokAdmin, map[string]any{"messages": msgs[:3]})
}

// A token with MaxConcurrent requests in progress gets 429; other tokens
// are not affected.
func TestConcurrencyLimit(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.MaxConcurrent = 2 })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := ts.do("POST", "/v1/queues/q/groups/default/receive", tokConsumer, map[string]any{"wait": "2s"})
			if r.status != 200 {
				t.Errorf("long poll: %d %s", r.status, r.body)
			}
		}()
	}
	ts.waitMetric("sluice_long_polls_waiting 2")
	r := ts.do("POST", "/v1/queues/q/groups/default/receive", tokConsumer, map[string]any{})
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Fatalf("a third request with two long polls in progress: %d %v %s", r.status, r.header, r.body)
	}
	ts.must(200, "POST", "/v1/queues/q/groups/default/receive", tokAdmin, map[string]any{})
	wg.Wait()
	ts.must(200, "POST", "/v1/queues/q/groups/default/receive", tokConsumer, map[string]any{})
}

// A client that sends its headers too slowly is cut off (slowloris).
func TestReadHeaderTimeout(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.ReadHeaderTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	buf := make([]byte, 1024)
	_, err = conn.Read(buf)
	if err == nil {
		// The server may answer 408 before closing.
		_, err = conn.Read(buf)
	}
	if err == nil || time.Since(start) > 4*time.Second {
		t.Fatalf("the connection stayed open: %v after %s", err, time.Since(start))
	}
	_ = context.Background()
}

// waitMetric waits until /metrics has line.
func (ts *testServer) waitMetric(line string) {
	ts.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := ts.do("GET", "/metrics", tokAdmin, nil)
		if strings.Contains(string(r.body), "\n"+line+"\n") {
			return
		}
		if time.Now().After(deadline) {
			ts.t.Fatalf("/metrics has no line %q:\n%s", line, r.body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
