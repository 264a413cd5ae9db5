package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/internal/sqlstate"
)

// pgVariables are the libpq variables that, when any is set, name the
// database to use (instead of the embedded one).
var pgVariables = []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE"}

// dbFlag defines --database-url on fs.
func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("database-url", "", "PostgreSQL connection `URL` (default $DATABASE_URL, else the PG* variables, else the embedded server)")
}

// settings is where the connection settings come from.
type settings struct {
	connString string // "" with source "the PG* environment variables"
	source     string // for messages: "--database-url", "DATABASE_URL", ...
	embedded   bool   // nothing configured: use the embedded server
}

// chooseSettings applies the rule of "sluice --help": --database-url, else
// DATABASE_URL, else the PG* variables if any is set, else embedded.
func (e *env) chooseSettings(flagURL string) settings {
	if flagURL != "" {
		return settings{connString: flagURL, source: "--database-url"}
	}
	if u := e.getenv("DATABASE_URL"); u != "" {
		return settings{connString: u, source: "DATABASE_URL"}
	}
	for _, v := range pgVariables {
		if e.getenv(v) != "" {
			return settings{source: "the PG* environment variables"}
		}
	}
	return settings{embedded: true}
}

// target describes a connection's database for messages, without its
// password.
func target(cfg *pgconn.Config) string {
	db := cfg.Database
	if db == "" {
		db = cfg.User // what the server assumes
	}
	return fmt.Sprintf("database %q on %s as user %q", db, net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), cfg.User)
}

// database is an open connection pool for a command.
type database struct {
	pool   *pgxpool.Pool
	client *sluice.Client
	target string
	// url is the connection string; embedded tells whether it is the
	// embedded server's.
	url      string
	embedded bool
	close    func()
}

// openDB connects to the database the settings name (starting the embedded
// server if none is configured) and checks that it can be reached.
func (e *env) openDB(ctx context.Context, flagURL string) (*database, error) {
	s := e.chooseSettings(flagURL)
	stopEmbedded := func() {}
	if s.embedded {
		url, stop, err := e.startEmbedded(ctx)
		if err != nil {
			return nil, fmt.Errorf("starting the embedded PostgreSQL (name a server with --database-url or DATABASE_URL instead): %w", err)
		}
		s = settings{connString: url, source: "the embedded server"}
		stopEmbedded = stop
	}
	cfg, err := pgxpool.ParseConfig(s.connString)
	if err != nil {
		stopEmbedded()
		return nil, usagef("reading the connection settings from %s: %v", s.source, err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 15 * time.Second
	}
	cfg.MaxConns = max(cfg.MaxConns, 16)
	t := target(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
		if err != nil {
			pool.Close()
		}
	}
	if err != nil {
		stopEmbedded()
		return nil, fmt.Errorf("cannot connect to %s (settings from %s; name another with --database-url, DATABASE_URL or the PG* variables): %w",
			t, s.source, err)
	}
	return &database{
		pool: pool, client: sluice.NewClient(pool), target: t,
		url: s.connString, embedded: s.source == "the embedded server",
		close: func() { pool.Close(); stopEmbedded() },
	}, nil
}

// connectOne is openDB for a single connection (sluice migrate).
func (e *env) connectOne(ctx context.Context, flagURL string) (*pgx.Conn, string, func(), error) {
	s := e.chooseSettings(flagURL)
	stopEmbedded := func() {}
	if s.embedded {
		url, stop, err := e.startEmbedded(ctx)
		if err != nil {
			return nil, "", nil, fmt.Errorf("starting the embedded PostgreSQL (name a server with --database-url or DATABASE_URL instead): %w", err)
		}
		s = settings{connString: url, source: "the embedded server"}
		stopEmbedded = stop
	}
	cfg, err := pgx.ParseConfig(s.connString)
	if err != nil {
		stopEmbedded()
		return nil, "", nil, usagef("reading the connection settings from %s: %v", s.source, err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 15 * time.Second
	}
	t := target(&cfg.Config)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		stopEmbedded()
		return nil, "", nil, fmt.Errorf("cannot connect to %s (settings from %s; name another with --database-url, DATABASE_URL or the PG* variables): %w",
			t, s.source, err)
	}
	return conn, t, func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
		stopEmbedded()
	}, nil
}

// withDB runs fn with an open database and closes it afterwards.
func (e *env) withDB(ctx context.Context, flagURL string, fn func(db *database) error) error {
	db, err := e.openDB(ctx, flagURL)
	if err != nil {
		return err
	}
	defer db.close()
	return fn(db)
}

// explain adds what the user can do about an error.
func explain(err error) string {
	msg := err.Error()
	// The engine's hint names SQL functions: say it in the command's words.
	var se *sluice.Error
	hinted := false
	if errors.As(err, &se) && se.Hint != "" {
		repl := se.Message
		if h := sqlstate.Hint(se.Hint, sqlstate.CLI); h != "" {
			repl += " (" + strings.TrimSuffix(h, ".") + ")"
			hinted = true
		}
		msg = strings.Replace(msg, se.Error(), repl, 1)
	}
	switch {
	case errors.Is(err, sluice.ErrSchemaMissing):
		return msg + "\nThe sluice schema is not installed in this database (or is older than this sluice): run \"sluice migrate\" with the same connection settings."
	case errors.Is(err, sluice.ErrQueueNotFound) && !hinted:
		return msg + "\n\"sluice queue list\" shows the queues; \"sluice queue create NAME\" makes one."
	case errors.Is(err, sluice.ErrGroupNotFound) && !hinted:
		return msg + "\n\"sluice queue list\" shows the groups of each queue; \"sluice group create QUEUE GROUP\" makes one."
	case errors.Is(err, context.Canceled):
		return "interrupted"
	}
	return strings.TrimSpace(msg)
}
