package sluice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Queue administration: sql/functions/queue.sql.

// QueueOptions configure a new queue. Zero fields keep the engine's
// defaults (shown in parentheses).
type QueueOptions struct {
	// MaxAttempts is how many deliveries a message gets before it becomes a
	// dead letter (5).
	MaxAttempts int
	// Lease is the default lease of Receive (30s).
	Lease time.Duration
	// BackoffBase is the first retry delay after a Nack, doubled per
	// attempt (1s).
	BackoffBase time.Duration
	// BackoffMax caps the retry delay (1h).
	BackoffMax time.Duration
	// Retention is how long completed messages stay readable (1h).
	Retention time.Duration
	// RotateInterval is how often a new storage epoch starts (1m).
	RotateInterval time.Duration
	// MaxPayload is the largest body + headers in bytes (1 MiB).
	MaxPayload int
	// DisableNotify turns off the NOTIFY on channel "sluice" that wakes
	// waiting consumers when a send commits.
	DisableNotify bool
	// NoDefaultGroup skips creating the consumer group "default".
	NoDefaultGroup bool
	// MaxDelay is the longest delay Send and SendBatch accept, and the
	// longest explicit Nack delay (365 days, which is also its upper bound).
	MaxDelay time.Duration
	// Lanes is the number of dispatch lanes (8), fixed at creation.
	// Consumers of a group take lanes side by side; order is kept per key
	// and per lane. 1 keeps strict commit order for the whole queue.
	Lanes int
	// Slots is the number of storage slots, 2 to 4 (2), fixed at creation:
	// how many epochs the queue keeps apart for reclaim. Fewer cost less on
	// every call; more keep less retained traffic on disk when Retention is
	// long (up to about Retention x Slots / (Slots - 1)).
	Slots int
	// Engine is the storage engine, 1 (the default) or 2, fixed at
	// creation. Engine 2 (docs/design.md, "Engine v2") receives and acks in
	// a few statements; in this release it has no priorities
	// (ErrNotSupported).
	Engine int
}

// options renders o as the jsonb options of create_queue.
func (o *QueueOptions) options() (json.RawMessage, error) {
	m := map[string]any{}
	if o == nil {
		return json.RawMessage(`{}`), nil
	}
	if o.MaxAttempts != 0 {
		m["max_attempts"] = o.MaxAttempts
	}
	if o.MaxPayload != 0 {
		m["max_payload"] = o.MaxPayload
	}
	if o.Lanes != 0 {
		m["lanes"] = o.Lanes
	}
	if o.Slots != 0 {
		m["slots"] = o.Slots
	}
	if o.Engine != 0 {
		m["engine"] = o.Engine
	}
	for name, d := range map[string]time.Duration{
		"lease": o.Lease, "backoff_base": o.BackoffBase, "backoff_max": o.BackoffMax,
		"retention": o.Retention, "rotate_interval": o.RotateInterval, "max_delay": o.MaxDelay,
	} {
		if d != 0 {
			m[name] = IntervalString(d)
		}
	}
	if o.DisableNotify {
		m["notify"] = false
	}
	if o.NoDefaultGroup {
		m["default_group"] = false
	}
	return json.Marshal(m)
}

// IntervalString renders d as a PostgreSQL interval such as "30 seconds" or
// "1500 milliseconds", exactly to the microsecond.
func IntervalString(d time.Duration) string {
	switch {
	case d%time.Second == 0:
		return fmt.Sprintf("%d seconds", d/time.Second)
	case d%time.Millisecond == 0:
		return fmt.Sprintf("%d milliseconds", d/time.Millisecond)
	default:
		return fmt.Sprintf("%d microseconds", d/time.Microsecond)
	}
}

// CreateQueue creates a queue; unless opts.NoDefaultGroup, with the consumer
// group "default" reading it from its start. It fails with ErrQueueExists
// when the name is taken, ErrInvalidName or ErrInvalidOption. opts may be
// nil.
func (c *Client) CreateQueue(ctx context.Context, queue string, opts *QueueOptions) error {
	return createQueue(ctx, c.pool, queue, opts)
}

// CreateQueueTx is CreateQueue in the caller's transaction.
func (c *Client) CreateQueueTx(ctx context.Context, tx pgx.Tx, queue string, opts *QueueOptions) error {
	return createQueue(ctx, tx, queue, opts)
}

func createQueue(ctx context.Context, db dbtx, queue string, opts *QueueOptions) error {
	o, err := opts.options()
	if err != nil {
		return fmt.Errorf("creating queue %q: %w", queue, err)
	}
	if _, err := db.Exec(ctx, sqlCreateQueue, queue, o); err != nil {
		return translate(err, "creating queue %q", queue)
	}
	return nil
}

