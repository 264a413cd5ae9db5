package server

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice"
)

// SubjectHeader is the message header in which the server records who sent
// a message (the JWT's sub, or the static token's name).
const SubjectHeader = "sluice_sub"

// sendRequest is one message to send.
type sendRequest struct {
	Body     json.RawMessage `json:"body"`
	Headers  json.RawMessage `json:"headers"`
	Key      string          `json:"key"`
	Delay    string          `json:"delay"`
	Priority int             `json:"priority"`
	DedupKey string          `json:"dedup_key"`
}

// headers returns the message's headers with the sender recorded, or a
// problem naming the member field() names when they are not an object
// (a func: a batch would build each message's name for nothing).
func headers(p *Principal, h json.RawMessage, field func() string) (json.RawMessage, error) {
	isNull := len(bytes.TrimSpace(h)) == 0 || string(bytes.TrimSpace(h)) == "null"
	if p.Role == "" && isNull { // no auth: nothing to record
		return nil, nil
	}
	if isNull {
		// Only the sender: the same for every message of the request.
		if p.subHeaders == nil {
			p.subHeaders, _ = json.Marshal(map[string]string{SubjectHeader: p.Subject})
		}
		return p.subHeaders, nil
	}
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(h, &m); err != nil || m == nil {
		f := field()
		return nil, fieldProblem(f, "%s must be a JSON object", f)
	}
	if p.Role != "" {
		sub, _ := json.Marshal(p.Subject)
		m[SubjectHeader] = sub
	}
	b, err := json.Marshal(m)
	return b, err
}

// SendResponse is the answer to a send.
type SendResponse struct {
	ID int64 `json:"id"`
}

func (s *Server) send(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	var req sendRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	p := principalOf(r.Context())
	opts, err := sendOptions(p, &req, "")
	if err != nil {
		return err
	}
	var id int64
	err = s.one(r.Context(), p, func(tx pgx.Tx) (err error) {
		id, err = s.client.SendTx(r.Context(), tx, queue, req.Body, opts)
		return err
	})
	if err != nil {
		return err
	}
	s.metrics.sent.WithLabelValues(queue).Inc()
	writeJSON(w, http.StatusCreated, SendResponse{ID: id})
	return nil
}

// sendOptions checks one message of a request (prefix names it in
// problems: "", "messages[3].", "send[0].").
func sendOptions(p *Principal, req *sendRequest, prefix string) (*sluice.SendOptions, error) {
	if len(req.Body) == 0 {
		return nil, fieldProblem(prefix+"body", "%sbody is required (any JSON value)", prefix)
	}
	d, err := duration(prefix+"delay", req.Delay)
	if err != nil {
		return nil, err
	}
	if err := checkPriority(prefix+"priority", req.Priority); err != nil {
		return nil, err
	}
	if err := checkNUL(prefix, req.Body, req.Headers, req.Key, req.DedupKey); err != nil {
		return nil, err
	}
	h, err := headers(p, req.Headers, func() string { return prefix + "headers" })
	if err != nil {
		return nil, err
	}
	return &sluice.SendOptions{Headers: h, Key: req.Key, Delay: d, Priority: req.Priority, DedupKey: req.DedupKey}, nil
}

// checkPriority refuses a priority the engine cannot store (an int: it
// was stored wrapped around, 3000000000 as -1294967296).
func checkPriority(field string, v int) error {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return fieldProblem(field, "%s must be between %d and %d, got %d", field, math.MinInt32, math.MaxInt32, v)
	}
	return nil
}

// checkNUL refuses a NUL character, which PostgreSQL cannot store in text
// or jsonb (a 500 with the database's message before): "\u0000" in body or
// headers, a NUL in key or dedup_key. prefix names the message in the
// problem ("", "messages[3].").
func checkNUL(prefix string, body, headers json.RawMessage, key, dedupKey string) error {
	m := nulMember(body, headers, key, dedupKey)
	switch m {
	case "":
		return nil
	case "body", "headers":
		return fieldProblem(prefix+m, "%s%s holds \\u0000, which PostgreSQL cannot store", prefix, m)
	}
	return fieldProblem(prefix+m, "%s%s holds a NUL character, which PostgreSQL cannot store", prefix, m)
}

// nulMember is the member of a message that holds a NUL, or "".
func nulMember(body, headers json.RawMessage, key, dedupKey string) string {
	switch {
	case jsonHasNUL(body):
		return "body"
	case jsonHasNUL(headers):
		return "headers"
	case strings.IndexByte(key, 0) >= 0:
		return "key"
	case strings.IndexByte(dedupKey, 0) >= 0:
		return "dedup_key"
	}
	return ""
}

