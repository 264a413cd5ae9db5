// Command pgtest-run runs a command against a fresh database that has the
// sluice schema, for the tests of the clients in other languages (the
// Python client's pytest suite, the shared conformance vectors).
//
// Usage:
//
//	pgtest-run COMMAND [ARG...]
//
// The database is created on the server DATABASE_URL names when it is set
// (its user needs CREATEDB), else on a private PostgreSQL that
// internal/pgtest starts. COMMAND runs with DATABASE_URL set to the new
// database; afterwards the database is dropped and a private server
// stopped. The exit status is COMMAND's.
package main

import (
	"fmt"
	"os"

	"github.com/sluicemq/sluice/internal/pgtest"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pgtest-run COMMAND [ARG...]")
		os.Exit(2)
	}
	code, err := pgtest.RunCommand(os.Args[1:], nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest-run:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
