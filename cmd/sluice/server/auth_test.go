package server_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/cmd/sluice/server"
	"github.com/sluicemq/sluice/internal/pgtest"
)

func hs256(t *testing.T, secret string, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (ts *testServer) eddsa(claims jwt.MapClaims) string {
	ts.t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims).SignedString(ts.edPriv)
	if err != nil {
		ts.t.Fatal(err)
	}
	return s
}

func claims(sub, role string, queues ...string) jwt.MapClaims {
	c := jwt.MapClaims{"sub": sub, "role": role, "exp": time.Now().Add(time.Hour).Unix()}
	if len(queues) > 0 {
		c["queues"] = queues
	}
	return c
}

// No token or a bad one: 401; a token without the privilege: 403 (from the
// database for roles, from the server for queue patterns).
func TestAuth(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "orders"})
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "secret"})

	ts.problem(401, "GET", "/v1/queues", "", nil)
	ts.problem(401, "GET", "/v1/queues", "not-a-token", nil)
	ts.problem(401, "GET", "/v1/queues", hs256(t, "wrong-secret-wrong-secret-wrong-secret", claims("x", server.RoleAdmin)), nil)
	expired := claims("x", server.RoleAdmin)
	expired["exp"] = time.Now().Add(-time.Minute).Unix()
	ts.problem(401, "GET", "/v1/queues", hs256(t, hsSecret, expired), nil)
	noExp := claims("x", server.RoleAdmin)
	delete(noExp, "exp")
	ts.problem(401, "GET", "/v1/queues", hs256(t, hsSecret, noExp), nil)
	ts.problem(403, "GET", "/v1/queues", hs256(t, hsSecret, claims("x", "postgres")), nil)
	if r := ts.do("GET", "/v1/queues", "", nil); r.header.Get("WWW-Authenticate") == "" {
		t.Fatal("401 without WWW-Authenticate")
	}

	// HS256 and EdDSA tokens work; sub is recorded with the message.
	hsProducer := hs256(t, hsSecret, claims("billing-service", server.RoleProducer))
	ts.must(201, "POST", "/v1/queues/orders/messages", hsProducer, map[string]any{"body": 1, "headers": map[string]any{"sluice_sub": "spoofed"}})
	edConsumer := ts.eddsa(claims("worker-7", server.RoleConsumer))
	msgs := ts.must(200, "POST", "/v1/queues/orders/groups/default/receive", edConsumer, map[string]any{})["messages"].([]any)
	if len(msgs) != 1 || msgs[0].(map[string]any)["headers"].(map[string]any)["sluice_sub"] != "billing-service" {
		t.Fatalf("received %v", msgs)
	}
	// An EdDSA token signed by another key is refused.
	other := start(t)
	ts.problem(401, "GET", "/v1/queues", other.eddsa(claims("x", server.RoleAdmin)), nil)

	// The database enforces the roles: a producer cannot receive, create
	// queues or list them; a consumer cannot send or purge.
	for _, c := range []struct {
		method, path, token string
		body                any
	}{
		{"POST", "/v1/queues/orders/groups/default/receive", hsProducer, map[string]any{}},
		{"POST", "/v1/queues", hsProducer, map[string]any{"name": "x"}},
		{"GET", "/v1/queues", tokProducer, nil},
		{"POST", "/v1/queues/orders/messages", edConsumer, map[string]any{"body": 1}},
		{"POST", "/v1/queues/orders/purge", tokConsumer, nil},
		{"DELETE", "/v1/queues/orders", tokConsumer, nil},
		{"GET", "/metrics", tokConsumer, nil},
	} {
		p := ts.problem(403, c.method, c.path, c.token, c.body)
		if c.path != "/metrics" && p["code"] != "42501" {
			t.Errorf("%s %s: not refused by the database: %v", c.method, c.path, p)
		}
	}

	// Queue patterns: the orders token sees and touches orders only, and
	// learns nothing of other queues.
	list := ts.must(200, "GET", "/v1/queues", tokOrders, nil)["queues"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["name"] != "orders" {
		t.Fatalf("orders token lists %v", list)
	}
	st := ts.must(200, "GET", "/v1/status", tokOrders, nil)["status"].([]any)
	for _, s := range st {
		if s.(map[string]any)["queue"] != "orders" {
			t.Fatalf("orders token sees status %v", st)
		}
	}
	for _, path := range []string{"/v1/queues/secret", "/v1/queues/does-not-exist", "/v1/status?queue=secret"} {
		p := ts.problem(403, "GET", path, tokOrders, nil)
		if p["code"] != nil {
			t.Fatalf("%s: %v", path, p)
		}
	}
	ts.problem(403, "POST", "/v1/queues", tokOrders, map[string]any{"name": "other"})
	ts.must(201, "POST", "/v1/queues", tokOrders, map[string]any{"name": "orders.eu"})
	ts.problem(403, "POST", "/v1/transaction", tokOrders, map[string]any{"send": []any{map[string]any{"queue": "secret", "body": 1}}})
	jwtOrders := ts.eddsa(claims("o", server.RoleAdmin, "orders"))
	ts.problem(403, "DELETE", "/v1/queues/secret", jwtOrders, nil)
	ts.must(200, "GET", "/v1/queues/orders", jwtOrders, nil)

	// An admin of every queue sees /metrics.
	if r := ts.do("GET", "/metrics", tokAdmin, nil); r.status != 200 {
		t.Fatalf("/metrics: %d %s", r.status, r.body)
	}
	ts.problem(403, "GET", "/metrics", tokOrders, nil)
}

