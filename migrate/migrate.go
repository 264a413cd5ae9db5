// Package migrate installs and upgrades the sluice schema in a PostgreSQL
// database.
//
// The schema comes as a file system (normally the embedded sql sources,
// package github.com/sluicemq/sluice/sql) laid out as:
//
//	tables/NNNN_name.sql    numbered forward migrations, each applied once, in
//	                        version order, and recorded in sluice.schema_migration
//	functions/manifest.txt  the function files, one name per line, in load order
//	functions/*.sql         function definitions (CREATE OR REPLACE ...),
//	                        reloaded on every migrate
//
// Migration files run inside a transaction the migrator opens, so they must
// not contain transaction control (BEGIN, COMMIT) or statements that cannot
// run in a transaction block (CREATE INDEX CONCURRENTLY). Function files are
// loaded after all migrations, in the same transaction: an upgrade is one
// transaction, behind a fence (see Apply), so that the calls of a running
// deployment see the old schema and functions or the new ones, never a
// mix.
//
// Apply migrates through a pgx connection; Script renders the same work as
// one psql script for teams that run their own migration tooling. Both take
// the same advisory lock, record the same versions and are idempotent, so
// they can be mixed on one database.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// LockKey is the key of the session-level advisory lock (pg_advisory_lock)
// that Apply and the script from Script hold while they migrate, so that
// concurrent migrations of one database run one after another. It spells
// "sluice" followed by 0x0001.
const LockKey int64 = 0x736c_7569_6365_0001

// fenceSQL starts an upgrade's transaction: it takes sluice.queue (when it
// exists) in ACCESS EXCLUSIVE mode before anything else. Every public
// function of every release reads sluice.queue before anything else it
// locks, so the fence waits for the transactions that called one to end,
// and the calls that start meanwhile wait at that read, before they have
// changed anything; they go on once the upgrade commits (with the function
// bodies they had compiled: see sql/functions/compat.sql). Taken first, it
// cannot deadlock with them.
const fenceSQL = `DO $sluice_fence$
BEGIN
    IF to_regclass('sluice.queue') IS NOT NULL THEN
        LOCK TABLE sluice.queue IN ACCESS EXCLUSIVE MODE;
    END IF;
END
$sluice_fence$;
`

// bootstrapSQL creates the schema and the table that records applied
// migrations. It is safe to run at any time.
const bootstrapSQL = `CREATE SCHEMA IF NOT EXISTS sluice;
CREATE TABLE IF NOT EXISTS sluice.schema_migration (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
`

// Result tells what Apply did.
type Result struct {
	// Applied holds the migrations this call applied, in order; it is empty
	// when the database was already up to date.
	Applied []Migration
	// Functions holds the paths of the function files reloaded, in manifest
	// order; it is empty when they were loaded as they are before and no
	// migration was applied (then Apply changed nothing: no DDL).
	Functions []string
	// Version is the highest migration version recorded in the database
	// after the call (0 when the schema has no migrations).
	Version int
	// SuperuserOwner is the superuser that owns the SECURITY DEFINER
	// functions of schema sluice, or "" when their owner is not a superuser.
	// Those functions run as their owner: with a superuser owner every call
	// of the API runs with superuser rights (docs/operations.md, "Who runs
	// the migration"). Callers should warn.
	SuperuserOwner string
}

