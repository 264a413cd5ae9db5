package cli

import (
	"context"
	"flag"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Command is a command defined outside this package, run by RunProgram:
// the benchmark's sluice-bench (bench/) is one, kept out of the sluice
// binary so that it links neither River nor the benchmark.
type Command struct {
	// Usage is the synopsis, description and examples that --help shows
	// before the flags.
	Usage string
	// MinArgs and MaxArgs bound the number of positional arguments (MaxArgs
	// -1: any number).
	MinArgs, MaxArgs int
	// Setup defines the command's flags on fs and returns the function that
	// runs it once they are parsed, with the positional arguments.
	Setup func(fs *flag.FlagSet, env *Env) func(ctx context.Context, args []string) error
}

// Env is what a Command may touch: its output and the database.
type Env struct{ e *env }

// Stdout is where the command writes its results.
func (e *Env) Stdout() io.Writer { return e.e.stdout }

// StdoutIsTerminal reports whether Stdout is a terminal.
func (e *Env) StdoutIsTerminal() bool { return isTerminal(e.e.stdout) }

// WithDatabase runs fn with a pool on the database a sluice command would
// use (flagURL, else DATABASE_URL, else the libpq variables, else the
// embedded PostgreSQL, started with the sluice schema installed) and a
// description of it for messages, then closes the pool and stops an
// embedded server.
func (e *Env) WithDatabase(ctx context.Context, flagURL string, fn func(pool *pgxpool.Pool, target string) error) error {
	return e.e.withDB(ctx, flagURL, func(db *database) error { return fn(db.pool, db.target) })
}

// DatabaseFlag defines --database-url on fs, as every sluice command has
// it; pass its value to Env.WithDatabase.
func DatabaseFlag(fs *flag.FlagSet) *string { return dbFlag(fs) }

// Usagef makes a usage error: RunProgram prints it with a pointer to
// --help and returns status 2.
func Usagef(format string, args ...any) error { return usagef(format, args...) }

// RunProgram runs c as a program named name with args (the command line
// without the program name), with the sluice command's flag parsing (flags
// before, between or after the arguments), help (--help) and errors, and
// returns the process exit status: 0 on success, 1 when the command failed,
// 2 for a usage error.
func RunProgram(ctx context.Context, name string, c Command, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr, stdin: os.Stdin, getenv: os.Getenv}
	return runCommand(ctx, name, command{
		name: name, usage: c.Usage, minArgs: c.MinArgs, maxArgs: c.MaxArgs,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			return c.Setup(fs, &Env{e})
		},
	}, args, e)
}
