package sluice

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/internal/notifier"
)

// Client sends, receives and administers sluice queues through a pgx pool.
// It is safe for concurrent use and cheap to make, and it never closes the
// pool. Its only state besides the pool is the LISTEN connection that its
// consumers (Consume) share: taken from the pool when the first consumer
// starts, closed when the last one returns, so a Client needs no Close.
//
// Every method that runs SQL has a ...Tx twin taking a pgx.Tx: the call then
// joins the caller's transaction, so that sending, acknowledging and the
// application's own writes commit or roll back together.
type Client struct {
	pool     *pgxpool.Pool
	notifier *notifier.Notifier
}

// NewClient returns a client that runs its statements on pool. The database
// must have the sluice schema (see package migrate or "sluice migrate").
func NewClient(pool *pgxpool.Pool) *Client {
	return &Client{pool: pool, notifier: notifier.New(pool)}
}

// Pool returns the pool the client was made with.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// dbtx is what the library runs statements on: the pool (each statement in
// its own transaction) or a pgx.Tx (the caller's transaction).
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// InTx runs fn in a transaction on the client's pool and commits it if fn
// returns nil, or rolls it back otherwise (also when fn panics); fn's error
// is returned as is. Use it with the ...Tx methods, for example to
// acknowledge a message and send its follow-up atomically.
func (c *Client) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("sluice: beginning a transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("sluice: committing: %w", err)
	}
	return nil
}

// nullText maps "" to SQL NULL.
func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nullInterval maps 0 to SQL NULL, and other durations to intervals.
func nullInterval(d time.Duration) any {
	if d == 0 {
		return nil
	}
	return d
}

// textOrEmpty reads a nullable text column.
func textOrEmpty(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// errNegative reports a negative duration argument before it reaches SQL.
// checkPriority refuses a priority outside the engine's int (a batch send
// stored 3000000000 as -1294967296; a single send failed in the driver).
func checkPriority(p int) error {
	if p < math.MinInt32 || p > math.MaxInt32 {
		return &Error{Code: "SL006", Message: fmt.Sprintf("priority must be between %d and %d, got %d", math.MinInt32, math.MaxInt32, p), kind: ErrInvalidArgument}
	}
	return nil
}

func errNegative(what string, d time.Duration) error {
	return &Error{Code: "SL006", Message: fmt.Sprintf("%s must not be negative, got %s", what, d), kind: ErrInvalidArgument}
}
