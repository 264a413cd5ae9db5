package sluice

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Status and upkeep: sluice.status and sluice.maintain (in
// sql/functions/api.sql, with receive, ack, nack and extend).

// Status is the depth and progress of one consumer group of a queue.
type Status struct {
	// Queue is the queue's name.
	Queue string
	// Group is the group's name; "" for a queue without groups (its row's
	// counts and positions are then 0).
	Group string
	// Ready counts messages deliverable now (new, expired leases, retries
	// due), keyed messages waiting for an earlier one of their key excepted.
	Ready int64
	// Waiting counts keyed messages that would be ready but wait for an
	// earlier message of their key to be completed.
	Waiting int64
	// Delayed counts messages not deliverable before a later time (delay,
	// retry backoff).
	Delayed int64
	// InFlight counts messages leased and not completed.
	InFlight int64
	// Dead counts dead letters neither redriven nor discarded.
	Dead int64
	// OldestPendingAge is the age of the oldest message the group has not
	// completed (0 when none).
	OldestPendingAge time.Duration
	// Lag counts the messages the group has not completed: ready, waiting,
	// in flight, waiting for a retry, and committed but not numbered yet;
	// not a send delayed to later (in Delayed only).
	Lag int64
	// Cursor, LWM and Head are positions: last dispatched, first not
	// completed, last numbered. A queue of engine 2 numbers each lane
	// apart: they are sums over its lanes (LWM: 1 + the positions before
	// each lane's first one not completed; Head + 1 when all is completed).
	Cursor, LWM, Head int64
	// LiveEpochs is how many storage epochs the queue keeps (1 to its slots).
	LiveEpochs int
	// HoldsReclaim is true when this group keeps an old epoch from being
	// reclaimed.
	HoldsReclaim bool
	// Estimated is true when Ready and Lag include an estimate: the queue
	// has more messages not numbered yet than status counts exactly
	// (sluice.status_exact_limit, 10,000 by default; docs/sql.md, status).
	Estimated bool
	// DeadLettered counts every message the group dead-lettered, redriven
	// ones included, whichever consumer's nack or expiry did it: it only
	// grows while the group exists (a counter, where Dead is a gauge).
	DeadLettered int64
	// HeldByPID is the backend whose open transaction holds the queue's
	// numbering (0: none): a receive that numbered new messages and has
	// not committed, which keeps them from every group until it does
	// (receive in its own short transaction; docs/sql.md, receive).
	HeldByPID int
	// HeldFor is how long that backend's transaction has been open (0
	// when none holds it, or when the caller may not see it:
	// pg_read_all_stats).
	HeldFor time.Duration
}

// Pending counts every message the engine still holds for the group:
// ready, waiting, delayed and in flight (dead letters, which no receive
// delivers again unless redriven, excepted). A group has handled
// everything sent to it when it is 0. Sums that leave out Waiting take
// keyed messages held behind an earlier one of their key for handled.
func (s Status) Pending() int64 { return s.Ready + s.Waiting + s.Delayed + s.InFlight }

// Status returns one row per consumer group of queue, or of every queue
// when queue is "".
func (c *Client) Status(ctx context.Context, queue string) ([]Status, error) {
	return status(ctx, c.pool, queue)
}

// StatusTx is Status in the caller's transaction.
func (c *Client) StatusTx(ctx context.Context, tx pgx.Tx, queue string) ([]Status, error) {
	return status(ctx, tx, queue)
}

func status(ctx context.Context, db dbtx, queue string) ([]Status, error) {
	what := "reading the status of every queue"
	if queue != "" {
		what = fmt.Sprintf("reading the status of queue %q", queue)
	}
	rows, err := db.Query(ctx, sqlStatus, nullText(queue))
	if err != nil {
		return nil, translate(err, "%s", what)
	}
	st, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Status, error) {
		var s Status
		var group *string
		var age, held *time.Duration
		err := row.Scan(&s.Queue, &group, &s.Ready, &s.Delayed, &s.InFlight, &s.Dead, &age, &s.Lag,
			&s.Cursor, &s.LWM, &s.Head, &s.LiveEpochs, &s.HoldsReclaim, &s.Waiting, &s.Estimated,
			&s.DeadLettered, &s.HeldByPID, &held)
		s.Group = textOrEmpty(group)
		if age != nil {
			s.OldestPendingAge = *age
		}
		if held != nil {
			s.HeldFor = *held
		}
		return s, err
	})
	if err != nil {
		return nil, translate(err, "%s", what)
	}
	return st, nil
}

// MaintainResult is what Maintain did to one queue.
type MaintainResult struct {
	// Queue is the queue's name.
	Queue string
	// Rotated is true when a new storage epoch started.
	Rotated bool
	// Reclaimed counts the storage epochs reclaimed.
	Reclaimed int
}

// Maintain runs the scheduled upkeep of every queue (rotation and reclaim).
// It is never needed for correctness; run it every few seconds so that idle
// queues rotate and reclaim too.
func (c *Client) Maintain(ctx context.Context) ([]MaintainResult, error) {
	return maintain(ctx, c.pool)
}

// MaintainTx is Maintain in the caller's transaction.
func (c *Client) MaintainTx(ctx context.Context, tx pgx.Tx) ([]MaintainResult, error) {
	return maintain(ctx, tx)
}

func maintain(ctx context.Context, db dbtx) ([]MaintainResult, error) {
	rows, err := db.Query(ctx, sqlMaintain)
	if err != nil {
		return nil, translate(err, "maintaining queues")
	}
	res, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (MaintainResult, error) {
		var r MaintainResult
		err := row.Scan(&r.Queue, &r.Rotated, &r.Reclaimed)
		return r, err
	})
	if err != nil {
		return nil, translate(err, "maintaining queues")
	}
	return res, nil
}
