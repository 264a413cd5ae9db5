package sluice

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Message is a message leased to a consumer by Receive (or handed to a
// Consume handler).
type Message struct {
	// ID is the message id: unique within the queue, increasing in send
	// order. A redriven dead letter keeps its id.
	ID int64
	// Queue and Group name where the message was received from.
	Queue, Group string
	// Body is the message as sent (JSON, normalized by PostgreSQL's jsonb).
	Body json.RawMessage
	// Headers is the JSON object of metadata sent with the message, or nil.
	Headers json.RawMessage
	// Key is the ordering key, "" for none.
	Key string
	// Priority is the priority the message was sent with.
	Priority int
	// Attempt counts the deliveries of the message to this group, from 1.
	Attempt int
	// SentAt is when the message was sent (the server's clock).
	SentAt time.Time
	// Receipt identifies this delivery: Ack, Nack and Extend take it. It is
	// current while the lease lasts and the message is not completed.
	Receipt string
	// LeaseExpiresAt is when the lease ends (the server's clock) unless
	// extended; then the message is delivered again.
	LeaseExpiresAt time.Time
	// Pos is the message's position in the group's delivery order.
	Pos int64
}

// ReceiveOptions tune Receive. The zero value receives one message with the
// queue's default lease.
type ReceiveOptions struct {
	// Max is the most messages to receive, 1 to 10000 (default 1).
	Max int
	// Lease is how long the messages are held (default: the queue's lease
	// option).
	Lease time.Duration
	// Consumer is optional free text naming the caller (at most 200
	// characters).
	Consumer string
	// Ack holds receipts to complete first, in the same call (a consumer
	// loop's previous batch): one round trip and one transaction for both.
	// They commit with the receive, asynchronously: after a crash of the
	// server they may be lost, and their messages delivered again. Stale
	// receipts are ignored, as by Ack.
	Ack []string
}

// Receive leases up to opts.Max ready messages of queue to the caller for
// consumer group group and returns them in delivery order; none (and no
// error) when nothing is ready. It does not wait: see Consume for a loop
// that does. Each message must then be completed with Ack, given back with
// Nack, or its lease renewed with Extend; when the lease expires it is
// delivered again. opts may be nil.
//
// Receive runs in its own short transaction, as it should: the lanes it
// takes are held until that transaction ends.
func (c *Client) Receive(ctx context.Context, queue, group string, opts *ReceiveOptions) ([]Message, error) {
	return receive(ctx, c.pool, queue, group, opts)
}

// ReceiveTx is Receive in the caller's transaction, which must be READ
// COMMITTED (else ErrInvalidIsolation). The lanes it takes, and any
// messages it numbers, are held from other consumers until tx ends, so keep
// it short; the usual pattern is Receive, then AckTx in the transaction that
// does the work.
func (c *Client) ReceiveTx(ctx context.Context, tx pgx.Tx, queue, group string, opts *ReceiveOptions) ([]Message, error) {
	return receive(ctx, tx, queue, group, opts)
}

func receive(ctx context.Context, db dbtx, queue, group string, opts *ReceiveOptions) ([]Message, error) {
	if opts == nil {
		opts = &ReceiveOptions{}
	}
	max := opts.Max
	if max == 0 {
		max = 1
	}
	if opts.Lease < 0 {
		return nil, translate(errNegative("lease", opts.Lease), "receiving from queue %q, group %q", queue, group)
	}
	var ack []string
	if len(opts.Ack) > 0 {
		ack = opts.Ack
	}
	rows, err := db.Query(ctx, sqlReceive, queue, group, max, nullInterval(opts.Lease), nullText(opts.Consumer), ack)
	if err != nil {
		return nil, translate(err, "receiving from queue %q, group %q", queue, group)
	}
	msgs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Message, error) {
		m := Message{Queue: queue, Group: group}
		var key *string
		err := row.Scan(&m.ID, (*[]byte)(&m.Body), (*[]byte)(&m.Headers), &key, &m.Priority, &m.Attempt,
			&m.SentAt, &m.Receipt, &m.LeaseExpiresAt, &m.Pos)
		m.Key = textOrEmpty(key)
		return m, err
	})
	if err != nil {
		return nil, translate(err, "receiving from queue %q, group %q", queue, group)
	}
	return msgs, nil
}

// Ack completes messages of group by their receipts and returns how many it
// completed now. A stale receipt (lease expired, message delivered again or
// already completed) changes nothing and is not counted.
//
// Ack is its own transaction, and it is durable: it returns once its commit
// is on disk, as in every client and the HTTP API. AckAsyncCommit does not
// wait for the disk. Use AckTx to complete messages together with other
// writes.
func (c *Client) Ack(ctx context.Context, queue, group string, receipts ...string) (int, error) {
	return ack(ctx, c.pool, queue, group, receipts, true)
}

