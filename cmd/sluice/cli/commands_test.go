package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/cmd/sluice/cli"
	"github.com/sluicemq/sluice/internal/pgserver"
	"github.com/sluicemq/sluice/internal/pgtest"
)

// cmdBundle runs sluice commands against a fresh database with the schema.
type cmdBundle struct {
	t      *testing.T
	url    string
	client *sluice.Client
	pool   *pgxpool.Pool
}

func setupCmd(t *testing.T) *cmdBundle {
	t.Helper()
	url := server.NewDatabase(t)
	pool := pgtest.NewPool(t, url)
	return &cmdBundle{t: t, url: url, client: sluice.NewClient(pool), pool: pool}
}

// noEnv is an environment without any database settings.
func noEnv(string) string { return "" }

// sluice runs a command with --database-url and stdin, and returns its status
// and output.
func (b *cmdBundle) sluice(stdin string, args ...string) (int, string, string) {
	b.t.Helper()
	var out, errOut bytes.Buffer
	args = append(args, "--database-url", b.url)
	code := cli.RunEnv(context.Background(), args, strings.NewReader(stdin), &out, &errOut, noEnv)
	return code, out.String(), errOut.String()
}

// ok runs a command that must succeed and returns its standard output.
func (b *cmdBundle) ok(args ...string) string {
	b.t.Helper()
	code, out, errOut := b.sluice("", args...)
	if code != 0 {
		b.t.Fatalf("sluice %s: status %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// fails runs a command that must exit with code and mention want on stderr.
func (b *cmdBundle) fails(code int, want string, args ...string) {
	b.t.Helper()
	c, out, errOut := b.sluice("", args...)
	if c != code || !strings.Contains(errOut, want) {
		b.t.Errorf("sluice %s: status %d, stdout %q, stderr %q; want status %d mentioning %q",
			strings.Join(args, " "), c, out, errOut, code, want)
	}
}

func contains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s: %q does not contain %q", what, got, w)
		}
	}
}

func TestQueueAndGroupCommands(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	contains(t, "create", b.ok("queue", "create", "orders", "--max-attempts", "3", "--lease", "1m", "--no-notify"), "created queue orders")
	contains(t, "list", b.ok("queue", "list"), "QUEUE", "orders", "default")
	contains(t, "config", b.ok("queue", "config", "orders"), "max_attempts", "3", "lease            1m\n", "notify", "false")
	contains(t, "config --set", b.ok("queue", "config", "orders", "--set", "max_attempts=7", "--set", "lease=90s",
		"--set", "notify=true"), "max_attempts     7", "lease            1m30s\n", "notify           true")
	b.fails(2, "is not a duration", "queue", "config", "orders", "--set", "lease=soon")
	b.fails(2, "unknown option", "queue", "config", "orders", "--set", "colour=blue")
	b.fails(1, "from 1 to 1000", "queue", "config", "orders", "--set", "max_attempts=0")
	contains(t, "config unchanged", b.ok("queue", "config", "orders"), "max_attempts     7")
	b.fails(1, "ueue 'orders' already exists", "queue", "create", "orders")
	b.fails(1, "invalid queue name", "queue", "create", "bad name")

	contains(t, "group create", b.ok("group", "create", "orders", "billing", "--start-from", "latest"), "created group billing")
	contains(t, "list groups", b.ok("queue", "list"), "billing,default")
	b.fails(2, "--yes", "group", "seek", "orders", "billing", "--to", "earliest")
	contains(t, "seek", b.ok("group", "seek", "orders", "billing", "--to", "earliest", "--yes"), "now starts from earliest")
	b.fails(1, "group create QUEUE GROUP", "group", "seek", "orders", "nosuch", "--to", "earliest", "--yes")
	contains(t, "group drop", b.ok("group", "drop", "orders", "billing"), "dropped group billing")
	b.fails(1, "does not exist", "group", "drop", "orders", "billing")
	contains(t, "group drop --if-exists", b.ok("group", "drop", "orders", "billing", "--if-exists"), "no group billing")

	b.ok("send", "orders", `{"n": 1}`)
	contains(t, "purge", b.ok("queue", "purge", "orders"), "purged 1 message from")
	contains(t, "drop", b.ok("queue", "drop", "orders"), "dropped queue orders")
	b.fails(1, "sluice queue list", "queue", "drop", "orders")
	contains(t, "drop --if-exists", b.ok("queue", "drop", "orders", "--if-exists"), "no queue orders")
	contains(t, "empty list", b.ok("queue", "list"), "no queues")
}

