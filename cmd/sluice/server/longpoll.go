package server

import (
	"container/list"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
	listen "github.com/sluicemq/sluice/internal/notifier"
)

// notifier holds the server's one LISTEN connection (channel
// sluice.NotifyChannel, payload the queue name) and wakes the long polls
// waiting on a queue when a send to it commits. Long polls never hold a
// connection while they wait.
//
// Per queue and group, a wake-up goes to the long poll that has waited
// longest, and one woken long poll receives at a time: a notification may
// stand for one message, and every long poll of the group receiving for it
// would be a thundering herd whose receives contend in the engine and
// mostly come back empty. A wake-up that arrives meanwhile is kept (again)
// and given to the next waiting long poll as soon as that receive is done,
// since it may have read the queue before that send committed. A receive
// that comes back full says that messages wait: it doubles how many woken
// long polls may receive at once (up to maxTries, so that a backlog drains
// through several lanes), and one that does not fill up sets it back to
// one.
type notifier struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	up   atomic.Bool
	// maxTries is how many woken long polls of one group may receive at
	// once while their receives come back full.
	maxTries int

	mu sync.Mutex
	// groups holds, per queue and group, its waiting long polls.
	groups map[string]map[string]*pollGroup
	// hot holds, per queue notified within hotPeriod, when it was
	// notified and when hotWake last woke it.
	hot map[string]*hotQueue
}

// While sends to a queue flow (for hotPeriod after its last notification),
// its long polls are woken every hotInterval besides the notifications: the
// engine sends one notification among concurrent sends (the first to
// commit's), so a send that commits after it notifies nobody (docs/design.md;
// the Go worker polls the same way).
const (
	hotPeriod   = time.Second
	hotInterval = 25 * time.Millisecond
)

// defaultMaxTries bounds the woken long polls of a group receiving at once
// while a backlog drains: the engine's default number of lanes (more
// receives than lanes find none free).
const defaultMaxTries = 8

// hotQueue is when a queue was last notified, and last woken by hotWake.
type hotQueue struct{ notified, woken time.Time }

// pollGroup is the long polls waiting on one group of a queue.
type pollGroup struct {
	queue, group string
	// idle are the waiters not woken, the longest waiting first.
	idle list.List
	// waiters counts every waiter of the group, woken or not.
	waiters int
	// woken counts the waiters woken and not done with their receive.
	woken int
	// tries is how many woken waiters may receive at once: 1, more while
	// receives come back full.
	tries int
	// receiving counts the receives of the group's long polls in progress,
	// woken or not.
	receiving int
	// caughtUp counts the idle waiters that found the group empty (or
	// joined behind one that did) and were not woken since.
	caughtUp int
	// again records a wake-up that found maxTries waiters woken, or none
	// idle, or that a woken receive found nothing while other receives of
	// the group were in progress (they may hold the lanes with the message):
	// the next receive done gives it on.
	again bool
}

// waiter is one long poll's subscription.
type waiter struct {
	// C receives a value when the long poll should receive again.
	C    chan struct{}
	pg   *pollGroup
	elem *list.Element // in pg.idle, or nil while woken
	// woken: a value was sent on C and the receive it asked for is not
	// done (tried) yet.
	woken bool
	// caughtUp: counted in pg.caughtUp.
	caughtUp bool
}

func newNotifier(pool *pgxpool.Pool, log *slog.Logger) *notifier {
	return &notifier{pool: pool, log: log, maxTries: defaultMaxTries, groups: map[string]map[string]*pollGroup{}, hot: map[string]*hotQueue{}}
}

// subscribe registers a long poll on queue and group, before its first
// receive (so that no send committing meanwhile goes unnoticed). Its C
// receives a value when a send to the queue commits, when the sweep finds
// messages ready for group, or when the listener reconnects. The long poll
// reports each receive with tried and ends with unsubscribe.
func (n *notifier) subscribe(queue, group string) *waiter {
	n.mu.Lock()
	defer n.mu.Unlock()
	gs := n.groups[queue]
	if gs == nil {
		gs = map[string]*pollGroup{}
		n.groups[queue] = gs
	}
	pg := gs[group]
	if pg == nil {
		pg = &pollGroup{queue: queue, group: group, tries: 1}
		gs[group] = pg
	}
	w := &waiter{C: make(chan struct{}, 1), pg: pg}
	w.elem = pg.idle.PushBack(w)
	pg.waiters++
	return w
}

// unsubscribe ends a long poll's subscription. A wake-up it was given and
// did not use goes to the next waiter.
func (n *notifier) unsubscribe(w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	pg := w.pg
	if w.elem != nil {
		pg.idle.Remove(w.elem)
		w.elem = nil
	}
	pg.waiters--
	pg.setCaughtUp(w, false)
	if w.woken {
		w.woken = false
		pg.woken--
		n.wakeGroup(pg)
	}
	if pg.waiters == 0 {
		delete(n.groups[pg.queue], pg.group)
		if len(n.groups[pg.queue]) == 0 {
			delete(n.groups, pg.queue)
		}
	}
}

// setCaughtUp marks w as an idle waiter that found the group empty, or
// not. n.mu is held.
func (pg *pollGroup) setCaughtUp(w *waiter, v bool) {
	if w.caughtUp != v {
		w.caughtUp = v
		if v {
			pg.caughtUp++
		} else {
			pg.caughtUp--
		}
	}
}

