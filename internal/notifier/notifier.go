// Package notifier shares one LISTEN connection among many subscribers.
//
// A Notifier holds at most one connection, taken from a pgx pool (and
// never given back: a connection in LISTEN mode is closed when done). It
// LISTENs on the channels its subscribers want, counting subscribers per
// channel: the first subscription to a channel makes it LISTEN, the last to
// end makes it UNLISTEN, and when no subscription is left the connection is
// closed and the notifier's goroutine ends, so a Notifier needs no Close.
// When the connection fails, the notifier tells its subscribers (Lost),
// reconnects after a pause that doubles up to maxPause, and tells them again
// once it listens (Listening): notifications sent meanwhile are lost, so a
// subscriber looks for what it may have missed then.
//
// The sluice library gives each Client one Notifier that all its consumers
// subscribe to; the sluice server has one for its long polls.
package notifier

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Kind says what an Event reports.
type Kind int

const (
	// Notified: a notification arrived on the channel, with its payload.
	Notified Kind = iota
	// Listening: the connection now LISTENs on the channel, for the first
	// time or again after Lost; notifications sent before may have been
	// missed.
	Listening
	// Lost: the connection failed (Err says why); the notifier reconnects
	// after a pause. Until Listening, no notification arrives.
	Lost
)

// Event is what a subscriber's function receives.
type Event struct {
	Kind    Kind
	Payload string // of Notified
	Err     error  // of Lost
}

// Func receives the events of a subscription, on the notifier's goroutine:
// it must return quickly and must not call the Notifier.
type Func func(Event)

// Pauses between connection attempts: from minPause, doubling up to
// maxPause after each failure.
const (
	minPause = 100 * time.Millisecond
	maxPause = 5 * time.Second
)

// closeTimeout bounds the closing of the connection, execTimeout a LISTEN
// or UNLISTEN.
const (
	closeTimeout = 5 * time.Second
	execTimeout  = 10 * time.Second
)

// Notifier shares one LISTEN connection among its subscriptions. The zero
// value is not usable; make one with New. It is safe for concurrent use.
type Notifier struct {
	pool *pgxpool.Pool

	mu sync.Mutex
	// subs holds the subscriptions by channel.
	subs map[string]map[*Subscription]struct{}
	// live holds the channels the current connection LISTENs on.
	live map[string]bool
	// gen is the goroutine that serves the subscriptions (nil before the
	// first); a new one starts after the last has ended.
	gen *generation
	// interrupt cancels the goroutine's current wait for a notification (or
	// pause between connections), so that it LISTENs or UNLISTENs, or ends;
	// nil while it is not waiting.
	interrupt context.CancelFunc
	// kicked: a change came while the goroutine was not waiting.
	kicked bool

	// deliverMu is held while subscribers' functions run (see Unlisten).
	deliverMu sync.Mutex
}

// generation is one run of the notifier's goroutine.
type generation struct {
	ctx    context.Context    // cancelled once stopped
	cancel context.CancelFunc //
	// stopped: no subscription is left, the goroutine ends (under
	// Notifier.mu).
	stopped bool
	done    chan struct{} // closed when it has ended and closed its connection
}

// Subscription is one subscriber's interest in a channel; end it with
// Unlisten.
type Subscription struct {
	n       *Notifier
	channel string
	fn      Func
	once    sync.Once
	heard   bool // Listening was delivered since the last Lost (under Notifier.mu)
}

// New returns a Notifier that takes its connection from pool when the first
// subscription comes.
func New(pool *pgxpool.Pool) *Notifier {
	return &Notifier{pool: pool, subs: map[string]map[*Subscription]struct{}{}, live: map[string]bool{}}
}

// Listen subscribes fn to the notifications of channel (an identifier: it
// is quoted as one) until Unlisten. It does not wait for the connection: fn
// receives Listening once the channel is listened on (at once, on the
// notifier's goroutine, when it already was).
func (n *Notifier) Listen(channel string, fn Func) *Subscription {
	s := &Subscription{n: n, channel: channel, fn: fn}
	n.mu.Lock()
	defer n.mu.Unlock()
	subs := n.subs[channel]
	if subs == nil {
		subs = map[*Subscription]struct{}{}
		n.subs[channel] = subs
	}
	subs[s] = struct{}{}
	if n.gen == nil || n.gen.stopped {
		ctx, cancel := context.WithCancel(context.Background())
		prev, g := n.gen, &generation{ctx: ctx, cancel: cancel, done: make(chan struct{})}
		n.gen = g
		go func() {
			defer close(g.done)
			if prev != nil {
				<-prev.done // one connection at a time
			}
			n.run(g)
		}()
	}
	// Even for a channel already live: the new subscriber hears Listening.
	n.kickLocked()
	return s
}

// Unlisten ends the subscription: its function is not called once Unlisten
// has returned. The last subscription of a channel makes the connection
// UNLISTEN it; the last of all closes the connection, and Unlisten waits
// for that. Calling it again does nothing.
func (s *Subscription) Unlisten() {
	s.once.Do(func() {
		n := s.n
		n.mu.Lock()
		subs := n.subs[s.channel]
		delete(subs, s)
		if len(subs) == 0 {
			delete(n.subs, s.channel)
		}
		g := n.gen
		if len(n.subs) == 0 {
			g.stopped = true
			g.cancel()
		}
		n.kickLocked()
		n.mu.Unlock()
		if g.stopped {
			<-g.done
		}
		// The goroutine calls the functions holding deliverMu: once it is
		// free, s's function is no longer running and never runs again.
		n.deliverMu.Lock()
		//lint:ignore SA2001 the empty critical section waits for a delivery in progress
		n.deliverMu.Unlock()
	})
}

