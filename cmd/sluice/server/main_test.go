package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/cmd/sluice/server"
	"github.com/sluicemq/sluice/internal/pgtest"
)

var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }

// Static tokens of the tests' tokens file.
const (
	tokAdmin    = "admin-token-0123456789"
	tokProducer = "producer-token-0123456789"
	tokConsumer = "consumer-token-0123456789"
	tokOrders   = "orders-only-token-0123456789"
	hsSecret    = "0123456789abcdef0123456789abcdef-secret"
)

// testServer is a sluice server on 127.0.0.1 on a database of its own.
type testServer struct {
	t      *testing.T
	url    string
	pool   *pgxpool.Pool
	srv    *server.Server
	stop   func() error // shuts down and returns Serve's error
	edPriv ed25519.PrivateKey
}

type option func(*server.Config)

// start runs a server with the tests' static tokens, the HS256 secret and
// a fresh Ed25519 key (unless an option changes cfg.Auth).
func start(t *testing.T, opts ...option) *testServer {
	t.Helper()
	pool := pg.NewPool(t)
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	writeJSON(t, tokens, map[string]any{"tokens": []map[string]any{
		{"name": "admin", "token": tokAdmin, "role": server.RoleAdmin},
		{"name": "producer", "token": tokProducer, "role": server.RoleProducer},
		{"name": "consumer", "token": tokConsumer, "role": server.RoleConsumer},
		{"name": "orders-app", "token": tokOrders, "role": server.RoleAdmin, "queues": []string{"orders", "orders.*"}},
	}})
	cfg := server.Config{
		Pool:   pool,
		Auth:   server.AuthConfig{TokensFile: tokens, HS256Secret: []byte(hsSecret), Ed25519Keys: []ed25519.PublicKey{pub}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, 10*time.Second) }()
	stopped := false
	var serveErr error
	ts := &testServer{t: t, url: "http://" + ln.Addr().String(), pool: cfg.Pool, srv: srv, edPriv: priv}
	ts.stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			serveErr = <-done
		}
		return serveErr
	}
	t.Cleanup(func() {
		if err := ts.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// response is an HTTP response with its body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into a map.
func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %v\n%s", r.status, err, r.body)
	}
	return m
}

// do sends a request; body is marshalled unless it is a string or []byte.
func (ts *testServer) do(method, path, token string, body any) response {
	ts.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			ts.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, ts.url+path, rd)
	if err != nil {
		ts.t.Fatal(err)
	}
	if rd != nil || method == "POST" || method == "PATCH" || method == "PUT" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		ts.t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// must checks the status of a request and returns its JSON body (nil for
// an empty one).
func (ts *testServer) must(status int, method, path, token string, body any) map[string]any {
	ts.t.Helper()
	r := ts.do(method, path, token, body)
	if r.status != status {
		ts.t.Fatalf("%s %s: status %d, want %d\n%s", method, path, r.status, status, r.body)
	}
	if len(r.body) == 0 {
		return nil
	}
	return r.json(ts.t)
}

// problem checks that a request fails with status as problem+json and
// returns the problem.
func (ts *testServer) problem(status int, method, path, token string, body any) map[string]any {
	ts.t.Helper()
	r := ts.do(method, path, token, body)
	if r.status != status {
		ts.t.Fatalf("%s %s: status %d, want %d\n%s", method, path, r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		ts.t.Fatalf("%s %s: Content-Type %q, want application/problem+json", method, path, ct)
	}
	p := r.json(ts.t)
	if int(p["status"].(float64)) != status || p["type"] == "" || p["title"] == "" {
		ts.t.Fatalf("%s %s: not a problem of status %d: %s", method, path, status, r.body)
	}
	return p
}
