package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/cmd/sluice/cli"
)

// Usage errors name the error and where the help is, in a few lines, and
// exit 2; bad values say what to type.
func TestUsageErrorsAreShort(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "orders")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "orders", "1", "--delay", "5"}, `use a unit, e.g. 5s`},
		{[]string{"send", "orders", "1", "--delay", "soon"}, `such as 500ms, 30s, 5m or 2h`},
		{[]string{"send", "orders", "1", "--priority", "99999999999"}, "--priority must be from -2147483648 to 2147483647"},
		{[]string{"queue", "create", "other", "--max-attempts", "-3"}, "--max-attempts must be positive, got -3"},
		{[]string{"queue", "create", "other", "--max-payload", "-1"}, "--max-payload must be positive"},
		{[]string{"queue", "create", "other", "--lease", "90"}, `use a unit, e.g. 90s`},
		{[]string{"queue", "config", "orders", "--set", "lease=5"}, `use a unit, e.g. 5s`},
		{[]string{"receive"}, "missing arguments"},
		{[]string{"send", "orders", "1", "--bogus"}, "flag provided but not defined"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"queue", "frobnicate"}, `unknown command "frobnicate"`},
	} {
		code, out, errOut := b.sluice("", tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("sluice %s: status %d, stdout %q, stderr %q; want status 2 and %q",
				strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
		if n := strings.Count(errOut, "\n"); n > 3 || strings.Contains(errOut, "Flags:") || !strings.Contains(errOut, "--help\" for usage") {
			t.Errorf("sluice %s: %d lines of stderr, want the error and a pointer to --help:\n%s", strings.Join(tc.args, " "), n, errOut)
		}
	}
	if st, err := b.client.Status(context.Background(), "orders"); err != nil || st[0].Ready != 0 {
		t.Errorf("status %+v, %v: a usage error sent something", st, err)
	}
}

// The database flag may come before the command.
func TestGlobalFlagsBeforeCommand(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := cli.RunEnv(context.Background(), args, strings.NewReader(""), &out, &errOut, noEnv)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := run("--database-url", b.url, "queue", "create", "orders"); code != 0 || !strings.Contains(out, "created queue orders") {
		t.Fatalf("sluice --database-url URL queue create: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run("--database-url="+b.url, "status"); code != 0 || !strings.Contains(out, "orders") {
		t.Errorf("sluice --database-url=URL status: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run("-database-url", b.url, "send", "orders", "--", "1"); code != 0 || strings.TrimSpace(out) == "" {
		t.Errorf("sluice -database-url URL send orders -- 1: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run("--database-url"); code != 2 || !strings.Contains(errOut, "needs an argument") {
		t.Errorf("sluice --database-url: %d %q", code, errOut)
	}
	for _, args := range [][]string{{"--database-url", b.url, "--help"}, {"--database-url", b.url, "help"}} {
		if code, out, _ := run(args...); code != 0 || !strings.Contains(out, "Commands:") {
			t.Errorf("sluice %s: %d %q", strings.Join(args, " "), code, out)
		}
	}
	if code, out, _ := run("--database-url", b.url, "help", "ack"); code != 0 || !strings.Contains(out, "Usage: sluice ack") {
		t.Errorf("sluice --database-url URL help ack: %d %q", code, out)
	}
	if code, _, errOut := run("--database-url", b.url); code != 2 || !strings.Contains(errOut, "missing command") {
		t.Errorf("sluice --database-url URL: %d %q", code, errOut)
	}
}

// Durations are shown as they are typed, not as PostgreSQL intervals.
func TestDurationsShownAsEntered(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "orders", "--lease", "2m", "--retention", "90m")
	out := b.ok("queue", "config", "orders", "--set", "backoff_max=36h")
	contains(t, "config", out, "lease            2m\n", "retention        1h30m\n", "backoff_max      36h\n", "backoff_base     1s\n")
	if strings.Contains(out, "seconds") {
		t.Errorf("config shows PostgreSQL intervals: %q", out)
	}
	_, help, _ := b.sluice("", "tail", "--help")
	contains(t, "tail --help", help, "--poll-interval duration\n", "(default 500ms)")
}

// A line of standard input longer than the limit is refused with the
// limit stated, not with bufio's "token too long".
func TestSendStdinLineLimit(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "orders")
	var out, errOut bytes.Buffer
	stdin := "{\"n\": 1}\n\"" + strings.Repeat("x", 2000) + "\"\n"
	code := cli.RunEnvMaxLine(context.Background(), []string{"send", "orders", "--database-url", b.url},
		strings.NewReader(stdin), &out, &errOut, 1024)
	if code != 1 || !strings.Contains(errOut.String(), "line 2: longer than 1024 bytes, the most one line (one message) may hold") ||
		strings.Contains(errOut.String(), "token too long") {
		t.Errorf("long line: status %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}

// sluice send with a dedup key says when it enqueued nothing.
func TestSendDedupNotice(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "orders")
	code, first, errOut := b.sluice("", "send", "orders", `{"charge": 9}`, "--dedup-key", "charge-9")
	if code != 0 || errOut != "" {
		t.Fatalf("first send: %d %q %q", code, first, errOut)
	}
	code, second, errOut := b.sluice("", "send", "orders", `{"charge": 9}`, "--dedup-key", "charge-9")
	if code != 0 || second != first || !strings.Contains(errOut, `nothing enqueued: dedup key "charge-9" was sent to queue orders`) {
		t.Errorf("duplicate send: %d %q %q; want the first id %q and a notice", code, second, errOut, first)
	}
	code, out, errOut := b.sluice("{\"a\": 1}\n{\"a\": 2}\n", "send", "orders", "--dedup-key", "charge-9")
	if code != 0 || !strings.Contains(errOut, "2 of the 2 messages enqueued nothing") {
		t.Errorf("duplicate stdin send: %d %q %q", code, out, errOut)
	}
	code, out, errOut = b.sluice("{\"a\": 1}\n{\"a\": 2}\n{\"a\": 3}\n", "send", "orders", "--dedup-key", "charge-10")
	if code != 0 || !strings.Contains(errOut, "2 of the 3 messages enqueued nothing") {
		t.Errorf("stdin send of a new key: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := b.sluice("", "send", "orders", `1`); code != 0 || errOut != "" {
		t.Errorf("send without a dedup key: %d %q %q", code, out, errOut)
	}
	if st, err := b.client.Status(context.Background(), "orders"); err != nil || st[0].Ready != 3 {
		t.Errorf("status %+v, %v; want 3 messages enqueued", st, err)
	}
}

// ack, nack and extend take receipts as arguments or on standard input,
// as receive --no-ack prints them.
func TestReceiptCommands(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	ctx := context.Background()
	b.ok("queue", "create", "orders", "--backoff-base", "1h")
	b.ok("group", "create", "orders", "billing")
	b.sluice("1\n2\n3\n", "send", "orders")

	leased := b.ok("receive", "orders", "--no-ack", "--max", "3")
	code, out, errOut := b.sluice(leased, "ack", "orders")
	if code != 0 || !strings.Contains(out, "acknowledged 3 messages of queue orders, group default") || strings.Contains(out, "stale") {
		t.Errorf("ack from stdin: %d %q %q", code, out, errOut)
	}
	code, out, _ = b.sluice(leased, "ack", "orders")
	if code != 0 || !strings.Contains(out, "acknowledged 0 messages") || !strings.Contains(out, "3 receipts were stale") {
		t.Errorf("second ack: %d %q", code, out)
	}

	// The group comes from the JSON lines unless --group is given.
	leased = b.ok("receive", "orders", "--group", "billing", "--no-ack", "--max", "1")
	code, out, errOut = b.sluice(leased, "nack", "orders", "--now", "--error", "card declined")
	if code != 0 || !strings.Contains(out, "gave back 1 message of queue orders, group billing") {
		t.Errorf("nack: %d %q %q", code, out, errOut)
	}
	type message struct {
		ID      int64  `json:"id"`
		Attempt int    `json:"attempt"`
		Receipt string `json:"receipt"`
	}
	var nacked message
	if err := json.Unmarshal([]byte(leased), &nacked); err != nil {
		t.Fatal(err)
	}
	var m message
	for _, line := range strings.Split(strings.TrimSpace(b.ok("receive", "orders", "--group", "billing", "--no-ack", "--max", "3", "--lease", "1s")), "\n") {
		var x message
		if err := json.Unmarshal([]byte(line), &x); err != nil {
			t.Fatal(err)
		}
		if x.ID == nacked.ID {
			m = x
		}
	}
	if m.Attempt != 2 {
		t.Fatalf("receive after nack --now: message %d has attempt %d; want 2", nacked.ID, m.Attempt)
	}
	b.fails(2, "--lease is required", "extend", "orders", m.Receipt, "--group", "billing")
	contains(t, "extend", b.ok("extend", "orders", m.Receipt, "--group", "billing", "--lease", "1m"), "extended the leases of 1 message")
	time.Sleep(1500 * time.Millisecond)
	st, err := b.client.Status(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Group == "billing" && s.InFlight != 1 {
			t.Errorf("billing after extend: %+v; want the message still leased", s)
		}
	}
	contains(t, "ack by argument", b.ok("ack", "orders", m.Receipt, "--group", "billing"), "acknowledged 1 message of queue orders, group billing")

	b.fails(2, "no receipts", "ack", "orders")
	code, _, errOut = b.sluice(`{"id": 1}`+"\n", "ack", "orders")
	if code != 2 || !strings.Contains(errOut, "without a receipt") {
		t.Errorf("ack of receive output without --no-ack: %d %q", code, errOut)
	}
	b.fails(1, "invalid receipt", "ack", "orders", "not-a-receipt")
	b.fails(1, "sluice queue list", "ack", "nosuch", "r")
}

func TestStatusAndListJSON(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "orders")
	b.sluice("1\n2\n", "send", "orders")
	b.ok("receive", "orders", "--no-ack", "--max", "1")
	var s struct {
		Queue    string  `json:"queue"`
		Group    *string `json:"group"`
		Ready    int64   `json:"ready"`
		InFlight int64   `json:"in_flight"`
		Lag      *int64  `json:"lag"`
		Age      float64 `json:"oldest_pending_age"`
		DeadLet  *int64  `json:"dead_lettered"`
	}
	out := b.ok("status", "--json")
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Queue != "orders" || s.Group == nil || *s.Group != "default" ||
		s.Ready != 1 || s.InFlight != 1 || s.Lag == nil || s.Age <= 0 || s.DeadLet == nil || *s.DeadLet != 0 {
		t.Errorf("status --json: %q (%+v, %v)", out, s, err)
	}
	var q struct {
		Queue   string          `json:"queue"`
		Groups  []string        `json:"groups"`
		Options json.RawMessage `json:"options"`
	}
	out = b.ok("queue", "list", "--json")
	if err := json.Unmarshal([]byte(out), &q); err != nil || q.Queue != "orders" || len(q.Groups) != 1 || !bytes.Contains(q.Options, []byte("max_attempts")) {
		t.Errorf("queue list --json: %q (%+v, %v)", out, q, err)
	}
}

func TestTailFromNeedsNoAck(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "events")
	b.sluice("1\n", "send", "events")
	b.fails(2, "--from works only with --no-ack", "tail", "events", "--from", "earliest", "--count", "1")
	if st, err := b.client.Status(context.Background(), "events"); err != nil || st[0].Ready != 1 {
		t.Errorf("status %+v, %v; want the message still ready for the real group", st, err)
	}
}

// buildSluice builds the sluice command into a temporary directory.
func buildSluice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/sluicemq/sluice/cmd/sluice")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// tail --no-ack drops its temporary group when it ends by a signal too.
func TestTailNoAckDropsGroupOnSignals(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "events")
	bin := buildSluice(t)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(bin, "tail", "events", "--no-ack", "--database-url", b.url)
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		group := fmt.Sprintf("tail-%d", cmd.Process.Pid)
		if !waitFor(func() bool { return hasGroup(t, b, group) }) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("%v: the temporary group %s never appeared: %s", sig, group, errOut.String())
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%v: tail did not exit", sig)
		}
		if hasGroup(t, b, group) {
			t.Errorf("%v: tail left its temporary group %s behind (stderr %q)", sig, group, errOut.String())
		}
	}
}