// queue upgrade moves a queue of engine 1 to engine 2 in place, keeping
// what it holds; a second upgrade is a no-op that says so; an unknown queue
// or a bad name is refused (status 1) and creates nothing.
func TestQueueUpgradeCommand(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "orders", "--engine", "1", "--lanes", "1")
	b.ok("send", "orders", `{"n": 1}`)
	contains(t, "upgrade", b.ok("queue", "upgrade", "orders"), "upgraded queue orders to engine 2")
	contains(t, "config", b.ok("queue", "config", "orders"), "engine           2\n", "lanes            1\n")
	contains(t, "upgrade again", b.ok("queue", "upgrade", "orders"), "queue orders is of engine 2 already")
	if out := b.ok("receive", "orders"); !strings.Contains(out, `"body":{"n":1}`) {
		t.Errorf("receive after the upgrade printed %q, want the message sent before it", out)
	}
	if st, err := b.client.Status(context.Background(), "orders"); err != nil || len(st) != 1 || st[0].Pending() != 0 {
		t.Errorf("status %+v, %v; want the message acked", st, err)
	}
	b.fails(1, "does not exist", "queue", "upgrade", "nosuch")
	b.fails(1, "invalid queue name", "queue", "upgrade", "bad name")
	b.fails(2, "Usage: sluice queue upgrade", "queue", "upgrade")
	if qs, err := b.client.ListQueues(context.Background()); err != nil || len(qs) != 1 {
		t.Errorf("queues %+v, %v; want orders alone", qs, err)
	}
}

func TestSendAndReceiveCommands(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "orders", "--lanes", "1") // one lane: receive returns commit order
	id := strings.TrimSpace(b.ok("send", "orders", `{"id": 1}`, "--key", "c-7", "--header", "trace=abc", "--header", "src=cli", "--priority", "5"))
	if id == "" || strings.ContainsAny(id, " \n") {
		t.Fatalf("send printed %q, want the id", id)
	}
	code, out, errOut := b.sluice("{\"id\": 2}\n\n\"three\"\n[4]\n", "send", "orders", "--delay", "0s")
	if code != 0 || !strings.Contains(out, "sent 3 messages to queue orders") {
		t.Fatalf("send from stdin: %d %q %q", code, out, errOut)
	}
	code, out, errOut = b.sluice("{\"id\": 5}\n", "send", "orders", "--dedup-key", "d-5")
	if code != 0 || !strings.Contains(out, "sent 1 message to") {
		t.Fatalf("send from stdin with a dedup key: %d %q %q", code, out, errOut)
	}

	out = b.ok("receive", "orders", "--max", "2", "--no-ack", "--lease", "1h")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("receive --max 2 printed %d lines: %q", len(lines), out)
	}
	var m struct {
		ID       json.Number     `json:"id"`
		Key      string          `json:"key"`
		Priority int             `json:"priority"`
		Attempt  int             `json:"attempt"`
		Receipt  string          `json:"receipt"`
		Headers  json.RawMessage `json:"headers"`
		Body     json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatal(err)
	}
	if m.ID.String() != id || m.Key != "c-7" || m.Priority != 5 || m.Attempt != 1 || m.Receipt == "" ||
		string(m.Body) != `{"id":1}` || !strings.Contains(string(m.Headers), `"trace":"abc"`) {
		t.Errorf("first message %s", lines[0])
	}
	out = b.ok("receive", "orders", "--max", "10")
	if n := strings.Count(out, "\n"); n != 3 || !strings.Contains(out, `"body":"three"`) || strings.Contains(out, "receipt") {
		t.Errorf("receive printed %d lines: %q", n, out)
	}
	if out := b.ok("receive", "orders"); out != "" {
		t.Errorf("receive after everything was acknowledged printed %q", out)
	}
	if st, err := b.client.Status(context.Background(), "orders"); err != nil || st[0].InFlight != 2 {
		t.Errorf("status %+v, %v; want the two --no-ack messages in flight", st, err)
	}

	b.fails(2, "not JSON", "send", "orders", "hello")
	b.fails(2, "invalid value", "send", "orders", "1", "--delay", "soon")
	b.fails(2, "key=value", "send", "orders", "1", "--header", "novalue")
	b.fails(2, "--max must be from 1 to 10000", "receive", "orders", "--max", "0")
	code, _, errOut = b.sluice("1\nnot json\n", "send", "orders")
	if code != 1 || !strings.Contains(errOut, "line 2: not JSON") {
		t.Errorf("bad NDJSON: %d %q", code, errOut)
	}
}

