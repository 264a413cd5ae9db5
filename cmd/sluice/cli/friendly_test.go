package cli_test

import (
	"strings"
	"testing"
)

// sluice --version prints what sluice version does.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	_, want, _ := run("version")
	for _, flag := range []string{"--version", "-version"} {
		code, out, errOut := run(flag)
		if code != 0 || out != want || !strings.HasPrefix(out, "sluice ") {
			t.Errorf("sluice %s: %d %q %q, want %q", flag, code, out, errOut, want)
		}
	}
}

// A mistyped command gets a suggestion; a word far from every command does
// not.
func TestDidYouMean(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stauts"}, `Did you mean "sluice status"?`},
		{[]string{"sned", "orders", "1"}, `Did you mean "sluice send"?`},
		{[]string{"queues"}, `Did you mean "sluice queue"?`},
		{[]string{"recieve", "orders"}, `Did you mean "sluice receive"?`},
		{[]string{"mig"}, `Did you mean "sluice migrate"?`},
		{[]string{"queue", "lst"}, `Did you mean "sluice queue list"?`},
		{[]string{"dlq", "redirve", "orders"}, `Did you mean "sluice dlq redrive"?`},
	} {
		code, _, errOut := run(tc.args...)
		if code != 2 || !strings.Contains(errOut, "unknown command") || !strings.Contains(errOut, tc.want) {
			t.Errorf("sluice %s: %d %q, want a usage error with %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
	if code, _, errOut := run("frobnicate"); code != 2 || strings.Contains(errOut, "Did you mean") {
		t.Errorf("sluice frobnicate: %d %q, want no suggestion", code, errOut)
	}
}

// The CLI's errors say what to do with the sluice command, never with a SQL
// function; and one message is one message.
func TestCLIErrorsAndCountsSpeakCLI(t *testing.T) {
	t.Parallel()
	b := setupCmd(t)
	_, _, errOut := b.sluice("", "send", "nowhere", "1")
	if strings.Contains(errOut, "sluice.create_queue") || strings.Contains(errOut, "sluice.list_queues") ||
		!strings.Contains(errOut, `"sluice queue create NAME" makes one`) {
		t.Errorf("send to a missing queue: %q", errOut)
	}
	b.ok("queue", "create", "q")
	_, _, errOut = b.sluice("", "receive", "q", "--group", "nope")
	if strings.Contains(errOut, "sluice.create_group") || !strings.Contains(errOut, `"sluice group create QUEUE GROUP"`) {
		t.Errorf("receive of a missing group: %q", errOut)
	}
	_, _, errOut = b.sluice("", "ack", "q", "not-a-receipt")
	if strings.Contains(errOut, "sluice.receive()") || !strings.Contains(errOut, `"sluice receive" printed`) {
		t.Errorf("ack of a malformed receipt: %q", errOut)
	}
	if _, out, _ := b.sluice("1\n", "send", "q"); !strings.Contains(out, "sent 1 message to queue q (id ") {
		t.Errorf("send of one line: %q", out)
	}
	contains(t, "purge one", b.ok("queue", "purge", "q"), "purged 1 message from queue q")
	if _, out, _ := b.sluice("1\n2\n", "send", "q"); !strings.Contains(out, "sent 2 messages to queue q (ids ") {
		t.Errorf("send of two lines: %q", out)
	}
}