// AckAsyncCommit is Ack committed asynchronously (sluice.ack's durable =>
// false): it does not wait for the disk, so it costs no flush, but a server
// crash right after it may lose the ack, and then the messages are delivered
// again, as at-least-once delivery allows; nothing is ever lost. An explicit
// opt-in, for consumers that tolerate redelivery after a crash.
func (c *Client) AckAsyncCommit(ctx context.Context, queue, group string, receipts ...string) (int, error) {
	return ack(ctx, c.pool, queue, group, receipts, false)
}

// AckTx is Ack in the caller's transaction: the message is completed only
// if tx commits, together with whatever else tx wrote (exactly-once
// effects), with the transaction's own synchronous_commit.
func (c *Client) AckTx(ctx context.Context, tx pgx.Tx, queue, group string, receipts ...string) (int, error) {
	return ack(ctx, tx, queue, group, receipts, true)
}

func ack(ctx context.Context, db dbtx, queue, group string, receipts []string, durable bool) (int, error) {
	if receipts == nil {
		receipts = []string{}
	}
	var n int
	if err := db.QueryRow(ctx, sqlAck, queue, group, receipts, durable).Scan(&n); err != nil {
		return 0, translate(err, "acknowledging messages of queue %q, group %q", queue, group)
	}
	return n, nil
}

// NackOptions say when a message given back by Nack is retried. The zero
// value retries after the queue's exponential backoff.
type NackOptions struct {
	// Error describes the failure; it is kept with the message if it
	// becomes a dead letter (at most 10000 characters).
	Error string
	// Delay is how long to wait before the retry; 0 means the queue's
	// backoff: backoff_base * 2^(attempt-1), capped at backoff_max.
	Delay time.Duration
	// Now retries at once (ignoring Delay and the backoff).
	Now bool
}

// Nack gives a message back after a failure: it is delivered to the group
// again after a delay, or becomes a dead letter once it has had the queue's
// max_attempts deliveries. It reports whether the receipt was current
// (false: stale, nothing changed). opts may be nil.
func (c *Client) Nack(ctx context.Context, queue, group, receipt string, opts *NackOptions) (bool, error) {
	return nack(ctx, c.pool, queue, group, receipt, opts)
}

// NackTx is Nack in the caller's transaction.
func (c *Client) NackTx(ctx context.Context, tx pgx.Tx, queue, group, receipt string, opts *NackOptions) (bool, error) {
	return nack(ctx, tx, queue, group, receipt, opts)
}

func nack(ctx context.Context, db dbtx, queue, group, receipt string, opts *NackOptions) (bool, error) {
	if opts == nil {
		opts = &NackOptions{}
	}
	var delay any
	switch {
	case opts.Now:
		delay = time.Duration(0)
	case opts.Delay < 0:
		return false, translate(errNegative("delay", opts.Delay), "giving back a message of queue %q, group %q", queue, group)
	case opts.Delay > 0:
		delay = opts.Delay
	}
	var ok bool
	if err := db.QueryRow(ctx, sqlNack, queue, group, receipt, delay, nullText(opts.Error)).Scan(&ok); err != nil {
		return false, translate(err, "giving back a message of queue %q, group %q", queue, group)
	}
	return ok, nil
}

// Extend renews the leases of receipts (a heartbeat): each current lease
// then lasts at least until now + lease; a lease is never shortened (use
// Nack to give a message back sooner). It returns how many leases were
// renewed; stale receipts are not counted.
func (c *Client) Extend(ctx context.Context, queue, group string, lease time.Duration, receipts ...string) (int, error) {
	return extend(ctx, c.pool, queue, group, lease, receipts)
}

// ExtendTx is Extend in the caller's transaction.
func (c *Client) ExtendTx(ctx context.Context, tx pgx.Tx, queue, group string, lease time.Duration, receipts ...string) (int, error) {
	return extend(ctx, tx, queue, group, lease, receipts)
}

func extend(ctx context.Context, db dbtx, queue, group string, lease time.Duration, receipts []string) (int, error) {
	if receipts == nil {
		receipts = []string{}
	}
	var n int
	if err := db.QueryRow(ctx, sqlExtend, queue, group, receipts, lease).Scan(&n); err != nil {
		return 0, translate(err, "extending leases of queue %q, group %q", queue, group)
	}
	return n, nil
}
