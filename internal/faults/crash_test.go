// Package faults_test drives sluice through faults against a real PostgreSQL
// and checks the history afterwards.
package faults_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/internal/pgserver"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

// history records what producers and consumers saw.
type history struct {
	mu        sync.Mutex
	committed map[int64]bool            // sends whose commit returned success
	failed    map[int64]bool            // sends that surely did not commit
	uncertain map[int64]bool            // sends whose commit outcome is unknown
	delivered map[string]map[int64]int  // group -> message -> deliveries
	acked     map[string]map[int64]bool // group -> messages whose ack surely committed
	ackMaybe  map[string]map[int64]bool // group -> messages whose ack outcome is unknown
	violation []string
}

func newHistory(groups []string) *history {
	h := &history{committed: map[int64]bool{}, failed: map[int64]bool{}, uncertain: map[int64]bool{},
		delivered: map[string]map[int64]int{}, acked: map[string]map[int64]bool{}, ackMaybe: map[string]map[int64]bool{}}
	for _, g := range groups {
		h.delivered[g] = map[int64]int{}
		h.acked[g] = map[int64]bool{}
		h.ackMaybe[g] = map[int64]bool{}
	}
	return h
}

func (h *history) sent(ids []int64, into map[int64]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		into[id] = true
	}
}

// deliver records a delivery; delivering a message again after its ack
// surely committed is a violation.
func (h *history) deliver(group string, id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.delivered[group][id]++
	if h.acked[group][id] {
		h.violation = append(h.violation, fmt.Sprintf("group %s: message %d delivered again after its ack committed", group, id))
	}
}

func (h *history) ack(group string, id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acked[group][id] = true
}

// maybeAcked records acks whose outcome is unknown (the connection broke):
// they may have committed, and then the message is not delivered again.
func (h *history) maybeAcked(group string, ids []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		h.ackMaybe[group][id] = true
	}
}

// remaining counts, per group, the committed messages neither surely nor
// maybe acked yet.
func (h *history) remaining(group string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for id := range h.committed {
		if !h.acked[group][id] && !h.ackMaybe[group][id] {
			n++
		}
	}
	return n
}

