package sqlsrc_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// runRows is what a queue holds of leases ("deliveries": deliveries and
// runs) or of completions ("acks": acks and run_acks): rows, and the
// positions they cover (a run's row covers pos..last_pos).
//
// On engine 2 (docs/design.md, "Lane state"): a receive's leases are its
// lease rows of kind r, one per lane taken, covering n positions; the
// completions are its ack rows, one per position, or one (pos 0) for a
// lease acked whole, covering all of the lease's positions.
func (b *bundle) runRows(queue, table string) (rows, positions int64) {
	b.t.Helper()
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = $1", queue))
	if b.int64("SELECT engine FROM sluice.queue WHERE name = $1", queue) == 2 {
		query := map[string]string{
			"deliveries": `SELECT count(*), coalesce(sum(n), 0) FROM %[1]s.lease WHERE kind = 'r'`,
			"acks": `SELECT count(*), coalesce(sum(CASE WHEN a.pos = 0 THEN l.n ELSE 1 END), 0)
			         FROM %[1]s.ack a JOIN %[1]s.lease l USING (group_id, lane, lease_no)`,
		}[table]
		if err := b.pool.QueryRow(b.ctx, fmt.Sprintf(query, schema)).Scan(&rows, &positions); err != nil {
			b.t.Fatal(err)
		}
		return rows, positions
	}
	runs := map[string]string{"deliveries": "runs", "acks": "run_acks"}[table]
	if err := b.pool.QueryRow(b.ctx, fmt.Sprintf(
		`SELECT (SELECT count(*) FROM %[1]s.%[2]s) + (SELECT count(*) FROM %[1]s.%[3]s),
		        (SELECT count(*) FROM %[1]s.%[2]s) + (SELECT coalesce(sum(last_pos - pos + 1), 0) FROM %[1]s.%[3]s)`,
		schema, table, runs)).Scan(&rows, &positions); err != nil {
		b.t.Fatal(err)
	}
	return rows, positions
}

// A receive of 50 from one lane leases them with one row, and an ack of
// all 50 completes them with one row (engine 1: a run and a run ack;
// engine 2: a lease row and an ack of the whole lease); forged receipts
// complete nothing.
func TestRunLeasedAndAckedWithOneRowEach(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) {
			t.Parallel()
			runLeasedAndAckedWithOneRowEach(t, engine)
		})
	}
}

func runLeasedAndAckedWithOneRowEach(t *testing.T, engine int) {
	b := setup(t)
	b.createQueue("q", fmt.Sprintf(`{"engine": %d, "lanes": 1}`, engine))
	for i := 0; i < 50; i++ {
		b.send(b.pool, "q", fmt.Sprintf(`{"n": %d}`, i))
	}
	got := b.receive("q", "default", 50, "")
	if len(got) != 50 {
		t.Fatalf("got %d, want 50", len(got))
	}
	for i, m := range got {
		if m.Body != fmt.Sprintf(`{"n": %d}`, i) || m.Attempt != 1 {
			t.Fatalf("message %d = %s attempt %d", i, m.Body, m.Attempt)
		}
	}
	if rows, n := b.runRows("q", "deliveries"); rows != 1 || n != 50 {
		t.Fatalf("deliveries: %d rows for %d positions, want 1 for 50", rows, n)
	}
	if n := b.ack("q", "default", receipts(got)...); n != 50 {
		t.Fatalf("ack = %d, want 50", n)
	}
	if rows, n := b.runRows("q", "acks"); rows != 1 || n != 50 {
		t.Fatalf("acks: %d rows for %d positions, want 1 for 50", rows, n)
	}
	if n := b.ack("q", "default", receipts(got)...); n != 0 {
		t.Fatalf("second ack = %d, want 0", n)
	}
	if n := b.ack("q", "default", got[7].Receipt); n != 0 {
		t.Fatalf("ack of one acked message of the run = %d, want 0", n)
	}
	st := b.status("q")["default"]
	if st.InFlight != 0 || st.Ready != 0 || *st.Lag != 0 {
		t.Fatalf("status after acking the run: %+v", st)
	}
	// Forged: a receipt naming the run with another token, or a position
	// outside it.
	b.send(b.pool, "q", `{"n": 50}`)
	b.send(b.pool, "q", `{"n": 51}`)
	two := b.receive("q", "default", 2, "")
	parts := strings.Split(two[0].Receipt, ".")
	if len(parts) != 5 {
		t.Fatalf("receipt %q does not name a run", two[0].Receipt)
	}
	forged := []string{
		strings.Join([]string{parts[0], parts[1], parts[2], "12345", parts[4]}, "."),
		strings.Join([]string{parts[0], fmt.Sprint(two[1].Pos + 1), parts[2], parts[3], parts[4]}, "."),
		strings.Join([]string{parts[0], parts[1], "2", parts[3], parts[4]}, "."),
	}
	if n := b.ack("q", "default", forged...); n != 0 {
		t.Fatalf("forged receipts acked %d", n)
	}
	if n := b.ack("q", "default", receipts(two)...); n != 2 {
		t.Fatalf("ack = %d, want 2", n)
	}
}

