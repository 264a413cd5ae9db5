package bench

import (
	"archive/zip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
)

// benchQueue is the name of the queue every scenario makes afresh.
const benchQueue = "bench"

// peerSchema holds the tables of the bare INSERT reference and the DIY SKIP
// LOCKED queue. Its name must not match "sluice%", the pattern the xmin
// scenario watches.
const peerSchema = "qbench"

// bodyExpr builds a message body on the server: the send time from the
// server clock (epoch seconds, for end-to-end latency) and padding ($1).
const bodyExpr = `jsonb_build_object('t', extract(epoch FROM clock_timestamp()), 'p', $1::text)`

// e2eExpr is the end-to-end latency in milliseconds of a received body b,
// by the server clock.
func e2eExpr(b string) string {
	return fmt.Sprintf(`(extract(epoch FROM clock_timestamp())::float8 - (%s->>'t')::float8) * 1000`, b)
}

// system is a queue implementation under test.
type system interface {
	// name is how tables and charts call it.
	name() string
	// schemas are the LIKE patterns, comma-separated, of the schemas
	// holding its tables.
	schemas() string
	// setup makes the benchmark queue afresh.
	setup(ctx context.Context, pool *pgxpool.Pool) error
	// cleanup drops the benchmark queue.
	cleanup(ctx context.Context, pool *pgxpool.Pool) error
	// sendSQL is the statement that sends a batch of messages in one
	// transaction: $1 is the padding, $2 the batch size when batch > 1.
	sendSQL(batch int) string
	// consume receives up to batch messages and completes them. It returns
	// how many, their end-to-end latencies (ms, server clock) and how long
	// the receive statement took.
	consume(ctx context.Context, conn *pgxpool.Conn, batch int) (int, []float64, time.Duration, error)
}

// clientSystem is implemented by a system that its users drive through its
// client library rather than with SQL statements on their own connections
// (River): the library sends, runs the consumers and takes connections from
// its own pool. The cell helpers (send, producers, consumers) use these
// methods when a system has them, and then never call sendSQL or consume.
type clientSystem interface {
	system
	// sendBatch sends batch messages in one transaction; pad is the
	// padding of each body.
	sendBatch(ctx context.Context, batch int, pad string) error
	// runConsumers runs consumers consumers (taking up to batch messages at
	// a time, if the system has such a setting) until deadline or until
	// enough (if not nil) returns true. It adds every message completed to
	// c.done and its end-to-end latency in ms to lat (if not nil).
	runConsumers(ctx context.Context, consumers, batch int, deadline time.Time, enough func() bool, c *counters, lat *recorder) error
}

// send runs one send transaction of batch messages: on conn, or through
// the client of a clientSystem (conn is then not used and may be nil).
func send(ctx context.Context, conn *pgxpool.Conn, s system, batch int, pad string) error {
	var err error
	if cs, ok := s.(clientSystem); ok {
		err = cs.sendBatch(ctx, batch, pad)
	} else if batch == 1 {
		_, err = conn.Exec(ctx, s.sendSQL(1), pad)
	} else {
		_, err = conn.Exec(ctx, s.sendSQL(batch), pad, batch)
	}
	if err != nil {
		return fmt.Errorf("%s: sending %d: %w", s.name(), batch, err)
	}
	return nil
}

// sluiceSystem is sluice through its SQL API, queue "bench", group
// "default": receive and ack in two transactions, as the Go worker does, or
// (ackWithReceive) each batch acked by the next receive of its connection.
// reclaimRotation is the rotate_interval of a benchmark queue whose size
// must show what reclaim leaves (the xmin scenario): sluice's, and
// pgmq-compat's, whose retention pgmq.create makes 0.
const reclaimRotation = "10 seconds"

type sluiceSystem struct {
	ackWithReceive bool
	// asyncAck acks with durable => false (as Client.AckAsyncCommit does):
	// the ack's transaction commits without waiting for the disk.
	asyncAck  bool
	pending   sync.Map      // *pgxpool.Conn -> []string, receipts the next receive acks
	retention time.Duration // 0: the engine's default
	lease     time.Duration // the queue's lease (0: defaultLease)
	lanes     int           // the queue's lanes (0: the engine's default)
	slots     int           // the queue's slots (0: the engine's default)
	engine    int           // the queue's engine (0: the default, 1; 2: engine v2)
	// reclaim keeps nothing completed (retention 0) and starts a storage
	// epoch every 10 s, so that the size of sluice's tables shows what
	// reclaim leaves (the backlog), not what a retention period keeps.
	reclaim bool
	// keys, if above 0, sends every message with an ordering key out of
	// that many: uniform, or with a Zipf(1.1) skew if zipf is set.
	keys int
	zipf bool
}