// TestPostgresCrashes kills PostgreSQL — every process, with SIGKILL, as a
// power loss would — again and again while producers send and two groups
// consume, and restarts it on the same data directory. Afterwards:
//   - every message whose send committed is acked by every group: none lost
//     (an ack whose outcome the client could not learn may have committed:
//     then the database must show nothing left for the group);
//   - no message whose send surely failed is ever delivered;
//   - a message whose ack committed is never delivered to that group again.
//
// Redeliveries of messages in flight at a crash are allowed (at-least-once).
// SLUICE_FAULT_KILLS sets the number of kills (default 3).
func TestPostgresCrashes(t *testing.T) {
	kills := 3
	if v := os.Getenv("SLUICE_FAULT_KILLS"); v != "" {
		var err error
		if kills, err = strconv.Atoi(v); err != nil || kills < 1 {
			t.Fatalf("SLUICE_FAULT_KILLS=%q: want a whole number >= 1", v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	// A cluster of its own: killing it must not disturb other tests.
	dir, err := os.MkdirTemp("", "sluice-crash-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the server may run as another user
		t.Fatal(err)
	}
	cfg := pgserver.Config{Version: os.Getenv("SLUICE_PG_VERSION"), DataDir: filepath.Join(dir, "data")}
	srv, err := pgserver.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Port, cfg.Password = srv.Port(), srv.Password()
	t.Cleanup(func() {
		if srv != nil {
			srv.Stop() //nolint:errcheck
		}
	})
	url := srv.URL("postgres")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Apply(ctx, conn, sqlsrc.FS); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	client := sluice.NewClient(pool)
	groups := []string{"g1", "g2"}
	if err := client.CreateQueue(ctx, "q", &sluice.QueueOptions{NoDefaultGroup: true, MaxAttempts: 1000,
		RotateInterval: time.Second, Retention: time.Nanosecond * 1000}); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if err := client.CreateGroup(ctx, "q", g, nil); err != nil {
			t.Fatal(err)
		}
	}
	h := newHistory(groups)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	var producing atomic.Bool
	producing.Store(true)
	var wg sync.WaitGroup
	for p := 0; p < 2; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(p)))
			for producing.Load() && ctx.Err() == nil {
				produceOnce(ctx, pool, client, h, rng)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	var consuming atomic.Bool
	consuming.Store(true)
	for _, g := range groups {
		for c := 0; c < 2; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for consuming.Load() && ctx.Err() == nil {
					if n, _ := consumeOnce(ctx, pool, client, h, g); n == 0 {
						time.Sleep(5 * time.Millisecond)
					}
				}
			}()
		}
	}

	rng := rand.New(rand.NewPCG(seed, 99))
	for i := 0; i < kills; i++ {
		time.Sleep(time.Duration(1000+rng.IntN(1500)) * time.Millisecond)
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		srv = nil
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		if srv, err = pgserver.Start(ctx, cfg); err != nil {
			t.Fatalf("restart %d: %v", i+1, err)
		}
	}
	time.Sleep(time.Second)
	producing.Store(false)

	// Drain: every committed message must reach every group.
	deadline := time.Now().Add(2 * time.Minute)
	for _, g := range groups {
		for h.remaining(g) > 0 {
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	consuming.Store(false)
	wg.Wait()

	// The database's view: nothing ready, in flight or dead for any group.
	sts, err := client.Status(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Ready != 0 || st.InFlight != 0 || st.Dead != 0 || st.Delayed != 0 {
			t.Errorf("group %s at the end: %+v, want nothing ready, delayed, in flight or dead", st.Group, st)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	redelivered, maybe := 0, 0
	for _, g := range groups {
		lost := 0
		for id := range h.committed {
			switch {
			case h.acked[g][id]:
			case h.ackMaybe[g][id]:
				maybe++
			default:
				lost++
			}
		}
		if lost > 0 {
			t.Errorf("group %s: %d committed messages never acked (lost)", g, lost)
		}
		for id, n := range h.delivered[g] {
			if h.failed[id] {
				t.Errorf("group %s: message %d delivered although its send failed", g, id)
			}
			if !h.committed[id] && !h.uncertain[id] {
				t.Errorf("group %s: message %d delivered but never sent", g, id)
			}
			redelivered += n - 1
		}
	}
	for _, v := range h.violation {
		t.Error(v)
	}
	t.Logf("%d kills: %d messages committed, %d failed, %d with an unknown outcome; %d redeliveries; "+
		"%d (group, message) acks with an unknown outcome, completed as the database shows",
		kills, len(h.committed), len(h.failed), len(h.uncertain), redelivered, maybe)
	if len(h.committed) < 100 {
		t.Errorf("only %d messages committed: the run did too little to mean anything", len(h.committed))
	}
}

// produceOnce sends 1 to 20 messages in one transaction, a tenth of them
// rolled back, and records the outcome.
func produceOnce(ctx context.Context, pool *pgxpool.Pool, client *sluice.Client, h *history, rng *rand.Rand) {
	n := 1 + rng.IntN(20)
	msgs := make([]sluice.BatchMessage, n)
	for i := range msgs {
		msgs[i].Body = json.RawMessage(fmt.Sprintf(`{"i": %d}`, i))
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		time.Sleep(20 * time.Millisecond) // the server is down
		return
	}
	ids, err := client.SendBatchTx(ctx, tx, "q", msgs, nil)
	if err != nil {
		tx.Rollback(ctx) //nolint:errcheck
		h.sent(ids, h.failed)
		return
	}
	if rng.IntN(10) == 0 {
		tx.Rollback(ctx) //nolint:errcheck
		h.sent(ids, h.failed)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		// The commit may or may not have happened before the crash.
		h.sent(ids, h.uncertain)
		return
	}
	h.sent(ids, h.committed)
}

// consumeOnce receives up to 20 messages and acks each, recording which
// acks surely committed. It returns how many it received.
func consumeOnce(ctx context.Context, pool *pgxpool.Pool, client *sluice.Client, h *history, group string) (int, error) {
	msgs, err := client.Receive(ctx, "q", group, &sluice.ReceiveOptions{Max: 20, Lease: 5 * time.Second})
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			time.Sleep(20 * time.Millisecond)
		}
		return 0, err
	}
	byReceipt := map[string]int64{}
	receipts := make([]string, len(msgs))
	for i, m := range msgs {
		h.deliver(group, m.ID)
		receipts[i] = m.Receipt
		byReceipt[m.Receipt] = m.ID
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	// One statement, one ack per receipt: which ones completed their message.
	rows, err := pool.Query(ctx, `SELECT r FROM unnest($3::text[]) r WHERE sluice.ack($1, $2, ARRAY[r]) = 1`,
		"q", group, receipts)
	var done []string
	if err == nil {
		done, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		// The ack's outcome is unknown: it may have committed, or the
		// messages come again.
		ids := make([]int64, 0, len(msgs))
		for _, m := range msgs {
			ids = append(ids, m.ID)
		}
		h.maybeAcked(group, ids)
		return len(msgs), err
	}
	for _, r := range done {
		h.ack(group, byReceipt[r])
	}
	return len(msgs), nil
}
