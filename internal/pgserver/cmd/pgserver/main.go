// Command pgserver runs a private PostgreSQL server (package pgserver) for
// the test harness of the library module, internal/pgtest, which builds
// and starts it when DATABASE_URL is not set. The harness cannot import
// package pgserver: it would make the library module require
// embedded-postgres, which fetches the binaries.
//
// Usage:
//
//	pgserver
//
// It starts a fresh temporary cluster of the version in SLUICE_PG_VERSION
// (14 to 18, default pgserver.DefaultVersion), writes one line to standard
// output, the connection URL of its maintenance database postgres (as user
// postgres), and runs until its standard input ends (the harness closes it,
// or dies) or it receives SIGINT or SIGTERM. Then it stops the server,
// removes the cluster and exits. Messages go to standard error; the exit
// status is 1 when the server could not be started or stopped cleanly.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicemq/sluice/internal/pgserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "pgserver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	srv, err := pgserver.Start(sctx, pgserver.Config{Version: os.Getenv("SLUICE_PG_VERSION")})
	cancel()
	if err != nil {
		return err
	}
	if _, err := fmt.Println(srv.URL("postgres")); err != nil {
		return fmt.Errorf("%w (and stopping the server: %v)", err, srv.Stop())
	}
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-ctx.Done():
	}
	return srv.Stop()
}
