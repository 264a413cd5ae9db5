// Package cli implements the sluice command: its subcommands, flags and
// help. cmd/sluice only calls Main; the benchmark's command (bench/,
// sluice-bench) runs a command of its own through RunProgram. It is the
// command's code, not an API: it changes with the command, without notice.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Exit statuses of Main.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// command is one subcommand, or a group of them (sub set).
type command struct {
	name    string
	summary string
	usage   string // synopsis, description and examples, shown by --help
	// args is the number of positional arguments: at least minArgs, at
	// most maxArgs (-1: any number).
	minArgs, maxArgs int
	// setup defines the command's flags on fs and returns the function that
	// runs it once they are parsed, with the positional arguments.
	setup func(fs *flag.FlagSet, env *env) func(ctx context.Context, args []string) error
	// sub holds the subcommands of a group such as "queue"; setup is nil
	// then.
	sub []command
}

// env is what a command may touch.
type env struct {
	stdout, stderr io.Writer
	stdin          io.Reader
	getenv         func(string) string
	// maxLine is the longest line sluice send reads from stdin (0: the
	// default, 128 MiB).
	maxLine int
}

// stdinIsTerminal reports whether standard input is a terminal (where a
// command that reads it would otherwise seem to hang).
func (e *env) stdinIsTerminal() bool {
	f, ok := e.stdin.(*os.File)
	return ok && isTerminalFile(f)
}

func commands() []command {
	return []command{
		migrateCommand(), queueCommand(), groupCommand(), sendCommand(), receiveCommand(), tailCommand(),
		ackCommand(), nackCommand(), extendCommand(),
		statusCommand(), dlqCommand(), serverCommand(), envCommand(), demoCommand(), versionCommand(),
	}
}

const mainUsage = `sluice is a message queue that lives inside PostgreSQL.

Usage:
  sluice <command> [arguments] [flags]

Commands:
%s
Choosing the database (every command that uses one):
  --database-url URL, else $DATABASE_URL, else the libpq variables (PGHOST,
  PGPORT, PGDATABASE, PGUSER, PGPASSWORD, PGSERVICE, ...) when any of PGHOST,
  PGHOSTADDR, PGPORT, PGDATABASE, PGUSER or PGSERVICE is set. With none of
  these, sluice runs an embedded PostgreSQL of its own: fetched once (into
  $SLUICE_CACHE_DIR, else $XDG_CACHE_HOME/sluice, else ~/.cache/sluice), its
  data kept in $SLUICE_DATA_DIR, else $XDG_DATA_HOME/sluice, else
  ~/.local/share/sluice (a directory under /tmp when those are unusable, or
  when running as root and they are private), with the sluice schema
  installed, and stopped when the command exits.

Run "sluice <command> --help" for the flags and examples of a command.

Quick start:
  sluice demo                                  # a one-minute live scenario
  sluice queue create orders
  sluice send orders '{"id": 1}'
  sluice receive orders
`

// Main runs the sluice command with args (the command line without the
// program name), writing to stdout and stderr, and returns the process exit
// status: 0 on success, 1 when the command failed, 2 for a usage error.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, &env{stdout: stdout, stderr: stderr, stdin: os.Stdin, getenv: os.Getenv})
}

func run(ctx context.Context, args []string, e *env) int {
	args, err := moveGlobalFlags(args)
	if err != nil {
		fmt.Fprintf(e.stderr, "sluice: %v\n%s", err, seeHelp("sluice"))
		return exitUsage
	}
	if len(args) == 0 {
		printGroupUsage(e.stderr, mainUsage, commands())
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			printGroupUsage(e.stdout, mainUsage, commands())
			return exitOK
		}
		return run(ctx, append(rest, "--help"), e)
	case "--version", "-version":
		return dispatch(ctx, "sluice", commands(), "version", rest, e)
	}
	return dispatch(ctx, "sluice", commands(), name, rest, e)
}

// dispatch finds command name among cmds and runs it.
func dispatch(ctx context.Context, prefix string, cmds []command, name string, rest []string, e *env) int {
	for _, c := range cmds {
		if c.name != name {
			continue
		}
		path := prefix + " " + c.name
		if c.sub == nil {
			return runCommand(ctx, path, c, rest, e)
		}
		if len(rest) == 0 {
			printGroupUsage(e.stderr, c.usage, c.sub)
			return exitUsage
		}
		switch rest[0] {
		case "help", "-h", "-help", "--help":
			if len(rest) > 1 {
				return dispatch(ctx, path, c.sub, rest[1], []string{"--help"}, e)
			}
			printGroupUsage(e.stdout, c.usage, c.sub)
			return exitOK
		}
		return dispatch(ctx, path, c.sub, rest[0], rest[1:], e)
	}
	fmt.Fprintf(e.stderr, "%s: unknown command %q\n", prefix, name)
	if near := nearest(name, cmds); near != "" {
		fmt.Fprintf(e.stderr, "Did you mean %q?\n", prefix+" "+near)
	}
	fmt.Fprint(e.stderr, seeHelp(prefix))
	return exitUsage
}

