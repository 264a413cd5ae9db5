package server

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice"
)

// Status readings are shared: GET /v1/status requests of the same scope
// (role, and the token's queue patterns or the queue asked for) that
// arrive while a reading of that scope waits to start join it, and a
// scope's readings run one at a time, each starting at least statusSpacing
// after the one before started, or 4 times as long as that one took (at
// most statusSpacingMax): a scope whose readings are slow (every queue of
// a large database) keeps a connection busy a fifth of the time at most.
// So one token's 64 concurrent status calls cost one reading at a time, at
// most 1/statusSpacing a second, instead of 64 (which kept PostgreSQL's
// CPUs busy: other tokens' sends, receives and acks took a median 3.9x
// their idle p99 in bench scenario statusburst, 1.5x since).
//
// A reading starts after every request it answers arrived: an answer
// counts every write that completed before its request was made (no
// cache, no staleness), at the price of waiting up to the spacing when the
// scope was read just before. The event streams' feed reads through the
// same share (its scope is its role's every queue). At most a quarter of
// the gated connections run readings at once, whatever the scopes, each
// also through the gate, so that status cannot take more than a few of the
// connections the other gated requests share; a request waiting for a
// reading holds none.

// statusSpacing is the least time between the starts of two readings of one
// scope; statusSpacingMax the most it grows to after a slow reading.
const (
	statusSpacing    = 100 * time.Millisecond
	statusSpacingMax = time.Second
)

// statusShare runs the status readings of every scope.
type statusShare struct {
	gate    *gate
	spacing time.Duration
	// slots bounds the readings in progress, server-wide.
	slots  chan struct{}
	mu     sync.Mutex
	scopes map[string]*statusScope
}

// statusScope is the state of one scope's readings.
type statusScope struct {
	// last is when the latest reading started, took how long it took (0
	// while it runs).
	last     time.Time
	lastTook time.Duration
	// running is the reading in progress (nil if none); next is the one
	// that requests arriving now join, not started yet (nil if none).
	running, next *statusRun
}

// statusRun is one reading, and the requests waiting for it.
type statusRun struct {
	done    chan struct{}
	rows    []sluice.Status
	err     error
	waiters int
	ctx     context.Context
	cancel  context.CancelFunc
}

func newStatusShare(g *gate, slots int, spacing time.Duration) *statusShare {
	return &statusShare{gate: g, spacing: spacing, slots: make(chan struct{}, slots), scopes: map[string]*statusScope{}}
}

// statusScopeKey is the scope of a status request of p: of queue if not
// "", else of every queue p may use.
func statusScopeKey(p *Principal, queue string) string {
	if queue != "" {
		return p.Role + "\x00queue\x00" + queue
	}
	if len(p.Queues) == 0 {
		return p.Role + "\x00all"
	}
	pats := slices.Clone(p.Queues)
	slices.Sort(pats)
	return p.Role + "\x00patterns\x00" + strings.Join(slices.Compact(pats), "\x00")
}

// read returns a reading of the scope key made by read, started after this
// call was made: the one that waits to start, else a new one. Every caller
// of one key must pass a read that reads the same.
func (sh *statusShare) read(ctx context.Context, key string, read func(ctx context.Context) ([]sluice.Status, error)) ([]sluice.Status, error) {
	sh.mu.Lock()
	sc := sh.scopes[key]
	if sc == nil {
		sc = &statusScope{}
		sh.scopes[key] = sc
	}
	run := sc.next
	if run == nil {
		run = &statusRun{done: make(chan struct{})}
		run.ctx, run.cancel = context.WithCancel(context.Background())
		sc.next = run
		go sh.start(key, sc, run, sc.running, read)
	}
	run.waiters++
	sh.mu.Unlock()
	select {
	case <-run.done:
		return run.rows, run.err
	case <-ctx.Done():
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if run.waiters--; run.waiters == 0 {
			// Nobody waits for it any more: a request arriving now gets
			// a reading of its own.
			if sc.next == run {
				sc.next = nil
			}
			run.cancel()
		}
		return nil, ctx.Err()
	}
}

// start runs run once the scope's reading in progress (prev) has ended and
// statusSpacing has passed since it started.
func (sh *statusShare) start(key string, sc *statusScope, run *statusRun, prev *statusRun, read func(ctx context.Context) ([]sluice.Status, error)) {
	ctx := run.ctx
	defer run.cancel()
	if prev != nil {
		select {
		case <-prev.done:
		case <-ctx.Done():
		}
	}
	sh.mu.Lock()
	wait := time.Until(sc.last.Add(min(max(sh.spacing, 4*sc.lastTook), statusSpacingMax)))
	sh.mu.Unlock()
	if wait > 0 {
		sleep(ctx, wait)
	}
	sh.mu.Lock()
	if ctx.Err() != nil {
		sh.mu.Unlock()
		sh.finish(key, sc, run, nil, ctx.Err())
		return
	}
	// From here on, requests join the next reading: this one starts now,
	// after each of its requests arrived.
	sc.next, sc.running, sc.last, sc.lastTook = nil, run, time.Now(), 0
	sh.mu.Unlock()
	rows, err := sh.bounded(ctx, read)
	sh.finish(key, sc, run, rows, err)
}

// bounded runs read holding one of the status slots and a place at the
// gate.
func (sh *statusShare) bounded(ctx context.Context, read func(ctx context.Context) ([]sluice.Status, error)) ([]sluice.Status, error) {
	select {
	case sh.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-sh.slots }()
	if err := sh.gate.enter(ctx); err != nil {
		return nil, err
	}
	defer sh.gate.leave()
	return read(ctx)
}

// finish hands the reading to its requests, and forgets the scope once it
// has been idle for statusSpacingMax.
func (sh *statusShare) finish(key string, sc *statusScope, run *statusRun, rows []sluice.Status, err error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	run.rows, run.err = rows, err
	close(run.done)
	if sc.running == run {
		sc.running, sc.lastTook = nil, time.Since(sc.last)
	}
	if sc.running == nil && sc.next == nil {
		time.AfterFunc(statusSpacingMax, func() {
			sh.mu.Lock()
			defer sh.mu.Unlock()
			if sc.running == nil && sc.next == nil && sh.scopes[key] == sc && time.Since(sc.last) >= statusSpacingMax {
				delete(sh.scopes, key)
			}
		})
	}
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
