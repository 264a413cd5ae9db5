package sqlsrc_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// No two receives wait for each other in a cycle under load: producers,
// consumers of two groups (more than the lanes; acking, nacking, acking
// with the next receive) and a rotation, every session with
// deadlock_timeout = 10ms, so that a cycle through the waits of 100 ms
// (the cut lock, a lane) fails a call with "deadlock detected" instead of
// ending when the waits run out (receives late by 100 ms). Before the
// changes of 2026-11-27 it failed within seconds: a receive holding the cut
// lock waited for a lane whose holder waited for the cut. (No reclaim: a
// reclaim locks a slot's leaves one after the other, waiting at most 50 ms,
// and a receive holding one of them may wait for another, which a
// deadlock_timeout below that can end with the receive failing; see
// docs/operations.md.)
func TestV2NoWaitCyclesUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := poolWithDeadlockTimeout(ctx, t, "10ms", 16)
	b := &bundle{t: t, ctx: ctx, pool: pool}
	b.createV2("wc", `"lanes": 2, "rotate_interval": "1 second", "lease": "2 seconds", "max_attempts": 100`)
	b.exec("SELECT sluice.create_group('wc', 'other')")

	run, stop := context.WithTimeout(ctx, 6*time.Second)
	defer stop()
	var mu sync.Mutex
	var failures []string
	fail := func(who string, err error) {
		if run.Err() != nil {
			return // (a call the end of the run cancelled)
		}
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf("%s: %v (SQLSTATE %s)", who, err, sqlstate(err)))
	}
	var sent, received atomic.Int64
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; run.Err() == nil; i++ {
				var key any
				if i%2 == 0 {
					key = fmt.Sprintf("k%d", i%8)
				}
				if _, err := pool.Exec(run, "SELECT sluice.send('wc', $1::jsonb, key => $2)",
					fmt.Sprintf(`{"p": %d, "i": %d}`, p, i), key); err != nil {
					fail("send", err)
					return
				}
				sent.Add(1)
			}
		}()
	}
	consume := func(id int, group string, carry bool) {
		defer wg.Done()
		rng := rand.New(rand.NewSource(int64(id)))
		var pending []string
		for run.Err() == nil {
			var ack any
			if carry && len(pending) > 0 {
				ack = pending
			}
			got, err := receiveAckOn(run, pool, "wc", group, 1+rng.Intn(10), ack)
			if err != nil {
				fail("receive", err)
				return
			}
			received.Add(int64(len(got)))
			pending = pending[:0]
			for _, m := range got {
				switch {
				case rng.Intn(10) == 0:
					if _, err := pool.Exec(run, "SELECT sluice.nack('wc', $1, $2, delay => '0')", group, m.Receipt); err != nil {
						fail("nack", err)
						return
					}
				case carry:
					pending = append(pending, m.Receipt)
				default:
					if _, err := pool.Exec(run, "SELECT sluice.ack('wc', $1, $2)", group, []string{m.Receipt}); err != nil {
						fail("ack", err)
						return
					}
				}
			}
			if len(got) == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	for c := range 5 {
		wg.Add(1)
		go consume(c, "default", false)
	}
	for c := range 2 {
		wg.Add(1)
		go consume(10+c, "other", true)
	}
	wg.Wait()
	t.Logf("sent %d, received %d (both groups), epochs %d", sent.Load(), received.Load(),
		b.int64("SELECT count(*) FROM sluice.epoch e JOIN sluice.queue q ON q.id = e.queue_id WHERE q.name = 'wc'"))
	if len(failures) > 0 {
		t.Fatalf("%d calls failed, first: %s", len(failures), failures[0])
	}
	if received.Load() == 0 {
		t.Fatal("nothing received")
	}
}

// receiveAckOn receives up to n messages of group, acking ack (receipts, or
// nil) with the receive.
func receiveAckOn(ctx context.Context, db q, queue, group string, n int, ack any) ([]msg, error) {
	rows, err := db.Query(ctx, "SELECT receipt FROM sluice.receive($1, $2, $3, ack => $4::text[])", queue, group, n, ack)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []msg
	for rows.Next() {
		var m msg
		if err := rows.Scan(&m.Receipt); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}
