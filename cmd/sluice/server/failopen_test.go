package server_test

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// Settings that failed open: a JWT's empty queues claim granted every queue,
// an iat in the future was accepted.
func TestJWTClaimsThatFailedOpen(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	none := claims("app", server.RoleAdmin)
	none["queues"] = []string{}
	ts.problem(403, "GET", "/v1/queues/q", hs256(t, hsSecret, none), nil)
	future := claims("app", server.RoleAdmin)
	future["iat"] = time.Now().Add(time.Hour).Unix()
	ts.problem(401, "GET", "/v1/queues/q", hs256(t, hsSecret, future), nil)
	past := claims("app", server.RoleAdmin)
	past["iat"] = time.Now().Add(-time.Minute).Unix()
	ts.must(200, "GET", "/v1/queues/q", hs256(t, hsSecret, past), nil)
}

// The server warns of a tokens file others may read, and of JWTs accepted
// without an audience check.
func TestWarnsOfOpenSettings(t *testing.T) {
	var log syncBuffer
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	writeJSON(t, tokens, map[string]any{"tokens": []map[string]any{{"name": "a", "token": tokAdmin, "role": server.RoleAdmin}}})
	if err := os.Chmod(tokens, 0o644); err != nil {
		t.Fatal(err)
	}
	start(t, func(c *server.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
		c.Auth = server.AuthConfig{TokensFile: tokens, HS256Secret: []byte(hsSecret)}
	})
	for _, want := range []string{"level=WARN msg=\"sluice server: the tokens file is readable", "mode=-rw-r--r--",
		"level=WARN msg=\"sluice server: JWTs are accepted without an audience check"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log has no %q:\n%s", want, log.String())
		}
	}
	var quiet syncBuffer
	if err := os.Chmod(tokens, 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, func(c *server.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&quiet, nil))
		c.Auth = server.AuthConfig{TokensFile: tokens, HS256Secret: []byte(hsSecret), Audience: "sluice"}
	})
	if strings.Contains(quiet.String(), "WARN") {
		t.Errorf("warnings for a 0600 file and an audience:\n%s", quiet.String())
	}
}

// A request refused before its body is read (no token) is answered and
// its connection closed at once: the server does not wait for a body the
// client dribbles (it read it for up to 70s to reuse the connection).
func TestUnauthenticatedBodyIsNotRead(t *testing.T) {
	ts := start(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/queues/q/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"body\": ")
	// (the test gives up after 20s; the server held such a connection 70s)
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	rd := bufio.NewReader(conn)
	status, err := rd.ReadString('\n')
	if err != nil || !strings.Contains(status, " 401 ") {
		t.Fatalf("answer %q, %v", status, err)
	}
	for {
		if _, err := rd.ReadByte(); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the connection stayed open after the 401, waiting for the body")
			}
			break // closed
		}
	}
}

// A transaction names at most --max-tx-queues distinct queues (each takes
// locks until the commit: about 330 exhausted the lock table).
func TestTransactionQueuesBounded(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.MaxTxQueues = 4 })
	var send []any
	for i := range 5 {
		send = append(send, map[string]any{"queue": fmt.Sprintf("q%d", i), "body": 1})
	}
	p := ts.problem(422, "POST", "/v1/transaction", tokAdmin, map[string]any{"send": send})
	if p["type"] != "urn:sluice:problem:too_many_queues" {
		t.Fatalf("%v", p)
	}
	for i := range 4 {
		ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": fmt.Sprintf("q%d", i)})
	}
	ts.must(200, "POST", "/v1/transaction", tokAdmin, map[string]any{"send": append(send[:4:4], send[0])})
}