func TestTailCommand(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "events")
	b.sluice("1\n2\n3\n", "send", "events")

	// --no-ack watches through a temporary group and leaves "default" alone.
	out := b.ok("tail", "events", "--no-ack", "--from", "earliest", "--count", "3")
	if n := strings.Count(out, "\n"); n != 3 {
		t.Errorf("tail --no-ack printed %d lines: %q", n, out)
	}
	if qs, err := b.client.ListQueues(context.Background()); err != nil || strings.Join(qs[0].Groups, ",") != "default" {
		t.Errorf("groups after tail --no-ack: %+v, %v; want the temporary group dropped", qs, err)
	}

	// tail consumes and acknowledges, following new messages.
	done := make(chan string)
	go func() { done <- b.ok("tail", "events", "--count", "4", "--poll-interval", "100ms") }()
	time.Sleep(300 * time.Millisecond)
	b.ok("send", "events", `"late"`)
	select {
	case out = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("tail did not return after --count messages")
	}
	if !strings.Contains(out, `"body":"late"`) || strings.Count(out, "\n") != 4 {
		t.Errorf("tail printed %q", out)
	}
	if st, err := b.client.Status(context.Background(), "events"); err != nil || st[0].Ready+st[0].InFlight != 0 {
		t.Errorf("status after tail %+v, %v; want everything acknowledged", st, err)
	}
	b.fails(1, "sluice queue list", "tail", "nosuch")
}

