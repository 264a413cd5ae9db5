package sluice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

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
	// Lanes is the number of dispatch lanes (8), fixed at creation.
	// Consumers of a group take lanes side by side; order is kept per key
	// and per lane. 1 keeps strict commit order for the whole queue.
	Lanes int
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
	for name, d := range map[string]time.Duration{
		"lease": o.Lease, "backoff_base": o.BackoffBase, "backoff_max": o.BackoffMax,
		"retention": o.Retention, "rotate_interval": o.RotateInterval,
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
// reports whether the queue existed.
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

// queueLease returns the lease option of queue, or ErrQueueNotFound.
func queueLease(ctx context.Context, db dbtx, queue string) (time.Duration, error) {
	var us int64
	if err := db.QueryRow(ctx, sqlQueueLease, queue).Scan(&us); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			err = &Error{Code: "SL002", Message: fmt.Sprintf("queue '%s' does not exist", queue), kind: ErrQueueNotFound}
		}
		return 0, translate(err, "reading the options of queue %q", queue)
	}
	return time.Duration(us) * time.Microsecond, nil
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

// Where a new consumer group starts reading (GroupOptions.StartFrom).
const (
	// StartEarliest starts at the oldest message the queue retains.
	StartEarliest = "earliest"
	// StartLatest starts with the messages that become visible after the
	// group is created.
	StartLatest = "latest"
)

// StartAt returns a GroupOptions.StartFrom value that starts a group at the
// messages batched at or after t (replay within the queue's retention).
func StartAt(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// GroupOptions configure a new consumer group.
type GroupOptions struct {
	// StartFrom is StartEarliest (the default), StartLatest, or a time from
	// StartAt.
	StartFrom string
}

// CreateGroup adds consumer group group to queue. Every group receives every
// message (fan-out); the consumers of one group compete for its messages.
// It fails with ErrGroupExists when the name is taken. opts may be nil.
func (c *Client) CreateGroup(ctx context.Context, queue, group string, opts *GroupOptions) error {
	return createGroup(ctx, c.pool, queue, group, opts)
}

// CreateGroupTx is CreateGroup in the caller's transaction.
func (c *Client) CreateGroupTx(ctx context.Context, tx pgx.Tx, queue, group string, opts *GroupOptions) error {
	return createGroup(ctx, tx, queue, group, opts)
}

func createGroup(ctx context.Context, db dbtx, queue, group string, opts *GroupOptions) error {
	start := StartEarliest
	if opts != nil && opts.StartFrom != "" {
		start = opts.StartFrom
	}
	if _, err := db.Exec(ctx, sqlCreateGroup, queue, group, start); err != nil {
		return translate(err, "creating group %q of queue %q", group, queue)
	}
	return nil
}

// DropGroup removes a consumer group and its dead letters. It reports
// whether the group existed.
func (c *Client) DropGroup(ctx context.Context, queue, group string) (bool, error) {
	return dropGroup(ctx, c.pool, queue, group)
}

// DropGroupTx is DropGroup in the caller's transaction.
func (c *Client) DropGroupTx(ctx context.Context, tx pgx.Tx, queue, group string) (bool, error) {
	return dropGroup(ctx, tx, queue, group)
}

func dropGroup(ctx context.Context, db dbtx, queue, group string) (bool, error) {
	var ok bool
	if err := db.QueryRow(ctx, sqlDropGroup, queue, group).Scan(&ok); err != nil {
		return false, translate(err, "dropping group %q of queue %q", group, queue)
	}
	return ok, nil
}

// Status is the depth and progress of one consumer group of a queue.
type Status struct {
	// Queue is the queue's name.
	Queue string
	// Group is the group's name; "" for a queue without groups.
	Group string
	// Ready counts messages deliverable now (new, expired leases, retries
	// due).
	Ready int64
	// Delayed counts messages not deliverable before a later time (delay,
	// retry backoff).
	Delayed int64
	// InFlight counts messages leased and not completed.
	InFlight int64
	// Dead counts dead letters not redriven.
	Dead int64
	// OldestPendingAge is the age of the oldest message the group has not
	// completed (0 when none).
	OldestPendingAge time.Duration
	// Lag counts the messages the group has not completed: ready, in flight,
	// waiting for a retry, and committed but not numbered yet.
	Lag int64
	// Cursor, LWM and Head are positions: last dispatched, first not
	// completed, last numbered.
	Cursor, LWM, Head int64
	// LiveEpochs is how many storage epochs the queue keeps (1 to 4).
	LiveEpochs int
	// HoldsReclaim is true when this group keeps an old epoch from being
	// reclaimed.
	HoldsReclaim bool
}

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
		var age *time.Duration
		err := row.Scan(&s.Queue, &group, &s.Ready, &s.Delayed, &s.InFlight, &s.Dead, &age, &s.Lag,
			&s.Cursor, &s.LWM, &s.Head, &s.LiveEpochs, &s.HoldsReclaim)
		s.Group = textOrEmpty(group)
		if age != nil {
			s.OldestPendingAge = *age
		}
		return s, err
	})
	if err != nil {
		return nil, translate(err, "%s", what)
	}
	return st, nil
}

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

// DeadLetters returns the dead letters of queue that were not redriven,
// oldest first. opts may be nil.
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
