package sqlsrc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/pgtest"
)

// TestPurgeQueueUnderLoad: purging a queue while 8 consumers receive and
// ack and 2 producers send to it succeeds every time, and nobody gets an
// error (purge locks the queue's tables, which its clients also lock, in
// another order: without the queue lock taken exclusively first, they
// deadlocked as drop_queue did).
func TestPurgeQueueUnderLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("busy", "")
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	var (
		mu   sync.Mutex
		bad  []string
		wg   sync.WaitGroup
		stop = make(chan struct{})
	)
	for i := range 10 {
		conn := pgtest.Connect(t, b.pool.Config().ConnString())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if i < 8 {
					var ms []msg
					ms, err = receiveOn(ctx, conn, "busy", "default", 5, "")
					if err == nil && len(ms) > 0 {
						_, err = conn.Exec(ctx, "SELECT sluice.ack('busy', 'default', $1)", receipts(ms))
					}
				} else {
					err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
						for k := range 5 {
							if _, err := tx.Exec(ctx, "SELECT sluice.send('busy', '1', key => $1)", fmt.Sprint(k)); err != nil {
								return err
							}
						}
						return nil
					})
				}
				if err != nil {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("client %d: %v", i, err))
					mu.Unlock()
					return
				}
			}
		}()
	}
	for round := range 3 {
		time.Sleep(700 * time.Millisecond)
		start := time.Now()
		if _, err := b.pool.Exec(ctx, "SELECT sluice.purge_queue('busy')"); err != nil {
			t.Errorf("purge %d under load: %v", round, err)
		}
		t.Logf("purge %d took %v", round, time.Since(start))
	}
	close(stop)
	wg.Wait()
	for _, e := range bad {
		t.Error(e)
	}
}
