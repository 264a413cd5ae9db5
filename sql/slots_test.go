package sqlsrc_test

import (
	"testing"
)

// The slots option: validated, fixed at creation, listed with the others,
// and the queue's tables get that many partitions each.
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
	for _, c := range []struct {
		queue, options string
		slots          int64
	}{{"d", `{}`, 2}, {"three", `{"slots": 3}`, 3}, {"four", `{"slots": 4}`, 4}} {
		b.createQueue(c.queue, c.options)
		if n := b.int64(`SELECT (options->>'slots')::int FROM sluice.list_queues() WHERE queue = $1`, c.queue); n != c.slots {
			t.Errorf("%s: list_queues shows slots %d, want %d", c.queue, n, c.slots)
		}
		for _, table := range []string{"messages", "batches", "deliveries", "acks", "group_states", "checkpoints", "dedup",
			"keyed", "prio", "runs", "run_acks"} {
			if n := partitions(c.queue, table); n != c.slots {
				t.Errorf("%s: %s has %d slot partitions, want %d", c.queue, table, n, c.slots)
			}
		}
	}
	_, err := b.pool.Exec(b.ctx, `SELECT sluice.alter_queue('three', '{"slots": 2}')`)
	if sqlstate(err) != "SL007" {
		t.Fatalf("alter_queue slots: %v, want SL007", err)
	}
	b.exec(`SELECT sluice.alter_queue('three', '{"slots": 3, "max_attempts": 2}')`) // the same value is fine
	b.exec(`SELECT sluice.alter_queue('d', '{"max_attempts": 2}')`)                 // the default kept
}