// Apply brings the database conn is connected to up to date with the schema
// in fsys: it creates schema sluice and table sluice.schema_migration if
// needed, then, in one transaction, applies every migration not yet recorded
// there (each with the row that records it) and reloads all function files.
// That transaction first takes the fence (sluice.queue in ACCESS EXCLUSIVE
// mode): calls of the API running meanwhile finish first, those that start
// meanwhile wait and then run on the new schema, and none meets a schema
// half upgraded or a function a migration dropped before the reload made
// its successor (issue 38, item 1). When nothing is pending and the
// function files were loaded as they are, it changes nothing (no DDL, no
// fence). It holds the advisory lock LockKey on conn's session meanwhile,
// so concurrent calls serialize; running it again applies nothing and
// succeeds.
//
// A database that records a migration fsys does not have (it was migrated by
// a newer sluice) is left untouched and reported as an error. A failing file
// is reported as a *FileError; the transaction is rolled back, and nothing
// of this call stays applied. conn must not be inside a transaction.
func Apply(ctx context.Context, conn *pgx.Conn, fsys fs.FS) (res Result, err error) {
	src, err := load(fsys)
	if err != nil {
		return Result{}, err
	}

	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", LockKey); err != nil {
		return Result{}, fmt.Errorf("taking the migration lock: %w", err)
	}
	defer func() {
		// Unlock even when ctx is done; a dead connection has lost the lock
		// anyway.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", LockKey); uerr != nil && err == nil && !conn.IsClosed() {
			err = fmt.Errorf("releasing the migration lock: %w", uerr)
		}
	}()

	if _, err := conn.Exec(ctx, bootstrapSQL); err != nil {
		return Result{}, fmt.Errorf("creating schema sluice and table sluice.schema_migration: %w", err)
	}

	applied, err := appliedVersions(ctx, conn)
	if err != nil {
		return Result{}, err
	}
	if err := checkKnown(src, applied); err != nil {
		return Result{}, err
	}

	var pending []Migration
	for _, m := range src.migrations {
		if _, done := applied[m.Version]; !done {
			pending = append(pending, m)
		}
	}
	loaded := false
	if len(pending) == 0 {
		if loaded, err = functionsLoaded(ctx, conn, src); err != nil {
			return res, err
		}
	}
	if !loaded {
		if err := upgrade(ctx, conn, src, pending); err != nil {
			return res, err
		}
		res.Applied, res.Functions = pending, src.functions
	}
	res.Version = src.latest()
	if res.SuperuserOwner, err = superuserOwner(ctx, conn); err != nil {
		return res, err
	}
	return res, nil
}

// superuserOwner returns a superuser owning a SECURITY DEFINER function of
// schema sluice, or "".
func superuserOwner(ctx context.Context, conn *pgx.Conn) (string, error) {
	var owner string
	err := conn.QueryRow(ctx, `SELECT r.rolname FROM pg_catalog.pg_proc p
		JOIN pg_catalog.pg_roles r ON r.oid = p.proowner
		WHERE p.pronamespace = 'sluice'::regnamespace AND p.prosecdef AND r.rolsuper
		ORDER BY 1 LIMIT 1`).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("checking the owner of the sluice functions: %w", err)
	}
	return owner, nil
}

// appliedVersions reads sluice.schema_migration.
func appliedVersions(ctx context.Context, conn *pgx.Conn) (map[int]string, error) {
	rows, err := conn.Query(ctx, "SELECT version, name FROM sluice.schema_migration")
	if err != nil {
		return nil, fmt.Errorf("reading sluice.schema_migration: %w", err)
	}
	applied := make(map[int]string)
	var (
		v    int
		name string
	)
	_, err = pgx.ForEachRow(rows, []any{&v, &name}, func() error {
		applied[v] = name
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading sluice.schema_migration: %w", err)
	}
	return applied, nil
}

// checkKnown refuses a database that records a migration src lacks.
func checkKnown(src *source, applied map[int]string) error {
	known := make(map[int]bool, len(src.migrations))
	for _, m := range src.migrations {
		known[m.Version] = true
	}
	unknown := 0
	for v := range applied {
		if !known[v] && (unknown == 0 || v < unknown) {
			unknown = v
		}
	}
	if unknown != 0 {
		return fmt.Errorf("database records migration %d (%s), which this schema does not have: it was migrated by a newer sluice; nothing was changed",
			unknown, applied[unknown])
	}
	return nil
}

// upgrade applies the pending migrations and reloads the function files of
// src in one transaction that starts with the fence (fenceSQL).
func upgrade(ctx context.Context, conn *pgx.Conn, src *source, pending []Migration) error {
	what := manifestPath
	if len(pending) > 0 {
		what = pending[0].Path
	}
	return inTx(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fenceSQL); err != nil {
			return fmt.Errorf("taking the upgrade's fence (sluice.queue): %w", err)
		}
		for _, m := range pending {
			if err := applyMigration(ctx, tx, m, src.migrSQL[m.Path]); err != nil {
				return err
			}
		}
		return reloadFunctions(ctx, tx, src)
	}, what)
}

