package sqlsrc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/internal/pgtest"
)

var server *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &server) }

// bundle is what a test of the SQL engine works with: a fresh database with
// the sluice schema and helpers that call the SQL API.
type bundle struct {
	t    testing.TB
	ctx  context.Context
	pool *pgxpool.Pool
}

func setup(t testing.TB) *bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return &bundle{t: t, ctx: ctx, pool: server.NewPool(t)}
}

// msg is a row of sluice.receive.
type msg struct {
	ID       int64
	Body     string
	Key      *string
	Attempt  int
	Receipt  string
	Pos      int64
	Priority int
}

// q is a queryer: the pool, a connection or a transaction.
type q interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (b *bundle) exec(sql string, args ...any) {
	b.t.Helper()
	if _, err := b.pool.Exec(b.ctx, sql, args...); err != nil {
		b.t.Fatalf("%s: %v", sql, err)
	}
}

func (b *bundle) int64(sql string, args ...any) int64 {
	b.t.Helper()
	var v int64
	if err := b.pool.QueryRow(b.ctx, sql, args...).Scan(&v); err != nil {
		b.t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// int64s runs a query of one bigint column (such as send_batch's ids) and
// returns its rows in order.
func (b *bundle) int64s(sql string, args ...any) []int64 {
	b.t.Helper()
	rows, err := b.pool.Query(b.ctx, sql, args...)
	if err != nil {
		b.t.Fatalf("%s: %v", sql, err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		b.t.Fatalf("%s: %v", sql, err)
	}
	return vs
}

func (b *bundle) createQueue(name string, options string) {
	b.t.Helper()
	if options == "" {
		options = "{}"
	}
	b.exec("SELECT sluice.create_queue($1, $2::jsonb)", name, options)
}

func (b *bundle) send(db q, queue, body string) int64 {
	b.t.Helper()
	var id int64
	if err := db.QueryRow(b.ctx, "SELECT sluice.send($1, $2::jsonb)", queue, body).Scan(&id); err != nil {
		b.t.Fatalf("send: %v", err)
	}
	return id
}

func receiveOn(ctx context.Context, db q, queue, group string, n int, lease string) ([]msg, error) {
	var leaseArg any
	if lease != "" {
		leaseArg = lease
	}
	rows, err := db.Query(ctx,
		`SELECT id, body::text, key, attempt, receipt, pos, priority
		 FROM sluice.receive($1, $2, $3, $4::interval)`, queue, group, n, leaseArg)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (msg, error) {
		var m msg
		err := r.Scan(&m.ID, &m.Body, &m.Key, &m.Attempt, &m.Receipt, &m.Pos, &m.Priority)
		return m, err
	})
}

func (b *bundle) receive(queue, group string, n int, lease string) []msg {
	b.t.Helper()
	ms, err := receiveOn(b.ctx, b.pool, queue, group, n, lease)
	if err != nil {
		b.t.Fatalf("receive: %v", err)
	}
	return ms
}

func (b *bundle) ack(queue, group string, receipts ...string) int {
	b.t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.ack($1, $2, $3)", queue, group, receipts).Scan(&n); err != nil {
		b.t.Fatalf("ack: %v", err)
	}
	return n
}

func (b *bundle) nack(queue, group, receipt string, delay string, errText string) bool {
	b.t.Helper()
	var delayArg, errArg any
	if delay != "" {
		delayArg = delay
	}
	if errText != "" {
		errArg = errText
	}
	var ok bool
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.nack($1, $2, $3, $4::interval, $5)",
		queue, group, receipt, delayArg, errArg).Scan(&ok); err != nil {
		b.t.Fatalf("nack: %v", err)
	}
	return ok
}

// status is one row of sluice.status.
type status struct {
	Group                          *string
	Ready, Delayed, InFlight, Dead int64
	Lag, Cursor, Lwm, Head         *int64
	LiveEpochs                     int
	HoldsReclaim                   bool
}

