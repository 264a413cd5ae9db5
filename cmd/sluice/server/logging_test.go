package server_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sluicemq/sluice/cmd/sluice/server"
	"github.com/sluicemq/sluice/internal/pgtest"
)

// logBuffer collects a server's JSON log.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// records returns the log's records, decoded.
func (l *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func withLog(buf *logBuffer, access bool) option {
	return func(c *server.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.AccessLog = access
	}
}

// request sends a request with extra headers and returns the response, its
// body read.
func (ts *testServer) request(method, path, token, body string, header map[string]string) response {
	ts.t.Helper()
	req, err := http.NewRequest(method, ts.url+path, strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(res.Body); err != nil {
		ts.t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b.Bytes()}
}

// A 5xx is logged with its cause and the request id that the response
// carries (header and problem body); the access log has a line per request;
// neither holds the token nor the message body.
func TestServerLogsFailuresWithRequestID(t *testing.T) {
	var buf logBuffer
	empty := pgtest.NewPool(t, pg.NewDatabaseFrom(t, nil)) // no sluice schema: 503s
	ts := start(t, withPool(empty), withLog(&buf, true))

	r := ts.request("POST", "/v1/queues/orders/messages", tokAdmin, `{"body": "secret-body-4711"}`, nil)
	if r.status != 503 {
		t.Fatalf("status %d, want 503\n%s", r.status, r.body)
	}
	id := r.header.Get("X-Request-Id")
	if len(id) < 16 {
		t.Fatalf("X-Request-Id %q", id)
	}
	if p := r.json(t); p["request_id"] != id {
		t.Errorf("problem %s: request_id is not the header's %q", r.body, id)
	}
	var failed, access map[string]any
	for _, rec := range buf.records(t) {
		if rec["request_id"] != id {
			continue
		}
		switch rec["msg"] {
		case "sluice server: request failed":
			failed = rec
		case "http request":
			access = rec
		}
	}
	if failed == nil || failed["level"] != "ERROR" || failed["status"] != float64(503) ||
		failed["method"] != "POST" || failed["path"] != "/v1/queues/orders/messages" ||
		failed["code"] != "3F000" || !strings.Contains(failed["error"].(string), "sluice") {
		t.Errorf("the 503 was not logged with its cause and request id: %v\nlog:\n%s", failed, buf.String())
	}
	if access == nil || access["level"] != "INFO" || access["status"] != float64(503) || access["method"] != "POST" ||
		access["path"] != "/v1/queues/orders/messages" {
		t.Errorf("access log record %v\nlog:\n%s", access, buf.String())
	}

	// A caller's plausible id is kept; anything else is replaced.
	r = ts.request("GET", "/healthz", "", "", map[string]string{"X-Request-Id": "lb-1234.abc"})
	if got := r.header.Get("X-Request-Id"); got != "lb-1234.abc" {
		t.Errorf("X-Request-Id %q, want the caller's lb-1234.abc", got)
	}
	r = ts.request("GET", "/healthz", "", "", map[string]string{"X-Request-Id": `forged" level=ERROR`})
	if got := r.header.Get("X-Request-Id"); got == "" || strings.ContainsAny(got, `" =`) {
		t.Errorf("X-Request-Id %q: an implausible id was kept", got)
	}
	// A 4xx carries the id too, and is not an error in the log.
	r = ts.request("GET", "/v1/queues", "not-a-token-0123456789", "", nil)
	if p := r.json(t); r.status != 401 || p["request_id"] != r.header.Get("X-Request-Id") {
		t.Errorf("401 %s: request_id is not the header's %q", r.body, r.header.Get("X-Request-Id"))
	}

	log := buf.String()
	for _, secret := range []string{tokAdmin, "not-a-token-0123456789", "secret-body-4711", "forged"} {
		if strings.Contains(log, secret) {
			t.Errorf("the log holds %q:\n%s", secret, log)
		}
	}
	for _, rec := range buf.records(t) {
		if rec["level"] == "ERROR" && rec["status"] == float64(401) {
			t.Errorf("a 401 logged as an error: %v", rec)
		}
	}
}

// Without AccessLog, a request that succeeds logs nothing.
func TestServerAccessLogIsOptional(t *testing.T) {
	var buf logBuffer
	ts := start(t, withLog(&buf, false))
	ts.must(200, "GET", "/v1/queues", tokAdmin, nil)
	if strings.Contains(buf.String(), "http request") {
		t.Errorf("access log without AccessLog:\n%s", buf.String())
	}
}
