package pgmqcompat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lanes is the number of lanes of the sluice queue behind a pgmq queue.
func lanes(t *testing.T, db *pgxpool.Pool, queue string) int {
	t.Helper()
	return scalar[int](t, db, "SELECT (options->>'lanes')::int FROM sluice.list_queues() WHERE queue = lower($1)", queue)
}

// TestConcurrentReadersNoDuplicateWithinVT has eight readers read (and not
// delete) a multi-lane queue at once: every message is read once, none
// twice while its vt has not passed, and afterwards nothing is visible.
func TestConcurrentReadersNoDuplicateWithinVT(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('lanesq')")
	if n := lanes(t, db, "lanesq"); n < 2 {
		t.Fatalf("a new pgmq queue has %d lane(s), want sluice's default (several)", n)
	}
	const total = 2000
	for i := 0; i < total; i += 50 { // 40 transactions: the cut deals them out to the lanes
		exec(t, db, "SELECT * FROM pgmq.send_batch('lanesq', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series($1::int, $1::int + 49) g))", i)
	}
	var mu sync.Mutex
	seen := make(map[int64]int)
	ctx, cancel := context.WithTimeout(ctxT(t), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for empty := 0; empty < 3; {
				rows, err := db.Query(ctx, "SELECT msg_id FROM pgmq.read('lanesq', 30, 7)")
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
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("message %d read %d times within its vt", id, n)
		}
	}
	if len(seen) != total {
		t.Fatalf("%d distinct messages read, want %d", len(seen), total)
	}
	if got := msgs(t, db, "pgmq.read('lanesq', 30, 10)"); len(got) != 0 {
		t.Fatalf("read while every message is invisible: %v", ids(got))
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.q_lanesq WHERE vt <= clock_timestamp()"); n != 0 {
		t.Fatalf("q_lanesq shows %d visible messages", n)
	}
}

// TestGroupedReadsFIFOWithConcurrentReaders drains interleaved FIFO groups
// (x-pgmq-group) of a multi-lane queue with six readers using every read
// form: each group's messages are handed out in send order, a message only
// once the one before it is deleted, and read_grouped_head returns at most
// one per group.
func TestGroupedReadsFIFOWithConcurrentReaders(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('gfifo')")
	if n := lanes(t, db, "gfifo"); n < 2 {
		t.Fatalf("%d lane(s), want several", n)
	}
	const groups, per = 6, 40
	for s := 0; s < per; s += 4 { // interleaved, 4 messages of each group per transaction
		exec(t, db, `SELECT * FROM pgmq.send_batch('gfifo',
			ARRAY(SELECT jsonb_build_object('g', g, 's', s) FROM generate_series($1::int, $1::int + 3) s, generate_series(0, $2::int - 1) g ORDER BY s, g),
			ARRAY(SELECT jsonb_build_object('x-pgmq-group', 'grp' || g) FROM generate_series($1::int, $1::int + 3) s, generate_series(0, $2::int - 1) g ORDER BY s, g))`,
			s, groups)
	}
	var mu sync.Mutex
	next := make([]int, groups) // per group, the seq the next read must return
	handled := 0
	ctx, cancel := context.WithTimeout(ctxT(t), 90*time.Second)
	defer cancel()
	forms := []string{"read_grouped('gfifo', 30, 5)", "read_grouped_rr('gfifo', 30, 5)", "read_grouped_head('gfifo', 30, 5)",
		"read('gfifo', 30, 5)", "read_grouped_with_poll('gfifo', 30, 5, 1, 10)", "read_grouped_head_with_poll('gfifo', 30, 3, 1, 10)"}
	var wg sync.WaitGroup
	errs := make(chan error, len(forms))
	for _, form := range forms {
		wg.Add(1)
		go func(form string) {
			defer wg.Done()
			for {
				mu.Lock()
				done := handled == groups*per
				mu.Unlock()
				if done || ctx.Err() != nil {
					return
				}
				rows, err := db.Query(ctx, "SELECT msg_id, message::text FROM pgmq."+form)
				if err != nil {
					errs <- err
					return
				}
				type item struct {
					ID   int64
					Body string
				}
				got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[item])
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				var delIDs []int64
				perGroup := map[int]int{}
				mu.Lock()
				for _, it := range got {
					var b struct{ G, S int }
					if err := json.Unmarshal([]byte(it.Body), &b); err != nil {
						mu.Unlock()
						errs <- err
						return
					}
					if b.S != next[b.G] {
						mu.Unlock()
						errs <- fmt.Errorf("%s: group %d gave seq %d, want %d (out of order, or before the one before it was deleted)", form, b.G, b.S, next[b.G])
						return
					}
					next[b.G]++
					perGroup[b.G]++
					delIDs = append(delIDs, it.ID)
				}
				handled += len(got)
				mu.Unlock()
				if form == forms[2] || form == forms[5] {
					for g, n := range perGroup {
						if n > 1 {
							errs <- fmt.Errorf("%s returned %d messages of group %d", form, n, g)
							return
						}
					}
				}
				// recorded before the delete commits: the next of a group comes only after it
				if _, err := db.Exec(ctx, "SELECT * FROM pgmq.delete('gfifo', $1::bigint[])", delIDs); err != nil {
					errs <- err
					return
				}
			}
		}(form)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if handled != groups*per {
		t.Fatalf("handled %d messages, want %d (per group: %v)", handled, groups*per, next)
	}
}

// TestLanesSetting checks sluice.pgmq_lanes: 1 makes a queue of one lane,
// read in msg_id order; a value that is not a lane count is refused with
// SL007 and creates nothing.
func TestLanesSetting(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	conn, err := db.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctxT(t), "SET sluice.pgmq_lanes = 1; SELECT pgmq.create('one'); RESET sluice.pgmq_lanes"); err != nil {
		t.Fatal(err)
	}
	if n := lanes(t, db, "one"); n != 1 {
		t.Fatalf("sluice.pgmq_lanes = 1 made %d lanes", n)
	}
	var want []int64
	for i := 0; i < 60; i++ { // one transaction each: several cuts
		want = append(want, scalar[int64](t, db, "SELECT * FROM pgmq.send('one', '{}')"))
	}
	var got []int64
	for len(got) < len(want) {
		ms := msgs(t, db, "pgmq.read('one', 30, 7)")
		if len(ms) == 0 {
			t.Fatalf("read nothing after %d of %d", len(got), len(want))
		}
		got = append(got, ids(ms)...)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("one lane read out of msg_id order: %v", got)
	}
	for _, bad := range []string{"0", "257", "many", "-1"} {
		if _, err := conn.Exec(ctxT(t), "SET sluice.pgmq_lanes = '"+bad+"'"); err != nil {
			t.Fatal(err)
		}
		_, err := conn.Exec(ctxT(t), "SELECT pgmq.create('badlanes')")
		if code := pgCode(err); code != "SL007" {
			t.Fatalf("sluice.pgmq_lanes = %s: %v, want SL007", bad, err)
		}
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.meta WHERE queue_name = 'badlanes'"); n != 0 {
		t.Fatal("a refused create left a queue")
	}
}

// pgCode is the SQLSTATE of err, or "" when it is not a PostgreSQL error.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
