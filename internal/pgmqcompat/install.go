// Package pgmqcompat installs sluice's PGMQ compatibility layer: schema pgmq,
// whose functions, parameters, result types and error texts are those of
// PGMQ 1.13, built on sluice's public SQL API (see docs/pgmq.md).
//
// The layer's SQL lives in package pgmqsql (sql/pgmq): numbered migrations
// recorded in pgmq.sluice_migration, then function files reloaded on every
// install. Install applies them through a pgx connection, Script renders the
// same work as a psql script. Both refuse a database where the pgmq
// extension is installed, or where a schema pgmq exists that sluice did not
// create, and both need the sluice schema installed first.
package pgmqcompat

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/migrate"
	pgmqsql "github.com/sluicemq/sluice/sql/pgmq"
)

// guardSQL refuses a database the layer must not touch, then creates schema
// pgmq and its migration record. It is safe to run at any time.
const guardSQL = `DO $sluice_pgmq_guard$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pgmq') THEN
        RAISE EXCEPTION 'the pgmq extension is installed in this database: sluice''s pgmq schema cannot be installed beside it; nothing was changed'
            USING HINT = 'Use another database, or move the queues out and DROP EXTENSION pgmq first.';
    END IF;
    IF to_regnamespace('pgmq') IS NOT NULL AND to_regclass('pgmq.sluice_migration') IS NULL THEN
        RAISE EXCEPTION 'schema pgmq exists and was not created by sluice (a SQL-only PGMQ install?); nothing was changed';
    END IF;
    IF to_regclass('sluice.queue') IS NULL THEN
        RAISE EXCEPTION 'schema sluice is not installed: run sluice migrate first';
    END IF;
END
$sluice_pgmq_guard$;
CREATE SCHEMA IF NOT EXISTS pgmq;
CREATE TABLE IF NOT EXISTS pgmq.sluice_migration (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
`

// Result tells what Install did.
type Result struct {
	// Applied holds the migrations applied by this call, in order.
	Applied []migrate.Migration
	// Functions holds the function files reloaded, in manifest order.
	Functions []string
	// Version is the highest migration version of the layer.
	Version int
}

type source struct {
	migrations []migrate.Migration
	functions  []string
	text       map[string]string
}

func load(fsys fs.FS) (*source, error) {
	s := &source{text: make(map[string]string)}
	var err error
	if s.migrations, err = migrate.Migrations(fsys); err != nil {
		return nil, fmt.Errorf("pgmq layer: %w", err)
	}
	if s.functions, err = migrate.Functions(fsys); err != nil {
		return nil, fmt.Errorf("pgmq layer: %w", err)
	}
	paths := append([]string(nil), s.functions...)
	for _, m := range s.migrations {
		paths = append(paths, m.Path)
	}
	for _, p := range paths {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("pgmq layer: reading %s: %w", p, err)
		}
		s.text[p] = string(b)
	}
	return s, nil
}

// Install installs or upgrades the layer in the database conn is connected
// to, which must have the sluice schema. It holds migrate.LockKey meanwhile,
// applies each migration not yet recorded in pgmq.sluice_migration in its
// own transaction, then reloads every function file in one transaction.
// Running it again applies nothing. conn must not be inside a transaction.
func Install(ctx context.Context, conn *pgx.Conn) (res Result, err error) {
	return installFS(ctx, conn, pgmqsql.FS)
}

func installFS(ctx context.Context, conn *pgx.Conn, fsys fs.FS) (res Result, err error) {
	src, err := load(fsys)
	if err != nil {
		return Result{}, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrate.LockKey); err != nil {
		return Result{}, fmt.Errorf("taking the migration lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", migrate.LockKey); uerr != nil && err == nil && !conn.IsClosed() {
			err = fmt.Errorf("releasing the migration lock: %w", uerr)
		}
	}()
	if _, err := conn.Exec(ctx, guardSQL); err != nil {
		return Result{}, fmt.Errorf("installing the pgmq layer: %w", err)
	}
	applied := make(map[int]bool)
	rows, err := conn.Query(ctx, "SELECT version FROM pgmq.sluice_migration")
	if err != nil {
		return Result{}, fmt.Errorf("reading pgmq.sluice_migration: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return Result{}, fmt.Errorf("reading pgmq.sluice_migration: %w", err)
	}
	known := make(map[int]bool)
	for _, m := range src.migrations {
		known[m.Version] = true
	}
	for _, v := range versions {
		if !known[v] {
			return Result{}, fmt.Errorf("pgmq.sluice_migration records migration %d, which this sluice does not have: it was installed by a newer sluice; nothing was changed", v)
		}
		applied[v] = true
	}
	for _, m := range src.migrations {
		if applied[m.Version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, src.text[m.Path]); err != nil {
				return &migrate.FileError{Path: "sql/pgmq/" + m.Path, Err: err}
			}
			_, err := tx.Exec(ctx, "INSERT INTO pgmq.sluice_migration (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		})
		if err != nil {
			return res, err
		}
		res.Applied = append(res.Applied, m)
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, p := range src.functions {
			if _, err := tx.Exec(ctx, src.text[p]); err != nil {
				return &migrate.FileError{Path: "sql/pgmq/" + p, Err: err}
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.Functions = src.functions
	if n := len(src.migrations); n > 0 {
		res.Version = src.migrations[n-1].Version
	}
	return res, nil
}

// Script renders what Install does as one psql script (run it after the
// script of migrate.Script). It starts with \set ON_ERROR_STOP on.
func Script() (string, error) {
	src, err := load(pgmqsql.FS)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(`\set ON_ERROR_STOP on` + "\n")
	b.WriteString("-- sluice's PGMQ compatibility layer (schema pgmq), as rendered by\n")
	b.WriteString("-- `sluice migrate --print --pgmq`. Idempotent. Needs the sluice schema.\n\n")
	b.WriteString("SET client_min_messages = warning;\n")
	fmt.Fprintf(&b, "SELECT pg_advisory_lock(%d);\n\n", migrate.LockKey)
	b.WriteString(guardSQL)
	for _, m := range src.migrations {
		body := src.text[m.Path]
		tag := dollarTag("sluice_pgmq_sql", body)
		fmt.Fprintf(&b, "\n-- %s\nBEGIN;\nDO $sluice_pgmq_migrate$\nBEGIN\n", m.Path)
		fmt.Fprintf(&b, "    IF EXISTS (SELECT 1 FROM pgmq.sluice_migration WHERE version = %d) THEN\n        RETURN;\n    END IF;\n", m.Version)
		fmt.Fprintf(&b, "    EXECUTE %s\n%s\n%s;\n", tag, body, tag)
		fmt.Fprintf(&b, "    INSERT INTO pgmq.sluice_migration (version, name) VALUES (%d, '%s');\n", m.Version, strings.ReplaceAll(m.Name, "'", "''"))
		b.WriteString("END\n$sluice_pgmq_migrate$;\nCOMMIT;\n")
	}
	b.WriteString("\nBEGIN;\n")
	for _, p := range src.functions {
		fmt.Fprintf(&b, "\n-- %s\n%s\n", p, src.text[p])
	}
	b.WriteString("COMMIT;\n")
	fmt.Fprintf(&b, "\nSELECT pg_advisory_unlock(%d);\n", migrate.LockKey)
	return b.String(), nil
}

func dollarTag(name, body string) string {
	tag := "$" + name + "$"
	for i := 1; strings.Contains(body, tag); i++ {
		tag = fmt.Sprintf("$%s_%d$", name, i)
	}
	return tag
}