// withKeys makes s send every message with an ordering key out of keys,
// Zipf(1.1)-skewed if zipf is set, and returns it.
func (s *sluiceSystem) withKeys(keys int, zipf bool) *sluiceSystem {
	s.keys, s.zipf = keys, zipf
	return s
}

// acking sets how s acks (an ack that commits asynchronously, or each
// batch acked by the next receive) and returns it.
func (s *sluiceSystem) acking(async, withReceive bool) *sluiceSystem {
	s.asyncAck, s.ackWithReceive = async, withReceive
	return s
}

// keyExpr is the SQL expression of a message's ordering key.
func (s *sluiceSystem) keyExpr() string {
	if s.zipf {
		// Inverse of the continuous Zipf(1.1) distribution over [1, keys].
		return fmt.Sprintf(`'k' || floor(power((power(%d::float8, -0.1) - 1) * random() + 1, -10))::int`, s.keys)
	}
	return fmt.Sprintf(`'k' || floor(random() * %d)::int`, s.keys)
}

func (s *sluiceSystem) name() string {
	n := "sluice"
	switch s.engine {
	case 1:
		n = "sluice-v1"
	case 2:
		n = "sluice-v2"
	}
	if s.ackWithReceive {
		return n + " (ack with next receive)"
	}
	if s.asyncAck {
		return n + " (async ack)"
	}
	return n
}
func (*sluiceSystem) schemas() string { return "sluice%" }

func (s *sluiceSystem) setup(ctx context.Context, pool *pgxpool.Pool) error {
	if err := s.cleanup(ctx, pool); err != nil {
		return err
	}
	lease := s.lease
	if lease <= 0 {
		lease = defaultLease
	}
	opts := map[string]any{"lease": sluice.IntervalString(lease)}
	if s.lanes > 0 {
		opts["lanes"] = s.lanes
	}
	if s.slots > 0 {
		opts["slots"] = s.slots
	}
	if s.engine > 0 {
		opts["engine"] = s.engine
	}
	switch {
	case s.reclaim:
		opts["retention"], opts["rotate_interval"] = "0 seconds", reclaimRotation
	case s.retention > 0:
		opts["retention"] = sluice.IntervalString(s.retention)
	}
	if _, err := pool.Exec(ctx, `SELECT sluice.create_queue($1, $2::jsonb)`, benchQueue, opts); err != nil {
		return fmt.Errorf("sluice: creating queue %s: %w", benchQueue, err)
	}
	return nil
}

func (*sluiceSystem) cleanup(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, `SELECT sluice.drop_queue($1)`, benchQueue); err != nil {
		return fmt.Errorf("sluice: dropping queue %s: %w", benchQueue, err)
	}
	return nil
}

func (s *sluiceSystem) sendSQL(batch int) string {
	if s.keys > 0 {
		if batch == 1 {
			return `SELECT sluice.send('` + benchQueue + `', ` + bodyExpr + `, key => ` + s.keyExpr() + `)`
		}
		return `SELECT count(*) FROM sluice.send_batch('` + benchQueue + `', ARRAY(SELECT ` + bodyExpr + ` FROM generate_series(1, $2::int)),
			keys => ARRAY(SELECT ` + s.keyExpr() + ` FROM generate_series(1, $2::int)))`
	}
	if batch == 1 {
		return `SELECT sluice.send('` + benchQueue + `', ` + bodyExpr + `)`
	}
	return `SELECT count(*) FROM sluice.send_batch('` + benchQueue + `', ARRAY(SELECT ` + bodyExpr + ` FROM generate_series(1, $2::int)))`
}

