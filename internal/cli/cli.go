// Package cli implements the sluice command: its subcommands, flags and
// help. cmd/sluice only calls Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Exit statuses of Main.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	usage   string // synopsis, description and examples, shown by --help
	// setup defines the command's flags on fs and returns the function that
	// runs it once they are parsed.
	setup func(fs *flag.FlagSet, env *env) func(ctx context.Context) error
}

// env is what a command may touch.
type env struct {
	stdout, stderr io.Writer
}

func commands() []command {
	return []command{migrateCommand(), versionCommand()}
}

const mainUsage = `sluice is a message queue that lives inside PostgreSQL.

Usage:
  sluice <command> [flags]

Commands:
%s
Run "sluice <command> --help" for the flags and examples of a command.
`

// Main runs the sluice command with args (the command line without the
// program name), writing to stdout and stderr, and returns the process exit
// status: 0 on success, 1 when the command failed, 2 for a usage error.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		printMainUsage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			printMainUsage(stdout)
			return exitOK
		}
		name, rest = rest[0], []string{"--help"}
	}
	for _, c := range commands() {
		if c.name == name {
			return runCommand(ctx, c, rest, e)
		}
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", name)
	printMainUsage(stderr)
	return exitUsage
}

func printMainUsage(w io.Writer) {
	var list strings.Builder
	for _, c := range commands() {
		fmt.Fprintf(&list, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, mainUsage, list.String())
}

func runCommand(ctx context.Context, c command, args []string, e *env) int {
	fs := flag.NewFlagSet("sluice "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	run := c.setup(fs, e)
	usage := func(w io.Writer) {
		fmt.Fprint(w, c.usage)
		var flags strings.Builder
		fs.VisitAll(func(f *flag.Flag) {
			arg, text := flag.UnquoteUsage(f)
			fmt.Fprintf(&flags, "  --%s %s\n      %s\n", f.Name, arg, text)
		})
		if flags.Len() > 0 {
			fmt.Fprintf(w, "\nFlags:\n%s", strings.ReplaceAll(flags.String(), " \n", "\n"))
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(e.stdout)
			return exitOK
		}
		fmt.Fprintf(e.stderr, "sluice %s: %v\n\n", c.name, err)
		usage(e.stderr)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "sluice %s: unexpected argument %q\n\n", c.name, fs.Arg(0))
		usage(e.stderr)
		return exitUsage
	}
	if err := run(ctx); err != nil {
		fmt.Fprintf(e.stderr, "sluice %s: %v\n", c.name, err)
		return exitError
	}
	return exitOK
}
