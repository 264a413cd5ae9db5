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

// QueueOptions are the options of a queue, the one form CreateQueue and
// AlterQueue take and AlterQueue and ListQueues return. A nil field is unset:
// CreateQueue gives it the engine's default (shown in parentheses) and
// AlterQueue leaves it as it is; a set field is sent even when it is zero
// (a Retention of 0 keeps nothing, a BackoffBase of 0 retries at once). Ptr
// makes a pointer of a value: &QueueOptions{Lanes: sluice.Ptr(1)}.
//
// The fields are the engine's options (docs/sql.md, create_queue), one for
// each row of test/queue_options.json; TestQueueOptionTable fails when one
// is missing.
type QueueOptions struct {
	// MaxAttempts is how many deliveries a message gets before it becomes a
	// dead letter (5).
	MaxAttempts *int
	// Lease is the default lease of Receive (30s, at most 7 days).
	Lease *time.Duration
	// BackoffBase is the first retry delay after a Nack, doubled per
	// attempt (1s).
	BackoffBase *time.Duration
	// BackoffMax caps the retry delay (1h).
	BackoffMax *time.Duration
	// Retention is how long completed messages stay readable (1h).
	Retention *time.Duration
	// RotateInterval is how often a new storage epoch starts (1m).
	RotateInterval *time.Duration
	// MaxPayload is the largest body + headers in bytes (1 MiB).
	MaxPayload *int
	// DedupWindow is how long a DedupKey of Send is remembered (1h).
	DedupWindow *time.Duration
	// MaxDelay is the longest delay Send and SendBatch accept, and the
	// longest explicit Nack delay (365 days, which is also its upper bound).
	MaxDelay *time.Duration
	// Lanes is the number of dispatch lanes (8), fixed at creation.
	// Consumers of a group take lanes side by side; order is kept per key
	// and per lane. 1 keeps strict commit order for the whole queue.
	Lanes *int
	// Slots is the number of storage slots, 2 to 4 (2), fixed at creation:
	// how many epochs the queue keeps apart for reclaim. Fewer cost less on
	// every call; more keep less retained traffic on disk when Retention is
	// long (up to about Retention x Slots / (Slots - 1)).
	Slots *int
	// Engine is the storage engine, 2 (the default) or 1, fixed at
	// creation. Engine 2 (docs/design.md, "Engine v2") receives and acks in
	// a few statements, with the same calls and semantics as engine 1's
	// (its differences: docs/design.md, "Engine v2"); engine 1 is the
	// first engine, kept for the pgmq layer and queues made before.
	Engine *int
	// Notify sends a NOTIFY on channel "sluice" when a send commits, to
	// wake waiting consumers (true); without it they poll.
	Notify *bool
	// DefaultGroup creates the consumer group "default" with the queue
	// (true). CreateQueue only: AlterQueue fails with ErrInvalidOption.
	DefaultGroup *bool
}

// Ptr returns a pointer to v, for the fields of QueueOptions.
func Ptr[T any](v T) *T { return &v }

// queueOption is one field of QueueOptions under its engine name; field is
// a **int, **time.Duration or **bool.
type queueOption struct {
	name  string
	field any
}

// fields lists o's fields under the engine's option names: the one place
// that maps the one to the other, for both directions.
func (o *QueueOptions) fields() []queueOption {
	return []queueOption{
		{"max_attempts", &o.MaxAttempts}, {"lease", &o.Lease}, {"backoff_base", &o.BackoffBase},
		{"backoff_max", &o.BackoffMax}, {"retention", &o.Retention}, {"rotate_interval", &o.RotateInterval},
		{"max_payload", &o.MaxPayload}, {"dedup_window", &o.DedupWindow}, {"max_delay", &o.MaxDelay},
		{"lanes", &o.Lanes}, {"slots", &o.Slots}, {"engine", &o.Engine}, {"notify", &o.Notify},
		{"default_group", &o.DefaultGroup},
	}
}

// durationOptionNames are the options that are intervals, for the queries
// that read them back as microseconds.
var durationOptionNames = func() []string {
	var out []string
	for _, f := range new(QueueOptions).fields() {
		if _, ok := f.field.(**time.Duration); ok {
			out = append(out, f.name)
		}
	}
	return out
}()

