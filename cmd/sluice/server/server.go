// Package server is "sluice server": an HTTP API over sluice's public SQL
// API (docs/http.md), with bearer-token auth mapped to the sluice_* database
// roles, long polls woken by one shared LISTEN connection, limits, and
// Prometheus metrics.
//
// Every request's SQL runs in one transaction under SET LOCAL ROLE of the
// caller's role, so PostgreSQL enforces the privileges; the server also
// checks the token's queue patterns.
//
// It is the command's code, not an API (it changes with the command,
// without notice): the package is importable only so that the benchmark's
// module (bench/) can run the server in its process.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice"
)

// Config configures a Server. Zero limits take the defaults shown.
type Config struct {
	// Pool is the database the server works on; the server does not close
	// it. Its login role must be a member of the sluice_* roles the tokens
	// map to (superusers are).
	Pool *pgxpool.Pool
	// Auth says how requests are authenticated.
	Auth AuthConfig
	// Logger receives the server's log (default: slog.Default()): every
	// 5xx with its cause and request id, the access log, the listener's
	// state. No line holds a token or a message body.
	Logger *slog.Logger
	// AccessLog logs one line per request at level INFO: request id,
	// method, path, status, bytes, duration, remote address.
	AccessLog bool
	// MaxBody is the largest request body in bytes (default 8 MiB).
	MaxBody int64
	// MaxBatch is the most messages of one send batch or transaction, and
	// the most a receive may ask for (default 1000).
	MaxBatch int
	// MaxWait is the longest long poll (default 30s).
	MaxWait time.Duration
	// PollInterval is how often the queues that long polls wait on are
	// checked (one sluice.status call per queue, whatever the number of
	// long polls) besides the notifications, for delayed messages and
	// retries that come due (default 5s; 500ms while the LISTEN connection
	// is down).
	PollInterval time.Duration
	// MaxConcurrent is how many requests one token may have in progress
	// (long polls included) before it gets 429 (default 64).
	MaxConcurrent int
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	ReadHeaderTimeout time.Duration
	// EventsInterval is how often GET /v1/events sends the status: one
	// sluice.status call per interval and role, shared by the streams of
	// that role (default 1s).
	EventsInterval time.Duration
	// HistoryInterval is how often the server samples the status for GET
	// /v1/status/history, which keeps the last hour of samples in memory
	// (default 10s: 361 samples of each group).
	HistoryInterval time.Duration
	// Hosts are the host names (or addresses) the server answers to besides
	// the address it listens on, such as the name a reverse proxy or DNS
	// gives it: a request whose Host is neither is refused (421), and so
	// is one whose Origin is neither (guardBrowser).
	Hosts []string
	// ReservedConns is how many of the pool's connections are kept for the
	// message endpoints (send, batch send, receive, ack, nack, extend,
	// transaction): every other request that uses the database (status,
	// lists, peek, leases, dead letters, administration, /metrics) waits
	// for a place among the rest, server-wide, so that no token's such
	// calls can hold the whole pool (default: a quarter of the pool, at
	// least 2; the others get at least 1).
	ReservedConns int
	// MaxTxQueues is the most distinct queues one POST /v1/transaction may
	// name (default 16): each queue's tables take locks until the commit,
	// and about 330 exhausted PostgreSQL's lock table.
	MaxTxQueues int
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxBody <= 0 {
		c.MaxBody = 8 << 20
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1000
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 30 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 5 * time.Second
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = 64
	}
	if c.ReadHeaderTimeout <= 0 {
		c.ReadHeaderTimeout = 10 * time.Second
	}
	if c.EventsInterval <= 0 {
		c.EventsInterval = time.Second
	}
	if c.HistoryInterval <= 0 {
		c.HistoryInterval = 10 * time.Second
	}
	if c.MaxTxQueues <= 0 {
		c.MaxTxQueues = 16
	}
}