// kickLocked makes the goroutine look at the subscriptions again.
func (n *Notifier) kickLocked() {
	if n.interrupt != nil {
		n.interrupt()
		n.interrupt = nil
	} else {
		n.kicked = true
	}
}

// wait returns a context that the next change of the subscriptions cancels
// (at once if one came since the last wait), or false when g has to end.
func (n *Notifier) wait(ctx context.Context, g *generation) (context.Context, context.CancelFunc, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if g.stopped {
		n.kicked = false
		return nil, nil, false
	}
	wctx, cancel := context.WithCancel(ctx)
	if n.kicked {
		n.kicked = false
		cancel()
	} else {
		n.interrupt = cancel
	}
	return wctx, cancel, true
}

// run serves the subscriptions until none is left: it connects, listens,
// and after a failure tells the subscribers and connects again after a
// pause.
func (n *Notifier) run(g *generation) {
	pause := minPause
	for {
		listened, err := n.session(g)
		if err == nil || g.ctx.Err() != nil {
			return
		}
		n.deliverAll(Event{Kind: Lost, Err: err})
		if listened {
			pause = minPause
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-g.ctx.Done():
		}
		t.Stop()
		pause = min(2*pause, maxPause)
	}
}

// errNoPool reports a Notifier without a pool.
var errNoPool = errors.New("notifier: no pool")

// session holds one connection until no subscription is left (nil) or it
// fails (the error); listened reports whether it got as far as listening.
func (n *Notifier) session(g *generation) (listened bool, err error) {
	if n.pool == nil {
		return false, errNoPool
	}
	ctx := g.ctx
	pc, err := n.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	// The connection leaves the pool: it is in LISTEN mode, and is closed
	// here.
	conn := pc.Hijack()
	defer func() {
		n.mu.Lock()
		clear(n.live)
		n.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	for {
		wctx, cancel, ok := n.wait(ctx, g)
		if !ok {
			return listened, nil
		}
		if err := n.sync(ctx, conn); err != nil {
			cancel()
			return listened, err
		}
		listened = true
		err := n.receive(wctx, conn)
		cancel()
		if err != nil {
			return listened, err
		}
	}
}

// sync makes the connection LISTEN on the channels subscribed to and
// UNLISTEN the others, then sends Listening to the subscriptions that have
// not heard it yet.
func (n *Notifier) sync(ctx context.Context, conn *pgx.Conn) error {
	n.mu.Lock()
	var listen, unlisten []string
	for ch := range n.subs {
		if !n.live[ch] {
			listen = append(listen, ch)
		}
	}
	for ch := range n.live {
		if n.subs[ch] == nil {
			unlisten = append(unlisten, ch)
		}
	}
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	for _, ch := range unlisten {
		if _, err := conn.Exec(ctx, "UNLISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
		n.mu.Lock()
		delete(n.live, ch)
		n.mu.Unlock()
	}
	for _, ch := range listen {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
		n.mu.Lock()
		n.live[ch] = true
		n.mu.Unlock()
	}
	n.greet()
	return nil
}

// receive delivers notifications until ctx is cancelled (nil: the
// subscriptions changed) or the connection fails (the error).
func (n *Notifier) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil && !conn.IsClosed() {
				return nil
			}
			return err
		}
		n.deliver(msg.Channel, Event{Kind: Notified, Payload: msg.Payload})
	}
}

// greet delivers Listening to the subscriptions of live channels that have
// not heard it since they subscribed or since the last Lost.
func (n *Notifier) greet() {
	n.deliverMu.Lock()
	defer n.deliverMu.Unlock()
	n.mu.Lock()
	var fns []Func
	for ch, subs := range n.subs {
		if !n.live[ch] {
			continue
		}
		for s := range subs {
			if !s.heard {
				s.heard = true
				fns = append(fns, s.fn)
			}
		}
	}
	n.mu.Unlock()
	for _, fn := range fns {
		fn(Event{Kind: Listening})
	}
}

// deliver gives ev to the subscriptions of channel.
func (n *Notifier) deliver(channel string, ev Event) {
	n.deliverMu.Lock()
	defer n.deliverMu.Unlock()
	n.mu.Lock()
	fns := make([]Func, 0, len(n.subs[channel]))
	for s := range n.subs[channel] {
		fns = append(fns, s.fn)
	}
	n.mu.Unlock()
	for _, fn := range fns {
		fn(ev)
	}
}

// deliverAll gives ev (Lost) to every subscription, which then hears
// Listening again once the connection is back.
func (n *Notifier) deliverAll(ev Event) {
	n.deliverMu.Lock()
	defer n.deliverMu.Unlock()
	n.mu.Lock()
	var fns []Func
	for _, subs := range n.subs {
		for s := range subs {
			s.heard = false
			fns = append(fns, s.fn)
		}
	}
	n.mu.Unlock()
	for _, fn := range fns {
		fn(ev)
	}
}