// nearest returns the command whose name is closest to a mistyped one: a
// typo or two away (edit distance, a swap of two letters counting one), or
// a prefix of at least two letters; "" when none is.
func nearest(name string, cmds []command) string {
	best, bestD := "", 3
	if len(name) < 4 {
		bestD = 2 // "sned" is send; "qu" is not a word to fix, but a prefix
	}
	for _, c := range cmds {
		if len(name) >= 2 && strings.HasPrefix(c.name, name) {
			return c.name
		}
		if d := editDistance(strings.ToLower(name), c.name); d < bestD {
			best, bestD = c.name, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and swaps of adjacent letters.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// plural says n things: "1 message", "3 messages".
func plural[N int | int64](n N, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// printGroupUsage prints the usage of a group of commands: usage has one %s
// for the list of commands.
func printGroupUsage(w io.Writer, usage string, cmds []command) {
	var list strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&list, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, usage, list.String())
}

func runCommand(ctx context.Context, path string, c command, args []string, e *env) int {
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	run := c.setup(fs, e)
	explainDurations(fs)
	usage := func(w io.Writer) {
		fmt.Fprint(w, c.usage)
		var flags strings.Builder
		fs.VisitAll(func(f *flag.Flag) {
			arg, text := flag.UnquoteUsage(f)
			if _, ok := f.Value.(friendlyDuration); ok && arg == "value" {
				arg = "duration"
			}
			def := ""
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "[]" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(&flags, "  --%s %s\n      %s%s\n", f.Name, arg, text, def)
		})
		if flags.Len() > 0 {
			fmt.Fprintf(w, "\nFlags:\n%s", strings.ReplaceAll(flags.String(), " \n", "\n"))
		}
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(e.stdout)
			return exitOK
		}
		fmt.Fprintf(e.stderr, "%s: %v\n%s", path, err, seeHelp(path))
		return exitUsage
	}
	switch {
	case len(pos) < c.minArgs:
		fmt.Fprintf(e.stderr, "%s: missing arguments\n%s%s", path, synopsis(c.usage), seeHelp(path))
		return exitUsage
	case c.maxArgs >= 0 && len(pos) > c.maxArgs:
		fmt.Fprintf(e.stderr, "%s: unexpected argument %q\n%s%s", path, pos[c.maxArgs], synopsis(c.usage), seeHelp(path))
		return exitUsage
	}
	if err := run(ctx, pos); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(e.stderr, "%s: %v\n%s", path, err, seeHelp(path))
			return exitUsage
		}
		fmt.Fprintf(e.stderr, "%s: %v\n", path, explain(err))
		return exitError
	}
	return exitOK
}

// seeHelp is the line that follows a usage error: where the help is,
// instead of the help itself (which would push the error off the screen).
func seeHelp(path string) string {
	return fmt.Sprintf("Run %q for usage.\n", path+" --help")
}

// synopsis returns the first line of a command's usage ("Usage: ...").
func synopsis(usage string) string {
	line, _, _ := strings.Cut(usage, "\n")
	return line + "\n"
}

// globalFlags are the flags that may come before the command as well as
// after it: "sluice --database-url URL status".
var globalFlags = []string{"database-url"}

// moveGlobalFlags moves the global flags given before the command (such as
// --database-url URL or --database-url=URL) to the end of the command's
// arguments, before any "--", where the command's flag set parses them.
func moveGlobalFlags(args []string) ([]string, error) {
	var moved []string
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		if !slices.Contains(globalFlags, name) {
			break
		}
		if !hasValue {
			if len(args) < 2 {
				return nil, fmt.Errorf("flag needs an argument: --%s", name)
			}
			value, args = args[1], args[1:]
		}
		moved = append(moved, "--"+name, value)
		args = args[1:]
	}
	if len(moved) == 0 {
		return args, nil
	}
	if len(args) == 0 {
		return nil, errors.New("missing command after the flags")
	}
	out := make([]string, 0, len(args)+len(moved))
	end := slices.Index(args, "--")
	if end < 0 {
		end = len(args)
	}
	out = append(out, args[:end]...)
	out = append(out, moved...)
	return append(out, args[end:]...), nil
}

// usageError is a bad flag value or argument found after parsing.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// parseInterleaved parses flags that may come before, between or after the
// positional arguments (which it returns). Everything after "--" is
// positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
