package sluice_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
)

// ackTracer records how a client acknowledges: the durable argument of each
// sluice.ack, and the receipts given to each sluice.receive.
type ackTracer struct {
	mu       sync.Mutex
	durable  []bool // one per sluice.ack call
	rideAcks int    // receipts acknowledged by receives
}

func (a *ackTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case strings.Contains(d.SQL, "sluice.ack("):
		a.durable = append(a.durable, d.Args[len(d.Args)-1].(bool))
	case strings.Contains(d.SQL, "sluice.receive("):
		if r, ok := d.Args[len(d.Args)-1].([]string); ok {
			a.rideAcks += len(r)
		}
	}
	return ctx
}

func (a *ackTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (a *ackTracer) calls() (durable, async, ride int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range a.durable {
		if d {
			durable++
		} else {
			async++
		}
	}
	return durable, async, a.rideAcks
}

// tracedBundle is a bundle whose pool records the acks it sends.
func tracedBundle(t *testing.T) (*bundle, *ackTracer) {
	t.Helper()
	b := setup(t)
	cfg, err := pgxpool.ParseConfig(b.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	tr := &ackTracer{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &bundle{t: t, ctx: b.ctx, pool: pool, client: sluice.NewClient(pool)}, tr
}

// Ack is durable, as in every client; AckAsyncCommit is the opt-in.
func TestAckIsDurable(t *testing.T) {
	t.Parallel()
	b, tr := tracedBundle(t)
	b.createQueue("q", nil)
	b.send("q", "1")
	b.send("q", "2")
	msgs, err := b.client.Receive(b.ctx, "q", "default", &sluice.ReceiveOptions{Max: 2})
	if err != nil || len(msgs) != 2 {
		t.Fatalf("receive: %v, %v", msgs, err)
	}
	if n, err := b.client.Ack(b.ctx, "q", "default", msgs[0].Receipt); n != 1 || err != nil {
		t.Fatalf("Ack: %d, %v", n, err)
	}
	if n, err := b.client.AckAsyncCommit(b.ctx, "q", "default", msgs[1].Receipt); n != 1 || err != nil {
		t.Fatalf("AckAsyncCommit: %d, %v", n, err)
	}
	if d, a, _ := tr.calls(); d != 1 || a != 1 {
		t.Errorf("durable acks %d, async %d; want Ack durable and AckAsyncCommit not", d, a)
	}
}

// Consume's acks are durable by default, never riding on a receive (which
// commits asynchronously); AsyncCommitAcks opts into the asynchronous ones.
func TestConsumeAcksAreDurableByDefault(t *testing.T) {
	t.Parallel()
	for _, async := range []bool{false, true} {
		b, tr := tracedBundle(t)
		b.createQueue("q", nil)
		const n = 50
		for i := range n {
			b.send("q", string(rune('0'+i%10)))
		}
		stop := b.consume("q", "default", func(context.Context, *sluice.Message) error { return nil },
			&sluice.ConsumeOptions{Concurrency: 4, AsyncCommitAcks: async, PollInterval: 20 * time.Millisecond})
		b.eventually(30*time.Second, "every message acknowledged", func() bool {
			s := b.status("q", "default")
			return s.Ready == 0 && s.InFlight == 0 && s.Lag == 0
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		durable, asyncAcks, ride := tr.calls()
		if !async && (asyncAcks != 0 || ride != 0 || durable == 0) {
			t.Errorf("default: %d durable ack calls, %d async, %d receipts acked by receives; want durable ones only", durable, asyncAcks, ride)
		}
		if async && durable != 0 {
			t.Errorf("AsyncCommitAcks: %d durable ack calls, %d async, %d receipts acked by receives; want no durable one", durable, asyncAcks, ride)
		}
	}
}

// A durable ack that waits does not hold up the worker's receives: the
// fetch loop sends the acks waiting for it beside its next receive, not
// before it. Here the ack of the first message waits for another
// transaction that completed it and has not ended (the ack's row is in
// conflict with that one's); meanwhile the second message is received and
// handled. (The fetch loop used to send them first, on its own: with one
// handler, it took the first message's ack as the slot came free and
// waited there, and the second message stayed in the queue until the other
// transaction ended.)
func TestConsumeReceivesWhileADurableAckWaits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", nil)
	first := b.send("q", "1")
	blocker, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(b.ctx) //nolint:errcheck // (ended below; a second rollback is a no-op)
	handled := make(chan int64, 4)
	stop := b.consume("q", "default", func(ctx context.Context, m *sluice.Message) error {
		if m.ID == first {
			// Completed by the blocker first, in a transaction left open: the
			// worker's ack of it waits for that transaction.
			if _, err := blocker.Exec(ctx, "SELECT sluice.ack('q', 'default', ARRAY[$1])", m.Receipt); err != nil {
				return err
			}
			b.send("q", "2")
		}
		handled <- m.ID
		return nil
	}, &sluice.ConsumeOptions{Concurrency: 1, PollInterval: 20 * time.Millisecond})
	defer stop() //nolint:errcheck // (stopped below)
	deadline := time.After(10 * time.Second)
	for got := 0; got < 2; {
		select {
		case <-handled:
			got++
		case <-deadline:
			t.Fatalf("%d of 2 messages handled while the first one's ack waited: the receives waited for it", got)
		}
	}
	if err := blocker.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.eventually(30*time.Second, "both messages acknowledged once the blocker ended", func() bool {
		s := b.status("q", "default")
		return s.Ready == 0 && s.InFlight == 0 && s.Lag == 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
