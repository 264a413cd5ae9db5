package server

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
)

// notifier holds the server's one LISTEN connection (channel
// sluice.NotifyChannel, payload the queue name) and wakes the long polls
// waiting on a queue when a send to it commits. Long polls never hold a
// connection while they wait.
type notifier struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	up   atomic.Bool

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

func newNotifier(pool *pgxpool.Pool, log *slog.Logger) *notifier {
	return &notifier{pool: pool, log: log, waiters: map[string]map[chan struct{}]struct{}{}}
}

// subscribe returns a channel that receives a value when a send to queue
// commits (or when the listener reconnects), and the function that ends the
// subscription.
func (n *notifier) subscribe(queue string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.waiters[queue] == nil {
		n.waiters[queue] = map[chan struct{}]struct{}{}
	}
	n.waiters[queue][ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.waiters[queue], ch)
		if len(n.waiters[queue]) == 0 {
			delete(n.waiters, queue)
		}
		n.mu.Unlock()
	}
}

// wake signals the waiters of queue, or of every queue when all is set.
func (n *notifier) wake(queue string, all bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for q, set := range n.waiters {
		if !all && q != queue {
			continue
		}
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// waiting returns how many long polls wait.
func (n *notifier) waiting() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, set := range n.waiters {
		c += len(set)
	}
	return c
}

// run listens until ctx is done, reconnecting after failures (the long
// polls poll meanwhile).
func (n *notifier) run(ctx context.Context) {
	pause := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := n.listenOnce(ctx)
		n.up.Store(false)
		if ctx.Err() != nil {
			return
		}
		n.log.Warn("sluice server: the LISTEN connection failed; long polls poll until it is back", "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

func (n *notifier) listenOnce(ctx context.Context) error {
	pc, err := n.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+sluice.NotifyChannel); err != nil {
		return err
	}
	n.up.Store(true)
	// Sends may have committed while nobody listened.
	n.wake("", true)
	for {
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		n.wake(msg.Payload, false)
	}
}
