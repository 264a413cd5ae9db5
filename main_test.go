package sluice_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/internal/pgtest"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

var server *pgtest.Server

// TestMain runs the tests against one PostgreSQL server (see pgtest), gives
// the runnable examples a database of their own through DATABASE_URL, and
// fails the run if goroutines outlive the tests.
func TestMain(m *testing.M) { pgtest.Main(leakCheck{m}, &server) }

type leakCheck struct{ m *testing.M }

func (l leakCheck) Run() int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	url, drop, err := server.CreateDatabase(ctx, sqlsrc.FS)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = drop(context.WithoutCancel(ctx)) }()
	os.Setenv("DATABASE_URL", url)

	ignore := goleak.IgnoreCurrent() // the harness's own pool
	code := l.m.Run()
	if code == 0 {
		if err := goleak.Find(ignore); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines leaked: %v\n", err)
			return 1
		}
	}
	return code
}

// bundle is what a test works with: a client on a fresh database with the
// sluice schema.
type bundle struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	client *sluice.Client
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool := server.NewPool(t)
	return &bundle{t: t, ctx: ctx, pool: pool, client: sluice.NewClient(pool)}
}

// createQueue creates a queue with opts (its group "default" included).
func (b *bundle) createQueue(name string, opts *sluice.QueueOptions) {
	b.t.Helper()
	if err := b.client.CreateQueue(b.ctx, name, opts); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bundle) send(queue, body string) int64 {
	b.t.Helper()
	id, err := b.client.Send(b.ctx, queue, []byte(body), nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return id
}

// status returns the status row of queue's group.
func (b *bundle) status(queue, group string) sluice.Status {
	b.t.Helper()
	st, err := b.client.Status(b.ctx, queue)
	if err != nil {
		b.t.Fatal(err)
	}
	for _, s := range st {
		if s.Group == group {
			return s
		}
	}
	b.t.Fatalf("no status for group %q of queue %q: %+v", group, queue, st)
	return sluice.Status{}
}

// eventually polls cond every 20 ms until it holds or timeout passes.
func (b *bundle) eventually(timeout time.Duration, what string, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			b.t.Fatalf("after %s: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
