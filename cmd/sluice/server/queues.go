package server

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice"
)

// QueueJSON is a queue in responses.
type QueueJSON struct {
	Name      string          `json:"name"`
	CreatedAt time.Time       `json:"created_at"`
	Options   json.RawMessage `json:"options"`
	Groups    []string        `json:"groups"`
	Status    []StatusJSON    `json:"status,omitempty"`
}

// StatusJSON is one group's row of sluice.status.
type StatusJSON struct {
	Queue            string  `json:"queue"`
	Group            string  `json:"group"`
	Ready            int64   `json:"ready"`
	Waiting          int64   `json:"waiting"` // keyed messages behind an earlier one of their key
	Delayed          int64   `json:"delayed"`
	InFlight         int64   `json:"in_flight"`
	Dead             int64   `json:"dead"`
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"`
	Lag              int64   `json:"lag"`
	Cursor           int64   `json:"cursor"`
	LWM              int64   `json:"lwm"`
	Head             int64   `json:"head"`
	LiveEpochs       int     `json:"live_epochs"`
	HoldsReclaim     bool    `json:"holds_reclaim"`
	Estimated        bool    `json:"estimated"`
	DeadLettered     int64   `json:"dead_lettered"`
	// HeldByPID is the backend whose open transaction holds the queue's
	// numbering (omitted: none); HeldFor how long, in seconds.
	HeldByPID int     `json:"held_by_pid,omitempty"`
	HeldFor   float64 `json:"held_for_seconds,omitempty"`
}

func statusJSON(st sluice.Status) StatusJSON {
	return StatusJSON{Queue: st.Queue, Group: st.Group, Ready: st.Ready, Waiting: st.Waiting, Delayed: st.Delayed, InFlight: st.InFlight,
		Dead: st.Dead, OldestPendingAge: st.OldestPendingAge.Seconds(), Lag: st.Lag, Cursor: st.Cursor, LWM: st.LWM,
		Head: st.Head, LiveEpochs: st.LiveEpochs, HoldsReclaim: st.HoldsReclaim, Estimated: st.Estimated,
		DeadLettered: st.DeadLettered, HeldByPID: st.HeldByPID, HeldFor: st.HeldFor.Seconds()}
}

