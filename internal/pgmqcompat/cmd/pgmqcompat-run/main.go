// Command pgmqcompat-run runs a command against a fresh database that has
// the sluice schema and its PGMQ compatibility layer (schema pgmq), for the
// tests that drive real pgmq clients (Python, JavaScript) against it.
//
// Usage:
//
//	pgmqcompat-run COMMAND [ARG...]
//
// The database is created on the server DATABASE_URL names when it is set
// (its user needs CREATEDB), else on a private PostgreSQL that
// internal/pgtest starts. COMMAND runs with DATABASE_URL set to the new
// database; afterwards the database is dropped and a private server
// stopped. The exit status is COMMAND's.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/pgmqcompat"
	"github.com/sluicemq/sluice/internal/pgtest"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pgmqcompat-run COMMAND [ARG...]")
		os.Exit(2)
	}
	code, err := run(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgmqcompat-run:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(args []string) (code int, err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	srv, err := pgtest.Start(sctx)
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
	if err := install(sctx, url); err != nil {
		return 1, err
	}

	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), nil
		}
		return 1, fmt.Errorf("running %s: %w", args[0], err)
	}
	return 0, nil
}

func install(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connecting to the new database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := pgmqcompat.Install(ctx, conn); err != nil {
		return fmt.Errorf("installing the pgmq layer: %w", err)
	}
	return nil
}
