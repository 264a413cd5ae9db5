package server_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// roundTrips counts what a pool sends: statements on their own and
// pipelines (batches), with the statements in them.
type roundTrips struct {
	queries, batches, batchQueries atomic.Int64
}

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return ctx
}
func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.batchQueries.Add(1)
}
func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *roundTrips) reset() { c.queries.Store(0); c.batches.Store(0); c.batchQueries.Store(0) }

// tracedServer starts a server whose pool counts its round trips.
func tracedServer(t *testing.T, opts ...option) (*testServer, *roundTrips) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return start(t, append([]option{func(c *server.Config) { c.Pool = pool }}, opts...)...), rt
}

// Each request of the message endpoints is one round trip to the database:
// the role's set_config and the statement in one pipeline, no BEGIN, no
// COMMIT; without auth, the statement alone.
func TestOneRoundTripPerRequest(t *testing.T) {
	for _, auth := range []bool{true, false} {
		var opts []option
		producer, consumer, admin, statements := tokProducer, tokConsumer, tokAdmin, int64(2)
		if !auth {
			opts = append(opts, func(c *server.Config) { c.Auth = server.AuthConfig{Insecure: true} })
			producer, consumer, admin, statements = "", "", "", 1
		}
		ts, rt := tracedServer(t, opts...)
		ts.must(201, "POST", "/v1/queues", admin, map[string]any{"name": "rt"})
		steps := []struct {
			name, path, token string
			body              func() any
		}{
			{"send", "/v1/queues/rt/messages", producer, func() any { return map[string]any{"body": 1} }},
			{"send batch", "/v1/queues/rt/messages/batch", producer, func() any {
				return map[string]any{"messages": []any{map[string]any{"body": 1}, map[string]any{"body": 2}}}
			}},
			{"receive", "/v1/queues/rt/groups/default/receive", consumer, func() any { return map[string]any{"max": 1} }},
			{"ack", "/v1/queues/rt/groups/default/ack", consumer, func() any { return map[string]any{"receipts": []string{"1:1:1"}} }},
			{"extend", "/v1/queues/rt/groups/default/extend", consumer, func() any {
				return map[string]any{"receipts": []string{"1:1:1"}, "lease": "1m"}
			}},
			{"status", "/v1/status", consumer, nil},
		}
		for round := range 2 { // the first round prepares the statements
			for _, s := range steps {
				rt.reset()
				method, body := "POST", any(nil)
				if s.body == nil {
					method = "GET"
				} else {
					body = s.body()
				}
				r := ts.do(method, s.path, s.token, body)
				if r.status/100 != 2 && r.status != 422 {
					t.Fatalf("%s: %d %s", s.name, r.status, r.body)
				}
				if round == 0 {
					continue
				}
				q, b, bq := rt.queries.Load(), rt.batches.Load(), rt.batchQueries.Load()
				if q+b != 1 || q+bq != statements {
					t.Errorf("auth %v, %s: %d statements alone and %d pipelines of %d statements, want one round trip of %d", auth, s.name, q, b, bq, statements)
				}
			}
		}
	}
}

// The role of a request is local to its transaction: connections go back
// to the pool as the login role and out of any transaction, also after
// requests that fail (and are not closed for it), while requests of several
// roles share the pool concurrently.
func TestRolePerRequestUnderConcurrency(t *testing.T) {
	ts, _ := tracedServer(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "mix"})
	ctx := context.Background()
	var login string
	if err := ts.pool.QueryRow(ctx, "SELECT current_user").Scan(&login); err != nil {
		t.Fatal(err)
	}
	newConns := ts.pool.Stat().NewConnsCount()

	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				var path, token string
				want := 0
				switch (w + i) % 5 {
				case 0: // the producer sends
					path, token, want = "/v1/queues/mix/messages", tokProducer, 201
				case 1: // the consumer may not send: refused by PostgreSQL
					path, token, want = "/v1/queues/mix/messages", tokConsumer, 403
				case 2: // the producer may not receive
					path, token, want = "/v1/queues/mix/groups/default/receive", tokProducer, 403
				case 3: // no such queue
					path, token, want = "/v1/queues/nope/messages", tokProducer, 404
				case 4: // a queue outside the token's patterns: refused before any SQL
					path, token, want = "/v1/queues/mix/messages", tokOrders, 403
				}
				body := map[string]any{"body": i}
				if want == 403 && token == tokProducer {
					body = map[string]any{}
				}
				if r := ts.do("POST", path, token, body); r.status != want {
					errs <- fmt.Errorf("POST %s as %s: %d, want %d: %s", path, token, r.status, want, r.body)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Refused requests closed no connection: at most the pool's size was
	// opened for the 240 requests.
	if n := ts.pool.Stat().NewConnsCount() - newConns; n > int64(ts.pool.Stat().MaxConns()) {
		t.Errorf("%d connections opened for 240 requests: failed requests closed theirs", n)
	}
	// Every idle connection is the login role, outside a transaction.
	conns := ts.pool.AcquireAllIdle(ctx)
	if len(conns) == 0 {
		t.Fatal("no idle connection")
	}
	for _, c := range conns {
		var user, role string
		if err := c.QueryRow(ctx, "SELECT current_user, current_setting('role')").Scan(&user, &role); err != nil {
			t.Fatal(err)
		}
		if user != login || role != "none" || c.Conn().PgConn().TxStatus() != 'I' {
			t.Errorf("a pooled connection is %s (role %s, status %c), want %s outside a transaction", user, role, c.Conn().PgConn().TxStatus(), login)
		}
		c.Release()
	}
	// Nothing the refused sends tried was written.
	msgs, err := sluice.NewClient(ts.pool).Receive(ctx, "mix", "default", &sluice.ReceiveOptions{Max: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 16*15/5 {
		t.Errorf("received %d messages, want the %d sent", len(msgs), 16*15/5)
	}
}