func queueJSON(q sluice.QueueInfo) QueueJSON {
	groups := q.Groups
	if groups == nil {
		groups = []string{}
	}
	return QueueJSON{Name: q.Name, CreatedAt: q.CreatedAt, Options: q.RawOptions, Groups: groups}
}

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) error {
	p := principalOf(r.Context())
	out := []QueueJSON{}
	err := s.tx(r.Context(), p, func(tx pgx.Tx) error {
		qs, err := s.client.ListQueuesTx(r.Context(), tx)
		for _, q := range qs {
			if p.Allows(q.Name) {
				out = append(out, queueJSON(q))
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out})
	return nil
}

// findQueue returns the queue's info from list_queues, or SL002.
func (s *Server) findQueue(r *http.Request, tx pgx.Tx, name string) (QueueJSON, error) {
	qs, err := s.client.ListQueuesTx(r.Context(), tx)
	if err != nil {
		return QueueJSON{}, err
	}
	for _, q := range qs {
		if q.Name == name {
			return queueJSON(q), nil
		}
	}
	return QueueJSON{}, &Problem{Type: "urn:sluice:problem:undefined_queue", Title: http.StatusText(http.StatusNotFound),
		Status: http.StatusNotFound, Detail: "queue \"" + name + "\" does not exist", Code: "SL002"}
}

type createQueueRequest struct {
	Name    string          `json:"name"`
	Options json.RawMessage `json:"options"`
}

func (s *Server) createQueue(w http.ResponseWriter, r *http.Request) error {
	var req createQueueRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Name == "" {
		return fieldProblem("name", "name is required")
	}
	p := principalOf(r.Context())
	if !p.Allows(req.Name) {
		return forbidQueue(req.Name)
	}
	opts := req.Options
	if len(opts) == 0 || string(opts) == "null" {
		opts = json.RawMessage(`{}`)
	} else if opts[0] != '{' {
		return fieldProblem("options", "options must be a JSON object")
	}
	var out QueueJSON
	err := s.tx(r.Context(), p, func(tx pgx.Tx) error {
		if _, err := tx.Exec(r.Context(), `SELECT sluice.create_queue($1, $2::jsonb)`, req.Name, string(opts)); err != nil {
			return wrapSQL(err, "creating queue %q", req.Name)
		}
		var err error
		out, err = s.findQueue(r, tx, req.Name)
		return err
	})
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/queues/"+req.Name)
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("queue")
	var out QueueJSON
	err := s.tx(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) error {
		sts, err := s.client.StatusTx(r.Context(), tx, name)
		if err != nil {
			return err
		}
		if out, err = s.findQueue(r, tx, name); err != nil {
			return err
		}
		out.Status = []StatusJSON{}
		for _, st := range sts {
			if st.Group != "" {
				out.Status = append(out.Status, statusJSON(st))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) alterQueue(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("queue")
	var changes map[string]json.RawMessage
	if err := decode(r, &changes); err != nil {
		return err
	}
	if changes == nil {
		return fieldProblem("", "the request body must be a JSON object of options")
	}
	b, _ := json.Marshal(changes)
	var opts json.RawMessage
	err := s.tx(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) error {
		err := tx.QueryRow(r.Context(), `SELECT sluice.alter_queue($1, $2::jsonb)`, name, string(b)).Scan((*[]byte)(&opts))
		return wrapSQL(err, "altering queue %q", name)
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": name, "options": opts})
	return nil
}

func (s *Server) dropQueue(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("queue")
	var existed bool
	err := s.tx(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) (err error) {
		existed, err = s.client.DropQueueTx(r.Context(), tx, name)
		return err
	})
	if err != nil {
		return err
	}
	if !existed {
		return &Problem{Type: "urn:sluice:problem:undefined_queue", Title: http.StatusText(http.StatusNotFound),
			Status: http.StatusNotFound, Detail: "queue \"" + name + "\" does not exist", Code: "SL002"}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// purgeQueue removes every message of a queue; with ?dead_letters=true it
// also discards every group's dead letters, in the same transaction (purge
// alone leaves them).
func (s *Server) purgeQueue(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("queue")
	withDead := false
	if v := r.URL.Query().Get("dead_letters"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fieldProblem("dead_letters", "dead_letters must be true or false, got %q", v)
		}
		withDead = b
	}
	var n, discarded int64
	err := s.tx(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) (err error) {
		if n, err = s.client.PurgeQueueTx(r.Context(), tx, name); err != nil || !withDead {
			return err
		}
		q, err := s.findQueue(r, tx, name)
		if err != nil {
			return err
		}
		for _, g := range q.Groups {
			d, err := s.client.DiscardDeadLettersTx(r.Context(), tx, name, g, nil)
			if err != nil {
				return err
			}
			discarded += d
		}
		return nil
	})
	if err != nil {
		return err
	}
	out := map[string]int64{"purged": n}
	if withDead {
		out["dead_letters_discarded"] = discarded
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// upgradeQueue replaces a queue of engine 1 by one of engine 2 in place
// (sluice.upgrade_queue): {"upgraded": false} when it is of engine 2
// already.
func (s *Server) upgradeQueue(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("queue")
	var upgraded bool
	err := s.tx(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) (err error) {
		upgraded, err = s.client.UpgradeQueueTx(r.Context(), tx, name)
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]bool{"upgraded": upgraded})
	return nil
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	p := principalOf(r.Context())
	queue := r.URL.Query().Get("queue")
	if queue != "" && !p.Allows(queue) {
		return forbidQueue(queue)
	}
	rows, err := s.readStatus(r.Context(), p, queue)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, statusBody(p, rows))
	return nil
}

// readStatus reads the status of queue, or of every queue p may use if
// queue is "", through the status share (statusshare.go): requests of the
// same scope share a reading that starts after each of them arrived. A
// problem it returns is the request's own copy (one reading's error
// answers several requests, and writing a problem sets its fields).
func (s *Server) readStatus(ctx context.Context, p *Principal, queue string) ([]sluice.Status, error) {
	rows, err := s.statuses.read(ctx, statusScopeKey(p, queue), func(ctx context.Context) (rows []sluice.Status, err error) {
		if queue != "" || len(p.Queues) == 0 {
			err = s.one(ctx, p, func(tx pgx.Tx) (err error) {
				rows, err = s.client.StatusTx(ctx, tx, queue)
				return err
			})
		} else {
			err = s.tx(ctx, p, func(tx pgx.Tx) (err error) {
				rows, err = s.allowedStatus(ctx, tx, p)
				return err
			})
		}
		return rows, err
	})
	if err != nil {
		own := *toProblem(err)
		if own.cause == nil {
			own.cause = err
		}
		return nil, &own
	}
	return rows, nil
}

// allowedStatus reads the status of the queues p may use, one by one: a
// token limited to a few queues costs what those queues cost, not what
// every queue of the database does (sluice.status of every queue took 196
// ms with 21 queues, of one 4 ms, and 64 such calls held the whole pool).
func (s *Server) allowedStatus(ctx context.Context, tx pgx.Tx, p *Principal) ([]sluice.Status, error) {
	qs, err := s.client.ListQueuesTx(ctx, tx)
	if err != nil {
		return nil, err
	}
	var rows []sluice.Status
	for _, q := range qs {
		if !p.Allows(q.Name) {
			continue
		}
		st, err := s.client.StatusTx(ctx, tx, q.Name)
		if err != nil {
			return nil, err
		}
		rows = append(rows, st...)
	}
	return rows, nil
}

type createGroupRequest struct {
	Name      string `json:"name"`
	StartFrom string `json:"start_from"`
}

func (s *Server) createGroup(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	var req createGroupRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Name == "" {
		return fieldProblem("name", "name is required")
	}
	err := s.tx(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) error {
		return s.client.CreateGroupTx(r.Context(), tx, queue, req.Name, &sluice.GroupOptions{StartFrom: req.StartFrom})
	})
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/queues/"+queue+"/groups/"+req.Name)
	writeJSON(w, http.StatusCreated, map[string]string{"queue": queue, "group": req.Name})
	return nil
}

func (s *Server) dropGroup(w http.ResponseWriter, r *http.Request) error {
	queue, group := r.PathValue("queue"), r.PathValue("group")
	var existed bool
	err := s.tx(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) (err error) {
		existed, err = s.client.DropGroupTx(r.Context(), tx, queue, group)
		return err
	})
	if err != nil {
		return err
	}
	if !existed {
		return &Problem{Type: "urn:sluice:problem:undefined_group", Title: http.StatusText(http.StatusNotFound),
			Status: http.StatusNotFound, Detail: "group \"" + group + "\" does not exist in queue \"" + queue + "\"", Code: "SL003"}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type seekGroupRequest struct {
	ToPosition string `json:"to_position"`
}

// seekGroup moves a group with sluice.seek_group: it keeps its name, ttl
// and dead letters, and replays (backward) or skips (forward).
func (s *Server) seekGroup(w http.ResponseWriter, r *http.Request) error {
	queue, group := r.PathValue("queue"), r.PathValue("group")
	var req seekGroupRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.ToPosition == "" {
		return fieldProblem("to_position", "to_position is required: \"earliest\", \"latest\" or a timestamp")
	}
	err := s.tx(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) error {
		return s.client.SeekGroupTx(r.Context(), tx, queue, group, req.ToPosition)
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"queue": queue, "group": group, "to_position": req.ToPosition})
	return nil
}

// DeadLetterJSON is a dead letter in responses.
type DeadLetterJSON struct {
	ID           int64           `json:"id"`
	Group        string          `json:"group"`
	Body         json.RawMessage `json:"body"`
	Headers      json.RawMessage `json:"headers,omitempty"`
	Key          string          `json:"key,omitempty"`
	Attempts     int             `json:"attempts"`
	Error        string          `json:"error,omitempty"`
	DiedAt       time.Time       `json:"died_at"`
	SentAt       time.Time       `json:"sent_at"`
	DeadLetterID int64           `json:"dead_letter_id"`
}

func (s *Server) deadLetters(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	q := r.URL.Query()
	opts := &sluice.DeadLetterOptions{Group: q.Get("group")}
	n, err := queryInt(r, "max", 0)
	if err != nil {
		return err
	}
	opts.Max = int(n)
	out := []DeadLetterJSON{}
	err = s.tx(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) error {
		dls, err := s.client.DeadLettersTx(r.Context(), tx, queue, opts)
		for _, d := range dls {
			out = append(out, DeadLetterJSON{ID: d.ID, Group: d.Group, Body: d.Body, Headers: d.Headers, Key: d.Key,
				Attempts: d.Attempts, Error: d.Error, DiedAt: d.DiedAt, SentAt: d.SentAt, DeadLetterID: d.DeadLetterID})
		}
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": out})
	return nil
}

// deadLetterSelection is the body of redrive and discard: a group's dead
// letters, or those of some message ids (absent or null: SQL NULL; []: an
// empty array, which the engine refuses with SL006).
type deadLetterSelection struct {
	Group string  `json:"group"`
	IDs   []int64 `json:"ids"`
}

// The request types of redrive and discard, one selection.
type (
	redriveRequest = deadLetterSelection
	discardRequest = deadLetterSelection
)

// onDeadLetters decodes a deadLetterSelection, runs call with it in the
// caller's transaction and answers {field: n}.
func (s *Server) onDeadLetters(w http.ResponseWriter, r *http.Request, field string,
	call func(ctx context.Context, tx pgx.Tx, queue string, sel deadLetterSelection) (int64, error)) error {
	queue := r.PathValue("queue")
	var sel deadLetterSelection
	if err := decode(r, &sel); err != nil {
		return err
	}
	if err := s.checkBatch("ids", len(sel.IDs)); err != nil {
		return err
	}
	var n int64
	err := s.tx(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) (err error) {
		n, err = call(r.Context(), tx, queue, sel)
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int64{field: n})
	return nil
}

func (s *Server) redrive(w http.ResponseWriter, r *http.Request) error {
	return s.onDeadLetters(w, r, "redriven", func(ctx context.Context, tx pgx.Tx, queue string, sel deadLetterSelection) (int64, error) {
		return s.client.RedriveTx(ctx, tx, queue, sel.Group, sel.IDs...)
	})
}

// discardDeadLetters drops dead letters for good (sluice.discard_dead_letters):
// all of a group's, or those of some message ids.
func (s *Server) discardDeadLetters(w http.ResponseWriter, r *http.Request) error {
	return s.onDeadLetters(w, r, "discarded", func(ctx context.Context, tx pgx.Tx, queue string, sel deadLetterSelection) (int64, error) {
		return s.client.DiscardDeadLettersTx(ctx, tx, queue, sel.Group, sel.IDs)
	})
}

// StoredMessageJSON is a row of sluice.peek in responses.
type StoredMessageJSON struct {
	ID        int64           `json:"id"`
	Body      json.RawMessage `json:"body"`
	Headers   json.RawMessage `json:"headers,omitempty"`
	Key       string          `json:"key,omitempty"`
	Priority  int             `json:"priority"`
	SentAt    time.Time       `json:"sent_at"`
	DeliverAt *time.Time      `json:"deliver_at,omitempty"`
	ResentTo  []string        `json:"resent_to,omitempty"`
}

// LeaseJSON is a row of sluice.leases in responses.
type LeaseJSON struct {
	Group          string    `json:"group"`
	ID             int64     `json:"id"`
	Pos            int64     `json:"pos"`
	Attempt        int       `json:"attempt"`
	Consumer       string    `json:"consumer,omitempty"`
	DeliveredAt    time.Time `json:"delivered_at"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
}

// queryInt reads an optional integer query parameter that the engine takes
// as an int (max): def when absent, a 400 naming it when it is not an
// integer or does not fit an int (?max=3000000000 was a 500). The rest of
// its range is the engine's to check (SL006, 422).
func queryInt(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, fieldProblem(name, "%s must be an integer from %d to %d, got %q", name, math.MinInt32, math.MaxInt32, v)
	}
	return n, nil
}

// queryInt64 is queryInt for a bigint (after_id).
func queryInt64(r *http.Request, name string) (int64, error) {
	v := r.URL.Query().Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fieldProblem(name, "%s must be an integer, got %q", name, v)
	}
	return n, nil
}

// peek lists the messages a queue stores (sluice.peek), without receiving
// them. Role: sluice_consumer or sluice_admin (the database refuses a
// producer, as for dead letters: the bodies are a consumer's to read).
func (s *Server) peek(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	limit, err := queryInt(r, "max", 10)
	if err != nil {
		return err
	}
	var after *int64
	if r.URL.Query().Get("after_id") != "" {
		a, err := queryInt64(r, "after_id")
		if err != nil {
			return err
		}
		after = &a
	}
	out := []StoredMessageJSON{}
	err = s.one(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) error {
		rows, err := tx.Query(r.Context(), `SELECT id, body, headers, coalesce(key, ''), priority, sent_at, deliver_at,
			resent_to FROM sluice.peek($1, $2, $3)`, queue, limit, after)
		if err != nil {
			return wrapSQL(err, "peeking at queue %q", queue)
		}
		out, err = pgx.AppendRows(out, rows, func(row pgx.CollectableRow) (StoredMessageJSON, error) {
			var m StoredMessageJSON
			err := row.Scan(&m.ID, (*[]byte)(&m.Body), (*[]byte)(&m.Headers), &m.Key, &m.Priority, &m.SentAt,
				&m.DeliverAt, &m.ResentTo)
			return m, err
		})
		return wrapSQL(err, "peeking at queue %q", queue)
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": out})
	return nil
}

// leases lists the deliveries of a queue in flight (sluice.leases), the
// earliest expiry first. Role: sluice_consumer or sluice_admin.
func (s *Server) leases(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	limit, err := queryInt(r, "max", 100)
	if err != nil {
		return err
	}
	var group *string
	if g := r.URL.Query().Get("group"); g != "" {
		group = &g
	}
	out := []LeaseJSON{}
	err = s.one(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) error {
		rows, err := tx.Query(r.Context(), `SELECT group_name, id, pos, attempt, coalesce(consumer, ''), delivered_at,
			lease_expires_at FROM sluice.leases($1, $2, $3)`, queue, group, limit)
		if err != nil {
			return wrapSQL(err, "listing leases of queue %q", queue)
		}
		out, err = pgx.AppendRows(out, rows, func(row pgx.CollectableRow) (LeaseJSON, error) {
			var l LeaseJSON
			err := row.Scan(&l.Group, &l.ID, &l.Pos, &l.Attempt, &l.Consumer, &l.DeliveredAt, &l.LeaseExpiresAt)
			return l, err
		})
		return wrapSQL(err, "listing leases of queue %q", queue)
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"leases": out})
	return nil
}
