package sluice

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// SendOptions are the optional attributes of a message. The zero value sends
// a plain message, deliverable at once.
type SendOptions struct {
	// Headers is a JSON object of metadata delivered with the message, or
	// nil.
	Headers json.RawMessage
	// Key is the message's ordering key ("" for none). Within a consumer
	// group, messages of one key are delivered in commit order, and none
	// while an earlier one of its key is unfinished (a receive may return a
	// run of one key, in order). A nacked message of a key is retried before
	// the later ones.
	Key string
	// Delay makes the message deliverable no earlier than now + Delay.
	Delay time.Duration
	// Priority orders unkeyed messages: a receive returns ready messages of
	// higher priority first, equal priorities in commit order (default 0;
	// negative ones after every other ready message). Keyed messages keep
	// their key's order whatever their priority. It must fit PostgreSQL's
	// int (-2147483648 to 2147483647): ErrInvalidArgument otherwise.
	Priority int
	// DedupKey is a deduplication key ("" for none): if a message was sent
	// to the queue with the same key within the queue's dedup window, Send
	// enqueues nothing and returns that message's id. It needs a READ
	// COMMITTED transaction (ErrInvalidIsolation otherwise).
	DedupKey string
}

// Send appends one message with body (any JSON value) to queue and returns
// its id. The message is visible to consumers as soon as Send returns: it
// runs in its own transaction. opts may be nil.
func (c *Client) Send(ctx context.Context, queue string, body json.RawMessage, opts *SendOptions) (int64, error) {
	return send(ctx, c.pool, queue, body, opts)
}

// SendTx is Send in the caller's transaction: the message becomes visible
// when tx commits, and is never delivered if tx rolls back.
func (c *Client) SendTx(ctx context.Context, tx pgx.Tx, queue string, body json.RawMessage, opts *SendOptions) (int64, error) {
	return send(ctx, tx, queue, body, opts)
}

func send(ctx context.Context, db dbtx, queue string, body json.RawMessage, opts *SendOptions) (int64, error) {
	if opts == nil {
		opts = &SendOptions{}
	}
	if opts.Delay < 0 {
		return 0, translate(errNegative("delay", opts.Delay), "sending to queue %q", queue)
	}
	if err := checkPriority(opts.Priority); err != nil {
		return 0, translate(err, "sending to queue %q", queue)
	}
	var id int64
	err := db.QueryRow(ctx, sqlSend, queue, body, opts.Headers, nullText(opts.Key), nullInterval(opts.Delay),
		opts.Priority, nullText(opts.DedupKey)).Scan(&id)
	if err != nil {
		return 0, translate(err, "sending to queue %q", queue)
	}
	return id, nil
}

// BatchMessage is one message of SendBatch.
type BatchMessage struct {
	// Body is the message, any JSON value.
	Body json.RawMessage
	// Headers is a JSON object of metadata, or nil.
	Headers json.RawMessage
	// Key is the ordering key ("" for none), as in SendOptions.
	Key string
	// Priority orders unkeyed messages, as in SendOptions (the same range).
	Priority int
	// DedupKey is a deduplication key ("" for none), as in SendOptions: a
	// key already sent within the queue's dedup window, or earlier in the
	// same batch, enqueues nothing and gets the first message's id.
	DedupKey string
}

// SendBatchOptions apply to every message of a SendBatch call.
type SendBatchOptions struct {
	// Delay makes the messages deliverable no earlier than now + Delay.
	Delay time.Duration
	// ChunkSize is how many messages go into one call of the SQL function
	// send_batch (default 1000). The chunks of one SendBatch are pipelined:
	// they travel to the server together, in one round trip.
	ChunkSize int
}

// DefaultChunkSize is the number of messages per send_batch call when
// SendBatchOptions.ChunkSize is 0.
const DefaultChunkSize = 1000

// SendBatch appends msgs to queue atomically (all or none) and returns
// their ids, in the order of msgs. The chunks (see SendBatchOptions) go to
// the server in one pipeline, which runs as one implicit transaction: one
// round trip whatever the size. opts may be nil.
func (c *Client) SendBatch(ctx context.Context, queue string, msgs []BatchMessage, opts *SendBatchOptions) ([]int64, error) {
	ids, err := sendBatch(ctx, c.pool, queue, msgs, opts)
	if err != nil {
		return nil, translate(err, "sending a batch to queue %q", queue)
	}
	return ids, nil
}

// SendBatchTx is SendBatch in the caller's transaction.
func (c *Client) SendBatchTx(ctx context.Context, tx pgx.Tx, queue string, msgs []BatchMessage, opts *SendBatchOptions) ([]int64, error) {
	ids, err := sendBatch(ctx, tx, queue, msgs, opts)
	if err != nil {
		return nil, translate(err, "sending a batch to queue %q", queue)
	}
	return ids, nil
}

// batcher runs a pgx.Batch: the pool (in an implicit transaction) or a
// pgx.Tx.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// sendBatch queues one send_batch call per chunk and sends them in one
// pipeline.
func sendBatch(ctx context.Context, db batcher, queue string, msgs []BatchMessage, opts *SendBatchOptions) ([]int64, error) {
	if opts == nil {
		opts = &SendBatchOptions{}
	}
	if opts.Delay < 0 {
		return nil, errNegative("delay", opts.Delay)
	}
	size := opts.ChunkSize
	if size <= 0 {
		size = DefaultChunkSize
	}
	if len(msgs) == 0 {
		return []int64{}, nil
	}
	ids := make([]int64, 0, len(msgs))
	var batch pgx.Batch
	for start := 0; start < len(msgs); start += size {
		chunk := msgs[start:min(start+size, len(msgs))]
		bodies := make([]json.RawMessage, len(chunk))
		var headers []json.RawMessage
		var keys, dedups []*string
		var priorities []int32
		for i, m := range chunk {
			if m.Priority != 0 {
				if err := checkPriority(m.Priority); err != nil {
					return nil, translate(err, "sending message %d of a batch to queue %q", start+i, queue)
				}
				if priorities == nil {
					priorities = make([]int32, len(chunk))
				}
				priorities[i] = int32(m.Priority)
			}
			if m.DedupKey != "" {
				if dedups == nil {
					dedups = make([]*string, len(chunk))
				}
				dedups[i] = &chunk[i].DedupKey
			}
			bodies[i] = m.Body
			if m.Headers != nil {
				if headers == nil {
					headers = make([]json.RawMessage, len(chunk))
				}
				headers[i] = m.Headers
			}
			if m.Key != "" {
				if keys == nil {
					keys = make([]*string, len(chunk))
				}
				keys[i] = &chunk[i].Key
			}
		}
		var h, k, p, d any
		if headers != nil {
			h = headers
		}
		if keys != nil {
			k = keys
		}
		if priorities != nil {
			p = priorities
		}
		if dedups != nil {
			d = dedups
		}
		batch.Queue(sqlSendBatch, queue, bodies, h, k, nullInterval(opts.Delay), p, d).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					return err
				}
				ids = append(ids, id)
			}
			return rows.Err()
		})
	}
	if err := db.SendBatch(ctx, &batch).Close(); err != nil {
		return nil, err
	}
	return ids, nil
}
