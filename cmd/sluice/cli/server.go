package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/cmd/sluice/server"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

const serverUsage = `Usage: sluice server [--listen ADDR] [--database-url URL] [flags]

Serves the HTTP API of sluice (JSON under /v1, see docs/http.md and
/v1/openapi.json), Prometheus metrics (/metrics) and health checks
(/healthz, /readyz), in the foreground until interrupted (Ctrl-C or
SIGTERM): then long polls return empty, requests in progress end and the
listener closes.

With no database configured it runs the embedded PostgreSQL for as long as
it serves, and prints its DATABASE_URL, so that psql, Go programs and the
other sluice commands can use the same database meanwhile ("sluice env"
prints it too).

Authentication: bearer tokens, each mapped to one of the database roles
sluice_producer, sluice_consumer or sluice_admin (and optionally to
queue-name patterns); every request's SQL runs under SET LOCAL ROLE of its
token's role. Tokens come from --tokens-file (static tokens) or are JWTs
signed with --jwt-hs256-secret-file or an --jwt-ed25519-key-file key.
Without any of these, authentication is off only with --insecure-no-auth, or
by default on the embedded database when listening on a loopback address.
The database login role must be a member of the roles the tokens use.

Examples:
  sluice server
  sluice server --database-url postgres://sluice_server@db/app --migrate --tokens-file tokens.json
  sluice server --listen 0.0.0.0:7810 --jwt-ed25519-key-file jwt.pub --tokens-file tokens.json
`

