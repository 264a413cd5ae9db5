package cli

import (
	"context"
	"io"
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