func hasGroup(t *testing.T, b *cmdBundle, group string) bool {
	t.Helper()
	qs, err := b.client.ListQueues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		for _, g := range q.Groups {
			if g == group {
				return true
			}
		}
	}
	return false
}

func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// sluice send at a terminal says that it reads standard input.
func TestSendAtTerminal(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("opens a pseudo-terminal the Linux way")
	}
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "orders")
	master, slave := openPTY(t)
	go func() {
		// A line, then end-of-file (Ctrl-D) at the start of the next one.
		fmt.Fprint(master, "{\"n\": 1}\n\x04")
		_, _ = bufio.NewReader(master).WriteTo(discard{}) // drain the echo
	}()
	var out, errOut bytes.Buffer
	code := cli.RunEnv(context.Background(), []string{"send", "orders", "--database-url", b.url}, slave, &out, &errOut, noEnv)
	if code != 0 || !strings.Contains(errOut.String(), "reading messages from standard input") || !strings.Contains(out.String(), "sent 1 message to") {
		t.Errorf("send at a terminal: %d %q %q", code, out.String(), errOut.String())
	}
	// Not at a terminal: no notice.
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	out.Reset()
	errOut.Reset()
	if code := cli.RunEnv(context.Background(), []string{"send", "orders", "--database-url", b.url}, null, &out, &errOut, noEnv); code != 0 || errOut.Len() != 0 {
		t.Errorf("send from /dev/null: %d %q %q", code, out.String(), errOut.String())
	}
	var st []sluice.Status
	if st, err = b.client.Status(context.Background(), "orders"); err != nil || st[0].Ready != 1 {
		t.Errorf("status %+v, %v", st, err)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// openPTY opens a pseudo-terminal pair, closed when the test ends.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	var unlock int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		t.Fatalf("unlockpt: %v", errno)
	}
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		t.Fatalf("ptsname: %v", errno)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

