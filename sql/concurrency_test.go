package sqlsrc_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// 8 producers send messages in transactions of random size, a tenth of them
// rolled back, while 3 groups of 4 consumers each drain the queue. Per group,
// every committed message is acked exactly once and no rolled-back message is
// ever seen. SLUICE_STRESS_MESSAGES sets the number of committed messages
// (default 100000).
func TestConcurrentProducersAndGroups(t *testing.T) {
	total := 100000
	if v := os.Getenv("SLUICE_STRESS_MESSAGES"); v != "" {
		var err error
		if total, err = strconv.Atoi(v); err != nil || total < 1000 {
			t.Fatalf("SLUICE_STRESS_MESSAGES=%q: want a whole number >= 1000", v)
		}
	}
	b := setup(t)
	b.createQueue("stress", `{"default_group": false}`)
	groups := []string{"g1", "g2", "g3"}
	for _, g := range groups {
		b.exec("SELECT sluice.create_group('stress', $1)", g)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	var (
		mu         sync.Mutex
		committed  = make(map[int64]bool, total)
		rolledBack = map[int64]bool{}
	)
	var committedN atomic.Int64
	ctx, cancel := context.WithTimeout(b.ctx, 8*time.Minute)
	defer cancel()

	produce := func(p int) error {
		rng := rand.New(rand.NewPCG(seed, uint64(p)))
		for committedN.Load() < int64(total) {
			size := 1 + rng.IntN(40)
			rollback := rng.IntN(10) == 0
			tx, err := b.pool.Begin(ctx)
			if err != nil {
				return err
			}
			var ids []int64
			if rng.IntN(2) == 0 {
				for i := 0; i < size; i++ {
					var id int64
					if err := tx.QueryRow(ctx, "SELECT sluice.send('stress', $1::jsonb)",
						fmt.Sprintf(`{"p": %d, "i": %d}`, p, i)).Scan(&id); err != nil {
						tx.Rollback(ctx) //nolint:errcheck
						return err
					}
					ids = append(ids, id)
				}
			} else {
				rows, err := tx.Query(ctx, `SELECT * FROM sluice.send_batch('stress',
					array(SELECT jsonb_build_object('p', $1::int, 'i', g) FROM generate_series(1, $2::int) g))`, p, size)
				if err != nil {
					tx.Rollback(ctx) //nolint:errcheck
					return err
				}
				if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
					tx.Rollback(ctx) //nolint:errcheck
					return err
				}
			}
			if rollback {
				if err := tx.Rollback(ctx); err != nil {
					return err
				}
			} else if err := tx.Commit(ctx); err != nil {
				return err
			}
			mu.Lock()
			for _, id := range ids {
				if rollback {
					rolledBack[id] = true
				} else {
					committed[id] = true
				}
			}
			mu.Unlock()
			if !rollback {
				committedN.Add(int64(len(ids)))
			}
		}
		return nil
	}

	type delivery struct {
		group string
		id    int64
	}
	var (
		dmu       sync.Mutex
		acked     = map[delivery]int{}
		ackedN    = map[string]*atomic.Int64{}
		producing atomic.Bool
	)
	for _, g := range groups {
		ackedN[g] = &atomic.Int64{}
	}
	producing.Store(true)
	consume := func(group string) error {
		for {
			got, err := receiveOn(ctx, b.pool, "stress", group, 50, "")
			if err != nil {
				return err
			}
			if len(got) == 0 {
				if !producing.Load() && ackedN[group].Load() >= committedN.Load() {
					return nil
				}
				time.Sleep(5 * time.Millisecond)
				continue
			}
			var n int
			if err := b.pool.QueryRow(ctx, "SELECT sluice.ack('stress', $1, $2)", group, receipts(got)).Scan(&n); err != nil {
				return err
			}
			if n != len(got) {
				return fmt.Errorf("group %s: ack of %d current receipts completed %d", group, len(got), n)
			}
			dmu.Lock()
			for _, m := range got {
				acked[delivery{group, m.ID}]++
			}
			dmu.Unlock()
			ackedN[group].Add(int64(n))
		}
	}

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	var pwg sync.WaitGroup
	for p := 0; p < 8; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			if err := produce(p); err != nil {
				errs <- fmt.Errorf("producer %d: %w", p, err)
			}
		}()
	}
	for _, g := range groups {
		for c := 0; c < 4; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := consume(g); err != nil {
					errs <- fmt.Errorf("consumer of %s: %w", g, err)
					cancel()
				}
			}()
		}
	}
	pwg.Wait()
	producing.Store(false)
	produced := time.Since(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	t.Logf("%d committed and %d rolled-back messages from 8 producers in %s; 3 groups x 4 consumers acked %d deliveries in %s (%.0f/s)",
		len(committed), len(rolledBack), produced.Round(time.Millisecond), len(acked), elapsed.Round(time.Millisecond),
		float64(len(acked))/elapsed.Seconds())

	for _, g := range groups {
		for id := range committed {
			if n := acked[delivery{g, id}]; n != 1 {
				t.Fatalf("group %s acked committed message %d %d times, want exactly once", g, id, n)
			}
		}
		for id := range rolledBack {
			if acked[delivery{g, id}] != 0 {
				t.Fatalf("group %s received rolled-back message %d", g, id)
			}
		}
	}
	if len(acked) != 3*len(committed) {
		t.Fatalf("%d (group, message) acks for %d committed messages and 3 groups", len(acked), len(committed))
	}
	for _, g := range groups {
		if got := b.receive("stress", g, 10, ""); len(got) != 0 {
			t.Fatalf("group %s still has %d messages after the run", g, len(got))
		}
	}
}