// AlterQueue changes options of an existing queue and returns all its
// options afterwards (a JSON object, defaults filled in). changes maps
// option names of create_queue (max_attempts, lease, backoff_base,
// backoff_max, retention, rotate_interval, max_payload, notify) to their new
// values, as JSON: numbers, booleans, and intervals as strings such as
// "30 seconds". Options not named keep their values. It fails with
// ErrQueueNotFound or ErrInvalidOption, changing nothing.
func (c *Client) AlterQueue(ctx context.Context, queue string, changes map[string]any) (json.RawMessage, error) {
	return alterQueue(ctx, c.pool, queue, changes)
}

// AlterQueueTx is AlterQueue in the caller's transaction.
func (c *Client) AlterQueueTx(ctx context.Context, tx pgx.Tx, queue string, changes map[string]any) (json.RawMessage, error) {
	return alterQueue(ctx, tx, queue, changes)
}

func alterQueue(ctx context.Context, db dbtx, queue string, changes map[string]any) (json.RawMessage, error) {
	if changes == nil {
		changes = map[string]any{}
	}
	in, err := json.Marshal(changes)
	if err != nil {
		return nil, fmt.Errorf("altering queue %q: %w", queue, err)
	}
	var out json.RawMessage
	if err := db.QueryRow(ctx, sqlAlterQueue, queue, in).Scan(&out); err != nil {
		return nil, translate(err, "altering queue %q", queue)
	}
	return out, nil
}

// DropQueue drops a queue with its groups, messages and dead letters. It
// reports whether the queue existed. It waits for the transactions that are
// using the queue; calls on the queue made meanwhile wait for it, then fail
// with ErrQueueNotFound. Other queues are not held up.
func (c *Client) DropQueue(ctx context.Context, queue string) (bool, error) {
	return dropQueue(ctx, c.pool, queue)
}

// DropQueueTx is DropQueue in the caller's transaction.
func (c *Client) DropQueueTx(ctx context.Context, tx pgx.Tx, queue string) (bool, error) {
	return dropQueue(ctx, tx, queue)
}

func dropQueue(ctx context.Context, db dbtx, queue string) (bool, error) {
	var ok bool
	if err := db.QueryRow(ctx, sqlDropQueue, queue).Scan(&ok); err != nil {
		return false, translate(err, "dropping queue %q", queue)
	}
	return ok, nil
}

// QueueInfo describes a queue, as ListQueues returns it.
type QueueInfo struct {
	// Name is the queue's name.
	Name string
	// CreatedAt is when the queue was created.
	CreatedAt time.Time
	// Options is the JSON object of the queue's options, every key present
	// (max_attempts, lease, backoff_base, backoff_max, retention,
	// rotate_interval, max_payload, notify, default_group).
	Options json.RawMessage
	// Groups are the names of the queue's consumer groups, sorted.
	Groups []string
}

// ListQueues returns every queue, by name.
func (c *Client) ListQueues(ctx context.Context) ([]QueueInfo, error) {
	return listQueues(ctx, c.pool)
}

// ListQueuesTx is ListQueues in the caller's transaction.
func (c *Client) ListQueuesTx(ctx context.Context, tx pgx.Tx) ([]QueueInfo, error) {
	return listQueues(ctx, tx)
}

func listQueues(ctx context.Context, db dbtx) ([]QueueInfo, error) {
	rows, err := db.Query(ctx, sqlListQueues)
	if err != nil {
		return nil, translate(err, "listing queues")
	}
	qs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueueInfo, error) {
		var q QueueInfo
		err := row.Scan(&q.Name, &q.CreatedAt, (*[]byte)(&q.Options), &q.Groups)
		return q, err
	})
	if err != nil {
		return nil, translate(err, "listing queues")
	}
	return qs, nil
}

// queueSettings returns the lease and max_attempts options of queue, or
// ErrQueueNotFound.
func queueSettings(ctx context.Context, db dbtx, queue string) (lease time.Duration, maxAttempts int, err error) {
	var us int64
	if err := db.QueryRow(ctx, sqlQueueSettings, queue).Scan(&us, &maxAttempts); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			err = &Error{Code: "SL002", Message: fmt.Sprintf("queue '%s' does not exist", queue), kind: ErrQueueNotFound}
		}
		return 0, 0, translate(err, "reading the options of queue %q", queue)
	}
	return time.Duration(us) * time.Microsecond, maxAttempts, nil
}

// PurgeQueue removes every message of a queue at once, pending or not, and
// returns how many it removed. Groups stay and continue with the messages
// sent afterwards.
func (c *Client) PurgeQueue(ctx context.Context, queue string) (int64, error) {
	return purgeQueue(ctx, c.pool, queue)
}

// PurgeQueueTx is PurgeQueue in the caller's transaction.
func (c *Client) PurgeQueueTx(ctx context.Context, tx pgx.Tx, queue string) (int64, error) {
	return purgeQueue(ctx, tx, queue)
}

func purgeQueue(ctx context.Context, db dbtx, queue string) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, sqlPurgeQueue, queue).Scan(&n); err != nil {
		return 0, translate(err, "purging queue %q", queue)
	}
	return n, nil
}
