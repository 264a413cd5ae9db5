package sqlsrc_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The SQL helpers on the hot paths (send, send_batch, receive, ack of a run
// and of one message, nack, extend) are inlined by the planner, not called: a LANGUAGE sql function
// that is called instead is parsed again in every transaction (declared
// IMMUTABLE over a STABLE body, _payload_size cost a third of a send).
// track_functions counts only the calls that were not inlined, and also a
// helper the planner folds into a constant while it plans: the rounds are
// repeated on one connection until PL/pgSQL keeps its plans, and the last
// one is counted.
func TestHotPathSQLHelpersAreInlined(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 2}`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 400) g))`)
	conn, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(b.ctx, "SET track_functions = 'all'"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "RESET track_functions") //nolint:errcheck
	round := func(tx pgx.Tx) {
		for _, stmt := range []string{
			`SELECT sluice.send('q', '{"a": 1}')`,
			`SELECT sluice.send('q', '{"a": 2}', headers => '{"h": "v"}', key => 'k', priority => 1)`,
			`SELECT sluice.send_batch('q', ARRAY['{"b": 1}', '{"b": 2}']::jsonb[], keys => ARRAY['k1', NULL])`,
		} {
			if _, err := tx.Exec(b.ctx, stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		run, err := receiveOn(b.ctx, tx, "q", "default", 5, "")
		if err != nil {
			t.Fatal(err)
		}
		one, err := receiveOn(b.ctx, tx, "q", "default", 1, "")
		if err != nil || len(run) != 5 || len(one) != 1 {
			t.Fatalf("received %d and %d (%v), want 5 and 1", len(run), len(one), err)
		}
		var n int
		if err := tx.QueryRow(b.ctx, "SELECT sluice.ack('q', 'default', $1)", receipts(run)).Scan(&n); err != nil || n != 5 {
			t.Fatalf("ack of a run: %d, %v", n, err)
		}
		if err := tx.QueryRow(b.ctx, "SELECT sluice.extend('q', 'default', $1, '1 minute')", receipts(one)).Scan(&n); err != nil || n != 1 {
			t.Fatalf("extend: %d, %v", n, err)
		}
		var ok bool
		if err := tx.QueryRow(b.ctx, "SELECT sluice.nack('q', 'default', $1)", one[0].Receipt).Scan(&ok); err != nil || !ok {
			t.Fatalf("nack: %v, %v", ok, err)
		}
		single, err := receiveOn(b.ctx, tx, "q", "default", 1, "")
		if err != nil || len(single) != 1 {
			t.Fatalf("received %d (%v), want 1", len(single), err)
		}
		if err := tx.QueryRow(b.ctx, "SELECT sluice.ack('q', 'default', $1)", receipts(single)).Scan(&n); err != nil || n != 1 {
			t.Fatalf("ack of one: %d, %v", n, err)
		}
	}
	for i := 0; i < 8; i++ {
		if err := pgx.BeginFunc(b.ctx, conn, func(tx pgx.Tx) error { round(tx); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	var called []string
	if err := pgx.BeginFunc(b.ctx, conn, func(tx pgx.Tx) error {
		// Maintenance, which a receive runs about once a second per session
		// (not a hot path: it calls helpers such as _lock_ns), is put off
		// past the measured round, which a loaded machine may stretch over
		// that second.
		if _, err := tx.Exec(b.ctx, `SELECT set_config('sluice.maintained_' || id, '9999999999', false)
			FROM sluice.queue WHERE name = 'q'`); err != nil {
			t.Fatal(err)
		}
		before := b.xactCalls(tx)
		round(tx)
		for fn, n := range b.xactCalls(tx) {
			// Called by design, and not on every call of the API: a cut
			// with keyed messages (e_lanes), a query over a set, which no
			// planner inlines into a scalar.
			hot := fn.lang == "sql" && (fn.schema == "sluice" || strings.HasPrefix(fn.schema, "sluice_q")) &&
				fn.name != "e_lanes"
			if hot && n > before[fn] {
				called = append(called, fmt.Sprintf("%s.%s (%d calls)", fn.schema, fn.name, n-before[fn]))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(called)
	if len(called) > 0 {
		t.Fatalf("SQL functions called instead of inlined: %s", strings.Join(called, ", "))
	}
}

// The public API calls a queue's copy of the engine by its bare name, with
// the search path set to the queue's schema, and PL/pgSQL keeps the plan of
// that call: one session that works on several queues in turn, on a queue
// dropped and made again under its name, and across a migration that
// re-creates the copies, reaches each time the queue it names.
func TestOneSessionReachesEachQueueItNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	queues := []string{"a", "b", "c"}
	for _, name := range queues {
		b.createQueue(name, `{"lanes": 1}`)
		for i := 1; i <= 4; i++ {
			b.send(b.pool, name, fmt.Sprintf(`{"q": %q, "i": %d}`, name, i))
		}
	}
	// receive, extend, ack and nack each queue in turn on one connection
	check := func(round int) {
		t.Helper()
		for _, name := range queues {
			ms, err := receiveOn(b.ctx, conn, name, "default", 1, "")
			if err != nil || len(ms) != 1 {
				t.Fatalf("round %d, queue %s: received %d (%v), want 1", round, name, len(ms), err)
			}
			if want := fmt.Sprintf(`"q": %q`, name); !strings.Contains(ms[0].Body, want) {
				t.Fatalf("round %d: a receive of queue %s returned %s", round, name, ms[0].Body)
			}
			var n int
			if err := conn.QueryRow(b.ctx, "SELECT sluice.extend($1, 'default', $2, '1 minute')",
				name, receipts(ms)).Scan(&n); err != nil || n != 1 {
				t.Fatalf("round %d, queue %s: extend %d (%v), want 1", round, name, n, err)
			}
			if round%2 == 0 {
				if err := conn.QueryRow(b.ctx, "SELECT sluice.ack($1, 'default', $2)", name, receipts(ms)).Scan(&n); err != nil || n != 1 {
					t.Fatalf("round %d, queue %s: ack %d (%v), want 1", round, name, n, err)
				}
				continue
			}
			var ok bool
			if err := conn.QueryRow(b.ctx, "SELECT sluice.nack($1, 'default', $2, '0 seconds')",
				name, ms[0].Receipt).Scan(&ok); err != nil || !ok {
				t.Fatalf("round %d, queue %s: nack %v (%v), want true", round, name, ok, err)
			}
		}
	}
	check(0)
	check(1)
	// A receipt of one queue means nothing to another: its ack counts 0.
	ms, err := receiveOn(b.ctx, conn, "a", "default", 1, "")
	if err != nil || len(ms) != 1 {
		t.Fatalf("received %d (%v)", len(ms), err)
	}
	var n int
	if err := conn.QueryRow(b.ctx, "SELECT sluice.ack('b', 'default', $1)", receipts(ms)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a's receipt acked on b: %d (%v), want 0", n, err)
	}
	if err := conn.QueryRow(b.ctx, "SELECT sluice.ack('a', 'default', $1)", receipts(ms)).Scan(&n); err != nil || n != 1 {
		t.Fatalf("ack on a: %d (%v), want 1", n, err)
	}
	// Made again under its name (a new schema), and the copies of all
	// re-created by a migration: the same session still reaches them.
	b.exec("SELECT sluice.drop_queue('b')")
	b.createQueue("b", `{"lanes": 1}`)
	b.send(b.pool, "b", `{"q": "b", "i": 100}`)
	b.exec("SELECT sluice._instantiate(id) FROM sluice.queue")
	for _, name := range queues {
		ms, err := receiveOn(b.ctx, conn, name, "default", 10, "")
		if err != nil || len(ms) == 0 {
			t.Fatalf("after the migration, queue %s: received %d (%v)", name, len(ms), err)
		}
		for _, m := range ms {
			if !strings.Contains(m.Body, fmt.Sprintf(`"q": %q`, name)) {
				t.Fatalf("after the migration, a receive of queue %s returned %s", name, m.Body)
			}
		}
		if name == "b" && (len(ms) != 1 || !strings.Contains(ms[0].Body, `"i": 100`)) {
			t.Fatalf("the new queue b returned %v, want only its one message", ms)
		}
		if err := conn.QueryRow(b.ctx, "SELECT sluice.ack($1, 'default', $2)", name, receipts(ms)).Scan(&n); err != nil || n != len(ms) {
			t.Fatalf("after the migration, ack on %s: %d (%v), want %d", name, n, err, len(ms))
		}
	}
	// The caller's search_path is its own again after each call.
	var path string
	if err := conn.QueryRow(b.ctx, "SHOW search_path").Scan(&path); err != nil || strings.Contains(path, "sluice_q") {
		t.Fatalf("search_path after the calls: %q (%v)", path, err)
	}
}
