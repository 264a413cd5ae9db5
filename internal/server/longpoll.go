package server

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
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

	mu sync.Mutex
	// waiters holds, per queue, each waiting long poll's channel and group.
	waiters map[string]map[chan struct{}]string
}

func newNotifier(pool *pgxpool.Pool, log *slog.Logger) *notifier {
	return &notifier{pool: pool, log: log, waiters: map[string]map[chan struct{}]string{}}
}

// subscribe returns a channel that receives a value when a send to queue
// commits, when the sweep finds messages ready for group, or when the
// listener reconnects; and the function that ends the subscription.
func (n *notifier) subscribe(queue, group string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.waiters[queue] == nil {
		n.waiters[queue] = map[chan struct{}]string{}
	}
	n.waiters[queue][ch] = group
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

// wake signals, for each group of queue (each group in groups, unless it
// is nil), one of its waiting long polls: a notification may stand for one
// message, and every long poll of the group trying to receive it would be
// a thundering herd. A long poll that receives a full batch wakes the next
// (wakeOne). With all set, it wakes every long poll of every queue.
func (n *notifier) wake(queue string, groups map[string]bool, all bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for q, set := range n.waiters {
		if !all && q != queue {
			continue
		}
		woken := map[string]bool{}
		for ch, g := range set {
			if (groups != nil && !groups[g]) || (!all && woken[g]) {
				continue
			}
			select {
			case ch <- struct{}{}:
				woken[g] = true
			default: // already signalled: it will receive
				woken[g] = true
			}
		}
	}
}

// wakeOne signals one waiting long poll of queue and group, but not self.
func (n *notifier) wakeOne(queue, group string, self <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch, g := range n.waiters[queue] {
		if g != group || ch == self {
			continue
		}
		select {
		case ch <- struct{}{}:
		default:
		}
		return
	}
}

// queues returns the queues that long polls wait on.
func (n *notifier) queues() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.waiters))
	for q := range n.waiters {
		out = append(out, q)
	}
	return out
}

// sweep checks, every interval (at most 500ms while the LISTEN connection
// is down), each queue that long polls wait on with one sluice.status call,
// and wakes the long polls of the groups that have messages ready: delayed
// messages and retries that come due send no notification. Its cost does
// not grow with the number of long polls.
func (n *notifier) sweep(ctx context.Context, interval time.Duration) {
	for {
		d := interval
		if !n.up.Load() {
			d = min(d, 500*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		for _, q := range n.queues() {
			ready, err := n.readyGroups(ctx, q)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				// The queue was dropped, say: the long polls find out.
				n.wake(q, nil, false)
			} else if len(ready) > 0 {
				n.wake(q, ready, false)
			}
		}
	}
}

// readyGroups returns the groups of queue that have messages ready.
func (n *notifier) readyGroups(ctx context.Context, queue string) (map[string]bool, error) {
	rows, err := n.pool.Query(ctx, `SELECT group_name FROM sluice.status($1) WHERE ready > 0 AND group_name IS NOT NULL`, queue)
	if err != nil {
		return nil, err
	}
	groups, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, g := range groups {
		out[g] = true
	}
	return out, nil
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
	n.wake("", nil, true)
	for {
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		n.wake(msg.Payload, nil, false)
	}
}
