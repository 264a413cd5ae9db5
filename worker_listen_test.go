package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice"
)

// listenConns counts, from the server's side, the sessions of the test's
// database whose last statement was a LISTEN or UNLISTEN.
func (b *bundle) listenConns() int {
	b.t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ~ '^(UN)?LISTEN '`).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

// TestConsumersShareOneListenConnection: ten consumers of one client (on
// five queues) hold one LISTEN connection between them; each is woken by
// the sends to its queue, long before its 1-minute poll; after the LISTEN
// connection is terminated they still are, through the new one; a consumer
// that returns leaves the connection to the others, and the last one closes
// it.
func TestConsumersShareOneListenConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	queues := []string{"l0", "l1", "l2", "l3", "l4"}
	got := map[string]chan time.Time{}
	var stops []func() error
	for _, q := range queues {
		b.createQueue(q, nil)
		got[q] = make(chan time.Time, 10)
		for range 2 {
			stops = append(stops, b.consume(q, "default", func(ctx context.Context, m *sluice.Message) error {
				got[q] <- time.Now()
				return nil
			}, &sluice.ConsumeOptions{PollInterval: time.Minute, Logger: quiet}))
		}
	}
	b.eventually(10*time.Second, "a LISTEN connection", func() bool { return b.listenConns() == 1 })
	// wakes checks that a send to each queue is delivered within 2 s (by a
	// wake-up: the consumers poll every minute once the hot period of their
	// last activity is over).
	wakes := func() {
		t.Helper()
		time.Sleep(1500 * time.Millisecond) // past the consumers' hot period
		for _, q := range queues {
			sent := time.Now()
			b.send(q, `"hi"`)
			select {
			case at := <-got[q]:
				if d := at.Sub(sent); d > 2*time.Second {
					t.Errorf("queue %s: delivered %s after the send, want a wake-up", q, d)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("queue %s: message not delivered", q)
			}
		}
	}
	wakes()
	if n := b.listenConns(); n != 1 {
		t.Fatalf("%d LISTEN connections for ten consumers, want 1", n)
	}

	var killed int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ~ '^LISTEN ') k`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminated %d LISTEN connections (%v), want 1", killed, err)
	}
	b.eventually(10*time.Second, "a new LISTEN connection", func() bool { return b.listenConns() == 1 })
	wakes()

	// A consumer that returns unsubscribes; the others keep the connection.
	if err := stops[0](); err != nil {
		t.Fatal(err)
	}
	if n := b.listenConns(); n != 1 {
		t.Fatalf("%d LISTEN connections after one consumer returned, want 1", n)
	}
	wakes()
	for _, stop := range stops[1:] {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	// Consume returned after its client closed the connection: the server
	// may take a moment to end the session.
	b.eventually(10*time.Second, "no LISTEN connection once every consumer returned", func() bool { return b.listenConns() == 0 })
}
