package server

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice"
)

// GET /v1/status/history: the status of the last hour, sampled by the
// server every HistoryInterval (10s by default) whether or not anyone
// looks, so that the dashboard's charts start with an hour behind them and
// survive a reload. One sluice.status call per interval, under the server's
// own login role (as /metrics), kept in memory: a restart starts it again.
// Each token sees the queues its patterns allow, and only if its role may
// call sluice.status.

// historyWindow is how far back the history goes.
const historyWindow = time.Hour

// historyPoint is one group's row of one sample.
type historyPoint struct {
	queue, group                                            string
	ready, waiting, delayed, inFlight, dead, lag, head, lwm int64
}

// statusHistory is a ring of samples, the oldest first from start.
type statusHistory struct {
	mu      sync.Mutex
	size    int
	times   []time.Time
	samples [][]historyPoint
	start   int
	// names shares the queue and group names of the samples (a status read
	// allocates them anew each time); it is cleared when it grows past
	// what the window holds.
	names map[string]string
}

func newStatusHistory(interval time.Duration) *statusHistory {
	size := int(historyWindow/interval) + 1
	return &statusHistory{size: size, names: map[string]string{}}
}

func (h *statusHistory) intern(s string) string {
	if v, ok := h.names[s]; ok {
		return v
	}
	h.names[s] = s
	return s
}

// add records a sample taken at t.
func (h *statusHistory) add(t time.Time, rows []sluice.Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.names) > 4*len(rows)+1024 {
		h.names = map[string]string{}
	}
	pts := make([]historyPoint, 0, len(rows))
	for _, r := range rows {
		if r.Group == "" {
			continue // a queue without groups has nothing to chart
		}
		pts = append(pts, historyPoint{queue: h.intern(r.Queue), group: h.intern(r.Group), ready: r.Ready,
			waiting: r.Waiting, delayed: r.Delayed, inFlight: r.InFlight, dead: r.Dead, lag: r.Lag, head: r.Head, lwm: r.LWM})
	}
	if len(h.times) < h.size {
		h.times = append(h.times, t)
		h.samples = append(h.samples, pts)
		return
	}
	h.times[h.start], h.samples[h.start] = t, pts
	h.start = (h.start + 1) % h.size
}

// HistorySeries is one group's values, one per time of the history (null
// where the group was not there).
type HistorySeries struct {
	Queue    string   `json:"queue"`
	Group    string   `json:"group"`
	Ready    []*int64 `json:"ready"`
	Waiting  []*int64 `json:"waiting"`
	Delayed  []*int64 `json:"delayed"`
	InFlight []*int64 `json:"in_flight"`
	Dead     []*int64 `json:"dead"`
	Lag      []*int64 `json:"lag"`
	Head     []*int64 `json:"head"`
	LWM      []*int64 `json:"lwm"`
}

// HistoryJSON is the body of GET /v1/status/history.
type HistoryJSON struct {
	IntervalSeconds float64         `json:"interval_seconds"`
	WindowSeconds   float64         `json:"window_seconds"`
	Times           []int64         `json:"times"` // Unix milliseconds, the oldest first
	Series          []HistorySeries `json:"series"`
}

// snapshot returns the samples taken after since (Unix milliseconds) of
// the queues keep accepts.
func (h *statusHistory) snapshot(since int64, keep func(queue string) bool) HistoryJSON {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := HistoryJSON{Times: []int64{}, Series: []HistorySeries{}}
	index := map[[2]string]int{}
	n := len(h.times)
	for k := range n {
		i := (h.start + k) % n
		if h.times[i].UnixMilli() <= since {
			continue
		}
		col := len(out.Times)
		out.Times = append(out.Times, h.times[i].UnixMilli())
		for _, p := range h.samples[i] {
			if !keep(p.queue) {
				continue
			}
			j, ok := index[[2]string{p.queue, p.group}]
			if !ok {
				j = len(out.Series)
				index[[2]string{p.queue, p.group}] = j
				out.Series = append(out.Series, HistorySeries{Queue: p.queue, Group: p.group})
			}
			s := &out.Series[j]
			for _, f := range []struct {
				col *[]*int64
				v   int64
			}{{&s.Ready, p.ready}, {&s.Waiting, p.waiting}, {&s.Delayed, p.delayed}, {&s.InFlight, p.inFlight},
				{&s.Dead, p.dead}, {&s.Lag, p.lag}, {&s.Head, p.head}, {&s.LWM, p.lwm}} {
				for len(*f.col) < col {
					*f.col = append(*f.col, nil)
				}
				v := f.v
				*f.col = append(*f.col, &v)
			}
		}
	}
	for i := range out.Series {
		s := &out.Series[i]
		for _, c := range []*[]*int64{&s.Ready, &s.Waiting, &s.Delayed, &s.InFlight, &s.Dead, &s.Lag, &s.Head, &s.LWM} {
			for len(*c) < len(out.Times) {
				*c = append(*c, nil)
			}
		}
	}
	return out
}

