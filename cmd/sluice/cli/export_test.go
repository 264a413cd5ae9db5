package cli

import (
	"context"
	"io"
	"time"

	"github.com/sluicemq/sluice"
)

// RunEnv is Main with its standard input and environment given, for tests.
func RunEnv(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	return run(ctx, args, &env{stdout: stdout, stderr: stderr, stdin: stdin, getenv: getenv})
}

// RunEnvMaxLine is RunEnv with the longest line sluice send reads from
// standard input set to maxLine bytes.
func RunEnvMaxLine(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, maxLine int) int {
	return run(ctx, args, &env{stdout: stdout, stderr: stderr, stdin: stdin, getenv: func(string) string { return "" }, maxLine: maxLine})
}

// FormatDuration, FormatInterval and Age are exported for tests.
var (
	FormatDuration = formatDuration
	FormatInterval = formatInterval
	Age            = age
)

// Settled is the demo's test that every group handled everything.
var Settled = settled

// DemoSummary writes the demo's summary to w for the status st of its
// queue, sent orders and the orders each group acknowledged.
func DemoSummary(w io.Writer, st []sluice.Status, sent int64, acked map[string]int64) {
	d := &demo{e: &env{stdout: w}, cfg: demoConfig{duration: time.Minute, queue: "orders"}, start: time.Now(), groups: map[string]*groupStats{}}
	d.sent.Store(sent)
	for _, g := range demoGroups {
		d.groups[g] = &groupStats{}
		d.groups[g].acked.Store(acked[g])
	}
	d.summary(st, false)
}

// QueueOptionNames returns the engine's name, the "queue create" flag and the
// QueueOptions field type of each option of cliOptions.
func QueueOptionNames() (names, flags, kinds []string) {
	for _, c := range cliOptions(&sluice.QueueOptions{}) {
		names, flags = append(names, c.name), append(flags, c.flag)
		switch c.field.(type) {
		case **int:
			kinds = append(kinds, "integer")
		case **time.Duration:
			kinds = append(kinds, "duration")
		case **bool:
			kinds = append(kinds, "boolean")
		}
	}
	return names, flags, kinds
}