// Without auth configured the server refuses to start, unless insecure.
func TestInsecure(t *testing.T) {
	if _, err := server.New(server.Config{Pool: pg.NewPool(t)}); err == nil {
		t.Fatal("New without auth succeeded")
	}
	ts := start(t, func(c *server.Config) { c.Auth = server.AuthConfig{Insecure: true} })
	ts.must(201, "POST", "/v1/queues", "", map[string]any{"name": "q"})
	ts.must(201, "POST", "/v1/queues/q/messages", "", map[string]any{"body": 1})
	m := ts.must(200, "POST", "/v1/queues/q/groups/default/receive", "", map[string]any{})["messages"].([]any)[0].(map[string]any)
	if m["headers"] != nil {
		t.Fatalf("headers without auth: %v", m["headers"])
	}
	var n int
	if err := ts.pool.QueryRow(context.Background(), "SELECT count(*) FROM sluice.list_queues()").Scan(&n); err != nil || n != 1 {
		t.Fatal(n, err)
	}
}

func TestLoadTokensRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]any{
		"short":    map[string]any{"tokens": []any{map[string]any{"name": "a", "token": "short", "role": server.RoleAdmin}}},
		"role":     map[string]any{"tokens": []any{map[string]any{"name": "a", "token": "0123456789abcdef", "role": "postgres"}}},
		"unknown":  map[string]any{"tokens": []any{map[string]any{"name": "a", "token": "0123456789abcdef", "role": server.RoleAdmin, "x": 1}}},
		"pattern":  map[string]any{"tokens": []any{map[string]any{"name": "a", "token": "0123456789abcdef", "role": server.RoleAdmin, "queues": []string{"["}}}},
		"noname":   map[string]any{"tokens": []any{map[string]any{"token": "0123456789abcdef", "role": server.RoleAdmin}}},
		"noqueues": map[string]any{"tokens": []any{map[string]any{"name": "a", "token": "0123456789abcdef", "role": server.RoleAdmin, "queues": []string{}}}},
		// (a name identifies a token: its concurrency limit, its messages' sender)
		"dupname": map[string]any{"tokens": []any{
			map[string]any{"name": "a", "token": "0123456789abcdef", "role": server.RoleAdmin},
			map[string]any{"name": "a", "token": "fedcba9876543210", "role": server.RoleProducer}}},
	} {
		f := dir + "/" + name
		writeJSON(t, f, content)
		if _, err := server.LoadTokens(f); err == nil {
			t.Errorf("%s: LoadTokens succeeded", name)
		}
	}
}

