package server_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// A client's mistakes are 4xx naming the member, never a 500 with the
// database's text: a max above int, NUL characters, a number PostgreSQL
// cannot store.
func TestClientMistakesAre4xx(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	for _, c := range []struct {
		method, path string
		body         any
		status       int
		field        string
	}{
		{"GET", "/v1/queues/q/messages?max=3000000000", nil, 400, "max"},
		{"GET", "/v1/queues/q/leases?max=3000000000", nil, 400, "max"},
		{"GET", "/v1/queues/q/dead-letters?max=3000000000", nil, 400, "max"},
		{"GET", "/v1/queues/q/dead-letters?max=-3000000000", nil, 400, "max"},
		{"POST", "/v1/queues/q/messages", `{"body": "a\u0000b"}`, 400, "body"},
		{"POST", "/v1/queues/q/messages", `{"body": 1, "headers": {"x": "\u0000"}}`, 400, "headers"},
		{"POST", "/v1/queues/q/messages", `{"body": 1, "key": "a\u0000"}`, 400, "key"},
		{"POST", "/v1/queues/q/messages", `{"body": 1, "dedup_key": "\u0000"}`, 400, "dedup_key"},
		{"POST", "/v1/queues/q/messages/batch", `{"messages": [{"body": 1}, {"body": {"k": "\u0000"}}]}`, 400, "messages[1].body"},
		{"POST", "/v1/transaction", `{"send": [{"queue": "q", "body": "\u0000"}]}`, 400, "send[0].body"},
		{"POST", "/v1/queues/q/messages", `{"body": 1e999999}`, 422, ""},
	} {
		r := ts.do(c.method, c.path, tokAdmin, c.body)
		if r.status != c.status {
			t.Errorf("%s %s %v: %d, want %d: %s", c.method, c.path, c.body, r.status, c.status, r.body)
			continue
		}
		p := r.json(t)
		if f, _ := p["field"].(string); f != c.field {
			t.Errorf("%s %s %v: field %q, want %q: %s", c.method, c.path, c.body, f, c.field, r.body)
		}
	}
	// An escaped backslash before u0000 is text, not a NUL.
	ts.must(201, "POST", "/v1/queues/q/messages", tokAdmin, `{"body": "\\u0000"}`)
	if msgs := ts.must(200, "GET", "/v1/queues/q/messages", tokAdmin, nil)["messages"].([]any); len(msgs) != 1 {
		t.Fatalf("stored %v, want the one message with an escaped backslash", msgs)
	}
}

// syncBuffer is a log destination for a test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cutProxy forwards TCP connections to addr until cut closes them all, as
// a network that fails does: the server's connections end without a word
// from PostgreSQL (an unexpected EOF), unlike pg_terminate_backend's.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t *testing.T, addr string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A lost database connection is a 503 with Retry-After that says nothing of
// the server's insides (it was a 500 "taking role sluice_admin: unexpected
// EOF"); the log has the cause under the request id the client was given.
func TestLostConnectionIs503(t *testing.T) {
	var log syncBuffer
	var proxy *cutProxy
	ts := start(t, func(c *server.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
		pc := c.Pool.Config()
		proxy = newCutProxy(t, net.JoinHostPort(pc.ConnConfig.Host, strconv.Itoa(int(pc.ConnConfig.Port))))
		pc.ConnConfig.Host, pc.ConnConfig.Port = "127.0.0.1", uint16(proxy.ln.Addr().(*net.TCPAddr).Port)
		pool, err := pgxpool.NewWithConfig(context.Background(), pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		c.Pool = pool
	})
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	for _, path := range []string{"/v1/queues", "/v1/queues/q/messages"} {
		ts.must(200, "GET", "/v1/queues", tokAdmin, nil) // (a connection used just now: the pool does not ping it)
		proxy.cut()
		r := ts.do("GET", path, tokAdmin, nil)
		if r.status != 503 || r.header.Get("Retry-After") == "" {
			t.Fatalf("GET %s after the connection was lost: %d %v %s", path, r.status, r.header, r.body)
		}
		body := string(r.body)
		for _, leak := range []string{"EOF", "sluice_admin", "127.0.0.1", "role", "SELECT", "sluice."} {
			if strings.Contains(body, leak) {
				t.Errorf("the 503 says %q: %s", leak, body)
			}
		}
		id := r.header.Get("X-Request-Id")
		if id == "" || !strings.Contains(body, id) || !strings.Contains(log.String(), "request_id="+id) {
			t.Errorf("request id %q: in the body %s; the log:\n%s", id, body, log.String())
		}
	}
}

// A client that gives up its long poll is not a failure to log (every
// disconnecting consumer would be a WARN line).
func TestClientGoneIsNotLogged(t *testing.T) {
	var log syncBuffer
	ts := start(t, func(c *server.Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if status, _ := postWithin(ctx, ts.url+"/v1/queues/q/groups/default/receive", tokAdmin, `{"wait": "10s"}`); status != 0 {
		t.Fatalf("the long poll answered %d before the client gave up", status)
	}
	// (the server counts the request once its handler is done, after it logged)
	ts.waitMetric(`sluice_http_request_duration_seconds_count{code="503",route="POST /v1/queues/{queue}/groups/{group}/receive"} 1`)
	if strings.Contains(log.String(), "request failed") {
		t.Fatalf("the log:\n%s", log.String())
	}
}