// joinBehind reports whether a new long poll (w, which has not received
// yet) may skip its first receive and wait behind the idle long polls of
// its group: they found it empty, nothing woke them since, and the next
// wake-up goes to them first, so that receive would only contend with
// theirs and come back empty. Messages that come ready without a
// notification (delays and retries coming due) are found by the sweep.
func (n *notifier) joinBehind(w *waiter) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	pg := w.pg
	if pg.caughtUp == 0 || pg.again || w.woken {
		return false
	}
	pg.setCaughtUp(w, true)
	return true
}

// begin reports that the long poll starts a receive.
func (n *notifier) begin(w *waiter) {
	n.mu.Lock()
	w.pg.receiving++
	n.mu.Unlock()
}

// tryResult is what a long poll's receive got.
type tryResult int

const (
	tryEmpty   tryResult = iota // no message
	tryPartial                  // fewer messages than it asked for
	tryFull                     // as many as it asked for: more may wait
	tryFailed                   // an error (the queue was dropped, say)
)

// tried reports that the long poll's receive is done. After tryEmpty it
// waits again (at the back); after the others it leaves. A wake-up that
// came during the receive stays pending on C: that receive may have read
// the queue before the send.
func (n *notifier) tried(w *waiter, res tryResult) {
	n.mu.Lock()
	defer n.mu.Unlock()
	pg := w.pg
	pg.receiving--
	wasWoken := w.woken && len(w.C) == 0
	if wasWoken {
		w.woken = false
		pg.woken--
	}
	if res == tryEmpty && !w.woken && w.elem == nil {
		w.elem = pg.idle.PushBack(w)
	}
	pg.setCaughtUp(w, res == tryEmpty && !w.woken)
	switch res {
	case tryFull:
		// Messages wait: more receives at once, each to its own lanes.
		pg.tries = min(2*pg.tries, n.maxTries)
		pg.again = false
		for pg.woken < pg.tries && pg.idle.Len() > 0 {
			n.wakeGroup(pg)
		}
		return
	case tryFailed:
		// The others find out (and leave) one after the other.
		pg.again = true
	case tryPartial:
		pg.tries = 1
	case tryEmpty:
		if wasWoken {
			pg.tries = 1
			if pg.receiving > 0 {
				// The message may be in a lane another receive holds:
				// try again when that one is done.
				pg.again = true
				return
			}
		}
	}
	if pg.again {
		pg.again = false
		n.wakeGroup(pg)
	}
}

// wakeGroup gives a wake-up to the longest waiting idle long poll of pg, or
// keeps it (again) when pg.tries are woken or none is idle. n.mu is held.
func (n *notifier) wakeGroup(pg *pollGroup) {
	if pg.woken >= pg.tries || pg.idle.Len() == 0 {
		pg.again = true
		return
	}
	w := pg.idle.Remove(pg.idle.Front()).(*waiter)
	w.elem = nil
	pg.setCaughtUp(w, false)
	w.woken = true
	pg.woken++
	select {
	case w.C <- struct{}{}:
	default: // cannot happen: C is empty while not woken
	}
}

// wake gives a wake-up to each group of queue (each group in groups, unless
// it is nil); with all set, to every group of every queue.
func (n *notifier) wake(queue string, groups map[string]bool, all bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for q, gs := range n.groups {
		if !all && q != queue {
			continue
		}
		for g, pg := range gs {
			if groups == nil || groups[g] {
				n.wakeGroup(pg)
			}
		}
	}
}

// queues returns the queues that long polls wait on.
func (n *notifier) queues() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.groups))
	for q := range n.groups {
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
	for _, gs := range n.groups {
		for _, pg := range gs {
			c += pg.waiters
		}
	}
	return c
}

// run listens until ctx is done, through a Notifier of its own (package
// internal/notifier, the one implementation of a shared LISTEN connection,
// which the library's clients use too): it reconnects after failures, and
// the long polls poll meanwhile.
func (n *notifier) run(ctx context.Context) {
	sub := listen.New(n.pool).Listen(sluice.NotifyChannel, func(ev listen.Event) {
		switch ev.Kind {
		case listen.Notified:
			n.notified(ev.Payload, time.Now())
		case listen.Listening:
			n.up.Store(true)
			// Sends may have committed while nobody listened.
			n.wake("", nil, true)
		case listen.Lost:
			n.up.Store(false)
			n.log.Warn("sluice server: the LISTEN connection failed; long polls poll until it is back", "error", ev.Err)
		}
	})
	<-ctx.Done()
	sub.Unlisten()
	n.up.Store(false)
}

// notified wakes the long polls of a queue a send to which committed, and
// keeps it hot.
func (n *notifier) notified(queue string, now time.Time) {
	n.mu.Lock()
	h := n.hot[queue]
	if h == nil {
		h = &hotQueue{}
		n.hot[queue] = h
	}
	h.notified = now
	n.mu.Unlock()
	n.wake(queue, nil, false)
}

// hotWake wakes, every hotInterval, the groups of the queues notified
// within hotPeriod that were neither notified nor woken by it for
// hotInterval: one receive per group and interval at most, while sends
// flow and long polls wait.
func (n *notifier) hotWake(ctx context.Context) {
	t := time.NewTicker(hotInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			n.hotTick(now)
		}
	}
}

func (n *notifier) hotTick(now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for q, h := range n.hot {
		if now.Sub(h.notified) > hotPeriod {
			delete(n.hot, q)
			continue
		}
		if now.Sub(h.notified) < hotInterval || now.Sub(h.woken) < hotInterval {
			continue
		}
		h.woken = now
		for _, pg := range n.groups[q] {
			// A receive in progress started within about hotInterval:
			// the next tick looks after it, and keeping the wake-up
			// (again) would chain receives back to back.
			if pg.woken == 0 {
				n.wakeGroup(pg)
			}
		}
	}
}
