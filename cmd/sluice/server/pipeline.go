package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// sqlSetRole takes the principal's role until the end of the transaction:
// SET LOCAL ROLE as a function, so that the role is a bound parameter and
// the statement can share a pipeline with the next one.
const sqlSetRole = `SELECT set_config('role', $1, true)`

// one runs fn, which must run exactly one statement on its tx, under the
// principal's role in one round trip: set_config('role', ..., true) and the
// statement go to the server together in one pipeline, which PostgreSQL runs
// as one implicit transaction, committed when it ends (no BEGIN and COMMIT
// of their own, no SET LOCAL ROLE of its own). A statement that fails rolls
// it back, and so does a role the login role may not take, before the
// statement runs. The role is local to that transaction: the connection
// goes back to the pool as the server's login role.
//
// Use it for the handlers that make one library call of one statement (the
// ...Tx calls of sluice.Client that run one Exec, Query, QueryRow or
// SendBatch); s.tx for the others.
func (s *Server) one(ctx context.Context, p *Principal, fn func(tx pgx.Tx) error) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquiring a database connection: %w", err)
	}
	defer c.Release()
	t := &pipeTx{conn: c.Conn(), role: p.Role}
	err = fn(t)
	if cerr := t.close(); err == nil {
		err = cerr
	}
	if t.roleErr != nil {
		return s.roleProblem(p.Role, t.roleErr)
	}
	return err
}

// roleProblem is the 500 of a role the server's login role may not take
// (42501): the server is misconfigured, not the client. Other errors are
// returned as they are.
func (s *Server) roleProblem(role string, err error) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "42501" {
		return fmt.Errorf("taking role %s: %w", role, err)
	}
	s.cfg.Logger.Error("sluice server: the database login role may not take a token's role", "role", role, "error", pg.Message)
	return problemf(http.StatusInternalServerError, "server_role",
		"the server's database login role may not take role %s (GRANT %s TO the server's login role; see docs/operations.md)", role, role)
}

// errOneStatement is a programming error: a handler ran a second statement
// in s.one.
var errOneStatement = errors.New("sluice server: internal error: a second statement in a one-statement transaction")

// pipeTx is the pgx.Tx of s.one: its first statement goes in a pipeline
// behind the role's set_config (or alone, with no role to take); it refuses
// a second one. Commit and Rollback
// do nothing: the pipeline's implicit transaction commits, or rolls back on
// an error, when it ends (close).
type pipeTx struct {
	conn    *pgx.Conn
	role    string
	br      pgx.BatchResults
	used    bool
	roleErr error
}

// send sends the role's set_config (if any) and the queued queries of b in
// one pipeline, and reads the set_config's result.
func (t *pipeTx) send(ctx context.Context, b *pgx.Batch) error {
	if t.used {
		return errOneStatement
	}
	t.used = true
	if t.role != "" {
		var nb pgx.Batch
		nb.Queue(sqlSetRole, t.role)
		nb.QueuedQueries = append(nb.QueuedQueries, b.QueuedQueries...)
		b = &nb
	}
	t.br = t.conn.SendBatch(ctx, b)
	if t.role != "" {
		if _, err := t.br.Exec(); err != nil {
			t.roleErr = err
			return err
		}
	}
	return nil
}

// close reads the pipeline to its end (the implicit commit) and returns its
// first error.
func (t *pipeTx) close() error {
	if t.br == nil {
		return nil
	}
	err := t.br.Close()
	// pgx 5.7's Close returns the error of a statement read with Query or
	// QueryRow without reading the rest of the pipeline, which leaves the
	// connection busy (and the pool closes it); a second Close reads it
	// (jackc/pgx#2391, fixed in later versions; harmless there).
	_ = t.br.Close()
	return err
}

// direct reports whether the statement goes alone, without a pipeline:
// with no role to take (authentication off), it is its own transaction.
func (t *pipeTx) direct() (bool, error) {
	if t.role != "" {
		return false, nil
	}
	if t.used {
		return true, errOneStatement
	}
	t.used = true
	return true, nil
}

func (t *pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if ok, err := t.direct(); ok {
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		return t.conn.Exec(ctx, sql, args...)
	}
	var b pgx.Batch
	b.Queue(sql, args...)
	if err := t.send(ctx, &b); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.br.Exec()
}

func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if ok, err := t.direct(); ok {
		if err != nil {
			return nil, err
		}
		return t.conn.Query(ctx, sql, args...)
	}
	var b pgx.Batch
	b.Queue(sql, args...)
	if err := t.send(ctx, &b); err != nil {
		return nil, err
	}
	return t.br.Query()
}

func (t *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if ok, err := t.direct(); ok {
		if err != nil {
			return errRow{err}
		}
		return t.conn.QueryRow(ctx, sql, args...)
	}
	var b pgx.Batch
	b.Queue(sql, args...)
	if err := t.send(ctx, &b); err != nil {
		return errRow{err}
	}
	return t.br.QueryRow()
}

// SendBatch sends b's queries behind the role's set_config; the results
// returned are b's own (Close runs b's callbacks, and ends the pipeline).
func (t *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if ok, err := t.direct(); ok {
		if err != nil {
			return errBatch{err}
		}
		return t.conn.SendBatch(ctx, b)
	}
	if err := t.send(ctx, b); err != nil {
		return errBatch{err}
	}
	return t.br
}

func (t *pipeTx) Begin(context.Context) (pgx.Tx, error) { return nil, errOneStatement }
func (t *pipeTx) Commit(context.Context) error          { return nil }
func (t *pipeTx) Rollback(context.Context) error        { return nil }
func (t *pipeTx) Conn() *pgx.Conn                       { return t.conn }
func (t *pipeTx) LargeObjects() pgx.LargeObjects        { return pgx.LargeObjects{} }

func (t *pipeTx) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errOneStatement
}

func (t *pipeTx) Prepare(context.Context, string, string) (*pgconn.StatementDescription, error) {
	return nil, errOneStatement
}

// errRow is a pgx.Row that fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// errBatch is a pgx.BatchResults that fails with err.
type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
