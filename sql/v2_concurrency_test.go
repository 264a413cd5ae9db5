package sqlsrc_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// v2produce sends rounds of messages in several transactions at once, each
// opened and sent in, then committed in reverse order of opening (so that
// commits come out of id order); a tenth of the transactions roll back.
// It returns the committed ids and the rolled-back ones.
func v2produce(ctx context.Context, b *bundle, queue string, p, total int, seed uint64,
	onCommit func(ids []int64)) (committed, rolledBack []int64, err error) {
	rng := rand.New(rand.NewPCG(seed, uint64(p)))
	var open []pgx.Tx
	defer func() {
		for _, tx := range open {
			tx.Rollback(context.Background()) //nolint:errcheck
		}
	}()
	for len(committed) < total {
		k := 2 + rng.IntN(4)
		txs := make([]pgx.Tx, k)
		ids := make([][]int64, k)
		for i := range txs {
			tx, err := b.pool.Begin(ctx)
			if err != nil {
				return nil, nil, err
			}
			txs[i] = tx
			open = append(open, tx)
			n := 1 + rng.IntN(8)
			if rng.IntN(2) == 0 {
				for j := 0; j < n; j++ {
					var id int64
					if err := tx.QueryRow(ctx, "SELECT sluice.send($1, $2::jsonb)", queue,
						fmt.Sprintf(`{"p": %d}`, p)).Scan(&id); err != nil {
						return nil, nil, err
					}
					ids[i] = append(ids[i], id)
				}
			} else {
				rows, err := tx.Query(ctx, `SELECT * FROM sluice.send_batch($1,
					array(SELECT jsonb_build_object('p', $2::int, 'j', g) FROM generate_series(1, $3::int) g))`,
					queue, p, n)
				if err != nil {
					return nil, nil, err
				}
				got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				if err != nil {
					return nil, nil, err
				}
				ids[i] = got
			}
		}
		for i := k - 1; i >= 0; i-- {
			if rng.IntN(10) == 0 {
				if err := txs[i].Rollback(ctx); err != nil {
					return nil, nil, err
				}
				rolledBack = append(rolledBack, ids[i]...)
				continue
			}
			if err := txs[i].Commit(ctx); err != nil {
				return nil, nil, err
			}
			committed = append(committed, ids[i]...)
			onCommit(ids[i])
		}
		open = open[:0]
	}
	return committed, rolledBack, nil
}