// jsonHasNUL reports whether the JSON text v has the escape \u0000 (a
// backslash that is itself escaped, as in "\\u0000", does not count).
func jsonHasNUL(v []byte) bool {
	if !bytes.Contains(v, []byte(`\u0000`)) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' {
			continue
		}
		if bytes.HasPrefix(v[i+1:], []byte("u0000")) {
			return true
		}
		i++ // the escaped character
	}
	return false
}

type batchMessage struct {
	Body     json.RawMessage `json:"body"`
	Headers  json.RawMessage `json:"headers"`
	Key      string          `json:"key"`
	Priority int             `json:"priority"`
	DedupKey string          `json:"dedup_key"`
}

type sendBatchRequest struct {
	Messages []batchMessage `json:"messages"`
	Delay    string         `json:"delay"`
}

// SendBatchResponse is the answer to a batch send.
type SendBatchResponse struct {
	IDs []int64 `json:"ids"`
}

func (s *Server) sendBatch(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	b := s.getBatch()
	// (deferred: it goes back after the database call and the response,
	// when nothing refers to b's memory: pgx has encoded the messages when
	// SendBatchTx returns, and a problem copies what it quotes)
	defer s.putBatch(b)
	if err := b.decode(r); err != nil {
		return err
	}
	req := &b.req
	if len(req.Messages) == 0 {
		return fieldProblem("messages", "messages is required: an array of at least one message")
	}
	if err := s.checkBatch("messages", len(req.Messages)); err != nil {
		return err
	}
	delay, err := duration("delay", req.Delay)
	if err != nil {
		return err
	}
	p := principalOf(r.Context())
	msgs, err := b.messages(p)
	if err != nil {
		return err
	}
	var ids []int64
	err = s.one(r.Context(), p, func(tx pgx.Tx) (err error) {
		ids, err = s.client.SendBatchTx(r.Context(), tx, queue, msgs, &sluice.SendBatchOptions{Delay: delay})
		return err
	})
	if err != nil {
		return err
	}
	s.metrics.sent.WithLabelValues(queue).Add(float64(len(ids)))
	writeJSON(w, http.StatusCreated, SendBatchResponse{IDs: ids})
	return nil
}

// MessageJSON is a received message.
type MessageJSON struct {
	ID             int64           `json:"id"`
	Body           json.RawMessage `json:"body"`
	Headers        json.RawMessage `json:"headers,omitempty"`
	Key            string          `json:"key,omitempty"`
	Priority       int             `json:"priority"`
	Attempt        int             `json:"attempt"`
	SentAt         time.Time       `json:"sent_at"`
	Receipt        string          `json:"receipt"`
	LeaseExpiresAt time.Time       `json:"lease_expires_at"`
}

type receiveRequest struct {
	Max      *int     `json:"max"`
	Lease    string   `json:"lease"`
	Wait     string   `json:"wait"`
	Consumer string   `json:"consumer"`
	Ack      []string `json:"ack"`
}

// ReceiveResponse is the answer to a receive: the messages, none when the
// wait ended first.
type ReceiveResponse struct {
	Messages []MessageJSON `json:"messages"`
}

func (s *Server) receive(w http.ResponseWriter, r *http.Request) error {
	queue, group := r.PathValue("queue"), r.PathValue("group")
	req := receiveRequest{}
	if r.ContentLength != 0 {
		if err := decode(r, &req); err != nil {
			return err
		}
	}
	lease, err := duration("lease", req.Lease)
	if err != nil {
		return err
	}
	wait, err := duration("wait", req.Wait)
	if err != nil {
		return err
	}
	if wait > s.cfg.MaxWait {
		return fieldProblem("wait", "wait is at most %s, got %s", s.cfg.MaxWait, req.Wait)
	}
	max := 1
	if req.Max != nil {
		max = *req.Max
	}
	if max < 1 {
		return fieldProblem("max", "max must be at least 1, got %d", max)
	}
	if err := s.checkBatch("max", max); err != nil {
		return err
	}
	if err := s.checkBatch("ack", len(req.Ack)); err != nil {
		return err
	}
	opts := &sluice.ReceiveOptions{Max: max, Lease: lease, Consumer: req.Consumer, Ack: req.Ack}
	msgs, err := s.longPoll(r, queue, group, opts, wait)
	if err != nil {
		return err
	}
	out := ReceiveResponse{Messages: make([]MessageJSON, len(msgs))}
	for i, m := range msgs {
		out.Messages[i] = MessageJSON{ID: m.ID, Body: m.Body, Headers: m.Headers, Key: m.Key, Priority: m.Priority,
			Attempt: m.Attempt, SentAt: m.SentAt, Receipt: m.Receipt, LeaseExpiresAt: m.LeaseExpiresAt}
	}
	s.metrics.received.WithLabelValues(queue, group).Add(float64(len(msgs)))
	writeJSON(w, http.StatusOK, out)
	return nil
}