// With a login role that is not a superuser: a token's role it is not a
// member of is a server error that says what to grant; once granted, the
// database enforces the role.
func TestNonSuperuserLogin(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	admin := pgtest.Connect(t, url)
	login := fmt.Sprintf("sluice_server_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'pw'`, login)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s; DROP ROLE %s`, login, login))
	})
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User, cfg.ConnConfig.Password = login, "pw"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ts := start(t, func(c *server.Config) { c.Pool = pool })
	if _, err := admin.Exec(ctx, `SELECT sluice.create_queue('q')`); err != nil {
		t.Fatal(err)
	}
	p := ts.problem(500, "POST", "/v1/queues/q/messages", tokProducer, map[string]any{"body": 1})
	if !strings.Contains(p["detail"].(string), "GRANT sluice_producer") {
		t.Fatalf("not a member: %v", p)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf(`GRANT sluice_producer, sluice_consumer TO %s`, login)); err != nil {
		t.Fatal(err)
	}
	ts.must(201, "POST", "/v1/queues/q/messages", tokProducer, map[string]any{"body": 1})
	ts.must(200, "POST", "/v1/queues/q/groups/default/receive", tokConsumer, map[string]any{})
	// The consumer role still may not send, nor the producer receive.
	ts.problem(403, "POST", "/v1/queues/q/messages", tokConsumer, map[string]any{"body": 1})
	ts.problem(403, "POST", "/v1/queues/q/groups/default/receive", tokProducer, map[string]any{})
}

// Every message of a batch records its sender, whatever headers it has.
func TestBatchRecordsSender(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	ts.must(201, "POST", "/v1/queues/q/messages/batch", tokProducer, map[string]any{"messages": []any{
		map[string]any{"body": 1},
		map[string]any{"body": 2, "headers": map[string]any{"a": 1}},
		map[string]any{"body": 3, "headers": map[string]any{"sluice_sub": "spoofed"}},
		map[string]any{"body": 4, "headers": nil},
	}})
	msgs := ts.must(200, "POST", "/v1/queues/q/groups/default/receive", tokConsumer, map[string]any{"max": 10})["messages"].([]any)
	want := []string{`{"sluice_sub":"producer"}`, `{"a":1,"sluice_sub":"producer"}`, `{"sluice_sub":"producer"}`, `{"sluice_sub":"producer"}`}
	if len(msgs) != len(want) {
		t.Fatalf("received %d messages", len(msgs))
	}
	for i, m := range msgs {
		b, _ := json.Marshal(m.(map[string]any)["headers"])
		if string(b) != want[i] {
			t.Errorf("message %d: headers %s, want %s", i+1, b, want[i])
		}
	}
}

// A JWT must say who it is (sub): those without one shared one concurrency
// limit across roles (64 long polls of a consumer made a producer's send
// get 429), and sent messages without a sender.
func TestJWTNeedsSubject(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	noSub := claims("", server.RoleConsumer)
	delete(noSub, "sub")
	p := ts.problem(401, "GET", "/v1/queues/q/leases", hs256(t, hsSecret, noSub), nil)
	if !strings.Contains(p["detail"].(string), "sub") {
		t.Fatalf("401 of a JWT without sub: %v", p)
	}
	ts.problem(401, "GET", "/v1/queues/q/leases", ts.eddsa(claims("", server.RoleConsumer)), nil)
}

