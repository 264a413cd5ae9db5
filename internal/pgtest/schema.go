package pgtest

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// Querier is what DumpSchema reads through: *pgx.Conn, *pgxpool.Pool and
// pgx.Tx all qualify.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// dumpQueries returns queries that each list one kind of object in schema
// $1, one text line per object.
func dumpQueries() []string {
	return []string{
		// Tables, views, sequences, indexes, composite types, with privileges.
		`SELECT format('relation %s kind=%s acl=%s', c.relname, c.relkind, coalesce(c.relacl::text, '-'))
	   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	  WHERE n.nspname = $1`,
		// Columns.
		`SELECT format('column %s.%s %s%s%s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
	               CASE WHEN a.attnotnull THEN ' not null' ELSE '' END,
	               coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), ''))
	   FROM pg_attribute a
	   JOIN pg_class c ON c.oid = a.attrelid
	   JOIN pg_namespace n ON n.oid = c.relnamespace
	   LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	  WHERE n.nspname = $1 AND a.attnum > 0 AND NOT a.attisdropped`,
		// Index definitions.
		`SELECT 'index ' || pg_get_indexdef(i.indexrelid)
	   FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	  WHERE n.nspname = $1`,
		// Constraints.
		`SELECT format('constraint %s on %s: %s', c.conname, c.conrelid::regclass, pg_get_constraintdef(c.oid))
	   FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
	  WHERE n.nspname = $1`,
		// Functions and procedures, by full definition.
		`SELECT format('function %s kind=%s acl=%s def=%s', p.oid::regprocedure, p.prokind, coalesce(p.proacl::text, '-'),
	               CASE WHEN p.prokind = 'a' THEN '-' ELSE md5(pg_get_functiondef(p.oid)) END)
	   FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
	  WHERE n.nspname = $1`,
		// Enums, domains, ranges and stand-alone composite types.
		`SELECT format('type %s kind=%s %s', t.typname, t.typtype,
	               coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid), ''))
	   FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
	   LEFT JOIN pg_class c ON c.oid = t.typrelid
	  WHERE n.nspname = $1 AND t.typelem = 0
	    AND (t.typtype IN ('e', 'd', 'r', 'm') OR (t.typtype = 'c' AND c.relkind = 'c'))`,
		// Triggers.
		`SELECT 'trigger ' || pg_get_triggerdef(t.oid)
	   FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	  WHERE n.nspname = $1 AND NOT t.tgisinternal`,
	}
}

// DumpSchema describes the objects of a schema (relations, columns,
// indexes, constraints, functions with a digest of their definitions,
// types, triggers and privileges) as sorted text lines, so that two
// databases can be compared, for example a fresh install with an upgraded
// one. Data is not included.
func DumpSchema(ctx context.Context, q Querier, schema string) ([]string, error) {
	var out []string
	for _, query := range dumpQueries() {
		rows, err := q.Query(ctx, query, schema)
		if err != nil {
			return nil, fmt.Errorf("describing schema %s: %w", schema, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("describing schema %s: %w", schema, err)
		}
		out = append(out, lines...)
	}
	sort.Strings(out)
	return out, nil
}
