package sqlsrc_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// 2 producers send keyed messages (5,000 keys, Zipf(1.1) skew) in
// transactions of random size, a tenth rolled back, while 8 consumers drain
// the queue: 1% of deliveries are nacked, 0.5% of received batches are
// abandoned (their leases expire). Each successful processing is logged, with
// the ack, in one transaction. The checker then verifies, per key, that
// successful processing followed commit order and that no message of a key
// was received while an earlier one was still unfinished (except as part of
// one receive's run), and that every committed message was processed exactly
// once. SLUICE_KEYED_MESSAGES sets the number of committed messages
// (default 20000).
func TestKeyedConcurrentZipf(t *testing.T) {
	engines(t, func(t *testing.T, opts func(string) string) {
		keyedConcurrentZipf(t, opts)
	})
}

func keyedConcurrentZipf(t *testing.T, opts func(string) string) {
	total := 20000
	if v := os.Getenv("SLUICE_KEYED_MESSAGES"); v != "" {
		var err error
		if total, err = strconv.Atoi(v); err != nil || total < 1000 {
			t.Fatalf("SLUICE_KEYED_MESSAGES=%q: want a whole number >= 1000", v)
		}
	}
	const (
		keys      = 5000
		consumers = 8
		lease     = "1 second"
	)
	b := setup(t)
	b.createQueue("zipf", opts(`{"backoff_base": "10 milliseconds", "backoff_max": "50 milliseconds", "max_attempts": 1000}`))
	b.exec(`CREATE TABLE zlog (id bigint NOT NULL, pos bigint NOT NULL, key text NOT NULL,
		recv_seq bigint NOT NULL, ack_seq bigint NOT NULL)`)
	b.exec(`CREATE SEQUENCE zseq`)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	var (
		mu         sync.Mutex
		keyOf      = make(map[int64]string, total)
		rolledBack = map[int64]bool{}
	)
	var committedN, processed, nacks, abandoned, received atomic.Int64
	var producersDone atomic.Bool
	ctx, cancel := context.WithTimeout(b.ctx, 6*time.Minute)
	defer cancel()

	produce := func(p int) error {
		rng := rand.New(rand.NewPCG(seed, uint64(p)))
		zipf := rand.NewZipf(rand.New(rand.NewPCG(seed, uint64(p)+100)), 1.1, 1, keys-1)
		for committedN.Load() < int64(total) {
			size := 1 + rng.IntN(50)
			ks := make([]string, size)
			for i := range ks {
				ks[i] = fmt.Sprintf("k%d", zipf.Uint64())
			}
			tx, err := b.pool.Begin(ctx)
			if err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `SELECT * FROM sluice.send_batch('zipf',
				array(SELECT jsonb_build_object('p', $1::int, 'i', g) FROM generate_series(1, $2::int) g), keys => $3)`,
				p, size, ks)
			if err != nil {
				tx.Rollback(ctx) //nolint:errcheck
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				tx.Rollback(ctx) //nolint:errcheck
				return err
			}
			if rng.IntN(10) == 0 {
				if err := tx.Rollback(ctx); err != nil {
					return err
				}
				mu.Lock()
				for _, id := range ids {
					rolledBack[id] = true
				}
				mu.Unlock()
				continue
			}
			if err := tx.Commit(ctx); err != nil {
				return err
			}
			mu.Lock()
			for i, id := range ids {
				keyOf[id] = ks[i]
			}
			mu.Unlock()
			committedN.Add(int64(len(ids)))
		}
		return nil
	}

	consume := func(c int) error {
		rng := rand.New(rand.NewPCG(seed, uint64(1000+c)))
		for {
			if producersDone.Load() && processed.Load() >= committedN.Load() {
				return nil
			}
			ms, err := receiveOn(ctx, b.pool, "zipf", "default", 10, lease)
			if err != nil {
				return fmt.Errorf("receive: %w", err)
			}
			if len(ms) == 0 {
				time.Sleep(2 * time.Millisecond)
				continue
			}
			received.Add(int64(len(ms)))
			var recvSeq int64
			if err := b.pool.QueryRow(ctx, "SELECT nextval('zseq')").Scan(&recvSeq); err != nil {
				return err
			}
			if rng.IntN(200) == 0 {
				abandoned.Add(1) // the consumer "dies": its leases expire
				continue
			}
			failed := map[string]bool{}
			for _, m := range ms {
				key := *m.Key
				if failed[key] {
					continue // released by the nack of an earlier message of its key
				}
				if rng.IntN(100) == 0 {
					nacks.Add(1)
					failed[key] = true
					if _, err := b.pool.Exec(ctx, "SELECT sluice.nack('zipf', 'default', $1)", m.Receipt); err != nil {
						return fmt.Errorf("nack: %w", err)
					}
					continue
				}
				tx, err := b.pool.Begin(ctx)
				if err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO zlog VALUES ($1, $2, $3, $4, nextval('zseq'))`,
					m.ID, m.Pos, key, recvSeq); err != nil {
					tx.Rollback(ctx) //nolint:errcheck
					return fmt.Errorf("log of message %d: %w", m.ID, err)
				}
				var n int
				if err := tx.QueryRow(ctx, "SELECT sluice.ack('zipf', 'default', ARRAY[$1])", m.Receipt).Scan(&n); err != nil {
					tx.Rollback(ctx) //nolint:errcheck
					return err
				}
				if n != 1 {
					// The lease was lost (it expired): not processed after all.
					if err := tx.Rollback(ctx); err != nil {
						return err
					}
					failed[key] = true
					continue
				}
				if err := tx.Commit(ctx); err != nil {
					return err
				}
				processed.Add(1)
			}
		}
	}

	start := time.Now()
	errs := make(chan error, 2+consumers)
	var producers, all sync.WaitGroup
	for p := 0; p < 2; p++ {
		producers.Add(1)
		all.Add(1)
		go func() {
			defer all.Done()
			defer producers.Done()
			errs <- produce(p)
		}()
	}
	go func() { producers.Wait(); producersDone.Store(true) }()
	for c := 0; c < consumers; c++ {
		all.Add(1)
		go func() { defer all.Done(); errs <- consume(c) }()
	}
	all.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("not drained in time: %d of %d processed", processed.Load(), committedN.Load())
			}
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)

	// The checker.
	type entry struct {
		id, pos, recv, ack int64
		key                string
	}
	rows, err := b.pool.Query(b.ctx, "SELECT id, pos, key, recv_seq, ack_seq FROM zlog ORDER BY ack_seq")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (entry, error) {
		var e entry
		err := r.Scan(&e.id, &e.pos, &e.key, &e.recv, &e.ack)
		return e, err
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[int64]bool, len(entries))
	byKey := map[string][]entry{}
	for _, e := range entries {
		if rolledBack[e.id] {
			t.Fatalf("rolled-back message %d was processed", e.id)
		}
		if keyOf[e.id] != e.key {
			t.Fatalf("message %d processed with key %q, sent with %q", e.id, e.key, keyOf[e.id])
		}
		if seen[e.id] {
			t.Errorf("message %d processed twice", e.id)
		}
		seen[e.id] = true
		byKey[e.key] = append(byKey[e.key], e)
	}
	for id := range keyOf {
		if !seen[id] {
			t.Fatalf("committed message %d was never processed", id)
		}
	}
	if len(entries) != len(keyOf) {
		t.Errorf("%d processings for %d committed messages", len(entries), len(keyOf))
	}
	violations := 0
	for key, es := range byKey {
		for i := 1; i < len(es); i++ {
			prev, cur := es[i-1], es[i]
			if cur.pos <= prev.pos {
				violations++
				t.Errorf("key %s: position %d processed after position %d", key, cur.pos, prev.pos)
			}
			if cur.recv != prev.recv && cur.recv < prev.ack {
				violations++
				t.Errorf("key %s: position %d received (seq %d) before position %d was acked (seq %d)",
					key, cur.pos, cur.recv, prev.pos, prev.ack)
			}
		}
	}
	sizes := make([]int, 0, len(byKey))
	for _, es := range byKey {
		sizes = append(sizes, len(es))
	}
	sort.Sort(sort.Reverse(sort.IntSlice(sizes)))
	t.Logf("%d messages over %d keys (largest %v) in %v: %.0f/s processed; %d deliveries, %d nacks, "+
		"%d abandoned batches, %d order violations",
		len(entries), len(byKey), sizes[:min(3, len(sizes))], elapsed.Round(time.Millisecond),
		float64(len(entries))/elapsed.Seconds(), received.Load(), nacks.Load(), abandoned.Load(), violations)
}