func TestStatusAndDLQCommands(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	ctx := context.Background()
	// one lane: the receive below takes the first message sent (with lanes,
	// either one could come first)
	b.ok("queue", "create", "jobs", "--max-attempts", "1", "--lanes", "1")
	b.ok("send", "jobs", `{"job": "poison"}`)
	b.ok("send", "jobs", `{"job": "fine"}`)
	msgs, err := b.client.Receive(ctx, "jobs", "default", nil)
	if err != nil || len(msgs) != 1 {
		t.Fatal(msgs, err)
	}
	if _, err := b.client.Nack(ctx, "jobs", "default", msgs[0].Receipt, &sluice.NackOptions{Error: "it exploded\nstack..."}); err != nil {
		t.Fatal(err)
	}
	contains(t, "status", b.ok("status"), "QUEUE", "IN FLIGHT", "jobs", "default")
	contains(t, "status jobs", b.ok("status", "jobs"), "jobs")
	contains(t, "dlq list", b.ok("dlq", "list", "jobs"), "ID", "it exploded", `{"job": "poison"}`)
	contains(t, "dlq list --json", b.ok("dlq", "list", "jobs", "--json", "--group", "default"), `"error":"it exploded\nstack..."`, `"attempts":1`)
	b.fails(2, "not a positive integer", "dlq", "redrive", "jobs", "x")
	contains(t, "redrive", b.ok("dlq", "redrive", "jobs", "--group", "default"), "redrove 1 dead letter of")
	contains(t, "dlq list after redrive", b.ok("dlq", "list", "jobs"), "no dead letters")

	// discard: by id, a group's, and purge's --dead-letters; never a whole
	// queue's by omission.
	for range 3 {
		b.ok("send", "jobs", `{"job": "poison"}`)
	}
	dead := func() int64 {
		t.Helper()
		st, err := b.client.Status(ctx, "jobs")
		if err != nil {
			t.Fatal(err)
		}
		return st[0].Dead
	}
	for {
		ms, err := b.client.Receive(ctx, "jobs", "default", &sluice.ReceiveOptions{Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			if _, err := b.client.Nack(ctx, "jobs", "default", m.Receipt, &sluice.NackOptions{Error: "poison"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	dls, err := b.client.DeadLetters(ctx, "jobs", nil)
	if err != nil || len(dls) < 3 {
		t.Fatalf("dead letters %v, %v", dls, err)
	}
	n0 := int64(len(dls))
	b.fails(2, "--group GROUP", "dlq", "discard", "jobs")
	b.fails(2, "not a positive integer", "dlq", "discard", "jobs", "x")
	b.fails(1, "does not exist", "dlq", "discard", "jobs", "--group", "nosuch")
	contains(t, "discard by id", b.ok("dlq", "discard", "jobs", strconv.FormatInt(dls[0].ID, 10)), "discarded 1 dead letter of queue jobs")
	if n := dead(); n != n0-1 {
		t.Fatalf("dead %d after a discard by id, want %d", n, n0-1)
	}
	contains(t, "purge", b.ok("queue", "purge", "jobs"), "purged")
	if n := dead(); n != n0-1 {
		t.Fatalf("dead %d after a purge, want %d (purge leaves them)", n, n0-1)
	}
	contains(t, "purge --dead-letters", b.ok("queue", "purge", "jobs", "--dead-letters"), fmt.Sprintf("discarded %d dead letters", n0-1))
	if n := dead(); n != 0 {
		t.Fatalf("dead %d after purge --dead-letters, want 0", n)
	}
	contains(t, "discard of none left", b.ok("dlq", "discard", "jobs", "--group", "default"), "discarded 0 dead letters")

	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer cancel()
	code := cli.RunEnv(ctx, []string{"status", "jobs", "--watch", "--database-url", b.url}, nil, &out, &out, noEnv)
	if code != 0 || strings.Count(out.String(), "QUEUE") < 2 {
		t.Errorf("status --watch: status %d, output %q; want refreshes until interrupted", code, out.String())
	}
}

func TestActionableErrors(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.fails(1, `"sluice queue list" shows the queues`, "send", "nowhere", "1")
	b.ok("queue", "create", "q")
	b.fails(1, `"sluice group create QUEUE GROUP"`, "receive", "q", "--group", "x")
	b.fails(2, "missing arguments", "send")
	b.fails(2, `unknown command "frob"`, "queue", "frob")

	empty := &cmdBundle{t: t, url: server.NewDatabaseFrom(t, nil)}
	empty.fails(1, `run "sluice migrate"`, "queue", "list")
	empty.fails(1, `run "sluice migrate"`, "send", "q", "1")

	var out, errOut bytes.Buffer
	code := cli.RunEnv(context.Background(), []string{"status"}, nil, &out, &errOut, func(k string) string {
		if k == "DATABASE_URL" {
			return "postgres://someone:sekrit@127.0.0.1:1/app?connect_timeout=5"
		}
		return ""
	})
	if code != 1 || !strings.Contains(errOut.String(), "cannot connect") || !strings.Contains(errOut.String(), "DATABASE_URL") ||
		strings.Contains(errOut.String(), "sekrit") {
		t.Errorf("unreachable server: status %d, stderr %q", code, errOut.String())
	}
}

func TestSubcommandHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"queue", "--help"}, {"queue", "create", "--help"}, {"queue", "list", "-h"}, {"queue", "config", "--help"},
		{"queue", "purge", "--help"}, {"queue", "upgrade", "--help"}, {"queue", "drop", "--help"}, {"group", "--help"}, {"group", "create", "--help"},
		{"group", "drop", "--help"}, {"group", "seek", "--help"}, {"send", "--help"}, {"receive", "--help"},
		{"tail", "--help"}, {"status", "--help"}, {"dlq", "--help"}, {"dlq", "list", "--help"},
		{"dlq", "redrive", "--help"}, {"demo", "--help"}, {"help", "queue"}, {"help", "dlq", "list"},
	} {
		code, out, errOut := run(args...)
		if code != 0 || !strings.Contains(out, "Usage: sluice") || !strings.Contains(out, "Example") || errOut != "" {
			t.Errorf("sluice %s: status %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
	}
	if code, _, errOut := run("queue"); code != 2 || !strings.Contains(errOut, "Commands:") {
		t.Errorf("sluice queue: status %d, stderr %q", code, errOut)
	}
}

// TestDemo runs a short demo on a harness database that holds a user's
// queue named orders (the name the README's tours use): the demo works on a
// queue of its own, drops only that one, and refuses a --queue that exists.
func TestDemo(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "orders")
	b.ok("send", "orders", `{"mine": true}`)
	code, out, errOut := b.sluice("", "demo", "--duration", "5s", "--rate", "200")
	if code != 0 {
		t.Fatalf("demo: status %d\n%s%s", code, out, errOut)
	}
	// (progress lines every second; on a loaded machine the first may come at [2s])
	contains(t, "demo", out, "s] billing  sent", "s] shipping sent", "backlog", "summary after", "dead letters")
	for _, line := range strings.Split(out, "\n") {
		if len(line) > 120 {
			t.Errorf("demo printed a line of %d characters, more than 120: %q", len(line), line)
		}
	}
	userQueueIntact := func(when string) {
		t.Helper()
		qs, err := b.client.ListQueues(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) != 1 || qs[0].Name != "orders" {
			t.Errorf("%s: queues %+v, want the user's orders alone", when, qs)
		}
		st, err := b.client.Status(context.Background(), "orders")
		if err != nil || len(st) != 1 || st[0].Ready != 1 {
			t.Errorf("%s: the user's queue orders lost its message: %+v, %v", when, st, err)
		}
	}
	userQueueIntact("after the demo")
	// A --queue that exists is not the demo's: refused, left alone.
	b.fails(1, "is not the demo's", "demo", "--duration", "1s", "--queue", "orders")
	userQueueIntact("after demo --queue orders")
	// --keep leaves the demo's own queue.
	out = b.ok("demo", "--duration", "1s", "--rate", "50", "--queue", "demo_kept", "--keep")
	contains(t, "demo --keep", out, "kept queue demo_kept")
	if _, err := b.client.Status(context.Background(), "demo_kept"); err != nil {
		t.Errorf("demo --keep: %v", err)
	}
}

// TestDemoCountsWaitingOrders reads the status of a demo queue where a
// customer's first order is in flight and their two others wait behind it
// (status: waiting, not ready): the demo must not take the queue for
// settled, and its summary must count the waiting orders as pending.
func TestDemoCountsWaitingOrders(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	ctx := context.Background()
	if err := b.client.CreateQueue(ctx, "orders", &sluice.QueueOptions{DefaultGroup: sluice.Ptr(false)}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"billing", "shipping"} {
		if err := b.client.CreateGroup(ctx, "orders", g, nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := b.client.Send(ctx, "orders", []byte(`{}`), &sluice.SendOptions{Key: "c-01"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []string{"billing", "shipping"} {
		if got, err := b.client.Receive(ctx, "orders", g, nil); err != nil || len(got) != 1 {
			t.Fatalf("receive for %s: %d, %v", g, len(got), err)
		}
	}
	st, err := b.client.Status(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Ready != 0 || s.Delayed != 0 || s.InFlight != 1 || s.Waiting != 2 {
			t.Fatalf("status %+v: want 1 in flight and 2 waiting", s)
		}
	}
	if cli.Settled(st) {
		t.Errorf("settled with 2 orders waiting in each group: %+v", st)
	}
	var out bytes.Buffer
	cli.DemoSummary(&out, st, 3, map[string]int64{})
	contains(t, "summary", out.String(), "billing   acked 0, retried 0, dead letters 0, pending 3",
		"shipping  acked 0, retried 0, dead letters 0, pending 3", "some orders were still pending")
}

// TestEmbeddedDefault runs commands with no database configured: they
// start the embedded server on a data directory of their own, keep their
// data across runs and stop the server on exit.
func TestEmbeddedDefault(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "sluice-cli-embedded-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// As root the server runs as another user, who must reach the directory.
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
	sluiceCmd := func(args ...string) (string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := cli.RunEnv(context.Background(), args, nil, &out, &errOut, getenv); code != 0 {
			t.Fatalf("sluice %s: status %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
		}
		return out.String(), errOut.String()
	}
	out, errOut := sluiceCmd("queue", "create", "kept")
	contains(t, "first run", out, "created queue kept")
	contains(t, "first run", errOut, "embedded PostgreSQL", "--database-url")
	out, _ = sluiceCmd("queue", "list")
	contains(t, "second run", out, "kept")
	if _, err := os.Stat(filepath.Join(data, "pg"+pgserver.DefaultVersion, "postmaster.pid")); !os.IsNotExist(err) {
		t.Errorf("postmaster.pid still exists after the command (%v): the server was not stopped", err)
	}
}

// Hostile input to the commands: each fails with a message that says what
// is wrong (status 2 for usage, 1 for what the engine refuses) and changes
// nothing.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "orders")
	b.ok("send", "orders", `{"n": 1}`)
	long := strings.Repeat("a", 10000)
	state := func() string {
		// Everything but the age of the oldest pending message, which grows.
		var lines []string
		for _, l := range strings.Split(b.ok("queue", "list")+b.ok("status", "orders"), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				lines = append(lines, strings.Join(f[:len(f)-1], " "))
			}
		}
		return strings.Join(lines, "\n")
	}
	before := state()
	cases := []struct {
		code int
		want string
		args []string
	}{
		{1, "invalid queue name", []string{"send", "q;drop", "{}"}},
		{1, "invalid queue name", []string{"send", "it's", "{}"}},
		{1, "invalid queue name", []string{"send", "café", "{}"}},
		{1, "invalid queue name", []string{"send", long, "{}"}},
		{1, "invalid queue name", []string{"queue", "create", ""}},
		{1, "invalid group name", []string{"group", "create", "orders", "bad;name"}},
		{1, "does not exist", []string{"send", "nosuch", "{}"}},
		{1, "does not exist", []string{"status", "nosuch"}},
		{1, "does not exist", []string{"dlq", "redrive", "nosuch"}},
		{2, "is not JSON", []string{"send", "orders", "not-json"}},
		{2, "must not be negative", []string{"send", "orders", "{}", "--delay", "-5s"}},
		{2, "invalid value", []string{"send", "orders", "{}", "--priority", "abc"}},
		{2, "want key=value", []string{"send", "orders", "{}", "--header", "noequals"}},
		{2, "--max must be from 1 to 10000", []string{"receive", "orders", "--max", "0"}},
		{2, "--max must be from 1 to 10000", []string{"receive", "orders", "--max", "1000000000"}},
		{2, "--lease must be positive", []string{"receive", "orders", "--lease", "0s"}},
		{2, "--lease must be positive", []string{"receive", "orders", "--lease", "-1s"}},
		{2, "--max-attempts must be positive", []string{"queue", "create", "x", "--max-attempts", "0"}},
		{2, "must not be negative", []string{"queue", "create", "x", "--retention", "-1h"}},
		{1, "out of range", []string{"queue", "create", "x", "--lease", "10000h"}},
		{2, "invalid value", []string{"queue", "create", "x", "--max-payload", "1e99"}},
		{1, "from 1 to 104857600", []string{"queue", "create", "x", "--max-payload", "104857601"}},
		{2, "unknown option", []string{"queue", "config", "orders", "--set", "nope=1"}},
	}
	for _, c := range cases {
		b.fails(c.code, c.want, c.args...)
	}
	if after := state(); after != before {
		t.Fatalf("hostile input changed the state:\nbefore %s\nafter  %s", before, after)
	}
}

// TestGroupSeekUsesTheEngine: "sluice group seek" moves the group with the
// engine's seek_group: the group replays what it acked and keeps its dead
// letters (dropping and recreating it, as before the engine had a seek,
// deleted them).
func TestGroupSeekUsesTheEngine(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	ctx := context.Background()
	b.ok("queue", "create", "jobs", "--max-attempts", "1")
	for _, body := range []string{`{"job": "poison"}`, `{"job": "fine"}`} {
		if _, err := b.client.Send(ctx, "jobs", json.RawMessage(body), nil); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := b.client.Receive(ctx, "jobs", "default", &sluice.ReceiveOptions{Max: 2})
	if err != nil || len(msgs) != 2 {
		t.Fatalf("receive: %d, %v", len(msgs), err)
	}
	if ok, err := b.client.Nack(ctx, "jobs", "default", msgs[0].Receipt, &sluice.NackOptions{Error: "it exploded"}); err != nil || !ok {
		t.Fatalf("nack: %v, %v", ok, err)
	}
	if n, err := b.client.Ack(ctx, "jobs", "default", msgs[1].Receipt); err != nil || n != 1 {
		t.Fatalf("ack: %d, %v", n, err)
	}
	contains(t, "seek", b.ok("group", "seek", "jobs", "default", "--to", "earliest", "--yes"), "now starts from earliest")
	contains(t, "dlq list after the seek", b.ok("dlq", "list", "jobs"), "it exploded", `{"job": "poison"}`)
	again, err := b.client.Receive(ctx, "jobs", "default", &sluice.ReceiveOptions{Max: 10})
	if err != nil || len(again) != 2 {
		t.Fatalf("receive after the seek: %d messages, %v; want both again", len(again), err)
	}
	b.fails(1, "invalid to_position", "group", "seek", "jobs", "default", "--to", "soon", "--yes")
}