// A run acked in part: the acked messages are completed, the others come
// back when the run's lease expires, the extended one only when its own
// lease does, and a nacked one as a retry.
func TestRunAckedInPart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 1, "backoff_base": "0 seconds", "backoff_max": "0 seconds"}`)
	for i := 0; i < 10; i++ {
		b.send(b.pool, "q", fmt.Sprintf(`{"n": %d}`, i))
	}
	// (A lease long enough for the checks below to run inside it on a
	// loaded machine: at 1.5 s, make test once saw it expire first.)
	leased := time.Now()
	got := b.receive("q", "default", 10, "4 seconds")
	if n := b.ack("q", "default", got[0].Receipt, got[3].Receipt, got[9].Receipt); n != 3 {
		t.Fatalf("ack = %d, want 3", n)
	}
	var extended int
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.extend('q', 'default', $1, '1 hour')",
		[]string{got[5].Receipt}).Scan(&extended); err != nil || extended != 1 {
		t.Fatalf("extend = %d, %v", extended, err)
	}
	if !b.nack("q", "default", got[6].Receipt, "", "boom") {
		t.Fatal("nack of a message of the run")
	}
	if st := b.status("q")["default"]; st.InFlight != 6 {
		t.Fatalf("in flight = %d, want 6 (10, less 3 acked and 1 nacked)", st.InFlight)
	}
	// The retry of the nacked message comes at once.
	retry := b.receive("q", "default", 10, "")
	if len(retry) != 1 || retry[0].Body != `{"n": 6}` || retry[0].Attempt != 2 {
		t.Fatalf("after the nack: %+v", retry)
	}
	b.ack("q", "default", retry[0].Receipt)
	time.Sleep(time.Until(leased.Add(4100 * time.Millisecond)))
	again := b.receive("q", "default", 10, "")
	var bodies []string
	for _, m := range again {
		bodies = append(bodies, m.Body)
		if m.Attempt != 2 {
			t.Fatalf("redelivered %s with attempt %d, want 2", m.Body, m.Attempt)
		}
	}
	want := `{"n": 1} {"n": 2} {"n": 4} {"n": 7} {"n": 8}`
	if strings.Join(bodies, " ") != want {
		t.Fatalf("redelivered %s, want %s", strings.Join(bodies, " "), want)
	}
	// The run's old receipts are stale now; the extended one is current.
	if n := b.ack("q", "default", got[1].Receipt, got[2].Receipt); n != 0 {
		t.Fatalf("stale receipts of the run acked %d", n)
	}
	if n := b.ack("q", "default", append(receipts(again), got[5].Receipt)...); n != 6 {
		t.Fatalf("ack = %d, want 6", n)
	}
	st := b.status("q")["default"]
	if st.InFlight != 0 || st.Ready != 0 || *st.Lag != 0 || *st.Lwm != *st.Head+1 {
		t.Fatalf("status at the end: %+v (lwm %d, head %d)", st, *st.Lwm, *st.Head)
	}
}

// Consumers acking the same run at once, whole and in part, complete each
// message once, and their counts add up to the run.
func TestRunAckedConcurrently(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 1}`)
	for round := 0; round < 10; round++ {
		for i := 0; i < 40; i++ {
			b.send(b.pool, "q", `{}`)
		}
		got := b.receive("q", "default", 40, "")
		if len(got) != 40 {
			t.Fatalf("got %d", len(got))
		}
		// whole run, whole run again, the first half, every third
		sets := [][]string{receipts(got), receipts(got), receipts(got[:20]), nil}
		for i := 0; i < 40; i += 3 {
			sets[3] = append(sets[3], got[i].Receipt)
		}
		var wg sync.WaitGroup
		counts := make([]int, len(sets))
		errs := make([]error, len(sets))
		for i := range sets {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				errs[i] = b.pool.QueryRow(b.ctx, "SELECT sluice.ack('q', 'default', $1)", sets[i]).Scan(&counts[i])
			}(i)
		}
		wg.Wait()
		total := 0
		for i := range sets {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			total += counts[i]
		}
		if total != 40 {
			t.Fatalf("round %d: the acks completed %d messages in all (%v), want 40", round, total, counts)
		}
		st := b.status("q")["default"]
		if st.InFlight != 0 || *st.Lag != 0 {
			t.Fatalf("round %d: status %+v, counts %v", round, st, counts)
		}
	}
	if got := b.receive("q", "default", 100, "1 second"); len(got) != 0 {
		t.Fatalf("%d messages came back", len(got))
	}
}