// Exactly once under concurrency: 8 consumers (batches of 1 and of 10)
// receive and ack while 3 producers send in transactions committed out of
// id order. Every committed message is delivered exactly once, as attempt
// 1, and each ack counts; no rolled-back message is delivered; status shows
// nothing left.
func TestV2ExactlyOnceConcurrent(t *testing.T) {
	const producers, consumers, perProducer = 3, 8, 2000
	b := setup(t)
	b.v2widen(40)
	b.createV2("v2c", `"lease": "5 minutes"`)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ctx, cancel := context.WithTimeout(b.ctx, 4*time.Minute)
	defer cancel()

	var (
		mu         sync.Mutex
		committed  = map[int64]bool{}
		rolledBack = map[int64]bool{}
		delivered  = map[int64]int{}
		bad        []string
		nCommitted atomic.Int64
		nAcked     atomic.Int64
		producing  atomic.Int32
	)
	errs := make(chan error, producers+consumers)
	var wg sync.WaitGroup
	producing.Store(producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			defer producing.Add(-1)
			_, rb, err := v2produce(ctx, b, "v2c", p, perProducer, seed, func(ids []int64) {
				mu.Lock()
				for _, id := range ids {
					committed[id] = true
				}
				mu.Unlock()
				nCommitted.Add(int64(len(ids)))
			})
			mu.Lock()
			for _, id := range rb {
				rolledBack[id] = true
			}
			mu.Unlock()
			if err != nil {
				errs <- fmt.Errorf("producer %d: %w", p, err)
			}
		}(p)
	}
	for c := 0; c < consumers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			batch := 1
			if c%2 == 1 {
				batch = 10
			}
			idle := 0
			for {
				ms, err := v2receiveOn(ctx, b.pool, "v2c", "default", batch, "")
				if err != nil {
					errs <- fmt.Errorf("consumer %d: %w", c, err)
					return
				}
				if len(ms) == 0 {
					if producing.Load() == 0 && nAcked.Load() >= nCommitted.Load() {
						idle++
						if idle > 20 {
							return
						}
					}
					if ctx.Err() != nil {
						return
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				idle = 0
				mu.Lock()
				for _, m := range ms {
					delivered[m.ID]++
					if m.Attempt != 1 {
						bad = append(bad, fmt.Sprintf("message %d delivered with attempt %d", m.ID, m.Attempt))
					}
					if delivered[m.ID] > 1 {
						bad = append(bad, fmt.Sprintf("message %d delivered %d times", m.ID, delivered[m.ID]))
					}
				}
				mu.Unlock()
				var n int
				if err := b.pool.QueryRow(ctx, "SELECT sluice.ack('v2c', 'default', $1)", v2receipts(ms)).Scan(&n); err != nil {
					errs <- fmt.Errorf("consumer %d ack: %w", c, err)
					return
				}
				if n != len(ms) {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("ack of %d fresh receipts counted %d", len(ms), n))
					mu.Unlock()
				}
				nAcked.Add(int64(len(ms)))
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, s := range bad {
		if i == 20 {
			t.Errorf("... %d problems in all", len(bad))
			break
		}
		t.Error(s)
	}
	var want, got []int64
	for id := range committed {
		want = append(want, id)
	}
	for id, n := range delivered {
		for i := 0; i < n; i++ {
			got = append(got, id)
		}
		if rolledBack[id] {
			t.Errorf("rolled-back message %d delivered", id)
		}
	}
	if !v2same(got, want) {
		t.Errorf("deliveries: %s", v2diff(got, want))
	}
	t.Logf("%d committed, %d rolled back, %d delivered", len(committed), len(rolledBack), len(got))
	b.v2expectEmpty("v2c", "default")
	if left := b.v2drain("v2c", "default", 100, ""); len(left) != 0 {
		t.Errorf("left after the run: %v", v2short(v2ids(left)))
	}
}

// Fan-out: two groups, each with consumers of its own, each get every
// message exactly once while producers send.
func TestV2FanOut(t *testing.T) {
	const producers, perProducer = 2, 1500
	b := setup(t)
	b.v2widen(30)
	b.createV2("v2f", `"default_group": false, "lanes": 4`)
	groups := []string{"g1", "g2"}
	for _, g := range groups {
		b.exec("SELECT sluice.create_group('v2f', $1)", g)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ctx, cancel := context.WithTimeout(b.ctx, 4*time.Minute)
	defer cancel()
	var (
		mu         sync.Mutex
		committed  []int64
		delivered  = map[string][]int64{}
		bad        []string
		producing  atomic.Int32
		nCommitted atomic.Int64
		nAcked     = map[string]*atomic.Int64{"g1": {}, "g2": {}}
	)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	producing.Store(producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			defer producing.Add(-1)
			_, _, err := v2produce(ctx, b, "v2f", p, perProducer, seed, func(ids []int64) {
				mu.Lock()
				committed = append(committed, ids...)
				mu.Unlock()
				nCommitted.Add(int64(len(ids)))
			})
			if err != nil {
				errs <- err
			}
		}(p)
	}
	for _, g := range groups {
		for c := 0; c < 2; c++ {
			wg.Add(1)
			go func(g string, c int) {
				defer wg.Done()
				idle := 0
				for {
					ms, err := v2receiveOn(ctx, b.pool, "v2f", g, 1+c*6, "")
					if err != nil {
						errs <- err
						return
					}
					if len(ms) == 0 {
						if producing.Load() == 0 && nAcked[g].Load() >= nCommitted.Load() {
							if idle++; idle > 20 {
								return
							}
						}
						if ctx.Err() != nil {
							return
						}
						time.Sleep(5 * time.Millisecond)
						continue
					}
					idle = 0
					var n int
					if err := b.pool.QueryRow(ctx, "SELECT sluice.ack('v2f', $1, $2)", g, v2receipts(ms)).Scan(&n); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					delivered[g] = append(delivered[g], v2ids(ms)...)
					if n != len(ms) {
						bad = append(bad, fmt.Sprintf("%s: ack of %d counted %d", g, len(ms), n))
					}
					mu.Unlock()
					nAcked[g].Add(int64(len(ms)))
				}
			}(g, c)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, s := range bad {
		t.Error(s)
	}
	for _, g := range groups {
		if !v2same(delivered[g], committed) {
			t.Errorf("group %s: %s", g, v2diff(delivered[g], committed))
		}
		b.v2expectEmpty("v2f", g)
	}
}