// longPoll receives, and while nothing is ready waits up to wait for a
// wake-up from the notifier (a send to the queue committed, or its sweep
// found messages ready as delays and retries come due), and tries again; it
// returns nothing at the end of the wait or of the server. The acks of opts
// go with the first try only.
func (s *Server) longPoll(r *http.Request, queue, group string, opts *sluice.ReceiveOptions, wait time.Duration) ([]sluice.Message, error) {
	ctx := r.Context()
	p := principalOf(ctx)
	var w *waiter
	var wake <-chan struct{}
	if wait > 0 {
		w = s.notify.subscribe(queue, group)
		defer s.notify.unsubscribe(w)
		wake = w.C
	}
	deadline := time.Now().Add(wait)
	// With acks to make, the first receive carries them; without, it may
	// wait behind the idle long polls of its group.
	skip := w != nil && len(opts.Ack) == 0 && s.notify.joinBehind(w)
	for {
		if skip {
			skip = false
			if done, err := s.waitWake(ctx, wake, deadline); done {
				return nil, err
			}
		}
		var msgs []sluice.Message
		if w != nil {
			s.notify.begin(w)
		}
		err := s.one(ctx, p, func(tx pgx.Tx) (err error) {
			msgs, err = s.client.ReceiveTx(ctx, tx, queue, group, opts)
			return err
		})
		if w != nil {
			res := tryEmpty
			switch {
			case err != nil:
				res = tryFailed
			case len(msgs) == max(opts.Max, 1):
				res = tryFull
			case len(msgs) > 0:
				res = tryPartial
			}
			s.notify.tried(w, res)
		}
		if err != nil || len(msgs) > 0 {
			return msgs, err
		}
		opts.Ack = nil
		if done, err := s.waitWake(ctx, wake, deadline); done {
			return nil, err
		}
	}
}

// waitWake waits for a wake-up until deadline; done says that the long
// poll ends empty instead (at its deadline, at the server's shutdown, or
// with err when the client went).
func (s *Server) waitWake(ctx context.Context, wake <-chan struct{}, deadline time.Time) (done bool, err error) {
	left := time.Until(deadline)
	if left <= 0 {
		return true, nil
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-wake:
		return false, nil
	case <-t.C:
		return true, nil
	case <-s.draining:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// ackRequest is the body of an ack: the receipts alone (an extend's lease
// is an unknown member here).
type ackRequest struct {
	Receipts []string `json:"receipts"`
}

// extendRequest is the body of an extend: receipts and the new lease.
type extendRequest struct {
	Receipts []string `json:"receipts"`
	Lease    string   `json:"lease,omitempty"`
}

func (s *Server) ack(w http.ResponseWriter, r *http.Request) error {
	queue, group := r.PathValue("queue"), r.PathValue("group")
	var req ackRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Receipts == nil {
		return fieldProblem("receipts", "receipts is required: an array of receipts from receive")
	}
	if err := s.checkBatch("receipts", len(req.Receipts)); err != nil {
		return err
	}
	var n int
	err := s.one(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) (err error) {
		n, err = s.client.AckTx(r.Context(), tx, queue, group, req.Receipts...)
		return err
	})
	if err != nil {
		return err
	}
	s.metrics.acked.WithLabelValues(queue, group).Add(float64(n))
	writeJSON(w, http.StatusOK, map[string]int{"acked": n})
	return nil
}

type nackRequest struct {
	Receipt string  `json:"receipt"`
	Delay   *string `json:"delay"`
	Error   string  `json:"error"`
}

func (s *Server) nack(w http.ResponseWriter, r *http.Request) error {
	queue, group := r.PathValue("queue"), r.PathValue("group")
	var req nackRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Receipt == "" {
		return fieldProblem("receipt", "receipt is required")
	}
	opts := &sluice.NackOptions{Error: req.Error}
	if req.Delay != nil {
		d, err := duration("delay", *req.Delay)
		if err != nil {
			return err
		}
		opts.Delay, opts.Now = d, d == 0
	}
	var ok bool
	err := s.one(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) (err error) {
		ok, err = s.client.NackTx(r.Context(), tx, queue, group, req.Receipt, opts)
		return err
	})
	if err != nil {
		return err
	}
	if ok {
		s.metrics.nacked.WithLabelValues(queue, group).Inc()
	}
	writeJSON(w, http.StatusOK, map[string]bool{"nacked": ok})
	return nil
}

