package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	sqlsrc "github.com/sluicemq/sluice/sql"
)

// RunCommand runs args (a command and its arguments) against a fresh
// database that has the sluice schema, for the tests of clients written in
// other languages (pytest, node --test). The database is created on the
// server DATABASE_URL names when it is set (its user needs CREATEDB), else
// on a private PostgreSQL (see Start). setup, when not nil, runs first with
// the new database's connection string (to install more, such as the pgmq
// layer). The command runs with DATABASE_URL set to the new database and
// its standard streams connected to this process's; afterwards the database
// is dropped and a private server stopped. SIGINT and SIGTERM are passed on
// to the command. It returns the command's exit status.
func RunCommand(args []string, setup func(ctx context.Context, url string) error) (code int, err error) {
	if len(args) == 0 {
		return 2, errors.New("no command given")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	srv, err := Start(sctx)
	if err != nil {
		return 1, fmt.Errorf("starting PostgreSQL: %w", err)
	}
	defer func() { err = errors.Join(err, srv.Close()) }()

	url, drop, err := srv.CreateDatabase(sctx, sqlsrc.FS)
	if err != nil {
		return 1, fmt.Errorf("creating a database: %w", err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer dcancel()
		err = errors.Join(err, drop(dctx))
	}()
	if setup != nil {
		if err := setup(sctx, url); err != nil {
			return 1, err
		}
	}

	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	// On SIGINT or SIGTERM the command gets SIGTERM and 10 seconds to end.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			if code := exit.ExitCode(); code >= 0 {
				return code, nil
			}
			return 1, fmt.Errorf("running %s: %w", args[0], err)
		}
		return 1, fmt.Errorf("running %s: %w", args[0], err)
	}
	return 0, nil
}
