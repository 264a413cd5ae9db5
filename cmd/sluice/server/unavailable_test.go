package server_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/cmd/sluice/server"
	"github.com/sluicemq/sluice/internal/pgtest"
)

// The API's 503s: a database without the sluice schema, a database the
// server cannot reach, and a server shutting down. Each is tried on the
// requests of dbRequests, which reach the database each way a handler
// does.

// dbRequests are one request of each way a handler reaches the database:
// through the library in a transaction (list, get), with SQL of the
// server's own in a transaction (create, alter), one statement pipelined
// behind the role (send, receive, status, peek, leases), the pooled batch
// send, the transaction endpoint, and /readyz's own query. They work on
// queue "orders" and create queue "made".
var dbRequests = []struct {
	method, path string
	body         any
}{
	{"GET", "/v1/queues", nil},
	{"GET", "/v1/queues/orders", nil},
	{"POST", "/v1/queues", map[string]any{"name": "made"}},
	{"PATCH", "/v1/queues/orders", map[string]any{"lease": "1 second"}},
	{"POST", "/v1/queues/orders/messages", map[string]any{"body": "lost"}},
	{"POST", "/v1/queues/orders/messages/batch", map[string]any{"messages": []any{map[string]any{"body": "lost"}}}},
	{"POST", "/v1/queues/orders/groups/default/receive", map[string]any{"max": 10}},
	{"GET", "/v1/status", nil},
	{"GET", "/v1/queues/orders/messages", nil},
	{"GET", "/v1/queues/orders/leases", nil},
	{"POST", "/v1/transaction", map[string]any{"send": []any{map[string]any{"queue": "orders", "body": "lost"}}}},
	{"GET", "/readyz", nil},
}

// withPool makes the server work on pool instead of the database start
// made (start still makes one, which also makes sure that the cluster has
// the sluice_* roles the tokens take: the migration creates them).
func withPool(pool *pgxpool.Pool) option { return func(c *server.Config) { c.Pool = pool } }

// insecure turns authentication off: no role is taken, and the
// one-statement handlers run their statement alone instead of in a
// pipeline behind set_config.
func insecure(c *server.Config) { c.Auth = server.AuthConfig{Insecure: true} }

// checkAll503 sends every request of dbRequests with token, and checks that
// each fails with a 503 problem of type urn:sluice:problem:<name>, the
// SQLSTATE code (none: "") and Retry-After: 1. It returns the problems.
func (ts *testServer) checkAll503(token, name, code string) []map[string]any {
	ts.t.Helper()
	var out []map[string]any
	for _, rq := range dbRequests {
		r := ts.do(rq.method, rq.path, token, rq.body)
		if r.status != 503 || r.header.Get("Content-Type") != "application/problem+json" {
			ts.t.Errorf("%s %s: %d %s, want a 503 problem\n%s", rq.method, rq.path, r.status, r.header.Get("Content-Type"), r.body)
			continue
		}
		p := r.json(ts.t)
		if got, _ := p["code"].(string); p["type"] != "urn:sluice:problem:"+name || p["status"] != float64(503) ||
			p["title"] != "Service Unavailable" || p["instance"] != rq.path || got != code {
			ts.t.Errorf("%s %s: problem %s, want type urn:sluice:problem:%s, status 503, code %q", rq.method, rq.path, r.body, name, code)
		}
		if ra := r.header.Get("Retry-After"); ra != "1" {
			ts.t.Errorf("%s %s: Retry-After %q, want 1", rq.method, rq.path, ra)
		}
		out = append(out, p)
	}
	return out
}

// A database without the sluice schema (a server started without --migrate
// on a database never migrated): every request is a 503 schema_missing
// that says how to install it, with a token (the role taken in the
// transaction or the pipeline) and without (no role); nothing is created.
func TestSchemaMissingIs503(t *testing.T) {
	for _, tc := range []struct {
		name  string
		token string
		opts  []option
	}{
		{"token", tokAdmin, nil},
		{"insecure", "", []option{insecure}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			empty := pgtest.NewPool(t, pg.NewDatabaseFrom(t, nil))
			ts := start(t, append(tc.opts, withPool(empty))...)
			for _, p := range ts.checkAll503(tc.token, "schema_missing", "3F000") {
				if d, _ := p["detail"].(string); !strings.Contains(d, "sluice migrate") || !strings.Contains(d, "--migrate") {
					t.Errorf("%s: detail %q does not say how to install the schema", p["instance"], d)
				}
			}
			var objects int
			err := empty.QueryRow(context.Background(), `SELECT count(*) FROM pg_class c
				JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')`).Scan(&objects)
			if err != nil {
				t.Fatalf("counting the database's relations: %v", err)
			}
			if objects != 0 {
				t.Fatalf("the requests left %d relations in the database without the schema", objects)
			}
		})
	}
}

