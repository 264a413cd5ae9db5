package server

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// limiter bounds the requests in progress per token.
type limiter struct {
	max   int
	mu    sync.Mutex
	inUse map[string]int
}

func newLimiter(max int) *limiter { return &limiter{max: max, inUse: map[string]int{}} }

// acquire takes a slot for key, or reports false when it has max in use.
func (l *limiter) acquire(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inUse[key] >= l.max {
		return false
	}
	l.inUse[key]++
	return true
}

func (l *limiter) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inUse[key]--; l.inUse[key] <= 0 {
		delete(l.inUse, key)
	}
}

// checkBatch refuses a batch of n items over the server's limit.
func (s *Server) checkBatch(field string, n int) error {
	if n > s.cfg.MaxBatch {
		p := problemf(http.StatusRequestEntityTooLarge, "batch_too_large",
			"%s has %d items, more than the server's limit of %d (--max-batch)", field, n, s.cfg.MaxBatch)
		p.Field = field
		return p
	}
	return nil
}

// gate bounds the requests of connGated routes in progress, server-wide, to
// the pool's size less the connections reserved for the message endpoints.
// A request waits for a place for at most gateWait, then gets 503.
type gate struct {
	slots chan struct{}
	wait  time.Duration
}

// gateWait is how long a request waits for a place at the gate.
const gateWait = 10 * time.Second

func newGate(n int, wait time.Duration) *gate {
	return &gate{slots: make(chan struct{}, n), wait: wait}
}

// enter waits for a place, or returns a 503 problem (ctx ended, or gateWait
// passed).
func (g *gate) enter(ctx context.Context) error {
	select {
	case g.slots <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(g.wait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	return problemf(http.StatusServiceUnavailable, "busy",
		"the server has %d requests other than sends, receives and acks in progress, its limit (the pool less --reserved-conns): try again", cap(g.slots))
}

func (g *gate) leave() { <-g.slots }
