package sluice

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Consumer groups: sql/functions/group.sql.

// Where a new consumer group starts reading (GroupOptions.StartFrom), and
// where SeekGroup moves one.
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
	// TTL, when not zero (1s to 365 days), makes a temporary group:
	// maintenance drops it once no receive has used it for that long, so a
	// watcher that dies without dropping it does not hold back the queue's
	// reclaim for ever. Zero: the group lasts until DropGroup.
	TTL time.Duration
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
	var ttl any
	if opts != nil && opts.StartFrom != "" {
		start = opts.StartFrom
	}
	if opts != nil && opts.TTL != 0 {
		ttl = IntervalString(opts.TTL)
	}
	if _, err := db.Exec(ctx, sqlCreateGroup, queue, group, start, ttl); err != nil {
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

// SeekGroup moves consumer group group of queue to position: StartEarliest,
// StartLatest or a time from StartAt, as CreateGroup's StartFrom. From then
// on the group receives every message from that position on, as a group
// created there would: backward it replays messages it already acked,
// forward it skips what it had not received. The group keeps its name, its
// TTL and its dead letters. Leases held at the seek go stale (Ack counts 0,
// Nack and Extend report them stale) and their messages come again if they
// are at or after the new position; retries of nacked messages still
// pending are forgotten. It fails with ErrGroupNotFound, ErrQueueNotFound
// or ErrInvalidArgument (a bad position) and then changes nothing. It needs
// role sluice_admin.
func (c *Client) SeekGroup(ctx context.Context, queue, group, position string) error {
	return seekGroup(ctx, c.pool, queue, group, position)
}

// SeekGroupTx is SeekGroup in the caller's transaction: the group moves when
// it commits.
func (c *Client) SeekGroupTx(ctx context.Context, tx pgx.Tx, queue, group, position string) error {
	return seekGroup(ctx, tx, queue, group, position)
}

func seekGroup(ctx context.Context, db dbtx, queue, group, position string) error {
	if _, err := db.Exec(ctx, sqlSeekGroup, queue, group, position); err != nil {
		return translate(err, "seeking group %q of queue %q to %q", group, queue, position)
	}
	return nil
}