func TestDurationFormats(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{cli.FormatDuration(2 * time.Minute), "2m"},
		{cli.FormatDuration(90 * time.Minute), "1h30m"},
		{cli.FormatDuration(36 * time.Hour), "36h"},
		{cli.FormatDuration(1500 * time.Millisecond), "1.5s"},
		{cli.FormatDuration(0), "0s"},
		{cli.FormatInterval("120 seconds"), "2m"},
		{cli.FormatInterval("00:00:30"), "30s"},
		{cli.FormatInterval("1 day 02:00:00"), "26h"},
		{cli.FormatInterval("0.5 seconds"), "500ms"},
		{cli.FormatInterval("1 mon"), "1 mon"},
		{cli.Age(125 * time.Second), "2m5s"},
		{cli.Age(3 * time.Minute), "3m"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// tail --no-ack killed with SIGKILL cannot drop its temporary group: the
// group has a time to live and maintenance drops it once unused for that
// long (issue 15, item 9).
func TestTailNoAckGroupExpiresAfterKill(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	b.ok("queue", "create", "events")
	b.fails(2, "--ttl works only with --no-ack", "tail", "events", "--ttl", "1s")
	bin := buildSluice(t)
	cmd := exec.Command(bin, "tail", "events", "--no-ack", "--ttl", "2s", "--poll-interval", "50ms", "--database-url", b.url)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	group := fmt.Sprintf("tail-%d", cmd.Process.Pid)
	if !waitFor(func() bool { return hasGroup(t, b, group) }) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the temporary group %s never appeared: %s", group, errOut.String())
	}
	// Alive, it keeps its group past the TTL.
	time.Sleep(3 * time.Second)
	if _, err := b.pool.Exec(context.Background(), "SELECT * FROM sluice.maintain()"); err != nil {
		t.Fatal(err)
	}
	if !hasGroup(t, b, group) {
		t.Errorf("the group of a live tail expired (stderr %q)", errOut.String())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if !hasGroup(t, b, group) {
		t.Fatalf("the group is gone at once after SIGKILL: the test does not test the TTL")
	}
	expired := waitFor(func() bool {
		if _, err := b.pool.Exec(context.Background(), "SELECT * FROM sluice.maintain()"); err != nil {
			t.Fatal(err)
		}
		return !hasGroup(t, b, group)
	})
	if !expired {
		t.Errorf("the temporary group %s of a tail killed with SIGKILL is still there after 30 s", group)
	}
}