// closedAddr returns a loopback address where nothing listens: a port the
// system gave and took back.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// A database the server cannot connect to (nothing listens at its
// address): every request is a 503 unavailable, without a SQLSTATE.
func TestUnreachableDatabaseIs503(t *testing.T) {
	// (pgxpool connects lazily: New does not fail, the requests do)
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+closedAddr(t)+"/sluice?connect_timeout=10")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ts := start(t, withPool(pool))
	for _, p := range ts.checkAll503(tokAdmin, "unavailable", "") {
		if d, _ := p["detail"].(string); !strings.HasPrefix(d, "the database is unavailable") {
			t.Errorf("%s: detail %q", p["instance"], d)
		}
	}
}

// A database that refuses the server's connections (it does not accept
// connections: the PostgreSQL server answers, with an error, as for a
// database dropped or a password refused): every request is a 503
// unavailable with the SQLSTATE of the refusal, nothing changes, and the
// server works again once the database accepts connections.
func TestRefusedConnectionsAre503(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "orders"})
	ts.must(201, "POST", "/v1/queues/orders/messages", tokAdmin, map[string]any{"body": "kept"})
	ctx := context.Background()
	var db string
	if err := ts.pool.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	admin := pgtest.Connect(t, pg.URL())
	allow := func(yes bool) {
		t.Helper()
		sql := "ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " ALLOW_CONNECTIONS " + map[bool]string{true: "true", false: "false"}[yes]
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	allow(false)
	t.Cleanup(func() { allow(true) }) // (before pgtest drops the database: cleanups run last first)
	// Every request connects anew: the pool's connections are closed (they
	// were opened before, and stay open after ALLOW_CONNECTIONS false).
	ts.pool.Reset()
	ts.checkAll503(tokAdmin, "unavailable", "55000") // object_not_in_prerequisite_state: not accepting connections

	allow(true)
	q := ts.must(200, "GET", "/v1/queues/orders", tokAdmin, nil)
	st := q["status"].([]any)[0].(map[string]any)
	if q["options"].(map[string]any)["lease"] != "30 seconds" || st["ready"] != float64(1) || st["in_flight"] != float64(0) {
		t.Fatalf("the queue changed while the database refused connections: %v", q)
	}
	if qs := ts.must(200, "GET", "/v1/queues", tokAdmin, nil)["queues"].([]any); len(qs) != 1 {
		t.Fatalf("queues: %v, want orders alone", qs)
	}
	msgs := ts.must(200, "POST", "/v1/queues/orders/groups/default/receive", tokAdmin, map[string]any{"max": 10})["messages"].([]any)
	if len(msgs) != 1 || msgs[0].(map[string]any)["body"] != "kept" {
		t.Fatalf("received %v, want the one message sent before", msgs)
	}
}

// A server shutting down (Drain, the start of Serve's graceful shutdown,
// before the listener closes) is not ready: /readyz is a 503 shutting_down
// while the server is still alive (/healthz) and serves what it is asked,
// and a long poll returns at once instead of waiting.
func TestDrainingServerIsNotReady(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "orders"})
	if r := ts.must(200, "GET", "/readyz", "", nil); r["status"] != "ready" {
		t.Fatalf("readyz before the shutdown: %v", r)
	}
	ts.srv.Drain()
	r := ts.do("GET", "/readyz", "", nil)
	if r.status != 503 || r.header.Get("Content-Type") != "application/problem+json" || r.header.Get("Retry-After") != "1" {
		t.Fatalf("readyz while shutting down: %d %v\n%s, want a 503 problem with Retry-After: 1", r.status, r.header, r.body)
	}
	if p := r.json(t); p["type"] != "urn:sluice:problem:shutting_down" || p["status"] != float64(503) || p["instance"] != "/readyz" {
		t.Fatalf("readyz while shutting down: %v", p)
	}
	ts.must(200, "GET", "/healthz", "", nil)
	ts.must(201, "POST", "/v1/queues/orders/messages", tokAdmin, map[string]any{"body": 1})
	if msgs := ts.must(200, "POST", "/v1/queues/orders/groups/default/receive", tokAdmin, nil)["messages"].([]any); len(msgs) != 1 {
		t.Fatalf("receive while shutting down: %v, want the message", msgs)
	}
	began := time.Now()
	msgs := ts.must(200, "POST", "/v1/queues/orders/groups/default/receive", tokAdmin, map[string]any{"wait": "25s"})["messages"].([]any)
	if d := time.Since(began); len(msgs) != 0 || d > 10*time.Second {
		t.Fatalf("a long poll while shutting down: %v after %s, want nothing at once", msgs, d)
	}
}
