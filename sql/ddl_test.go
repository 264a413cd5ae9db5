package sqlsrc_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/pgtest"
)

// TestDropQueueUnderLoad: dropping a queue while 8 consumers receive and ack
// and 2 producers send to it succeeds, without a deadlock (40P01) for the
// drop or for anyone, and its clients get SL002 once it is gone and nothing
// else: no raw 42P01 or 42883 from the dropped tables and functions (issue
// 15, item 1).
func TestDropQueueUnderLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for round := range 3 {
		queue := fmt.Sprintf("busy%d", round)
		b.createQueue(queue, "")
		var (
			mu       sync.Mutex
			bad      []string
			sl002    atomic.Int64
			ops      atomic.Int64
			wg       sync.WaitGroup
			stop     = make(chan struct{})
			dropping atomic.Bool
		)
		fail := func(who string, err error) bool {
			if err == nil {
				return false
			}
			if sqlstate(err) == "SL002" && dropping.Load() {
				sl002.Add(1)
				return true
			}
			mu.Lock()
			bad = append(bad, fmt.Sprintf("%s: %v", who, err))
			mu.Unlock()
			return true
		}
		// One connection each (the pool has fewer), made before the load starts.
		ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
		conns := make([]*pgx.Conn, 10)
		for i := range conns {
			conns[i] = pgtest.Connect(t, b.pool.Config().ConnString())
		}
		client := func(who string, conn *pgx.Conn, step func(ctx context.Context, conn *pgx.Conn) error) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if fail(who, step(ctx, conn)) {
					return
				}
				ops.Add(1)
			}
		}
		for i := range 8 {
			wg.Add(1)
			go client(fmt.Sprintf("consumer %d", i), conns[i], func(ctx context.Context, conn *pgx.Conn) error {
				ms, err := receiveOn(ctx, conn, queue, "default", 5, "")
				if err != nil {
					return err
				}
				if len(ms) == 0 {
					return nil
				}
				receipts := make([]string, len(ms))
				for i, m := range ms {
					receipts[i] = m.Receipt
				}
				if i%2 == 0 {
					_, err = conn.Exec(ctx, "SELECT sluice.ack($1, 'default', $2)", queue, receipts)
					return err
				}
				return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "SELECT sluice.ack($1, 'default', $2)", queue, receipts); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "SELECT sluice.send($1, '\"follow-up\"', key => 'k')", queue)
					return err
				})
			})
		}
		for i := range 2 {
			wg.Add(1)
			go client(fmt.Sprintf("producer %d", i), conns[8+i], func(ctx context.Context, conn *pgx.Conn) error {
				return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					for k := range 5 {
						if _, err := tx.Exec(ctx, "SELECT sluice.send($1, '1', key => $2)", queue, fmt.Sprint(k)); err != nil {
							return err
						}
					}
					_, err := tx.Exec(ctx, "SELECT sluice.send_batch($1, ARRAY['1', '2']::jsonb[])", queue)
					return err
				})
			})
		}
		time.Sleep(time.Second)
		dropping.Store(true)
		start := time.Now()
		var dropped bool
		err := b.pool.QueryRow(ctx, "SELECT sluice.drop_queue($1)", queue).Scan(&dropped)
		took := time.Since(start)
		if err != nil || !dropped {
			t.Errorf("round %d: drop_queue under load: %v, %v (after %v)", round, dropped, err, took)
		}
		// Every client meets the drop within a few calls, and gets SL002.
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			close(stop)
			<-done
			t.Errorf("round %d: clients still running 30 s after the drop", round)
		}
		sort.Strings(bad)
		for _, e := range bad {
			t.Errorf("round %d: %s", round, e)
		}
		if sl002.Load() != 10 {
			t.Errorf("round %d: %d of 10 clients got SL002", round, sl002.Load())
		}
		t.Logf("round %d: %d calls, drop took %v", round, ops.Load(), took)
		cancel()
	}
}

// TestAdminDDLDoesNotStallOtherQueues: while a producer transaction is open
// on queue A, create_queue B and drop_queue C do not make sends and
// receives on queue D wait (issue 15, item 2). On both engines: engine 1's
// queues share the parent sluice.messages, whose lock the producer holds,
// so C's table is detached later (by maintain); engine 2's queues share no
// table, so C's schema goes at once.
func TestAdminDDLDoesNotStallOtherQueues(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) {
			t.Parallel()
			adminDDLDoesNotStallOtherQueues(t, engine)
		})
	}
}

