package server

import (
	"net/http"
	"sync"
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
