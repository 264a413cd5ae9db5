package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
)

// sluiceWorkerSystem is sluice consumed by its Go library's worker
// (Client.Consume), as a Go user runs it, for the cells that set it beside
// River's client (issue 37's target: the worker draining at least as fast
// as River's client with the same consumers). Its queue and sends are the
// sluice system's (the same statements, through sendBatch); its consumers
// are one Consume with consumers x batch handlers, as River's client gets
// MaxWorkers = consumers x batch, each a no-op that counts its message and
// records its end-to-end latency; every other option is the worker's
// default (LISTEN wake-ups, a receive asking for as many messages as there
// are free handlers, durable acks sent in their own transactions, batched),
// but the poll interval, --poll as River's, and AsyncCommitAcks with
// asyncAcks.
type sluiceWorkerSystem struct {
	*sluiceSystem
	poll time.Duration
	// asyncAcks sets the worker's AsyncCommitAcks: acks ride on its next
	// receive, committed without waiting for the disk.
	asyncAcks bool
	// pool is the one setup was given, which sends and Consume use.
	pool *pgxpool.Pool
}

func (s *sluiceWorkerSystem) name() string {
	if s.asyncAcks {
		return "sluice worker, async acks"
	}
	return "sluice worker"
}

// settings describes the worker's configuration for the report.
func (s *sluiceWorkerSystem) settings() string {
	acks := "durable acks in transactions of their own, batched"
	if s.asyncAcks {
		acks = "AsyncCommitAcks: acks riding on the next receive, committed without waiting for the disk"
	}
	return fmt.Sprintf("Client.Consume with Concurrency = consumers x batch (River's MaxWorkers), PollInterval %s (--poll, as River's FetchPollInterval), %s, every other option the worker's default (LISTEN wake-ups, BatchSize = Concurrency)", s.poll, acks)
}

func (s *sluiceWorkerSystem) setup(ctx context.Context, pool *pgxpool.Pool) error {
	s.pool = pool
	return s.sluiceSystem.setup(ctx, pool)
}

// sendBatch sends as the sluice system does, on a connection of the pool.
func (s *sluiceWorkerSystem) sendBatch(ctx context.Context, batch int, pad string) error {
	if s.pool == nil {
		return errors.New("sluice worker: not set up")
	}
	var err error
	if batch == 1 {
		_, err = s.pool.Exec(ctx, s.sendSQL(1), pad)
	} else {
		_, err = s.pool.Exec(ctx, s.sendSQL(batch), pad, batch)
	}
	return err
}

// runConsumers runs one Consume of the benchmark queue's group "default"
// until deadline or until enough returns true, then stops it (its running
// handlers finish and their acks are sent before it returns).
func (s *sluiceWorkerSystem) runConsumers(ctx context.Context, consumers, batch int, deadline time.Time, enough func() bool, c *counters, lat *recorder) error {
	if s.pool == nil {
		return errors.New("sluice worker: not set up")
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	handler := func(_ context.Context, m *sluice.Message) error {
		if lat != nil {
			// (the body's t: the server clock's epoch seconds at the send,
			// bodyExpr; the server runs on this machine)
			var b struct {
				T float64 `json:"t"`
			}
			if err := json.Unmarshal(m.Body, &b); err == nil && b.T > 0 {
				lat.add(float64(time.Now().UnixNano())/1e6 - b.T*1000)
			}
		}
		c.done.Add(1)
		return nil
	}
	done := make(chan error, 1)
	go func() {
		done <- sluice.NewClient(s.pool).Consume(wctx, benchQueue, "default", handler, &sluice.ConsumeOptions{
			Concurrency:     consumers * max(batch, 1),
			PollInterval:    s.poll,
			AsyncCommitAcks: s.asyncAcks,
			DrainTimeout:    10 * time.Second,
			Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
	}()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) && (enough == nil || !enough()) {
		select {
		case <-ctx.Done():
			stop()
			<-done
			return ctx.Err()
		case err := <-done:
			return fmt.Errorf("sluice worker: Consume returned early: %w", err)
		case <-tick.C:
		}
	}
	stop()
	return ignoreDone(wctx, <-done)
}