func (s *sluiceSystem) consume(ctx context.Context, conn *pgxpool.Conn, batch int) (int, []float64, time.Duration, error) {
	if s.ackWithReceive {
		return s.consumeAckingPrevious(ctx, conn, batch)
	}
	start := time.Now()
	rows, err := conn.Query(ctx, `SELECT receipt, `+e2eExpr("body")+` FROM sluice.receive('`+benchQueue+`', 'default', $1)`, batch)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("sluice: receiving: %w", err)
	}
	receipts, lat, err := receiptsAndLatencies(rows)
	if err != nil {
		return 0, nil, 0, err
	}
	took := time.Since(start)
	if len(receipts) == 0 {
		return 0, nil, took, nil
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT sluice.ack('`+benchQueue+`', 'default', $1::text[], durable => $2)`, receipts, !s.asyncAck).Scan(&n); err != nil {
		return 0, nil, took, fmt.Errorf("sluice: acknowledging %d: %w", len(receipts), err)
	}
	if n != len(receipts) {
		return 0, nil, took, fmt.Errorf("sluice: ack completed %d of %d messages", n, len(receipts))
	}
	return len(receipts), lat, took, nil
}

// consumeAckingPrevious receives a batch and acks the connection's previous
// one in the same call (sluice.receive's ack); the messages of the last
// batch of a run stay leased.
func (s *sluiceSystem) consumeAckingPrevious(ctx context.Context, conn *pgxpool.Conn, batch int) (int, []float64, time.Duration, error) {
	var prev []string
	if v, ok := s.pending.Load(conn); ok {
		prev = v.([]string)
	}
	start := time.Now()
	rows, err := conn.Query(ctx, `SELECT receipt, `+e2eExpr("body")+` FROM sluice.receive('`+benchQueue+`', 'default', $1, ack => $2::text[])`, batch, prev)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("sluice: receiving: %w", err)
	}
	receipts, lat, err := receiptsAndLatencies(rows)
	if err != nil {
		return 0, nil, 0, err
	}
	s.pending.Store(conn, receipts)
	return len(receipts), lat, time.Since(start), nil
}

// receiptsAndLatencies reads the (receipt, end-to-end latency) rows of a
// sluice receive.
func receiptsAndLatencies(rows pgx.Rows) ([]string, []float64, error) {
	defer rows.Close()
	var receipts []string
	var lat []float64
	for rows.Next() {
		var r string
		var l float64
		if err := rows.Scan(&r, &l); err != nil {
			return nil, nil, fmt.Errorf("sluice: receiving: %w", err)
		}
		receipts, lat = append(receipts, r), append(lat, l)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("sluice: receiving: %w", err)
	}
	return receipts, lat, nil
}

// tableSystem is a plain table with a bigserial key: "bare" is the
// physical reference (INSERT only), "skiplocked" the DIY queue of the
// AlloyDB post and Que (INSERT; DELETE ... FOR UPDATE SKIP LOCKED
// RETURNING, one transaction per batch).
type tableSystem struct {
	table string // "bare" or "skiplocked"
}

func (t *tableSystem) name() string {
	if t.table == "bare" {
		return "bare INSERT"
	}
	return "SKIP LOCKED"
}
func (*tableSystem) schemas() string { return peerSchema }

func (t *tableSystem) qualified() string { return peerSchema + "." + t.table }

func (t *tableSystem) setup(ctx context.Context, pool *pgxpool.Pool) error {
	sql := fmt.Sprintf(`CREATE SCHEMA IF NOT EXISTS %s;
DROP TABLE IF EXISTS %s;
CREATE TABLE %s (id bigserial PRIMARY KEY, body jsonb NOT NULL, enqueued_at timestamptz NOT NULL DEFAULT now())`,
		peerSchema, t.qualified(), t.qualified())
	if _, err := pool.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: creating %s: %w", t.name(), t.qualified(), err)
	}
	return nil
}

func (t *tableSystem) cleanup(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+t.qualified()); err != nil {
		return fmt.Errorf("%s: dropping %s: %w", t.name(), t.qualified(), err)
	}
	return nil
}

func (t *tableSystem) sendSQL(batch int) string {
	if batch == 1 {
		return `INSERT INTO ` + t.qualified() + ` (body) VALUES (` + bodyExpr + `)`
	}
	return `INSERT INTO ` + t.qualified() + ` (body) SELECT ` + bodyExpr + ` FROM generate_series(1, $2::int)`
}

func (t *tableSystem) consume(ctx context.Context, conn *pgxpool.Conn, batch int) (int, []float64, time.Duration, error) {
	if t.table == "bare" {
		return 0, nil, 0, errors.New("the bare INSERT reference has no consumer")
	}
	q := t.qualified()
	start := time.Now()
	rows, err := conn.Query(ctx, `DELETE FROM `+q+` WHERE id = ANY(ARRAY(SELECT id FROM `+q+` ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)) RETURNING `+e2eExpr("body"), batch)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("%s: dequeuing: %w", t.name(), err)
	}
	lat, err := pgx.CollectRows(rows, pgx.RowTo[float64])
	if err != nil {
		return 0, nil, 0, fmt.Errorf("%s: dequeuing: %w", t.name(), err)
	}
	return len(lat), lat, time.Since(start), nil
}

// pgmqSystem is PGMQ installed from the SQL script of its PyPI wheel:
// pgmq.send / send_batch, pgmq.read with visibility timeout vt (whole
// seconds; 0: defaultLease), then pgmq.delete of the batch (two transactions, as
// its clients do).
type pgmqSystem struct {
	vt time.Duration
}

// vtSeconds is the visibility timeout of the reads, in seconds.
func (p pgmqSystem) vtSeconds() int {
	if p.vt < time.Second {
		return int(defaultLease / time.Second)
	}
	return int(p.vt / time.Second)
}

func (pgmqSystem) name() string    { return "PGMQ" }
func (pgmqSystem) schemas() string { return "pgmq" }

func (p pgmqSystem) setup(ctx context.Context, pool *pgxpool.Pool) error {
	if err := p.cleanup(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `SELECT pgmq.create($1)`, benchQueue); err != nil {
		return fmt.Errorf("PGMQ: creating queue %s: %w", benchQueue, err)
	}
	return nil
}

func (pgmqSystem) cleanup(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, `SELECT pgmq.drop_queue(queue_name) FROM pgmq.meta WHERE queue_name = $1`, benchQueue); err != nil {
		return fmt.Errorf("PGMQ: dropping queue %s: %w", benchQueue, err)
	}
	return nil
}

func (pgmqSystem) sendSQL(batch int) string {
	if batch == 1 {
		return `SELECT pgmq.send('` + benchQueue + `', ` + bodyExpr + `)`
	}
	return `SELECT count(*) FROM pgmq.send_batch('` + benchQueue + `', ARRAY(SELECT ` + bodyExpr + ` FROM generate_series(1, $2::int)))`
}

func (p pgmqSystem) consume(ctx context.Context, conn *pgxpool.Conn, batch int) (int, []float64, time.Duration, error) {
	start := time.Now()
	rows, err := conn.Query(ctx, `SELECT msg_id, `+e2eExpr("message")+` FROM pgmq.read('`+benchQueue+`', $2, $1)`, batch, p.vtSeconds())
	if err != nil {
		return 0, nil, 0, fmt.Errorf("PGMQ: reading: %w", err)
	}
	var ids []int64
	var lat []float64
	for rows.Next() {
		var id int64
		var l float64
		if err := rows.Scan(&id, &l); err != nil {
			rows.Close()
			return 0, nil, 0, fmt.Errorf("PGMQ: reading: %w", err)
		}
		ids, lat = append(ids, id), append(lat, l)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, 0, fmt.Errorf("PGMQ: reading: %w", err)
	}
	took := time.Since(start)
	if len(ids) == 0 {
		return 0, nil, took, nil
	}
	if _, err := conn.Exec(ctx, `SELECT count(*) FROM pgmq.delete('`+benchQueue+`', $1::bigint[])`, ids); err != nil {
		return 0, nil, took, fmt.Errorf("PGMQ: deleting %d: %w", len(ids), err)
	}
	return len(ids), lat, took, nil
}

// installPGMQ makes PGMQ available in the database: an existing pgmq
// schema is used as it is; otherwise the SQL script of the pgmq wheel
// (wheel, else one downloaded with "pip download pgmq --no-deps") is run,
// and remove drops the schema again. It returns the PGMQ version.
func installPGMQ(ctx context.Context, pool *pgxpool.Pool, wheel string) (version string, remove func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('pgmq.meta') IS NOT NULL`).Scan(&exists); err != nil {
		return "", noop, fmt.Errorf("looking for PGMQ: %w", err)
	}
	if exists {
		return "already installed", noop, nil
	}
	if wheel == "" {
		dir, err := os.MkdirTemp("", "sluice-bench-pgmq-")
		if err != nil {
			return "", noop, fmt.Errorf("downloading PGMQ: %w", err)
		}
		defer os.RemoveAll(dir)
		if wheel, err = downloadWheel(ctx, dir); err != nil {
			return "", noop, err
		}
	}
	script, version, err := readWheelSQL(wheel)
	if err != nil {
		return "", noop, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return "", noop, fmt.Errorf("installing PGMQ: %w", err)
	}
	defer conn.Release()
	// The simple protocol runs the whole multi-statement script.
	if _, err := conn.Conn().PgConn().Exec(ctx, script).ReadAll(); err != nil {
		_, _ = conn.Exec(ctx, `DROP SCHEMA IF EXISTS pgmq CASCADE`)
		return "", noop, fmt.Errorf("installing PGMQ %s from %s: %w", version, filepath.Base(wheel), err)
	}
	return version, func(ctx context.Context) error {
		if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS pgmq CASCADE`); err != nil {
			return fmt.Errorf("removing PGMQ: %w", err)
		}
		return nil
	}, nil
}

// downloadWheel runs pip to fetch the pgmq wheel into dir.
func downloadWheel(ctx context.Context, dir string) (string, error) {
	var errs []error
	for _, argv := range [][]string{{"pip3"}, {"pip"}, {"python3", "-m", "pip"}} {
		if _, err := exec.LookPath(argv[0]); err != nil {
			continue
		}
		args := append(argv[1:], "download", "pgmq", "--no-deps", "--only-binary", ":all:", "--quiet", "-d", dir)
		out, err := exec.CommandContext(ctx, argv[0], args...).CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out))))
			continue
		}
		matches, _ := filepath.Glob(filepath.Join(dir, "pgmq-*.whl"))
		if len(matches) == 1 {
			return matches[0], nil
		}
		errs = append(errs, fmt.Errorf("%s: no pgmq wheel downloaded", strings.Join(argv, " ")))
	}
	if len(errs) == 0 {
		return "", errors.New("downloading PGMQ: no pip found (pass --pgmq-wheel FILE)")
	}
	return "", fmt.Errorf("downloading PGMQ: %w", errors.Join(errs...))
}

// readWheelSQL returns pgmq/sql/pgmq.sql and pgmq/sql/VERSION from a wheel.
func readWheelSQL(wheel string) (script, version string, err error) {
	zr, err := zip.OpenReader(wheel)
	if err != nil {
		return "", "", fmt.Errorf("reading the PGMQ wheel: %w", err)
	}
	defer zr.Close()
	read := func(name string) (string, error) {
		for _, f := range zr.File {
			if f.Name != name {
				continue
			}
			rc, err := f.Open()
			if err != nil {
				return "", err
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			return string(b), err
		}
		return "", fmt.Errorf("%s: no %s in the wheel (this pgmq release ships no installable SQL script)", filepath.Base(wheel), name)
	}
	if script, err = read("pgmq/sql/pgmq.sql"); err != nil {
		return "", "", fmt.Errorf("reading the PGMQ wheel: %w", err)
	}
	version, _ = read("pgmq/sql/VERSION")
	return script, strings.TrimSpace(version), nil
}

// withPGMQ installs PGMQ for a scenario (installPGMQ): the note its report
// gives PGMQ and the removal to defer, or the error that skips PGMQ (no pip,
// no network), not the scenario.
func (r *runner) withPGMQ(ctx context.Context) (note string, remove func(), err error) {
	version, rm, err := installPGMQ(ctx, r.o.Pool, r.o.PGMQWheel)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("PGMQ %s, installed for the run from the SQL script of the pgmq PyPI wheel and removed afterwards.", version),
		func() {
			if err := rm(context.WithoutCancel(ctx)); err != nil {
				fmt.Fprintf(r.o.Out, "cleanup: %v\n", err)
			}
		}, nil
}
