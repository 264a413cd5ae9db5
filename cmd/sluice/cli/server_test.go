package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/cmd/sluice/cli"
	"github.com/sluicemq/sluice/internal/pgserver"
)

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runningServer is "sluice server" run in the test process.
type runningServer struct {
	url, dbURL string // http://host:port, and DATABASE_URL when printed
	stderr     *lockedBuffer
	stop       func() int // cancels and returns the exit status
}

func startServerCmd(t *testing.T, getenv func(string) string, args ...string) *runningServer {
	t.Helper()
	pr, pw := io.Pipe()
	errOut := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- cli.RunEnv(ctx, append([]string{"server", "--listen", "127.0.0.1:0"}, args...), nil, pw, errOut, getenv)
		pw.Close()
	}()
	rs := &runningServer{stderr: errOut}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(3 * time.Minute)
	for rs.url == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("sluice server exited: status %d\n%s", <-done, errOut)
			}
			if u, ok := strings.CutPrefix(l, "DATABASE_URL="); ok {
				rs.dbURL = u
			}
			if _, rest, ok := strings.Cut(l, "listening on "); ok {
				rs.url = strings.Fields(rest)[0]
			}
		case <-timeout:
			cancel()
			t.Fatalf("sluice server did not start\n%s", errOut)
		}
	}
	go func() {
		for range lines {
		}
	}()
	var code *int
	rs.stop = func() int {
		if code == nil {
			cancel()
			c := <-done
			code = &c
		}
		return *code
	}
	t.Cleanup(func() { rs.stop() })
	return rs
}

func httpStatus(t *testing.T, method, url, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// "sluice server" with no flags: the embedded PostgreSQL, its DATABASE_URL
// printed and usable while it runs (also through "sluice env"), no auth on
// loopback; stopped cleanly.
func TestServerEmbedded(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "sluice-cli-server-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	getenv := func(k string) string {
		if k == "SLUICE_DATA_DIR" {
			return data
		}
		return ""
	}
	var out, errOut bytes.Buffer
	if code := cli.RunEnv(context.Background(), []string{"env"}, nil, &out, &errOut, getenv); code != 1 || !strings.Contains(errOut.String(), "sluice server") {
		t.Fatalf("sluice env without a server: %d %s%s", code, out.String(), errOut.String())
	}
	rs := startServerCmd(t, getenv)
	if rs.dbURL == "" || !strings.Contains(rs.stderr.String(), "authentication is off") {
		t.Fatalf("no DATABASE_URL or no notice of auth off:\n%s", rs.stderr)
	}
	if s := httpStatus(t, "GET", rs.url+"/readyz", ""); s != 200 {
		t.Fatalf("readyz: %d", s)
	}
	if s := httpStatus(t, "POST", rs.url+"/v1/queues", `{"name": "viahttp"}`); s != 201 {
		t.Fatalf("create queue: %d", s)
	}
	out.Reset()
	errOut.Reset()
	if code := cli.RunEnv(context.Background(), []string{"env"}, nil, &out, &errOut, getenv); code != 0 ||
		out.String() != "export DATABASE_URL='"+rs.dbURL+"'\n" {
		t.Fatalf("sluice env: %d %q %s, want the URL %s", code, out.String(), errOut.String(), rs.dbURL)
	}
	code, list, stderr := run("queue", "list", "--database-url", rs.dbURL)
	if code != 0 || !strings.Contains(list, "viahttp") {
		t.Fatalf("queue list on the printed DATABASE_URL: %d %s%s", code, list, stderr)
	}
	if code := rs.stop(); code != 0 {
		t.Fatalf("sluice server exited with %d\n%s", code, rs.stderr)
	}
	if _, err := os.Stat(filepath.Join(data, "pg"+pgserver.DefaultVersion, "postmaster.pid")); !os.IsNotExist(err) {
		t.Errorf("postmaster.pid still exists after the server stopped (%v)", err)
	}
}

// On a named database: no auth is refused unless --insecure-no-auth;
// --migrate installs the schema.
func TestServerNamedDatabase(t *testing.T) {
	t.Parallel()
	url := server.NewDatabaseFrom(t, nil) // no schema
	code, _, errOut := run("server", "--database-url", url, "--listen", "127.0.0.1:0")
	if code != 2 || !strings.Contains(errOut, "--insecure-no-auth") {
		t.Fatalf("no auth: %d %s", code, errOut)
	}
	code, _, errOut = run("server", "--database-url", url, "--tokens-file", "/nonexistent")
	if code != 2 || !strings.Contains(errOut, "tokens file") {
		t.Fatalf("missing tokens file: %d %s", code, errOut)
	}
	none := func(string) string { return "" }
	rs := startServerCmd(t, none, "--database-url", url, "--insecure-no-auth")
	if s := httpStatus(t, "GET", rs.url+"/readyz", ""); s != 503 {
		t.Fatalf("readyz without the schema: %d", s)
	}
	rs.stop()
	rs = startServerCmd(t, none, "--database-url", url, "--insecure-no-auth", "--migrate")
	if rs.dbURL != "" {
		t.Fatal("DATABASE_URL printed for a named database")
	}
	if s := httpStatus(t, "GET", rs.url+"/readyz", ""); s != 200 {
		t.Fatalf("readyz after --migrate: %d", s)
	}
	if code := rs.stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, rs.stderr)
	}
}

// --log-format json: a refused start is a JSON record with its cause; a
// running server logs in JSON, with --access-log a line per request.
func TestServerLogFormat(t *testing.T) {
	t.Parallel()
	url := server.NewDatabaseFrom(t, nil) // no schema
	code, _, errOut := run("server", "--database-url", url, "--listen", "127.0.0.1:0", "--log-format", "json")
	var refused map[string]any
	for _, line := range strings.Split(errOut, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "sluice server: refused to start" {
			refused = rec
		}
	}
	if code != 2 || refused == nil || refused["level"] != "ERROR" || !strings.Contains(fmt.Sprint(refused["error"]), "--insecure-no-auth") {
		t.Fatalf("refused start: %d, record %v\n%s", code, refused, errOut)
	}
	for _, args := range [][]string{{"--log-format", "xml"}, {"--log-level", "loud"}} {
		code, _, errOut = run(append([]string{"server", "--database-url", url, "--insecure-no-auth"}, args...)...)
		if code != 2 || !strings.Contains(errOut, args[0]) {
			t.Errorf("%v: %d %s", args, code, errOut)
		}
	}

	rs := startServerCmd(t, func(string) string { return "" }, "--database-url", url, "--insecure-no-auth",
		"--log-format", "json", "--access-log")
	if s := httpStatus(t, "GET", rs.url+"/readyz", ""); s != 503 {
		t.Fatalf("readyz without the schema: %d", s)
	}
	if code := rs.stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, rs.stderr)
	}
	msgs := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(rs.stderr.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("stderr line %q is not JSON: %v", line, err)
		}
		msgs[fmt.Sprint(rec["msg"])] = rec
	}
	for _, m := range []string{"sluice server: listening", "http request", "sluice server: request failed", "sluice server: stopped"} {
		if msgs[m] == nil {
			t.Errorf("no %q record:\n%s", m, rs.stderr)
		}
	}
	if a, f := msgs["http request"], msgs["sluice server: request failed"]; a != nil && f != nil &&
		(a["request_id"] != f["request_id"] || a["path"] != "/readyz" || a["status"] != float64(503)) {
		t.Errorf("access %v and failure %v records do not match", a, f)
	}
}
