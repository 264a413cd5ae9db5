package sqlsrc_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// indexEntriesRead is how many index entries the transaction so far read
// from the indexes of the queue's storage (its schema).
func indexEntriesRead(b *bundle, c *pgxpool.Conn, qid int64) int64 {
	b.t.Helper()
	var n int64
	if err := c.QueryRow(b.ctx, `SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid)), 0)::bigint
		FROM pg_class c WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'i'`, fmt.Sprintf("sluice_q%d", qid)).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

// A slot partition analyzed while empty (autovacuum analyzes the waiting
// slots, whose rows went with the TRUNCATE of reclaim; or a database-wide
// ANALYZE) has reltuples = 0. A session that plans while it is empty
// estimates it at 0 rows, and its cached generic plans may probe it with an
// index condition on group_id alone: once the slot is current and fills,
// every probe (the lane's low-water mark walks completions one position at
// a time) reads every completion of the group in the slot, each with a heap
// fetch while an xid is held (vacuum cannot mark the pages all-visible).
// Maintenance analyzes such partitions once they have rows, which makes the
// sessions plan again. (Issue 16: consumed/s fell to a quarter for a minute
// under a held xid.)
func TestSlotAnalyzedEmptyIsAnalyzedAgainOnceFilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// One lane, and a retention that keeps the first slot (a reclaim would
	// TRUNCATE, which resets the statistics and makes every session plan again).
	b.createQueue("q", `{"lanes": 1, "rotate_interval": "1 second", "lease": "5 minutes"}`)
	qid := b.int64("SELECT id FROM sluice.queue WHERE name = 'q'")

	holder, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(b.ctx) //nolint:errcheck
	if _, err := holder.Exec(b.ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}

	// The consumer's session keeps its cached plans for the whole test.
	c, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	recv := func(n int) []msg {
		t.Helper()
		ms, err := receiveOn(b.ctx, c, "q", "default", n, "")
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		return ms
	}
	ack := func(ms []msg) {
		t.Helper()
		var n int
		if err := c.QueryRow(b.ctx, "SELECT sluice.ack('q', 'default', $1)", receipts(ms)).Scan(&n); err != nil || n != len(ms) {
			t.Fatalf("ack of %d: %d, %v", len(ms), n, err)
		}
	}

	// Slots 1 to 3 are analyzed empty, then the consumer plans the
	// low-water mark's walk (positions in flight after completed ones).
	b.exec(fmt.Sprintf("ANALYZE sluice_q%d.messages, sluice_q%d.batches, sluice_q%d.deliveries, sluice_q%d.acks, sluice_q%d.group_states", qid, qid, qid, qid, qid))
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 20) g))`)
	first := recv(10)
	ack(first[:5])
	time.Sleep(1100 * time.Millisecond)
	rest := recv(10)
	ack(append(first[5:], rest...))

	// The next epoch, in slot 1, fills.
	time.Sleep(1100 * time.Millisecond)
	b.exec("SELECT sluice.maintain()")
	if e := b.int64("SELECT max(epoch) FROM sluice.epoch WHERE queue_id = $1", qid); e != 1 {
		t.Fatalf("epoch %d after maintain, want 1", e)
	}
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 600) g))`)
	ms := recv(300)
	if len(ms) != 300 {
		t.Fatalf("received %d, want 300", len(ms))
	}
	ack(ms[:299])
	b.exec("SELECT sluice.maintain()")

	// No partition of the queue is left analyzed empty once it has rows.
	var stale []string
	rows, err := b.pool.Query(b.ctx, `SELECT c.relname FROM pg_class c
		WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'r' AND c.reltuples >= 0 AND c.relpages = 0
		  AND pg_relation_size(c.oid) > 0 ORDER BY 1`, fmt.Sprintf("sluice_q%d", qid))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		stale = append(stale, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Errorf("partitions with rows but statistics of an empty table after maintain: %v", stale)
	}

	// The walk over the 299 completed positions probes each one: one index
	// entry a probe, every completion of the group with the plan made while
	// the slot was empty (about 45,000 here).
	time.Sleep(1100 * time.Millisecond)
	tx, err := c.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	before := indexEntriesRead(b, c, qid)
	if _, err := receiveOn(b.ctx, tx, "q", "default", 1, ""); err != nil {
		t.Fatalf("receive: %v", err)
	}
	used := indexEntriesRead(b, c, qid) - before
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("a receive walking 299 completed positions read %d index entries of the queue's storage", used)
	if used > 10000 {
		t.Errorf("a receive walking 299 completed positions read %d index entries of the queue's storage, want under 10,000 (a few per position)", used)
	}
}
