package sluice

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Looking without receiving: sluice.peek and sluice.leases (in
// sql/functions/api.sql). Both only read: they lease, lock and change
// nothing.

// PeekedMessage is a message a queue stores, as Peek shows it (a row of
// sluice.stored_message).
type PeekedMessage struct {
	// ID is the message id (as Receive returns it).
	ID int64
	// Body and Headers are the message's; Headers is nil when it was sent
	// without.
	Body, Headers json.RawMessage
	// Key is the ordering key, "" for none.
	Key string
	// Priority is the priority given to Send.
	Priority int
	// SentAt is when the message was first sent.
	SentAt time.Time
	// DeliverAt is when it becomes deliverable if it was sent with a delay,
	// the zero time otherwise (retries have their own backoff).
	DeliverAt time.Time
	// ResentTo names the groups it was sent to again (a retry after a Nack,
	// or a Redrive), nil for none.
	ResentTo []string
}

// PeekOptions select the messages Peek shows.
type PeekOptions struct {
	// Max is the most messages to return, 1 to 1000 (default 10).
	Max int
	// AfterID shows only messages with an id above it (0: from the first).
	// Pass the last ID of a page to get the next one.
	AfterID int64
}

// Peek returns the messages queue stores, by id, without receiving them: it
// leases nothing and changes no group's cursor or attempts. A queue stores
// a message from its send until its storage epoch is reclaimed, so Peek
// shows messages not yet delivered, in flight, and completed ones that wait
// for reclaim, one row per message id. It reads every message the queue
// stores: O(messages stored). opts may be nil.
func (c *Client) Peek(ctx context.Context, queue string, opts *PeekOptions) ([]PeekedMessage, error) {
	return peek(ctx, c.pool, queue, opts)
}

// PeekTx is Peek in the caller's transaction.
func (c *Client) PeekTx(ctx context.Context, tx pgx.Tx, queue string, opts *PeekOptions) ([]PeekedMessage, error) {
	return peek(ctx, tx, queue, opts)
}

func peek(ctx context.Context, db dbtx, queue string, opts *PeekOptions) ([]PeekedMessage, error) {
	if opts == nil {
		opts = &PeekOptions{}
	}
	max := opts.Max
	if max == 0 {
		max = 10
	}
	var after any
	if opts.AfterID != 0 {
		after = opts.AfterID
	}
	rows, err := db.Query(ctx, sqlPeek, queue, max, after)
	if err != nil {
		return nil, translate(err, "peeking at queue %q", queue)
	}
	msgs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PeekedMessage, error) {
		var m PeekedMessage
		var key *string
		var deliverAt *time.Time
		err := row.Scan(&m.ID, (*[]byte)(&m.Body), (*[]byte)(&m.Headers), &key, &m.Priority, &m.SentAt,
			&deliverAt, &m.ResentTo)
		m.Key = textOrEmpty(key)
		if deliverAt != nil {
			m.DeliverAt = *deliverAt
		}
		return m, err
	})
	if err != nil {
		return nil, translate(err, "peeking at queue %q", queue)
	}
	return msgs, nil
}

// Lease is a delivery in flight, as Leases shows it (a row of
// sluice.lease_info). It has no receipt: Leases is for looking, not for
// completing another consumer's messages.
type Lease struct {
	// Group is the group that leased the message.
	Group string
	// ID is the message id (as Receive returns it).
	ID int64
	// Pos is its position in the queue's commit order.
	Pos int64
	// Attempt is the delivery's attempt, as Receive returned it.
	Attempt int
	// Consumer is the consumer named by the Receive, "" for none.
	Consumer string
	// DeliveredAt is when the Receive leased it.
	DeliveredAt time.Time
	// LeaseExpiresAt is when the lease ends unless extended.
	LeaseExpiresAt time.Time
}

// LeasesOptions select the deliveries Leases shows.
type LeasesOptions struct {
	// Group limits the list to one group's leases ("" for all).
	Group string
	// Max is the most rows to return, 1 to 1000 (default 100).
	Max int
}

// Leases returns the deliveries of queue in flight now, the earliest expiry
// first (then by group and position): leased by a Receive, lease not
// expired, not completed, and the newest delivery of its message in its
// group. An extended lease shows its new expiry; a nacked message, or one
// whose lease expired, is not in flight. opts may be nil.
func (c *Client) Leases(ctx context.Context, queue string, opts *LeasesOptions) ([]Lease, error) {
	return leases(ctx, c.pool, queue, opts)
}

// LeasesTx is Leases in the caller's transaction.
func (c *Client) LeasesTx(ctx context.Context, tx pgx.Tx, queue string, opts *LeasesOptions) ([]Lease, error) {
	return leases(ctx, tx, queue, opts)
}

func leases(ctx context.Context, db dbtx, queue string, opts *LeasesOptions) ([]Lease, error) {
	if opts == nil {
		opts = &LeasesOptions{}
	}
	max := opts.Max
	if max == 0 {
		max = 100
	}
	rows, err := db.Query(ctx, sqlLeases, queue, nullText(opts.Group), max)
	if err != nil {
		return nil, translate(err, "listing leases of queue %q", queue)
	}
	ls, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Lease, error) {
		var l Lease
		var consumer *string
		err := row.Scan(&l.Group, &l.ID, &l.Pos, &l.Attempt, &consumer, &l.DeliveredAt, &l.LeaseExpiresAt)
		l.Consumer = textOrEmpty(consumer)
		return l, err
	})
	if err != nil {
		return nil, translate(err, "listing leases of queue %q", queue)
	}
	return ls, nil
}