// A position completed twice (a dead letter racing the ack of its run)
// counts once: the low-water mark does not pass a message that is not
// completed. (Engine 1's acks and run_acks. Engine 2 has no counterpart to
// overlap: one ack row per (lease, position) by its unique key, and a lease
// acked whole is settled by its pos 0 row, not by a count.)
func TestCompletedCountCountsOverlapOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"engine": 1, "lanes": 1}`)
	for i := 0; i < 10; i++ {
		b.send(b.pool, "q", `{}`)
	}
	got := b.receive("q", "default", 10, "")
	if n := b.ack("q", "default", receipts(got[:9])...); n != 9 {
		t.Fatalf("ack = %d", n)
	}
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'q'"))
	// The first 5 completed as one run too, overlapping their acks rows.
	first := got[0].Pos
	b.exec(fmt.Sprintf(`DELETE FROM %s.acks WHERE pos = %d`, schema, first))
	b.exec(fmt.Sprintf(`INSERT INTO %s.run_acks (slot, group_id, pos, last_pos, acked_at)
		SELECT slot, group_id, %d, %d, now() FROM %s.acks LIMIT 1`, schema, first, first+4, schema))
	// (the function names the queue's tables: it runs with the queue's
	// schema on the search path, as inside the engine)
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	if _, err := tx.Exec(b.ctx, fmt.Sprintf("SET LOCAL search_path = %s, pg_catalog", schema)); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := tx.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM e_completed_in(g.id, $1, $2))
		FROM sluice.consumer_group g JOIN sluice.queue q ON q.id = g.queue_id WHERE q.name = 'q'`,
		first, got[9].Pos).Scan(&n); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(b.ctx)
	if n != 9 {
		t.Fatalf("completed count = %d, want 9", n)
	}
	time.Sleep(1100 * time.Millisecond) // the low-water mark moves at most once a second
	b.receive("q", "default", 1, "")
	if st := b.status("q")["default"]; *st.Lwm != got[9].Pos {
		t.Fatalf("lwm = %d, want %d (the one not acked)", *st.Lwm, got[9].Pos)
	}
}