func (b *bundle) status(queue string) map[string]status {
	b.t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT group_name, coalesce(ready, 0), coalesce(delayed, 0),
		coalesce(in_flight, 0), coalesce(dead, 0), lag, cursor, lwm, head, live_epochs, holds_reclaim
		FROM sluice.status($1)`, queue)
	if err != nil {
		b.t.Fatalf("status: %v", err)
	}
	defer rows.Close() // (a Fatalf with rows open would keep the pool from closing)
	out := map[string]status{}
	for rows.Next() {
		var s status
		if err := rows.Scan(&s.Group, &s.Ready, &s.Delayed, &s.InFlight, &s.Dead, &s.Lag, &s.Cursor,
			&s.Lwm, &s.Head, &s.LiveEpochs, &s.HoldsReclaim); err != nil {
			b.t.Fatalf("status: %v", err)
		}
		name := ""
		if s.Group != nil {
			name = *s.Group
		}
		out[name] = s
	}
	if err := rows.Err(); err != nil {
		b.t.Fatalf("status: %v", err)
	}
	return out
}

// execRepeatableRead runs sql in a REPEATABLE READ transaction, rolls it
// back, and returns the statement's error.
func (b *bundle) execRepeatableRead(sql string) error {
	b.t.Helper()
	tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		b.t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	_, err = tx.Exec(b.ctx, sql)
	return err
}

// sqlstate returns the SQLSTATE of err, or "" when it is not a server error.
func sqlstate(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// dataFingerprint summarizes everything sluice stores: the row count of
// every table in the sluice schemas and the position of every sequence. Two
// equal fingerprints mean a call changed nothing.
func (b *bundle) dataFingerprint() string {
	b.t.Helper()
	rows, err := b.pool.Query(b.ctx, `
		SELECT n.nspname || '.' || c.relname, c.relkind::text
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname LIKE 'sluice%' AND c.relkind IN ('r', 'S')
		ORDER BY 1`)
	if err != nil {
		b.t.Fatalf("fingerprint: %v", err)
	}
	type rel struct{ name, kind string }
	var rels []rel
	for rows.Next() {
		var r rel
		if err := rows.Scan(&r.name, &r.kind); err != nil {
			b.t.Fatalf("fingerprint: %v", err)
		}
		rels = append(rels, r)
	}
	if err := rows.Err(); err != nil {
		b.t.Fatalf("fingerprint: %v", err)
	}
	var parts []string
	for _, r := range rels {
		sql := "SELECT count(*) FROM " + r.name
		if r.kind == "S" {
			sql = "SELECT last_value FROM " + r.name
		}
		parts = append(parts, fmt.Sprintf("%s=%d", r.name, b.int64(sql)))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// onBothEngines runs body as parallel subtests engine1 and engine2 of t
// (itself parallel), each with a database of its own holding queue q of
// that engine, with the options opts (members of a JSON object, or "").
func onBothEngines(t *testing.T, opts string, body func(b *bundle, engine int)) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine%d", engine), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			o := fmt.Sprintf(`{"engine": %d}`, engine)
			if opts != "" {
				o = fmt.Sprintf(`{"engine": %d, %s}`, engine, opts)
			}
			b.createQueue("q", o)
			body(b, engine)
		})
	}
}

// waitFor polls cond every 20 ms until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func receipts(ms []msg) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Receipt
	}
	return out
}

// explainBuffers runs query under EXPLAIN (ANALYZE, BUFFERS) on q and returns
// the rows its top node returned and the shared buffers it hit or read,
// counting those of the statements its functions ran.
func explainBuffers(t *testing.T, ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, query string, args ...any) (rows float64, buffers int64) {
	t.Helper()
	var raw []byte
	if err := q.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+query, args...).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan struct {
			Rows float64 `json:"Actual Rows"`
			Hit  int64   `json:"Shared Hit Blocks"`
			Read int64   `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("plan %s: %v", raw, err)
	}
	return plan[0].Plan.Rows, plan[0].Plan.Hit + plan[0].Plan.Read
}

// poolWithDeadlockTimeout is a pool on a new database whose every session
// runs with the deadlock_timeout given (a superuser's setting: the test is
// skipped without one), closed when the test ends; maxConns 0 keeps
// pgxpool's default.
func poolWithDeadlockTimeout(ctx context.Context, t *testing.T, timeout string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(server.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = timeout
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		t.Skipf("no session with deadlock_timeout = %s (not a superuser?): %v", timeout, err)
	}
	t.Cleanup(pool.Close)
	return pool
}