func (s *Server) extend(w http.ResponseWriter, r *http.Request) error {
	queue, group := r.PathValue("queue"), r.PathValue("group")
	var req extendRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Receipts == nil {
		return fieldProblem("receipts", "receipts is required: an array of receipts from receive")
	}
	if err := s.checkBatch("receipts", len(req.Receipts)); err != nil {
		return err
	}
	if req.Lease == "" {
		return fieldProblem("lease", "lease is required, such as \"30s\"")
	}
	lease, err := duration("lease", req.Lease)
	if err != nil {
		return err
	}
	var n int
	err = s.one(r.Context(), principalOf(r.Context()), func(tx pgx.Tx) (err error) {
		n, err = s.client.ExtendTx(r.Context(), tx, queue, group, lease, req.Receipts...)
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int{"extended": n})
	return nil
}

type txAck struct {
	Queue    string   `json:"queue"`
	Group    string   `json:"group"`
	Receipts []string `json:"receipts"`
}

type txSend struct {
	Queue string `json:"queue"`
	sendRequest
}

type transactionRequest struct {
	Ack  []txAck  `json:"ack"`
	Send []txSend `json:"send"`
}

// TransactionResponse is the answer to /v1/transaction: per ack entry the
// messages completed, per send entry the message id.
type TransactionResponse struct {
	Acked []int   `json:"acked"`
	IDs   []int64 `json:"ids"`
}

// transaction acks and sends in one database transaction: all commit, or
// nothing does.
func (s *Server) transaction(w http.ResponseWriter, r *http.Request) error {
	var req transactionRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if len(req.Ack)+len(req.Send) == 0 {
		return fieldProblem("", "the transaction is empty: give ack, send or both")
	}
	if err := s.checkBatch("send", len(req.Send)); err != nil {
		return err
	}
	if err := s.checkBatch("ack", len(req.Ack)); err != nil {
		return err
	}
	p := principalOf(r.Context())
	sends := make([]*sluice.SendOptions, len(req.Send))
	for i := range req.Send {
		prefix := "send[" + itoa(i) + "]."
		if req.Send[i].Queue == "" {
			return fieldProblem(prefix+"queue", "%squeue is required", prefix)
		}
		if !p.Allows(req.Send[i].Queue) {
			return forbidQueue(req.Send[i].Queue)
		}
		o, err := sendOptions(p, &req.Send[i].sendRequest, prefix)
		if err != nil {
			return err
		}
		sends[i] = o
	}
	for i, a := range req.Ack {
		prefix := "ack[" + itoa(i) + "]."
		switch {
		case a.Queue == "":
			return fieldProblem(prefix+"queue", "%squeue is required", prefix)
		case a.Group == "":
			return fieldProblem(prefix+"group", "%sgroup is required", prefix)
		case a.Receipts == nil:
			return fieldProblem(prefix+"receipts", "%sreceipts is required", prefix)
		case !p.Allows(a.Queue):
			return forbidQueue(a.Queue)
		}
	}
	queues := map[string]bool{}
	for _, a := range req.Ack {
		queues[a.Queue] = true
	}
	for _, m := range req.Send {
		queues[m.Queue] = true
	}
	if len(queues) > s.cfg.MaxTxQueues {
		return problemf(http.StatusUnprocessableEntity, "too_many_queues",
			"the transaction names %d queues, more than the server's limit of %d (--max-tx-queues)", len(queues), s.cfg.MaxTxQueues)
	}
	out := TransactionResponse{Acked: make([]int, len(req.Ack)), IDs: make([]int64, len(req.Send))}
	err := s.tx(r.Context(), p, func(tx pgx.Tx) error {
		for i, a := range req.Ack {
			n, err := s.client.AckTx(r.Context(), tx, a.Queue, a.Group, a.Receipts...)
			if err != nil {
				return err
			}
			out.Acked[i] = n
		}
		for i, m := range req.Send {
			id, err := s.client.SendTx(r.Context(), tx, m.Queue, m.Body, sends[i])
			if err != nil {
				return err
			}
			out.IDs[i] = id
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, a := range req.Ack {
		s.metrics.acked.WithLabelValues(a.Queue, a.Group).Add(float64(out.Acked[i]))
	}
	for _, m := range req.Send {
		s.metrics.sent.WithLabelValues(m.Queue).Inc()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
