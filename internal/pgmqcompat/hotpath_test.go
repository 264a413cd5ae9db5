package pgmqcompat

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestHotPathsCallNoSQLFunctionsOrSettings checks what the layer's hot paths
// (send, send_batch, read, pop, delete, archive, set_vt) call of its own
// functions, as track_functions counts them: no LANGUAGE sql function (the
// planner inlines the helpers; one that is called instead is parsed and
// planned again in every transaction), and no function with a SET clause
// (each costs ~30 us a call) beyond the entry point itself: none for the
// sends, which pin nothing, one for the others, whose SET clause carries
// the settings of the queue's copy of its template.
//
// Each statement's calls are the difference of pg_stat_xact_user_functions
// around it, in one transaction. The round runs three times on one
// connection, so that PL/pgSQL keeps its plans (planning may count a helper
// it folds into a constant), and the last one is checked.
func TestHotPathsCallNoSQLFunctionsOrSettings(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := ctxT(t)
	exec(t, db, "SELECT pgmq.create('hot')")
	exec(t, db, "SELECT pgmq.create('hotn')")
	exec(t, db, "SELECT pgmq.enable_notify_insert('hotn', 0)")
	exec(t, db, `SELECT pgmq.send_batch('hot', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 200) g))`)
	conn, err := db.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET track_functions = 'all'"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "RESET track_functions") //nolint:errcheck

	// calls: the pgmq functions called so far in this transaction (with the
	// session's counts not flushed yet), by name, and whether each is SQL
	// or has a SET clause.
	type fn struct {
		calls   int64
		sql     bool
		setting bool
	}
	calls := func(tx pgx.Tx) map[string]fn {
		rows, err := tx.Query(ctx, `
			SELECT f.funcid::regprocedure::text, f.calls, l.lanname = 'sql', p.proconfig IS NOT NULL
			FROM pg_stat_xact_user_functions f
			JOIN pg_proc p ON p.oid = f.funcid
			JOIN pg_language l ON l.oid = p.prolang
			WHERE f.schemaname = 'pgmq'`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]fn{}
		var name string
		var f fn
		if _, err := pgx.ForEachRow(rows, []any{&name, &f.calls, &f.sql, &f.setting}, func() error {
			out[name] = f
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	type step struct {
		stmt     string
		settings int64 // calls of pgmq functions with a SET clause
	}
	steps := []step{
		{`SELECT pgmq.send('hot', '{"a": 1}')`, 0},
		{`SELECT pgmq.send('hot', '{"a": 2}', '{"x-pgmq-group": "g"}'::jsonb, 0)`, 0},
		{`SELECT pgmq.send('hot', '{"a": 3}', clock_timestamp())`, 0},
		{`SELECT pgmq.send_batch('hot', ARRAY['{"b": 1}', '{"b": 2}']::jsonb[])`, 0},
		{`SELECT pgmq.send_batch('hot', ARRAY['{"b": 3}']::jsonb[], ARRAY['{"h": 1}']::jsonb[], 0)`, 0},
		{`SELECT pgmq.send('hotn', '{"a": 4}')`, 0},
		{`SELECT pgmq.send_batch('hotn', ARRAY['{"b": 4}', NULL]::jsonb[], ARRAY['{"x-pgmq-group": "g"}', NULL]::jsonb[])`, 0},
		{`SELECT pgmq.delete('hot', ARRAY(SELECT msg_id FROM pgmq.read('hot', 30, 3)))`, 2},
		{`SELECT pgmq.delete('hot', (SELECT msg_id FROM pgmq.read('hot', 30, 1)))`, 2},
		{`SELECT pgmq.archive('hot', ARRAY(SELECT msg_id FROM pgmq.read('hot', 30, 2)))`, 2},
		{`SELECT pgmq.archive('hot', (SELECT msg_id FROM pgmq.read('hot', 30, 1)))`, 2},
		{`SELECT pgmq.set_vt('hot', (SELECT msg_id FROM pgmq.read('hot', 30, 1)), 60)`, 2},
		{`SELECT pgmq.set_vt('hot', ARRAY(SELECT msg_id FROM pgmq.read('hot', 30, 2)), clock_timestamp() + interval '1 minute')`, 2},
		{`SELECT pgmq.pop('hot')`, 1},
		{`SELECT pgmq.read_grouped('hot', 30, 2)`, 1},
	}
	var problems []string
	for round := 1; round <= 3; round++ {
		problems = problems[:0]
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range steps {
			before := calls(tx)
			if _, err := tx.Exec(ctx, s.stmt); err != nil {
				t.Fatalf("%s: %v", s.stmt, err)
			}
			var sqlFns []string
			var settings int64
			for name, f := range calls(tx) {
				n := f.calls - before[name].calls
				if n == 0 {
					continue
				}
				if f.sql {
					sqlFns = append(sqlFns, fmt.Sprintf("%s x%d", name, n))
				}
				if f.setting {
					settings += n
				}
			}
			sort.Strings(sqlFns)
			if len(sqlFns) > 0 {
				problems = append(problems, fmt.Sprintf("%s called SQL functions (not inlined): %s", s.stmt, strings.Join(sqlFns, ", ")))
			}
			if settings != s.settings {
				problems = append(problems, fmt.Sprintf("%s called %d functions with a SET clause, want %d", s.stmt, settings, s.settings))
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestEngineSettingsTurnParallelPlansOff: every function of the layer that
// carries the engine's settings (those of the queues' copies: generic
// plans, no sequential scans, no JIT) turns parallel plans off too, as
// sluice.receive does: a read over a backlog large enough for the planner to
// go parallel otherwise started parallel workers for a probe that reads an
// index page or two (see sluice's TestEngineFunctionsTurnJITOff).
func TestEngineSettingsTurnParallelPlansOff(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := ctxT(t)
	rows, err := db.Query(ctx, `
		SELECT p.oid::regprocedure::text, array_to_string(p.proconfig, ' ')
		FROM pg_proc p
		WHERE p.pronamespace = 'pgmq'::regnamespace
		  AND 'plan_cache_mode=force_generic_plan' = ANY (p.proconfig)`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var name, config string
		if err := rows.Scan(&name, &config); err != nil {
			t.Fatal(err)
		}
		seen++
		if !strings.Contains(config, "max_parallel_workers_per_gather=0") {
			t.Errorf("%s: settings %q lack max_parallel_workers_per_gather=0", name, config)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen < 10 {
		t.Fatalf("found %d functions with the engine's settings, want the read and completion functions (10 or more)", seen)
	}
}
