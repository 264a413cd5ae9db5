package sluice

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Dead letters: sql/functions/dead_letter.sql.

// DeadLetter is a message that used up its attempts in one group.
type DeadLetter struct {
	// ID is the message's id.
	ID int64
	// Group is the group it died in.
	Group string
	// Body, Headers and Key are the message's.
	Body, Headers json.RawMessage
	// Key is the message's ordering key, "" for none.
	Key string
	// Attempts is how many deliveries it had.
	Attempts int
	// Error is the error of its last Nack, "" if its last lease expired.
	Error string
	// DiedAt is when it became a dead letter; SentAt when it was sent.
	DiedAt, SentAt time.Time
	// DeadLetterID identifies the dead letter itself (a message can die
	// again after a redrive).
	DeadLetterID int64
}

// DeadLetterOptions select dead letters.
type DeadLetterOptions struct {
	// Group limits the list to one group's dead letters ("" for all).
	Group string
	// Max is the most rows to return, 1 to 10000 (default 100).
	Max int
}

// DeadLetters returns the dead letters of queue that were neither redriven
// nor discarded, oldest first. opts may be nil.
func (c *Client) DeadLetters(ctx context.Context, queue string, opts *DeadLetterOptions) ([]DeadLetter, error) {
	return deadLetters(ctx, c.pool, queue, opts)
}

// DeadLettersTx is DeadLetters in the caller's transaction.
func (c *Client) DeadLettersTx(ctx context.Context, tx pgx.Tx, queue string, opts *DeadLetterOptions) ([]DeadLetter, error) {
	return deadLetters(ctx, tx, queue, opts)
}

func deadLetters(ctx context.Context, db dbtx, queue string, opts *DeadLetterOptions) ([]DeadLetter, error) {
	if opts == nil {
		opts = &DeadLetterOptions{}
	}
	max := opts.Max
	if max == 0 {
		max = 100
	}
	rows, err := db.Query(ctx, sqlDeadLetters, queue, nullText(opts.Group), max)
	if err != nil {
		return nil, translate(err, "listing dead letters of queue %q", queue)
	}
	dls, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadLetter, error) {
		var d DeadLetter
		var key, errText *string
		err := row.Scan(&d.ID, &d.Group, (*[]byte)(&d.Body), (*[]byte)(&d.Headers), &key, &d.Attempts, &errText,
			&d.DiedAt, &d.SentAt, &d.DeadLetterID)
		d.Key, d.Error = textOrEmpty(key), textOrEmpty(errText)
		return d, err
	})
	if err != nil {
		return nil, translate(err, "listing dead letters of queue %q", queue)
	}
	return dls, nil
}

// Redrive makes dead letters of queue deliverable again, each to the group
// it died in, with its attempts reset, and returns how many it redrove.
// group "" means every group's; no ids means all of them.
func (c *Client) Redrive(ctx context.Context, queue, group string, ids ...int64) (int64, error) {
	return redrive(ctx, c.pool, queue, group, ids)
}

// RedriveTx is Redrive in the caller's transaction.
func (c *Client) RedriveTx(ctx context.Context, tx pgx.Tx, queue, group string, ids ...int64) (int64, error) {
	return redrive(ctx, tx, queue, group, ids)
}

func redrive(ctx context.Context, db dbtx, queue, group string, ids []int64) (int64, error) {
	var idArg any
	if len(ids) > 0 {
		idArg = ids
	}
	var n int64
	if err := db.QueryRow(ctx, sqlRedrive, queue, nullText(group), idArg).Scan(&n); err != nil {
		return 0, translate(err, "redriving dead letters of queue %q", queue)
	}
	return n, nil
}

// DiscardDeadLetters drops dead letters of queue for good and returns how
// many it discarded: those of the given message ids (of group, or of every
// group when group is ""), or, when ids is nil, every one of group's. A
// discarded dead letter is no longer listed, counted in Status's Dead or
// redriven; Status's DeadLettered still counts it. As in SQL, it fails with
// ErrInvalidArgument (SL006) without a group and ids, or with ids empty but
// not nil: it never discards a whole group's or queue's by omission.
func (c *Client) DiscardDeadLetters(ctx context.Context, queue, group string, ids []int64) (int64, error) {
	return discardDeadLetters(ctx, c.pool, queue, group, ids)
}

// DiscardDeadLettersTx is DiscardDeadLetters in the caller's transaction.
func (c *Client) DiscardDeadLettersTx(ctx context.Context, tx pgx.Tx, queue, group string, ids []int64) (int64, error) {
	return discardDeadLetters(ctx, tx, queue, group, ids)
}

func discardDeadLetters(ctx context.Context, db dbtx, queue, group string, ids []int64) (int64, error) {
	var idArg any
	if ids != nil {
		idArg = ids // (an empty one too: SL006)
	}
	var n int64
	if err := db.QueryRow(ctx, sqlDiscardDeadLetters, queue, nullText(group), idArg).Scan(&n); err != nil {
		return 0, translate(err, "discarding dead letters of queue %q", queue)
	}
	return n, nil
}
