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
// stopped. The exit status is COMMAND's. (internal/pgtest/cmd/pgtest-run
// is the same without the pgmq layer.)
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/pgmqcompat"
	"github.com/sluicemq/sluice/internal/pgtest"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pgmqcompat-run COMMAND [ARG...]")
		os.Exit(2)
	}
	code, err := pgtest.RunCommand(os.Args[1:], install)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgmqcompat-run:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
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
