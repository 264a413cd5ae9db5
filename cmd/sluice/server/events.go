package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluicemq/sluice"
)

// GET /v1/events streams Server-Sent Events (text/event-stream) for the
// dashboard: an event "status" with the body of GET /v1/status, at once and
// then every EventsInterval, until the client goes, the server shuts down or
// the token expires. The streams of one role share one sluice.status call
// per interval (each filtered by its token's queue patterns), so that open
// dashboards cost the database one call per interval and role, whatever
// their number; a new stream's first event is the feed's latest reading
// (or its first, read at once when the stream starts the feed), so that
// connecting streams cost nothing either (512 streams each reading the
// status first held the pool: first event p50 6.9 s, a send 11.4 s). A
// failed read is an event "problem" (a problem+json body); the stream goes
// on.

// eventHub runs one feed per database role with streams open.
type eventHub struct {
	s     *Server
	mu    sync.Mutex
	feeds map[string]*feed
}

// feed reads sluice.status under one role every interval and hands each
// reading to the streams of that role.
type feed struct {
	role string
	subs map[chan statusReading]struct{}
	stop context.CancelFunc
	// last is the latest reading (nil before the first), given to a new
	// stream at once.
	last *statusReading
}

// statusReading is one read of sluice.status (all queues the role sees).
type statusReading struct {
	rows []sluice.Status
	err  error
}

func newEventHub(s *Server) *eventHub {
	return &eventHub{s: s, feeds: map[string]*feed{}}
}

// subscribe returns the channel that receives role's readings (the latest
// one: a slow stream skips readings), starting with the feed's latest
// reading if it has one, and the function that ends the subscription.
func (h *eventHub) subscribe(role string) (<-chan statusReading, func()) {
	ch := make(chan statusReading, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[role]
	if f == nil {
		ctx, stop := context.WithCancel(context.Background())
		f = &feed{role: role, subs: map[chan statusReading]struct{}{}, stop: stop}
		h.feeds[role] = f
		go h.run(ctx, f)
	}
	if f.last != nil {
		ch <- *f.last
	}
	f.subs[ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(f.subs, ch)
		if len(f.subs) == 0 {
			f.stop()
			delete(h.feeds, role)
		}
	}
}

// run reads at once, then every interval until ctx ends.
func (h *eventHub) run(ctx context.Context, f *feed) {
	t := time.NewTicker(h.s.cfg.EventsInterval)
	defer t.Stop()
	for {
		rows, err := h.s.readStatus(ctx, &Principal{Role: f.role}, "")
		if ctx.Err() != nil {
			return
		}
		reading := statusReading{rows: rows, err: err}
		h.mu.Lock()
		f.last = &reading
		for ch := range f.subs {
			select {
			case <-ch: // drop the reading the stream has not taken
			default:
			}
			ch <- reading
		}
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// statusBody is the body of GET /v1/status and of a "status" event: the
// rows of the queues p may use.
func statusBody(p *Principal, rows []sluice.Status) map[string]any {
	out := []StatusJSON{}
	for _, st := range rows {
		if p.Allows(st.Queue) {
			out = append(out, statusJSON(st))
		}
	}
	return map[string]any{"status": out}
}

func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	p := principalOf(ctx)
	readings, unsubscribe := s.hub.subscribe(p.Role)
	defer unsubscribe()
	// The first reading comes as a plain response if it failed: a token
	// that may not read the status gets its 403 so, not as an event.
	var reading statusReading
	select {
	case reading = <-readings:
	case <-s.draining:
		return problemf(http.StatusServiceUnavailable, "shutting_down", "the server is shutting down")
	case <-ctx.Done():
		return nil
	}
	if reading.err != nil {
		return reading.err
	}
	rc := http.NewResponseController(w)
	// The server's read and write timeouts are for plain requests: a
	// stream lives on (past the read timeout, the server would cancel it).
	if err := rc.SetWriteDeadline(time.Time{}); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	if err := rc.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	var expired <-chan time.Time
	if !p.expires.IsZero() {
		t := time.NewTimer(time.Until(p.expires))
		defer t.Stop()
		expired = t.C
	}
	for {
		name, body := "status", any(nil)
		if reading.err != nil {
			// (a copy: the streams of the role share the reading's error)
			pr := *toProblem(reading.err)
			pr.Instance = r.URL.Path
			name, body = "problem", &pr
		} else {
			body = statusBody(p, reading.rows)
		}
		if err := writeEvent(w, name, body); err != nil {
			return nil // the client went away
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
		select {
		case reading = <-readings:
		case <-expired:
			// The client reconnects, and its expired token gets a 401.
			return nil
		case <-s.draining:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// writeEvent writes one Server-Sent Event: its name and its JSON data on one
// line (JSON has no raw newlines).
func writeEvent(w http.ResponseWriter, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	return err
}