// options renders the set fields of o as the jsonb options of create_queue
// and alter_queue: durations as interval strings exact to the microsecond.
func (o *QueueOptions) options() (json.RawMessage, error) {
	m := map[string]any{}
	if o == nil {
		return json.RawMessage(`{}`), nil
	}
	for _, f := range o.fields() {
		switch p := f.field.(type) {
		case **int:
			if *p != nil {
				m[f.name] = **p
			}
		case **bool:
			if *p != nil {
				m[f.name] = **p
			}
		case **time.Duration:
			if *p != nil {
				m[f.name] = IntervalString(**p) // the engine rejects a negative one (SL007)
			}
		}
	}
	return json.Marshal(m)
}

// decodeQueueOptions reads options as the engine reports them, with its
// intervals turned into microseconds by the query (sqlTypedOptions): every
// option the engine reports is set in the result.
func decodeQueueOptions(data []byte) (QueueOptions, error) {
	var m map[string]json.RawMessage
	var o QueueOptions
	if err := json.Unmarshal(data, &m); err != nil {
		return o, fmt.Errorf("reading queue options: %w", err)
	}
	for _, f := range o.fields() {
		v, ok := m[f.name]
		if !ok || string(v) == "null" {
			continue
		}
		var err error
		switch p := f.field.(type) {
		case **int:
			*p = new(int)
			err = json.Unmarshal(v, *p)
		case **bool:
			*p = new(bool)
			err = json.Unmarshal(v, *p)
		case **time.Duration:
			var us int64
			err = json.Unmarshal(v, &us)
			*p = Ptr(time.Duration(us) * time.Microsecond)
		}
		if err != nil {
			return o, fmt.Errorf("reading queue option %s (%s): %w", f.name, v, err)
		}
	}
	return o, nil
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

// CreateQueue creates a queue with the options set in opts (the engine's
// defaults for the rest); unless opts.DefaultGroup is false, with the
// consumer group "default" reading it from its start. It fails with ErrQueueExists
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

// AlterQueue changes the options set in changes and returns all the
// queue's options afterwards (every field set). Options left nil keep their
// values; Lanes, Slots and Engine are fixed at creation (setting them to the
// queue's own value is allowed), and DefaultGroup is CreateQueue's only. It
// fails with ErrQueueNotFound or ErrInvalidOption, changing nothing. changes
// may be nil, which changes nothing.
func (c *Client) AlterQueue(ctx context.Context, queue string, changes *QueueOptions) (QueueOptions, error) {
	return alterQueue(ctx, c.pool, queue, changes)
}

// AlterQueueTx is AlterQueue in the caller's transaction.
func (c *Client) AlterQueueTx(ctx context.Context, tx pgx.Tx, queue string, changes *QueueOptions) (QueueOptions, error) {
	return alterQueue(ctx, tx, queue, changes)
}

func alterQueue(ctx context.Context, db dbtx, queue string, changes *QueueOptions) (QueueOptions, error) {
	in, err := changes.options()
	if err != nil {
		return QueueOptions{}, fmt.Errorf("altering queue %q: %w", queue, err)
	}
	var out []byte
	if err := db.QueryRow(ctx, sqlAlterQueue, queue, in, durationOptionNames).Scan(&out); err != nil {
		return QueueOptions{}, translate(err, "altering queue %q", queue)
	}
	return decodeQueueOptions(out)
}

// DropQueue drops a queue with its groups, messages and dead letters. It
// reports whether the queue existed. It waits for the transactions that are
// using the queue; calls on the queue made while it holds it wait for it,
// then fail with ErrQueueNotFound. Other queues are not held up, nor are
// the queue's calls while it waits for a transaction that stays open with
// the queue; with the session's lock_timeout set, it fails after that long
// with SQLSTATE 55P03 (a *pgconn.PgError, nothing changed: retry), and with
// 40P01 when such a transaction waits for a lock the caller's holds.
// docs/operations.md, "Creating and dropping queues under load".
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
	// Options are the queue's options, every field set (the engine's
	// defaults filled in).
	Options QueueOptions
	// RawOptions is the JSON object of the options as the engine stores
	// them: intervals as the strings they were given as (such as
	// "30 seconds"), and any option newer than this library.
	RawOptions json.RawMessage
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
	rows, err := db.Query(ctx, sqlListQueues, durationOptionNames)
	if err != nil {
		return nil, translate(err, "listing queues")
	}
	qs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueueInfo, error) {
		var q QueueInfo
		var typed []byte
		if err := row.Scan(&q.Name, &q.CreatedAt, (*[]byte)(&q.RawOptions), &typed, &q.Groups); err != nil {
			return q, err
		}
		var err error
		q.Options, err = decodeQueueOptions(typed)
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
// sent afterwards. It waits for the transactions using the queue as
// DropQueue does, and fails as it does (SQLSTATE 55P03 or 40P01).
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