func adminDDLDoesNotStallOtherQueues(t *testing.T, engine int) {
	b := setup(t)
	opts := fmt.Sprintf(`{"engine": %d}`, engine)
	for _, q := range []string{"a", "c", "d"} {
		b.createQueue(q, opts)
	}
	cid := b.queueID("c")
	b.send(b.pool, "c", "1")
	holder, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(b.ctx) //nolint:errcheck
	if _, err := holder.Exec(b.ctx, "SELECT sluice.send('a', '1')"); err != nil {
		t.Fatal(err)
	}

	const hold = 4 * time.Second
	ddlDone := make(chan string, 2)
	go func() {
		start := time.Now()
		_, err := b.pool.Exec(b.ctx, "SELECT sluice.create_queue('b', $1::jsonb)", opts)
		ddlDone <- fmt.Sprintf("create_queue b: %v after %v", err, time.Since(start).Round(time.Millisecond))
	}()
	go func() {
		start := time.Now()
		_, err := b.pool.Exec(b.ctx, "SELECT sluice.drop_queue('c')")
		ddlDone <- fmt.Sprintf("drop_queue c: %v after %v", err, time.Since(start).Round(time.Millisecond))
	}()
	var worst time.Duration
	var waits []time.Duration
	start := time.Now()
	for time.Since(start) < hold {
		t0 := time.Now()
		// A round that waits for the DDL waits for the holder, which this
		// loop keeps open: give up after 3 s.
		err := func() error {
			ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
			defer cancel()
			if _, err := b.pool.Exec(ctx, "SELECT sluice.send('d', '1')"); err != nil {
				return err
			}
			ms, err := receiveOn(ctx, b.pool, "d", "default", 10, "")
			for _, m := range ms {
				if _, err := b.pool.Exec(ctx, "SELECT sluice.ack('d', 'default', $1)", []string{m.Receipt}); err != nil {
					return err
				}
			}
			return err
		}()
		d := time.Since(t0)
		waits = append(waits, d)
		worst = max(worst, d)
		if err != nil {
			t.Errorf("a round on queue d failed after %v: %v", d, err)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Engine 1: drop_queue c could not detach c's messages table while the
	// holder's transaction (which inserted into sluice.messages) is open:
	// c's schema is left, empty, for later. Engine 2: nothing of c's is
	// shared, and its schema is gone.
	if n, want := b.int64(`SELECT count(*) FROM pg_namespace WHERE nspname ~ '^sluice_(dropped_)?q[0-9]+$'`),
		map[int]int64{1: 4, 2: 3}[engine]; n != want {
		t.Errorf("%d queue schemas while the producer transaction is open, want %d (a, b, d, and on engine 1 what c left)",
			n, want)
	}
	if err := holder.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case s := <-ddlDone:
			t.Log(s)
			if len(s) < 10 || !containsNil(s) {
				t.Errorf("%s", s)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("create_queue or drop_queue did not finish 30 s after the producer transaction ended")
		}
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	t.Logf("send+receive+ack on d: %d rounds, median %v, worst %v", len(waits), waits[len(waits)/2], worst)
	if worst > time.Second {
		t.Errorf("a send+receive+ack round on queue d took %v while create_queue b and drop_queue c ran", worst)
	}
	if n := b.int64("SELECT count(*) FROM sluice.list_queues() WHERE queue IN ('b', 'c')"); n != 1 {
		t.Errorf("%d of queues b (created) and c (dropped) listed, want 1", n)
	}
	// What drop_queue could not detach while the producer transaction was
	// open goes with the next maintain.
	b.exec("SELECT * FROM sluice.maintain()")
	if n := b.int64(`SELECT count(*) FROM pg_namespace WHERE nspname ~ '^sluice_q[0-9]+$'`); n != 3 {
		t.Errorf("%d queue schemas after maintain, want 3 (a, b, d)", n)
	}
	if engine == 1 {
		if n := b.int64(`SELECT count(*) FROM pg_inherits WHERE inhparent = 'sluice.messages'::regclass`); n != 3 {
			t.Errorf("%d partitions of sluice.messages after maintain, want 3 (a, b, d)", n)
		}
		return
	}
	// engine 2: each queue left has its own message table, with a leaf per
	// slot; c has nothing left, and sluice.messages none of them
	for _, q := range []string{"a", "b", "d"} {
		if n := b.int64(`SELECT count(*) FROM pg_inherits
			WHERE inhparent = to_regclass(format('sluice_q%s.msg', $1::int))`, b.queueID(q)); n != 2 {
			t.Errorf("queue %s: %d slot tables of its msg, want 2", q, n)
		}
	}
	if n := b.int64(`SELECT count(*) FROM pg_class WHERE relnamespace::regnamespace::text ~ ('^sluice_(dropped_)?q' || $1::int || '$')`,
		cid); n != 0 {
		t.Errorf("%d relations of the dropped queue c left after maintain, want 0", n)
	}
	if n := b.int64(`SELECT count(*) FROM pg_inherits WHERE inhparent = 'sluice.messages'::regclass`); n != 0 {
		t.Errorf("%d partitions of sluice.messages on engine 2, want 0 (each queue keeps its own)", n)
	}
}

func containsNil(s string) bool {
	for i := 0; i+5 <= len(s); i++ {
		if s[i:i+5] == "<nil>" {
			return true
		}
	}
	return false
}

// TestDroppedQueueInOldSnapshot: a REPEATABLE READ transaction whose
// snapshot was taken before a drop still sees the queue's row; its calls on
// the queue get SL002 all the same, not a raw error from the missing schema
// (or, for a send, a message routed into the dropped queue's table).
func TestDroppedQueueInOldSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, call := range []string{
		"SELECT sluice.send('r', '1')",
		"SELECT sluice.send_batch('r', ARRAY['1']::jsonb[])",
		"SELECT sluice.ack('r', 'default', ARRAY['0.1.1.1'])",
		"SELECT sluice.extend('r', 'default', ARRAY['0.1.1.1'], '1 minute')",
		"SELECT * FROM sluice.status('r')",
	} {
		b.createQueue("r", "")
		rr, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rr.Exec(b.ctx, "SELECT count(*) FROM sluice.list_queues()"); err != nil {
			t.Fatal(err)
		}
		b.exec("SELECT sluice.drop_queue('r')")
		if _, err := rr.Exec(b.ctx, call); sqlstate(err) != "SL002" {
			t.Errorf("%s in a snapshot from before the drop: %v, want SL002", call, err)
		}
		_ = rr.Rollback(b.ctx)
	}
}
