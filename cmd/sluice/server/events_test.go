package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// event is one Server-Sent Event.
type event struct {
	name string
	data map[string]any
}

// stream is an open GET /v1/events.
type stream struct {
	res    *http.Response
	events chan event
	cancel context.CancelFunc
}

// openEvents opens GET /v1/events; it returns the response when it is not
// a stream (an error status).
func (ts *testServer) openEvents(token string) (*stream, response) {
	ts.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.url+"/v1/events", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		ts.t.Fatal(err)
	}
	if res.StatusCode != 200 {
		defer cancel()
		defer res.Body.Close()
		var b strings.Builder
		_, _ = bufio.NewReader(res.Body).WriteTo(&b)
		return nil, response{status: res.StatusCode, header: res.Header, body: []byte(b.String())}
	}
	s := &stream{res: res, events: make(chan event, 100), cancel: cancel}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(res.Body)
		var ev event
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data)
			case line == "":
				s.events <- ev
				ev = event{}
			}
		}
	}()
	ts.t.Cleanup(func() { cancel(); res.Body.Close() })
	return s, response{status: 200, header: res.Header}
}

// next returns the next event, failing the test after timeout.
func (s *stream) next(t *testing.T, timeout time.Duration) (event, bool) {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		return ev, ok
	case <-time.After(timeout):
		t.Fatalf("no event within %s", timeout)
		return event{}, false
	}
}

// lag returns the lag of queue's default group in a status event, -1 if
// the queue is not in it.
func lag(ev event, queue string) float64 {
	for _, r := range ev.data["status"].([]any) {
		r := r.(map[string]any)
		if r["queue"] == queue && r["group"] == "default" {
			return r["lag"].(float64)
		}
	}
	return -1
}

// The stream sends the status at once and then every interval, as GET
// /v1/status would show it to the token: changes appear, other tokens'
// queues do not; refusals are plain responses; shutdown ends it.
func TestEvents(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.EventsInterval = 100 * time.Millisecond })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "orders"})
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "secret"})

	s, r := ts.openEvents(tokAdmin)
	if ct := r.header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	ev, _ := s.next(t, 2*time.Second)
	if ev.name != "status" || lag(ev, "orders") != 0 || lag(ev, "secret") != 0 {
		t.Fatalf("first event: %+v", ev)
	}
	ts.must(201, "POST", "/v1/queues/orders/messages", tokAdmin, map[string]any{"body": 1})
	for deadline := time.Now().Add(5 * time.Second); lag(ev, "orders") != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("the send did not show: %+v", ev)
		}
		ev, _ = s.next(t, 2*time.Second)
	}

	// A token limited to orders* never sees the other queue.
	limited, _ := ts.openEvents(tokOrders)
	for range 3 {
		ev, _ := limited.next(t, 2*time.Second)
		b, _ := json.Marshal(ev.data)
		if ev.name != "status" || lag(ev, "orders") != 1 || strings.Contains(string(b), "secret") {
			t.Fatalf("limited token's event: %s %s", ev.name, b)
		}
	}
	// No token, a bad one, a producer (PostgreSQL refuses it the status).
	for _, c := range []struct {
		token  string
		status int
	}{{"", 401}, {"not-a-token", 401}, {tokProducer, 403}} {
		if s, r := ts.openEvents(c.token); s != nil || r.status != c.status || r.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("token %q: %d %s", c.token, r.status, r.body)
		}
	}
	if r := ts.do("POST", "/v1/events", tokAdmin, nil); r.status != 405 {
		t.Fatalf("POST /v1/events: %d", r.status)
	}

	// Shutdown ends the streams at once.
	began := time.Now()
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("shutdown took %s with streams open", d)
	}
	for range s.events { // drains to the end of the stream
	}
}

// The streams of one role share one status call per interval.
func TestEventsShareOneRead(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	calls := &statementCalls{match: "sluice.status("}
	cfg.ConnConfig.Tracer = calls
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ts := start(t, func(c *server.Config) { c.Pool = pool; c.EventsInterval = 100 * time.Millisecond })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	const streams = 10
	var all []*stream
	for range streams {
		s, _ := ts.openEvents(tokAdmin)
		all = append(all, s)
	}
	calls.n.Store(0)
	time.Sleep(time.Second)
	n := calls.n.Load()
	for _, s := range all {
		s.cancel()
	}
	// About 10 intervals in the second: one call each, not one per stream.
	if n < 3 || n > 20 {
		t.Fatalf("%d status calls in a second for %d streams at 100ms", n, streams)
	}
	// The feed stops with the last stream.
	time.Sleep(300 * time.Millisecond)
	calls.n.Store(0)
	time.Sleep(500 * time.Millisecond)
	if n := calls.n.Load(); n != 0 {
		t.Fatalf("%d status calls after every stream closed", n)
	}
}

// statementCalls counts the statements of a pool that contain match, as
// they end.
type statementCalls struct {
	match string
	n     atomic.Int64
}

type matchedKey struct{}

func (c *statementCalls) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, c.match) {
		return context.WithValue(ctx, matchedKey{}, true)
	}
	return ctx
}
func (c *statementCalls) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(matchedKey{}) != nil {
		c.n.Add(1)
	}
}
func (c *statementCalls) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *statementCalls) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if strings.Contains(d.SQL, c.match) {
		c.n.Add(1)
	}
}
func (c *statementCalls) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// A stream ends when its JWT expires; opening it again is refused.
func TestEventsEndAtTokenExpiry(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.EventsInterval = 100 * time.Millisecond })
	claims := claims("watcher", server.RoleConsumer)
	claims["exp"] = time.Now().Add(1500 * time.Millisecond).Unix()
	tok := hs256(t, hsSecret, jwt.MapClaims(claims))
	s, r := ts.openEvents(tok)
	if s == nil {
		t.Fatalf("%d %s", r.status, r.body)
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-s.events:
			if !ok {
				if _, r := ts.openEvents(tok); r.status != 401 {
					t.Fatalf("reopened with an expired token: %d", r.status)
				}
				return
			}
		case <-deadline:
			t.Fatal("the stream outlived its token")
		}
	}
}
