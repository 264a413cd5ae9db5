package sqlsrc_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// leaseIndexBlocks is how many blocks of queue qid's lease indexes the
// session has read in its transactions not reported to the statistics yet
// (the current one's included).
func leaseIndexBlocks(t *testing.T, tx pgx.Tx, qid int64) int64 {
	t.Helper()
	var n int64
	if err := tx.QueryRow(context.Background(), `SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(c.oid)), 0)::bigint
		FROM pg_class c WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'i' AND c.relname LIKE 'lease%'`,
		fmt.Sprintf("sluice_q%d", qid)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// An ack reads the lease its receipt names by the lease's key, whatever
// the statistics of the slot's leaves: one session acks 2,000 messages of
// a one-lane queue whose leaves were never analyzed (the session's plans
// are made while they are empty), and its last ack and nack read a few
// index blocks, not every lease of the lane. (Planned on a leaf without
// statistics, the lookup took the index on expiry, whose key has the lease
// number after the expiry time, and read the whole lane: 17 blocks at
// 3,000 leases, and more with every lease the slot held.)
func TestV2AckReadsItsLeaseByKey(t *testing.T) {
	b := setup(t)
	b.createV2("ackkey", `"lanes": 1, "lease": "1 hour"`)
	qid := b.int64("SELECT id FROM sluice.queue WHERE name = 'ackkey'")
	c, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	// (autovacuum kept off the leaves, so that they stay never analyzed;
	// the session's upkeep kept from running)
	if _, err := c.Exec(b.ctx, fmt.Sprintf(`SELECT set_config('sluice.maint_%d', '99990101000000000000', false)`, qid)); err != nil {
		t.Fatal(err)
	}
	b.exec(fmt.Sprintf(`DO $$ DECLARE r regclass; BEGIN
		FOR r IN SELECT c.oid FROM pg_class c WHERE c.relnamespace = 'sluice_q%d'::regnamespace AND c.relkind = 'r' LOOP
			EXECUTE format('ALTER TABLE %%s SET (autovacuum_enabled = false)', r);
		END LOOP; END $$`, qid))
	receiveOne := func() string {
		t.Helper()
		ms, err := v2receiveOn(b.ctx, c, "ackkey", "default", 1, "")
		if err != nil || len(ms) != 1 {
			t.Fatalf("receive: %v, %+v", err, ms)
		}
		return ms[0].Receipt
	}
	send := func() {
		t.Helper()
		if _, err := c.Exec(b.ctx, `SELECT sluice.send('ackkey', '{}')`); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2000; i++ {
		send()
		r := receiveOne()
		if _, err := c.Exec(b.ctx, `SELECT sluice.ack('ackkey', 'default', ARRAY[$1])`, r); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.int64(fmt.Sprintf(`SELECT count(*) FROM pg_class c
		WHERE c.relnamespace = 'sluice_q%d'::regnamespace AND c.relkind = 'r' AND c.reltuples >= 0`, qid)); n != 0 {
		t.Fatalf("%d leaves have statistics: the case needs leaves never analyzed", n)
	}
	for _, call := range []string{`SELECT sluice.ack('ackkey', 'default', ARRAY[$1])`,
		`SELECT sluice.nack('ackkey', 'default', $1, '1 hour')::int`} {
		send()
		r := receiveOne()
		tx, err := c.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		// (the counts of the session's transactions not reported yet are
		// in it too: the difference)
		blocks := -leaseIndexBlocks(t, tx, qid)
		var done int
		if err := tx.QueryRow(b.ctx, call, r).Scan(&done); err != nil || done != 1 {
			t.Fatalf("%s: %v, %d", call, err, done)
		}
		blocks += leaseIndexBlocks(t, tx, qid)
		if err := tx.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		if blocks > 6 {
			t.Errorf("%s read %d blocks of the lease indexes, want a lookup by key (at most 6)", call, blocks)
		}
	}
}