func applyMigration(ctx context.Context, tx pgx.Tx, m Migration, body string) error {
	// Without arguments pgx uses the simple protocol, which runs a
	// multi-statement file as is.
	if _, err := tx.Exec(ctx, body); err != nil {
		return newFileError(m.Path, body, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO sluice.schema_migration (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
		return fmt.Errorf("%s: recording version %d: %w", m.Path, m.Version, err)
	}
	return nil
}

// functionsLoaded reports whether the function files of src, as they are,
// were loaded already (their digest is in sluice.function_load; a schema
// without that table has not recorded any).
func functionsLoaded(ctx context.Context, conn *pgx.Conn, src *source) (bool, error) {
	if len(src.functions) == 0 {
		return true, nil
	}
	var has, loaded bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('sluice.function_load') IS NOT NULL`).Scan(&has); err != nil {
		return false, fmt.Errorf("looking for sluice.function_load: %w", err)
	}
	if !has {
		return false, nil
	}
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM sluice.function_load WHERE digest = $1)`,
		src.functionsDigest()).Scan(&loaded)
	if err != nil {
		return false, fmt.Errorf("reading sluice.function_load: %w", err)
	}
	return loaded, nil
}

// reloadFunctions runs the function files of src in tx and records their
// digest.
func reloadFunctions(ctx context.Context, tx pgx.Tx, src *source) error {
	if len(src.functions) == 0 {
		return nil
	}
	for _, p := range src.functions {
		body := src.funcSQL[p]
		if _, err := tx.Exec(ctx, body); err != nil {
			return newFileError(p, body, err)
		}
	}
	// (a schema without sluice.function_load, migration 0018, records none)
	var has bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('sluice.function_load') IS NOT NULL`).Scan(&has); err != nil {
		return fmt.Errorf("looking for sluice.function_load: %w", err)
	}
	if !has {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO sluice.function_load (digest) VALUES ($1) ON CONFLICT DO NOTHING`,
		src.functionsDigest()); err != nil {
		return fmt.Errorf("recording the function files' digest: %w", err)
	}
	return nil
}

// inTx runs fn in a transaction on conn and commits it; what names the work
// in errors.
func inTx(ctx context.Context, conn *pgx.Conn, fn func(pgx.Tx) error, what string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%s: beginning a transaction: %w", what, err)
	}
	if err := fn(tx); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("%s: committing: %w", what, err)
	}
	return nil
}

// FileError reports a schema file that failed to apply. When the failure is
// a PostgreSQL error, errors.As finds the *pgconn.PgError in Err.
type FileError struct {
	// Path is the file's path in the schema file system, such as
	// "tables/0002_lease.sql".
	Path string
	// Line is the 1-based line in the file where PostgreSQL located the
	// error, or 0 when it did not say.
	Line int
	// Err is the underlying error.
	Err error
}

// Error formats the error as "path:line: ERROR: message (SQLSTATE code)",
// followed by PostgreSQL's detail, hint and context when it gave them.
func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString(e.Path)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	var pgErr *pgconn.PgError
	if !errors.As(e.Err, &pgErr) {
		b.WriteString(e.Err.Error())
		return b.String()
	}
	fmt.Fprintf(&b, "%s: %s (SQLSTATE %s)", pgErr.Severity, pgErr.Message, pgErr.Code)
	for _, part := range []struct{ label, text string }{
		{"detail", pgErr.Detail}, {"hint", pgErr.Hint}, {"context", pgErr.Where},
	} {
		if part.text != "" {
			fmt.Fprintf(&b, "; %s: %s", part.label, strings.ReplaceAll(part.text, "\n", " / "))
		}
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *FileError) Unwrap() error { return e.Err }

func newFileError(path, body string, err error) *FileError {
	fe := &FileError{Path: path, Err: err}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Position > 0 {
		fe.Line = lineAt(body, int(pgErr.Position))
	}
	return fe
}

// lineAt returns the 1-based line of the pos'th character (1-based, counted
// in characters as PostgreSQL does) of s, or 0 when pos is past the end.
func lineAt(s string, pos int) int {
	line, n := 1, 0
	for _, r := range s {
		n++
		if n == pos {
			return line
		}
		if r == '\n' {
			line++
		}
	}
	return 0
}
