package pgmqcompat

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestConcurrentConsumersUnderHeldXid drains a queue with four competing
// consumers (read, then delete or archive) while another session holds an
// xid open: every message is handled exactly once, and afterwards the
// queue's tables and the side tables have no dead tuples.
func TestConcurrentConsumersUnderHeldXid(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	const total = 1000
	exec(t, db, "SELECT pgmq.create('conc')")

	holder, err := db.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	htx, err := holder.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = htx.Rollback(context.Background()) }()
	if _, err := htx.Exec(ctxT(t), "SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}

	for i := 0; i < total; i += 100 {
		exec(t, db, "SELECT * FROM pgmq.send_batch('conc', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series($1::int, $1::int + 99) g))", i)
	}

	var mu sync.Mutex
	seen := make(map[int64]int)
	ctx, cancel := context.WithTimeout(ctxT(t), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			empty := 0
			for empty < 3 {
				rows, err := db.Query(ctx, "SELECT msg_id FROM pgmq.read('conc', 30, 10)")
				if err != nil {
					errs <- err
					return
				}
				got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					empty++
					time.Sleep(20 * time.Millisecond)
					continue
				}
				empty = 0
				mu.Lock()
				for _, id := range got {
					seen[id]++
				}
				mu.Unlock()
				f := "delete"
				if w == 0 {
					f = "archive"
				}
				rows, err = db.Query(ctx, fmt.Sprintf("SELECT * FROM pgmq.%s('conc', $1::bigint[])", f), got)
				if err != nil {
					errs <- err
					return
				}
				done, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				if err != nil {
					errs <- err
					return
				}
				if len(done) != len(got) {
					errs <- fmt.Errorf("%s of %d messages completed %d", f, len(got), len(done))
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != total {
		t.Fatalf("%d distinct messages handled, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("message %d handled %d times within its vt", id, n)
		}
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.q_conc"); n != 0 {
		t.Fatalf("q_conc still shows %d messages", n)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.a_conc"); n == 0 || n == total {
		t.Fatalf("a_conc has %d rows: the archiving consumer took none or all", n)
	}
	// Idle sessions flush their statistics within PostgreSQL's idle interval
	// (10 s) since version 15; before it, an idle session may keep what it
	// counted in its last half second until its next transaction, which
	// never comes in this test. A session that ends sends its counts: close
	// the pool's idle connections (the xid holder stays), then wait for the
	// inserts to show, up to 20 s.
	db.Reset()
	var ins, dead int64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if err := db.QueryRow(ctxT(t), `
			SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_dead_tup + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables
			 WHERE schemaname LIKE 'sluice_q%' OR (schemaname = 'pgmq' AND (relname LIKE '\_sl\_%' OR relname LIKE 'a\_%'))`).Scan(&ins, &dead); err != nil {
			t.Fatal(err)
		}
		if ins >= int64(total) || time.Now().After(deadline) {
			break
		}
	}
	if ins < total {
		t.Fatalf("statistics show %d inserts: not flushed, the check would see nothing", ins)
	}
	if dead != 0 {
		t.Fatalf("%d dead, updated or deleted tuples in the queue's tables under a held xid", dead)
	}
}
