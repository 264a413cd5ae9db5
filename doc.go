// Package sluice is the Go client of sluice, the message queue that lives
// inside PostgreSQL: send, receive, acknowledge and administer queues, and
// run handlers over a queue with Consume.
//
// The semantics live in the database (schema sluice, installed by package
// migrate or "sluice migrate"); this package calls its SQL functions through
// a pgx pool, one statement per call. A queue is a durable, ordered log;
// every consumer group of a queue receives every message (fan-out), and the
// consumers of one group compete for its messages. A received message is
// leased: acknowledge it (Ack), give it back (Nack) or renew the lease
// (Extend) before it expires, or it is delivered again (at-least-once).
// After the queue's max_attempts deliveries it becomes a dead letter.
//
// Every method has a ...Tx twin that joins the caller's transaction, so that
// acknowledging a message, writing the application's data and sending
// follow-up messages commit atomically:
//
//	err := client.InTx(ctx, func(tx pgx.Tx) error {
//		if _, err := client.AckTx(ctx, tx, "orders", "billing", msg.Receipt); err != nil {
//			return err
//		}
//		_, err := client.SendTx(ctx, tx, "invoices", invoice, nil)
//		return err
//	})
//
// Errors of the engine are *Error values that errors.Is matches against
// ErrQueueNotFound, ErrGroupNotFound and the other sentinels; a database
// without the schema gives ErrSchemaMissing.
package sluice