// sampleHistory reads the status every HistoryInterval until ctx ends,
// the first time one interval after the start (a server that starts does
// not add a status call to its first requests'). A failed read is logged
// once until a read succeeds again.
func (s *Server) sampleHistory(ctx context.Context) {
	t := time.NewTicker(s.cfg.HistoryInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, s.cfg.HistoryInterval+5*time.Second)
		rows, err := s.client.Status(rctx, "")
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			failing = true
			s.cfg.Logger.Warn("sluice server: reading the status for the history failed", "error", err.Error())
		case err == nil:
			failing = false
			s.history.add(time.Now(), rows)
		}
	}
}

// statusHistoryHandler serves the history to a token that may read the
// status (checked under its role: the database's grants decide), with the
// queues it may use; ?queue= limits it to one queue, ?since= (Unix
// milliseconds) to the samples after it.
func (s *Server) statusHistoryHandler(w http.ResponseWriter, r *http.Request) error {
	p := principalOf(r.Context())
	queue := r.URL.Query().Get("queue")
	if queue != "" && !p.Allows(queue) {
		return forbidQueue(queue)
	}
	since := time.Now().Add(-historyWindow).UnixMilli()
	if r.URL.Query().Get("since") != "" {
		var err error
		if since, err = queryInt64(r, "since"); err != nil {
			return err
		}
	}
	var may bool
	err := s.one(r.Context(), p, func(tx pgx.Tx) error {
		return tx.QueryRow(r.Context(), `SELECT has_function_privilege('sluice.status(text)', 'EXECUTE')`).Scan(&may)
	})
	if err != nil {
		return err
	}
	if !may {
		return problemf(http.StatusForbidden, "forbidden", "this token's role (%s) may not read the status", p.Role)
	}
	out := s.history.snapshot(since, func(q string) bool { return (queue == "" || q == queue) && p.Allows(q) })
	out.IntervalSeconds, out.WindowSeconds = s.cfg.HistoryInterval.Seconds(), historyWindow.Seconds()
	writeJSON(w, http.StatusOK, out)
	return nil
}

// WhoAmIJSON is the body of GET /v1/whoami.
type WhoAmIJSON struct {
	// Subject is the token's name or the JWT's sub ("anonymous" without
	// authentication).
	Subject string `json:"subject"`
	// Role is the database role the token maps to ("" without
	// authentication: the server's own login role).
	Role string `json:"role"`
	// Queues are the token's queue patterns (none: every queue).
	Queues []string `json:"queues"`
	// Functions are the public sluice functions the role may call, by
	// name: what the token may do, as the database's grants say.
	Functions []string `json:"functions"`
}

// whoAmI says who the token is and what it may do, so that the dashboard
// shows only the actions that would not be refused.
func (s *Server) whoAmI(w http.ResponseWriter, r *http.Request) error {
	p := principalOf(r.Context())
	out := WhoAmIJSON{Subject: p.Subject, Role: p.Role, Queues: p.Queues, Functions: []string{}}
	if out.Queues == nil {
		out.Queues = []string{}
	}
	err := s.one(r.Context(), p, func(tx pgx.Tx) error {
		rows, err := tx.Query(r.Context(), `SELECT DISTINCT p.proname::text FROM pg_catalog.pg_proc p
			WHERE p.pronamespace = 'sluice'::regnamespace AND p.proname !~ '^_'
			  AND has_function_privilege(p.oid, 'EXECUTE') ORDER BY 1`)
		if err != nil {
			return err
		}
		out.Functions, err = pgx.AppendRows(out.Functions, rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
