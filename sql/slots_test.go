package sqlsrc_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The slots option: validated, fixed at creation, listed with the others,
// and the queue's tables get that many partitions each (on both engines).
func TestSlotsOption(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, bad := range []string{`{"slots": 1}`, `{"slots": 5}`, `{"slots": "2"}`, `{"slots": 2.5}`, `{"slots": 0}`} {
		_, err := b.pool.Exec(b.ctx, "SELECT sluice.create_queue('bad', $1::jsonb)", bad)
		if sqlstate(err) != "SL007" {
			t.Errorf("create_queue with %s: %v, want SL007", bad, err)
		}
	}
	if n := b.int64(`SELECT count(*) FROM sluice.queue WHERE name = 'bad'`); n != 0 {
		t.Fatalf("a refused create_queue left %d queues", n)
	}
	partitions := func(queue, table string) int64 {
		return b.int64(`SELECT count(*) FROM pg_inherits i
			JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace n ON n.oid = p.relnamespace
			WHERE n.nspname = 'sluice_q' || (SELECT id FROM sluice.queue WHERE name = $1) AND p.relname = $2`, queue, table)
	}
	// Each engine's tables (engine 2: docs/design.md, "Engine v2"), and
	// every partitioned table of the queue's schema (none left out).
	tables := map[int][]string{
		1: {"messages", "batches", "deliveries", "acks", "group_states", "checkpoints", "dedup", "keyed", "prio", "runs",
			"run_acks"},
		2: {"msg", "cut", "batch", "lease", "ack", "ext", "pending", "prio", "dedup"},
	}
	for _, engine := range []int{1, 2} {
		for _, c := range []struct {
			queue, options string
			slots          int64
		}{{"d", ``, 2}, {"three", `, "slots": 3`, 3}, {"four", `, "slots": 4`, 4}} {
			queue := fmt.Sprintf("%s_e%d", c.queue, engine)
			b.createQueue(queue, fmt.Sprintf(`{"engine": %d%s}`, engine, c.options))
			if n := b.int64(`SELECT (options->>'slots')::int FROM sluice.list_queues() WHERE queue = $1`, queue); n != c.slots {
				t.Errorf("%s: list_queues shows slots %d, want %d", queue, n, c.slots)
			}
			for _, table := range tables[engine] {
				if n := partitions(queue, table); n != c.slots {
					t.Errorf("%s: %s has %d slot partitions, want %d", queue, table, n, c.slots)
				}
			}
			rows, err := b.pool.Query(b.ctx, `SELECT p.relname, count(i.inhrelid) FROM pg_class p
				LEFT JOIN pg_inherits i ON i.inhparent = p.oid
				WHERE p.relnamespace::regnamespace::text = 'sluice_q' || (SELECT id FROM sluice.queue WHERE name = $1)
				  AND p.relkind = 'p'
				GROUP BY p.relname`, queue)
			if err != nil {
				t.Fatal(err)
			}
			counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
				Name string
				N    int64
			}])
			if err != nil {
				t.Fatal(err)
			}
			if len(counts) < len(tables[engine]) {
				t.Errorf("%s: %d partitioned tables, want at least %d", queue, len(counts), len(tables[engine]))
			}
			for _, tn := range counts {
				if tn.N != c.slots {
					t.Errorf("%s: %s has %d slot partitions, want %d", queue, tn.Name, tn.N, c.slots)
				}
			}
		}
	}
	_, err := b.pool.Exec(b.ctx, `SELECT sluice.alter_queue('three_e2', '{"slots": 2}')`)
	if sqlstate(err) != "SL007" {
		t.Fatalf("alter_queue slots: %v, want SL007", err)
	}
	b.exec(`SELECT sluice.alter_queue('three_e2', '{"slots": 3, "max_attempts": 2}')`) // the same value is fine
	b.exec(`SELECT sluice.alter_queue('d_e2', '{"max_attempts": 2}')`)                 // the default kept
}