// A priority outside PostgreSQL's int is a 400 naming the member, for a
// send, a batch send and a transaction, and nothing is sent (a batch
// stored 3000000000 as -1294967296 with a 201).
func TestPriorityOutOfRange(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	for _, c := range []struct {
		path, field string
		body        any
	}{
		{"/v1/queues/q/messages", "priority", map[string]any{"body": 1, "priority": 3000000000}},
		{"/v1/queues/q/messages", "priority", map[string]any{"body": 1, "priority": -2147483649}},
		{"/v1/queues/q/messages/batch", "messages[1].priority", map[string]any{"messages": []any{
			map[string]any{"body": 1}, map[string]any{"body": 2, "priority": 3000000000}}}},
		{"/v1/transaction", "send[0].priority", map[string]any{"send": []any{
			map[string]any{"queue": "q", "body": 1, "priority": 3000000000}}}},
	} {
		p := ts.problem(400, "POST", c.path, tokAdmin, c.body)
		if p["field"] != c.field {
			t.Errorf("%s: field %v, want %s (%v)", c.path, p["field"], c.field, p["detail"])
		}
	}
	if msgs := ts.must(200, "GET", "/v1/queues/q/messages", tokAdmin, nil)["messages"].([]any); len(msgs) != 0 {
		t.Fatalf("stored %v", msgs)
	}
	ts.must(201, "POST", "/v1/queues/q/messages/batch", tokAdmin, map[string]any{"messages": []any{
		map[string]any{"body": 1, "priority": 2147483647}, map[string]any{"body": 2, "priority": -2147483648}}})
}

// What held when the server was probed as an attacker would (issue 39),
// kept with a test: queue patterns are matched on the decoded name, so
// encodings and dot segments do not reach another queue; JWTs with alg
// "none", HS256 signed with the public key, or a role that is almost one
// are refused.
func TestTokensHoldAgainstTricks(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "orders"})
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "secret"})
	ts.must(201, "POST", "/v1/queues/secret/messages", tokAdmin, map[string]any{"body": "kept"})
	for _, path := range []string{
		"/v1/queues/%73ecret/messages",
		"/v1/queues/orders%2F..%2Fsecret/messages",
		"/v1/queues/orders%2f..%2fsecret/messages",
		"/v1/queues/orders/../secret/messages",
		"/v1/queues/./secret/messages",
		"/v1/queues/SECRET/messages",
		"/v1/queues/secret%00/messages",
		"/v1/queues/orders.%2E%2E%2Fsecret/messages",
	} {
		for _, method := range []string{"GET", "POST"} {
			var body any
			if method == "POST" {
				body = map[string]any{"body": "spoofed"}
			}
			r := ts.do(method, path, tokOrders, body)
			if r.status < 400 {
				t.Errorf("%s %s with the orders token: %d %s", method, path, r.status, r.body)
			}
		}
	}
	msgs := ts.must(200, "GET", "/v1/queues/secret/messages", tokAdmin, nil)["messages"].([]any)
	if len(msgs) != 1 || msgs[0].(map[string]any)["body"] != "kept" {
		t.Fatalf("secret holds %v", msgs)
	}

	none := strings.Join([]string{
		base64url(`{"alg":"none","typ":"JWT"}`),
		base64url(fmt.Sprintf(`{"sub":"x","role":"sluice_admin","exp":%d}`, time.Now().Add(time.Hour).Unix())), ""}, ".")
	ts.problem(401, "GET", "/v1/queues", none, nil)
	pub := ts.edPriv.Public().(ed25519.PublicKey)
	confused, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims("x", server.RoleAdmin)).SignedString([]byte(pub))
	if err != nil {
		t.Fatal(err)
	}
	ts.problem(401, "GET", "/v1/queues", confused, nil)
	for _, role := range []string{"sluice_admin ", "SLUICE_ADMIN", "postgres", ""} {
		ts.problem(403, "GET", "/v1/queues", hs256(t, hsSecret, claims("x", role)), nil)
	}
}

func base64url(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