func serverCommand() command {
	return command{
		name: "server", summary: "serve the HTTP API, metrics and health checks", usage: serverUsage,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			url := dbFlag(fs)
			listen := fs.String("listen", "127.0.0.1:7810", "`address` to listen on (host:port)")
			migrateOnStart := fs.Bool("migrate", false, "install or upgrade the sluice schema before serving")
			tokens := fs.String("tokens-file", "", "JSON `file` of static tokens (see docs/http.md)")
			hsFile := fs.String("jwt-hs256-secret-file", "", "`file` holding the shared secret of HS256 JWTs")
			edFiles := fs.String("jwt-ed25519-key-file", "", "PEM `files` (comma-separated) of the Ed25519 public keys of EdDSA JWTs")
			audience := fs.String("jwt-audience", "", "if set, JWTs must name this `audience` in aud")
			insecure := fs.Bool("insecure-no-auth", false, "accept requests without a token, all running as the database login role")
			maxBody := fs.Int64("max-body", 8<<20, "largest request body in `bytes`")
			maxBatch := fs.Int("max-batch", 1000, "most messages of one batch send, receive or transaction")
			maxConc := fs.Int("max-concurrent", 64, "most requests in progress per token (more get 429)")
			maxTxQueues := fs.Int("max-tx-queues", 16, "most distinct queues one /v1/transaction may name")
			reserved := fs.Int("reserved-conns", 0, "database connections kept for sends, receives, acks, nacks, extends and transactions; other requests share the rest of the pool (default: a quarter of the pool, at least 2)")
			maxWait := fs.Duration("max-wait", 30*time.Second, "longest long poll (wait of receive)")
			poll := fs.Duration("poll-interval", 5*time.Second, "how often the queues that long polls wait on are checked, for delays and retries coming due")
			headerTimeout := fs.Duration("read-header-timeout", 10*time.Second, "time allowed to read a request's headers")
			grace := fs.Duration("shutdown-grace", 30*time.Second, "how long requests in progress may take to end at shutdown")
			events := fs.Duration("events-interval", time.Second, "how often /v1/events (the dashboard's stream) sends the status: one sluice.status per interval and role")
			history := fs.Duration("history-interval", 10*time.Second, "how often the status is sampled for /v1/status/history (the dashboard's charts), which keeps the last hour in memory")
			hosts := fs.String("allowed-host", "", "host `names` (comma-separated) the server answers to besides its listen address, such as a reverse proxy's; requests naming another Host or Origin are refused")
			logFormat := fs.String("log-format", "text", "log `format` on stderr: text or json")
			logLevel := fs.String("log-level", "info", "lowest `level` logged: debug, info, warn or error")
			accessLog := fs.Bool("access-log", false, "log one line per request (request id, method, path, status, bytes, duration)")
			return func(ctx context.Context, _ []string) (err error) {
				logger, err := newLogger(e.stderr, *logFormat, *logLevel)
				if err != nil {
					return err
				}
				serving := false
				defer func() {
					if err != nil && !serving {
						logger.Error("sluice server: refused to start", "error", err)
					}
				}()
				auth := server.AuthConfig{Insecure: *insecure, TokensFile: *tokens, Audience: *audience}
				if *hsFile != "" {
					b, err := os.ReadFile(*hsFile)
					if err != nil {
						return usagef("--jwt-hs256-secret-file: %v", err)
					}
					auth.HS256Secret = []byte(strings.TrimRight(string(b), "\r\n"))
					if len(auth.HS256Secret) < 32 {
						return usagef("--jwt-hs256-secret-file: the secret must have at least 32 bytes")
					}
				}
				if *edFiles != "" {
					for _, f := range strings.Split(*edFiles, ",") {
						b, err := os.ReadFile(f)
						if err == nil {
							var k []byte
							k, err = server.ParseEd25519PublicKey(b)
							auth.Ed25519Keys = append(auth.Ed25519Keys, k)
						}
						if err != nil {
							return usagef("--jwt-ed25519-key-file %s: %v", f, err)
						}
					}
				}
				if auth.TokensFile != "" {
					if _, err := server.LoadTokens(auth.TokensFile); err != nil {
						return usagef("--tokens-file: %v", err)
					}
				}
				host, _, err := net.SplitHostPort(*listen)
				if err != nil {
					return usagef("--listen %q: %v", *listen, err)
				}
				return e.withDB(ctx, *url, func(db *database) error {
					if auth.Insecure && auth.Enabled() {
						return usagef("--insecure-no-auth cannot be combined with tokens or JWT keys")
					}
					if !auth.Insecure && !auth.Enabled() {
						if !db.embedded || !isLoopback(host) {
							return usagef("no authentication configured: give --tokens-file or JWT keys, or --insecure-no-auth for local use")
						}
						auth.Insecure = true
						logger.Warn("sluice server: authentication is off (embedded database, loopback address; give --tokens-file or JWT keys to turn it on)")
					} else if auth.Insecure && !isLoopback(host) {
						logger.Warn("sluice server: authentication is off on an address that is not a loopback address", "listen", *listen)
					}
					if *migrateOnStart {
						if err := migrateWith(ctx, db); err != nil {
							return err
						}
					}
					srv, err := server.New(server.Config{
						Pool: db.pool, Auth: auth, MaxBody: *maxBody, MaxBatch: *maxBatch, MaxConcurrent: *maxConc,
						MaxWait: *maxWait, PollInterval: *poll, ReadHeaderTimeout: *headerTimeout, EventsInterval: *events,
						HistoryInterval: *history,
						Hosts:           splitList(*hosts), ReservedConns: *reserved, MaxTxQueues: *maxTxQueues,
						Logger: logger, AccessLog: *accessLog,
					})
					if err != nil {
						return err
					}
					ln, err := net.Listen("tcp", *listen)
					if err != nil {
						return fmt.Errorf("listening on %s: %w", *listen, err)
					}
					if db.embedded {
						fmt.Fprintf(e.stdout, "DATABASE_URL=%s\n", db.url)
					}
					fmt.Fprintf(e.stdout, "sluice server: listening on http://%s (database: %s)\n", ln.Addr(), db.target)
					logger.Info("sluice server: listening", "addr", ln.Addr().String(), "database", db.target,
						"auth", !auth.Insecure, "access_log", *accessLog)
					serving = true
					err = srv.Serve(ctx, ln, *grace)
					if err != nil {
						logger.Error("sluice server: stopped", "error", err)
					} else {
						logger.Info("sluice server: stopped")
					}
					return err
				})
			}
		},
	}
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// newLogger makes the server's logger on w: --log-format and --log-level.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	o := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// migrateWith installs or upgrades the schema on a connection of db's pool.
func migrateWith(ctx context.Context, db *database) error {
	c, err := db.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	defer c.Release()
	if _, err := migrate.Apply(ctx, c.Conn(), sqlsrc.FS); err != nil {
		return fmt.Errorf("migrating %s: %w", db.target, err)
	}
	return nil
}

const envUsage = `Usage: sluice env

Prints the DATABASE_URL of the embedded PostgreSQL while a sluice process
(such as "sluice server") runs it, as a shell assignment:

  eval "$(sluice env)"     # then psql "$DATABASE_URL", or any sluice command

It fails when no sluice process runs the embedded server.
`

func envCommand() command {
	return command{
		name: "env", summary: "print the embedded PostgreSQL's DATABASE_URL", usage: envUsage,
		setup: func(fs *flag.FlagSet, e *env) func(context.Context, []string) error {
			return func(ctx context.Context, _ []string) error {
				base, err := e.dataHome()
				if err != nil {
					return err
				}
				b, err := os.ReadFile(filepath.Join(base, filePort))
				port, perr := strconv.Atoi(strings.TrimSpace(string(b)))
				if err != nil || perr != nil {
					if err != nil && !errors.Is(err, os.ErrNotExist) {
						return err
					}
					return fmt.Errorf("no embedded PostgreSQL is running from %s: start one with \"sluice server\" (it runs while the server does)", base)
				}
				password, err := os.ReadFile(filepath.Join(base, filePassword))
				if err != nil {
					return fmt.Errorf("reading the embedded server's password: %w", err)
				}
				fmt.Fprintf(e.stdout, "export DATABASE_URL='%s'\n", embeddedURL(strings.TrimSpace(string(password)), port))
				return nil
			}
		},
	}
}
