package sluice

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Upgrading a queue to engine 2: sql/functions/upgrade.sql.

// UpgradeQueue replaces a queue of engine 1 by a queue of engine 2 of the
// same name, options and groups, in place and without copying messages, and
// reports whether it did: false when the queue is of engine 2 already. Sends
// go to the new storage at once; each group receives what the old storage
// still holds for it first, so key order and the backlog's order hold, and
// receipts of either storage can be acked, nacked and extended. Status sums
// both storages meanwhile; Maintain drops the old one once every group has
// drained it, and SeekGroup fails with ErrNotSupported (SL011) until then.
// A queue of the pgmq layer too. It waits for the transactions using the
// queue as DropQueue does and fails as it does (SQLSTATE 55P03, 40P01;
// nothing changed: retry), and with 55P03 when a reader holds the view of a
// pgmq queue. Admin only. Errors: ErrInvalidName
// (SL001), ErrQueueNotFound (SL002), ErrNotSupported (SL011: a queue still
// draining an earlier upgrade). docs/operations.md, "Upgrading a queue to
// engine 2".
func (c *Client) UpgradeQueue(ctx context.Context, queue string) (bool, error) {
	return upgradeQueue(ctx, c.pool, queue)
}

// UpgradeQueueTx is UpgradeQueue in the caller's transaction. It takes the
// queue's lock exclusively, as DropQueue does, until the transaction ends:
// keep the transaction short.
func (c *Client) UpgradeQueueTx(ctx context.Context, tx pgx.Tx, queue string) (bool, error) {
	return upgradeQueue(ctx, tx, queue)
}

func upgradeQueue(ctx context.Context, db dbtx, queue string) (bool, error) {
	var ok bool
	if err := db.QueryRow(ctx, sqlUpgradeQueue, queue).Scan(&ok); err != nil {
		return false, translate(err, "upgrading queue %q", queue)
	}
	return ok, nil
}