// Server is the HTTP server. Make it with New, run it with Serve.
type Server struct {
	cfg     Config
	pool    *pgxpool.Pool
	client  *sluice.Client
	auth    *authenticator
	notify  *notifier
	limiter *limiter
	metrics *metrics
	hub     *eventHub
	history *statusHistory
	gate    *gate
	// statuses shares the status readings (statusshare.go).
	statuses *statusShare
	handler  http.Handler
	routes   []route
	// batches keeps batch sends' memory between requests (batchScratch).
	batches sync.Pool
	// hosts are cfg.Hosts in lower case; listenIP is the address Serve
	// listens on (nil before Serve).
	hosts    []string
	listenIP atomic.Pointer[net.IP]

	// draining is closed when shutdown starts: long polls return.
	draining  chan struct{}
	drainOnce sync.Once
}

// New makes a server.
func New(cfg Config) (*Server, error) {
	cfg.defaults()
	if cfg.Pool == nil {
		return nil, errors.New("sluice server: no database pool")
	}
	if !cfg.Auth.Insecure && !cfg.Auth.Enabled() {
		return nil, errors.New("sluice server: no authentication configured (tokens file or JWT keys), and not insecure")
	}
	a, err := newAuthenticator(cfg.Auth, cfg.Logger)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, pool: cfg.Pool, client: sluice.NewClient(cfg.Pool), auth: a,
		notify:   newNotifier(cfg.Pool, cfg.Logger),
		limiter:  newLimiter(cfg.MaxConcurrent),
		draining: make(chan struct{}),
	}
	for _, h := range cfg.Hosts {
		s.hosts = append(s.hosts, strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), ".")))
	}
	poolMax := int(cfg.Pool.Config().MaxConns)
	reserve := cfg.ReservedConns
	if reserve <= 0 {
		reserve = max(2, poolMax/4)
	}
	gated := max(1, poolMax-reserve)
	s.gate = newGate(gated, gateWait)
	s.statuses = newStatusShare(s.gate, max(1, gated/4), statusSpacing)
	s.batches.New = func() any { return new(batchScratch) }
	s.metrics = newMetrics(s)
	s.hub = newEventHub(s)
	s.history = newStatusHistory(cfg.HistoryInterval)
	s.routes = s.routeTable()
	s.handler = s.buildMux()
	return s, nil
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry returns the Prometheus registry /metrics serves.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

// Serve serves HTTP on ln until ctx is done, then shuts down gracefully:
// long polls return what they have (nothing), requests in progress end
// (for up to grace), the listener closes. It returns nil after a clean
// shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		ip := a.IP
		s.listenIP.Store(&ip)
	}
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadHeaderTimeout + time.Minute,
		WriteTimeout:      s.cfg.MaxWait + time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
	}
	lctx, stopListen := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); s.sampleHistory(lctx) }()
	go func() { defer wg.Done(); s.notify.run(lctx) }()
	go func() { defer wg.Done(); s.notify.hotWake(lctx) }()
	go func() { defer wg.Done(); s.notify.sweep(lctx, s.cfg.PollInterval) }()
	defer func() { stopListen(); wg.Wait() }()

	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("sluice server: %w", err)
	case <-ctx.Done():
	}
	s.Drain()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
		return fmt.Errorf("sluice server: shutting down: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Drain makes the long polls in progress return at once, and new ones not
// wait: the start of a graceful shutdown.
func (s *Server) Drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// tx runs fn in a transaction under the principal's role. BEGIN and SET
// LOCAL ROLE go to the server together, in one round trip; then fn's
// statements, then COMMIT. Handlers of one statement use s.one, one round
// trip in all.
func (s *Server) tx(ctx context.Context, p *Principal, fn func(tx pgx.Tx) error) error {
	opts := pgx.TxOptions{}
	if p.Role != "" {
		opts.BeginQuery = "BEGIN; SET LOCAL ROLE " + pgx.Identifier{p.Role}.Sanitize()
	}
	tx, err := s.pool.BeginTx(ctx, opts)
	if err != nil {
		var pg *pgconn.PgError
		if errors.As(err, &pg) && pg.Code == "42501" {
			return s.roleProblem(p.Role, err)
		}
		return fmt.Errorf("beginning a transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
