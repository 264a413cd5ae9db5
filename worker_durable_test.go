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
