package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// memoryQueues is how many queues the memory scenario's connection uses.
const memoryQueues = 20

// memoryQueue names the memory scenario's i-th queue.
func memoryQueue(i int) string { return fmt.Sprintf("bench_mem_%d", i) }

// memoryDialect is what the memory scenario runs on one system's queues: the
// statements an application would (sluice: receive, then ack; PGMQ and the
// layer: read, then delete), each in its own transaction, $1 the queue.
type memoryDialect struct {
	// drop drops the queue if it exists (one a killed run left behind, too).
	create, drop, send string
	// rotate, if set, makes queue $1 rotate at the next sluice.maintain()
	// (a sluice queue: its storage's next slot, with the copies of the
	// engine's functions that name that slot's tables)
	rotate string
	// consume takes one message from queue q and completes it.
	consume func(ctx context.Context, conn *pgx.Conn, q string) error
}

var sluiceMemory = memoryDialect{
	create: `SELECT sluice.create_queue($1)`,
	drop:   `SELECT sluice.drop_queue(queue) FROM sluice.list_queues() WHERE queue = $1`,
	send:   `SELECT sluice.send($1, '{"n": 1}')`,
	rotate: sluiceRotate,
	consume: func(ctx context.Context, conn *pgx.Conn, q string) error {
		var receipts []string
		if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(receipt), '{}') FROM sluice.receive($1, 'default', 1)`, q).Scan(&receipts); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, `SELECT sluice.ack($1, 'default', $2)`, q, receipts)
		return err
	},
}

// sluiceRotate makes a sluice queue due to rotate a second later.
const sluiceRotate = `SELECT sluice.alter_queue($1, '{"rotate_interval": "1 second"}')`

var pgmqMemory = memoryDialect{
	create: `SELECT pgmq.create($1)`,
	drop:   `SELECT pgmq.drop_queue(queue_name) FROM pgmq.meta WHERE queue_name = $1`,
	send:   `SELECT pgmq.send($1, '{"n": 1}'::jsonb)`,
	consume: func(ctx context.Context, conn *pgx.Conn, q string) error {
		var id int64
		if err := conn.QueryRow(ctx, `SELECT msg_id FROM pgmq.read($1, 30, 1)`, q).Scan(&id); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, `SELECT pgmq.delete($1, $2::bigint)`, q, id)
		return err
	},
}

// memory: how much memory one PostgreSQL connection holds after it used n
// queues (one message received and completed on each), for sluice, PGMQ and
// pgmq-compat: a pool's connections that serve many queues each hold that
// much, for as long as they live.
func (r *runner) memory(ctx context.Context) (*Result, error) {
	all, err := r.systems("sluice", "pgmq", "pgmq-compat")
	if err != nil {
		return nil, err
	}
	// (the scenario's dialects are sluice's and PGMQ's)
	var others []string
	all = slices.DeleteFunc(all, func(s system) bool {
		switch s.(type) {
		case *sluiceSystem, pgmqSystem, *pgmqCompatSystem:
			return false
		}
		others = append(others, r.skipped(s, errors.New("the memory scenario runs sluice, pgmq and pgmq-compat")))
		return true
	})
	systems, notes, remove := r.prepare(ctx, all)
	notes = append(others, notes...)
	defer remove()
	defer r.cleanupAll(ctx, systems...)
	t := Table{
		Title: fmt.Sprintf("memory: one connection's memory (pg_backend_memory_contexts) after it received and completed one message on each of 1 and %d queues", memoryQueues),
		Columns: []string{"system", "after 1 queue MB", fmt.Sprintf("after %d queues MB", memoryQueues),
			"per further queue MB", "per further queue / PGMQ's", "per further queue after a rotation MB"},
	}
	perQueue := map[string]float64{}
	for _, s := range systems {
		d := sluiceMemory
		if _, ok := s.(*sluiceSystem); !ok {
			d = pgmqMemory
			if _, ok := s.(*pgmqCompatSystem); ok {
				d.rotate = sluiceRotate
			}
		}
		var record func(queue string) error
		if _, ok := s.(sluiceQueued); ok {
			record = func(queue string) error { return r.recordQueues(ctx, r.poolOf(s), s.name(), queue) }
		}
		m, err := memoryOf(ctx, r.poolOf(s), d, record)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name(), err)
		}
		per := (m.all - m.one) / (memoryQueues - 1)
		perQueue[s.name()] = per
		fmt.Fprintf(r.o.Out, "memory %s: %.1f MB after 1 queue, %.1f MB after %d, %.2f MB a further queue\n", s.name(), m.one, m.all, memoryQueues, per)
		rotated := ""
		if d.rotate != "" {
			// (the first queue rotated, the others not; then all rotated)
			rot := per + (m.rotAll-m.rotOne)/(memoryQueues-1)
			rotated = fmt.Sprintf("%.2f", rot)
			fmt.Fprintf(r.o.Out, "memory %s: %.2f MB a further queue once each rotated\n", s.name(), rot)
		}
		t.Rows = append(t.Rows, []string{s.name(), fmt.Sprintf("%.1f", m.one), fmt.Sprintf("%.1f", m.all), fmt.Sprintf("%.2f", per), "", rotated})
	}
	if base, ok := perQueue["PGMQ"]; ok && base > 0 {
		for i, row := range t.Rows {
			t.Rows[i][4] = fmt.Sprintf("%.1f", perQueue[row[0]]/base)
		}
	}
	notes = append(notes,
		"Each system's queues are made afresh and get one message each; a new connection (a new backend) then receives and completes one message on each queue, each call in its own transaction, and reads the sum of total_bytes of pg_backend_memory_contexts after the first queue and after the last. Per further queue = (after the last - after the first) / (queues - 1).",
		"After a rotation (sluice and pgmq-compat): then each queue rotates its storage (rotate_interval set to 1 s, sluice.maintain() a second later) and gets one message more, which the same connection consumes: what it holds once it has used a queue's two slots, as a pooled connection does after a minute or two with the default rotate_interval. Per further queue = the figure before + (after the last queue's second message - after the first's) / (queues - 1).",
		"sluice (and pgmq-compat, which calls it) runs each queue's own copy of the engine's functions, whose plans are cached for the connection's life: a connection keeps them for every queue it has used. DISCARD ALL does not release them; only closing the connection does (docs/operations.md, Memory per connection).")
	return &Result{Params: map[string]any{"queues": memoryQueues}, Tables: []Table{t}, Notes: notes}, nil
}

// memoryMB is what memoryOf measures: a connection's memory in MB after it
// consumed from the first queue and from all of them, and, when the dialect
// rotates, after it consumed again from the first rotated queue and from
// all of them rotated.
type memoryMB struct{ one, all, rotOne, rotAll float64 }

// memoryOf makes memoryQueues queues with d on pool (dropping any of their
// names first), with one message each, and measures a new connection's
// memory as it consumes from them (memoryMB); the queues are dropped
// afterwards. record, if not nil, is called with each queue once made.
func memoryOf(ctx context.Context, pool *pgxpool.Pool, d memoryDialect, record func(queue string) error) (m memoryMB, err error) {
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for i := range memoryQueues {
			if _, derr := pool.Exec(cctx, d.drop, memoryQueue(i)); derr != nil {
				err = errors.Join(err, fmt.Errorf("dropping queue %s: %w", memoryQueue(i), derr))
			}
		}
	}()
	for i := range memoryQueues {
		if _, err := pool.Exec(ctx, d.drop, memoryQueue(i)); err != nil {
			return m, fmt.Errorf("dropping queue %s, left behind by an earlier run: %w", memoryQueue(i), err)
		}
		if _, err := pool.Exec(ctx, d.create, memoryQueue(i)); err != nil {
			return m, fmt.Errorf("creating queue %s: %w", memoryQueue(i), err)
		}
		if record != nil {
			if err := record(memoryQueue(i)); err != nil {
				return m, err
			}
		}
		if _, err := pool.Exec(ctx, d.send, memoryQueue(i)); err != nil {
			return m, fmt.Errorf("sending to queue %s: %w", memoryQueue(i), err)
		}
	}
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		return m, fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	held := func() (float64, error) {
		var b int64
		if err := conn.QueryRow(ctx, `SELECT sum(total_bytes)::bigint FROM pg_backend_memory_contexts`).Scan(&b); err != nil {
			return 0, fmt.Errorf("reading pg_backend_memory_contexts (superuser or pg_read_all_stats): %w", err)
		}
		return float64(b) / (1 << 20), nil
	}
	pass := func(first, last *float64) error {
		for i := range memoryQueues {
			if err := d.consume(ctx, conn, memoryQueue(i)); err != nil {
				return fmt.Errorf("consuming from queue %s: %w", memoryQueue(i), err)
			}
			if i == 0 {
				if *first, err = held(); err != nil {
					return err
				}
			}
		}
		*last, err = held()
		return err
	}
	if err := pass(&m.one, &m.all); err != nil || d.rotate == "" {
		return m, err
	}
	for i := range memoryQueues {
		if _, err := pool.Exec(ctx, d.rotate, memoryQueue(i)); err != nil {
			return m, fmt.Errorf("making queue %s rotate: %w", memoryQueue(i), err)
		}
	}
	sleep(ctx, 1100*time.Millisecond)
	var rotated int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE rotated) FROM sluice.maintain()`).Scan(&rotated); err != nil {
		return m, fmt.Errorf("rotating: %w", err)
	}
	if rotated < memoryQueues {
		return m, fmt.Errorf("rotating: sluice.maintain() rotated %d of the %d queues", rotated, memoryQueues)
	}
	for i := range memoryQueues {
		if _, err := pool.Exec(ctx, d.send, memoryQueue(i)); err != nil {
			return m, fmt.Errorf("sending to queue %s: %w", memoryQueue(i), err)
		}
	}
	err = pass(&m.rotOne, &m.rotAll)
	return m, err
}
