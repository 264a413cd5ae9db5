package cli_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

// The Python and TypeScript workers of TestMigrateUnderLoad, relative to
// this package: the venv make test-python makes (package sluicemq installed)
// and the client make test-typescript (or pack-typescript) compiles. Each is
// left out, with a log line, when missing, as TestClientsSmoke
// (bench/internal/bench) does; make test builds both before the Go tests.
const (
	loadPython   = "../../../clients/python/.venv/bin/python"
	loadTSClient = "../../../clients/typescript/dist/index.js"
)

// Every message of the load tests is leased for this long (the queues'
// lease option), so none is redelivered by an expiry while they run: each
// is then handled exactly once.
const loadLease = "10 minutes"

// Upgrades under load (issue 38, item 1): while a Go worker, a Python
// worker, a TypeScript worker and an HTTP consumer (receive + ack through
// "sluice server") drain an engine 1 and an engine 2 queue, and a Go
// producer and an HTTP producer send to both, the schema is migrated 20
// times with a reload of every function (the path of "sluice migrate" when
// the functions changed, forced by forgetting their digest). No call of any
// client fails (their error logs stay empty, every HTTP answer is a
// success), and every message sent is handled and acked exactly once.
func TestMigrateUnderLoad(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := server.NewDatabaseFrom(t, nil)
	conn := loadConn(t, ctx, url)
	if _, err := migrate.Apply(ctx, conn, sqlsrc.FS); err != nil {
		t.Fatal(err)
	}
	l := newLoad(t, ctx, url, map[string]string{
		"mload1": `{"lease": "` + loadLease + `"}`,
		"mload2": `{"engine": 2, "lease": "` + loadLease + `"}`,
	})
	l.startConsumers(true)
	l.startProducers()
	start := time.Now()
	for i := range 20 {
		time.Sleep(100 * time.Millisecond) // let the load run between the reloads too
		if _, err := conn.Exec(ctx, `DELETE FROM sluice.function_load`); err != nil {
			t.Fatal(err)
		}
		res, err := migrate.Apply(ctx, conn, sqlsrc.FS)
		if err != nil {
			t.Fatalf("migrate %d: %v", i+1, err)
		}
		if len(res.Functions) == 0 {
			t.Fatalf("migrate %d reloaded nothing; the test needs it to", i+1)
		}
	}
	t.Logf("20 migrations with a reload of every function in %v", time.Since(start).Round(time.Millisecond))
	l.finish(nil)
}

// The same across a real version change: a database installed at release
// 0.1.0 (sql/testdata/engine-0.1.0.tar.gz, as sql/upgrade_test.go installs
// it) with an engine 1 queue is migrated once to the current version while
// the Go and HTTP producers send to it (send's call is the same in both
// versions): no send fails, and the Go worker and the HTTP consumer, started
// right after the upgrade (as the new release's processes of a rolling
// deploy are), handle every message exactly once. They cannot run before
// it: this code's clients (the Go worker, the HTTP server, the Python and
// TypeScript workers) call sluice.receive with arguments 0.1.0 does not
// have.
func TestMigrateUnderLoadFrom010(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := server.NewDatabaseFrom(t, engineTarFS(t, "../../../sql/testdata/engine-0.1.0.tar.gz"))
	conn := loadConn(t, ctx, url)
	l := newLoad(t, ctx, url, map[string]string{"mold": `{"lease": "` + loadLease + `"}`})
	l.startProducers()
	time.Sleep(time.Second)
	res, err := migrate.Apply(ctx, conn, sqlsrc.FS)
	if err != nil {
		t.Fatalf("upgrade from 0.1.0: %v", err)
	}
	if len(res.Applied) == 0 {
		t.Fatal("the upgrade from 0.1.0 applied no migration")
	}
	t.Logf("upgrade from 0.1.0: %d migrations, to version %d", len(res.Applied), res.Version)
	l.startConsumers(false)
	time.Sleep(2 * time.Second) // load after the upgrade
	l.finish(nil)
}

// TestMigrateUnderLoadFrom010 with release 0.1.0's consumers and producers
// running across the upgrade (issue 38, item 1): a database installed at
// release 0.1.0 (sql/testdata/engine-0.1.0.tar.gz, as sql/upgrade_test.go
// installs it) with an engine 1 queue is migrated once to the current
// version while two consumers make 0.1.0's calls over SQL, as its Go
// library made them (queries.go of that release: receive, extend, nack of
// some first deliveries, ack) and a producer sends with 0.1.0's send; the
// Go and HTTP producers send throughout too (send's call is the same in
// both). This code's clients need the current schema (the Go worker and
// the HTTP server call sluice.receive with arguments 0.1.0 does not have;
// so do the Python and TypeScript workers, left out here): the Go worker
// and the HTTP consumer start right after the upgrade, as the new release's
// processes of a rolling deploy do, and compete with the old ones. No call
// fails (the upgrade runs in one transaction behind its fence; the old
// calls it catches complete, sql/functions/compat.sql), and every message
// is handled exactly once.
func TestMigrateUnderLoadFrom010OldConsumers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := server.NewDatabaseFrom(t, engineTarFS(t, "../../../sql/testdata/engine-0.1.0.tar.gz"))
	conn := loadConn(t, ctx, url)
	l := newLoad(t, ctx, url, map[string]string{"mold": `{"lease": "` + loadLease + `"}`})
	old, stopOld := context.WithCancel(ctx)
	var oldDone sync.WaitGroup
	for i := range 2 {
		oldDone.Add(1)
		go func() {
			defer oldDone.Done()
			l.sqlConsume(old, fmt.Sprintf("sql010-%d", i), "mold")
		}()
	}
	l.startProducers()
	l.startOldProducer()
	time.Sleep(time.Second)
	start := time.Now()
	res, err := migrate.Apply(ctx, conn, sqlsrc.FS)
	if err != nil {
		t.Fatalf("upgrade from 0.1.0: %v", err)
	}
	if len(res.Applied) == 0 {
		t.Fatal("the upgrade from 0.1.0 applied no migration")
	}
	t.Logf("upgrade from 0.1.0: %d migrations, to version %d, in %v", len(res.Applied), res.Version,
		time.Since(start).Round(time.Millisecond))
	l.startConsumers(false)
	time.Sleep(2 * time.Second) // load after the upgrade, on old and new consumers
	l.finish(func() {
		stopOld()
		oldDone.Wait()
	}, "sql010-0", "sql010-1")
}

// The calls of release 0.1.0's Go library (its queries.go).
const (
	sql010Send    = `SELECT sluice.send($1, $2::jsonb, $3::jsonb, $4::text, $5::interval, $6::int, $7::text)`
	sql010Receive = `SELECT id, attempt, receipt FROM (SELECT id, body, headers, key, priority, attempt, sent_at,
       receipt, lease_expires_at, pos FROM sluice.receive($1, $2, $3::int, $4::interval, $5::text)) r`
	sql010Extend = `SELECT sluice.extend($1, $2, $3::text[], $4::interval)`
	sql010Nack   = `SELECT sluice.nack($1, $2, $3, $4::interval, $5::text)`
	sql010Ack    = `SELECT sluice.ack($1, $2, $3::text[])`
)

// sqlConsume receives, extends and acks with the calls of release 0.1.0
// until ctx is done, recording as consumer who; it nacks (retry at once)
// the first delivery of every seventh message instead of acking it.
func (l *load) sqlConsume(ctx context.Context, who, q string) {
	bg := context.WithoutCancel(ctx) // (calls not cut short by ctx, as in httpConsume)
	for ctx.Err() == nil {
		rows, err := l.pool.Query(bg, sql010Receive, q, "default", 5, nil, who)
		if err != nil {
			l.fail("%s: receive: %v", who, err)
			return
		}
		var ids []int64
		var receipts []string
		var retry []string
		var id int64
		var attempt int
		var r string
		_, err = pgx.ForEachRow(rows, []any{&id, &attempt, &r}, func() error {
			if id%7 == 0 && attempt == 1 {
				retry = append(retry, r)
			} else {
				ids, receipts = append(ids, id), append(receipts, r)
			}
			return nil
		})
		if err != nil {
			l.fail("%s: receive: %v", who, err)
			return
		}
		if len(ids)+len(retry) == 0 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		var n int
		if err := l.pool.QueryRow(bg, sql010Extend, q, "default", append(receipts, retry...), loadLease).Scan(&n); err != nil ||
			n != len(ids)+len(retry) {
			l.fail("%s: extend: %d of %d, %v", who, n, len(ids)+len(retry), err)
			return
		}
		for _, r := range retry {
			var ok bool
			if err := l.pool.QueryRow(bg, sql010Nack, q, "default", r, "0 seconds", "again").Scan(&ok); err != nil || !ok {
				l.fail("%s: nack: %v, %v", who, ok, err)
				return
			}
		}
		if len(ids) == 0 {
			continue
		}
		if err := l.pool.QueryRow(bg, sql010Ack, q, "default", receipts).Scan(&n); err != nil || n != len(ids) {
			l.fail("%s: ack: %d of %d, %v", who, n, len(ids), err)
			return
		}
		for _, id := range ids {
			l.record(who, q, id)
		}
	}
}

// startOldProducer starts a producer that sends with release 0.1.0's call
// (as sql010), a message every 10ms to every queue in turn, until finish.
func (l *load) startOldProducer() {
	l.producers.Add(1)
	l.producerNames = append(l.producerNames, "sql010")
	go l.produce("sql010", func(q string, n int) (int64, bool) {
		var id int64
		err := l.pool.QueryRow(l.ctx, sql010Send, q, fmt.Sprintf(`{"n": %d}`, n), nil, nil, nil, 0, nil).Scan(&id)
		if err != nil {
			l.fail("0.1.0's send to %s: %v", q, err)
			return 0, false
		}
		return id, true
	})
}

func loadConn(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// load is the traffic of a TestMigrateUnderLoad run: producers recording
// what they sent and consumers recording what they handled, by "queue id".
type load struct {
	t       *testing.T
	ctx     context.Context
	queues  []string
	pool    *pgxpool.Pool
	client  *sluice.Client
	srv     *runningServer
	handled atomic.Int64

	mu   sync.Mutex
	sent map[string]string   // by "queue id": the producer
	got  map[string][]string // by "queue id": the consumers that handled it

	stopSend  chan struct{}
	producers sync.WaitGroup
	stopRecv  context.CancelFunc
	consumers sync.WaitGroup
	external  []*extWorker
	failures  atomic.Int64

	producerNames []string // the producers started, each of which must send
}

// newLoad creates the queues (name: options) and starts "sluice server" on
// the database.
func newLoad(t *testing.T, ctx context.Context, url string, queues map[string]string) *load {
	t.Helper()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l := &load{t: t, ctx: ctx, pool: pool, client: sluice.NewClient(pool),
		sent: map[string]string{}, got: map[string][]string{}, stopSend: make(chan struct{})}
	for q, opts := range queues {
		if _, err := pool.Exec(ctx, `SELECT sluice.create_queue($1, $2::jsonb)`, q, opts); err != nil {
			t.Fatalf("create queue %s: %v", q, err)
		}
		l.queues = append(l.queues, q)
	}
	sort.Strings(l.queues)
	none := func(string) string { return "" }
	l.srv = startServerCmd(t, none, "--database-url", url, "--insecure-no-auth")
	return l
}

// fail records a failed call of a client.
func (l *load) fail(format string, args ...any) {
	l.failures.Add(1)
	l.t.Errorf(format, args...)
}

// record notes that consumer handled message id of queue q.
func (l *load) record(consumer, q string, id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := q + " " + strconv.FormatInt(id, 10)
	l.got[k] = append(l.got[k], consumer)
	l.handled.Add(1)
}

// failWriter turns every line written to it (a Go worker's log) into a
// failure.
type failWriter struct {
	l   *load
	who string
}

func (w failWriter) Write(p []byte) (int, error) {
	w.l.fail("%s logged: %s", w.who, bytes.TrimSpace(p))
	return len(p), nil
}

// startConsumers starts the Go worker and the HTTP consumer on every
// queue, and with external the Python and TypeScript workers found.
func (l *load) startConsumers(external bool) {
	ctx, cancel := context.WithCancel(l.ctx)
	l.stopRecv = cancel
	logger := slog.New(slog.NewTextHandler(failWriter{l, "the Go worker"}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, q := range l.queues {
		l.consumers.Add(2)
		go func() {
			defer l.consumers.Done()
			err := l.client.Consume(ctx, q, "default", func(_ context.Context, m *sluice.Message) error {
				l.record("go", q, m.ID)
				return nil
			}, &sluice.ConsumeOptions{Concurrency: 4, Logger: logger})
			if err != nil {
				l.fail("the Go worker on %s: %v", q, err)
			}
		}()
		go func() {
			defer l.consumers.Done()
			l.httpConsume(ctx, q)
		}()
	}
	if !external {
		return
	}
	if _, err := os.Stat(loadPython); err != nil {
		l.t.Logf("no Python worker: no %s (make test-python makes it)", loadPython)
	} else {
		l.startExternal("python", loadPython, "testdata/migrate_load_worker.py")
	}
	lib, err := filepath.Abs(loadTSClient)
	if err != nil {
		l.t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	switch {
	case err != nil:
		l.t.Logf("no TypeScript worker: no node (%v)", err)
	case fileMissing(lib):
		l.t.Logf("no TypeScript worker: no %s (make test-typescript compiles it)", lib)
	default:
		l.startExternal("typescript", node, "testdata/migrate_load_worker.mjs", lib)
	}
}

func fileMissing(path string) bool {
	_, err := os.Stat(path)
	return err != nil
}

// httpConsume receives and acks through the server until ctx is done.
func (l *load) httpConsume(ctx context.Context, q string) {
	for ctx.Err() == nil {
		var rec struct {
			Messages []struct {
				ID      int64  `json:"id"`
				Receipt string `json:"receipt"`
			} `json:"messages"`
		}
		// Neither the receive nor the ack is cut short by ctx (a message
		// received but never acked would stay leased): the loop stops between
		// them.
		if !l.call(context.WithoutCancel(ctx), "/v1/queues/"+q+"/groups/default/receive", map[string]any{"max": 5}, 200, &rec) {
			return
		}
		if len(rec.Messages) == 0 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		receipts := make([]string, len(rec.Messages))
		for i, m := range rec.Messages {
			receipts[i] = m.Receipt
		}
		var ack struct {
			Acked int `json:"acked"`
		}
		if !l.call(context.WithoutCancel(ctx), "/v1/queues/"+q+"/groups/default/ack", map[string]any{"receipts": receipts}, 200, &ack) {
			return
		}
		if ack.Acked != len(receipts) {
			l.fail("HTTP ack on %s: %d acked of %d", q, ack.Acked, len(receipts))
			return
		}
		for _, m := range rec.Messages {
			l.record("http", q, m.ID)
		}
	}
}

// call POSTs body to the server's path and decodes the answer into out; a
// status other than want is a failure (false). A call cut short by ctx is
// not.
func (l *load) call(ctx context.Context, path string, body any, want int, out any) bool {
	b, err := json.Marshal(body)
	if err != nil {
		l.t.Error(err)
		return false
	}
	req, err := http.NewRequestWithContext(ctx, "POST", l.srv.url+path, bytes.NewReader(b))
	if err != nil {
		l.t.Error(err)
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			l.fail("POST %s: %v", path, err)
		}
		return false
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		l.fail("POST %s: %d %s", path, res.StatusCode, data)
		return false
	}
	if err := json.Unmarshal(data, out); err != nil {
		l.fail("POST %s: %v in %s", path, err, data)
		return false
	}
	return true
}

// startProducers starts a Go and an HTTP producer, each sending to every
// queue in turn, a message every 10ms, until finish.
func (l *load) startProducers() {
	l.producers.Add(2)
	l.producerNames = append(l.producerNames, "go", "http")
	go l.produce("go", func(q string, n int) (int64, bool) {
		id, err := l.client.Send(l.ctx, q, json.RawMessage(fmt.Sprintf(`{"n": %d}`, n)), nil)
		if err != nil {
			l.fail("Go send to %s: %v", q, err)
			return 0, false
		}
		return id, true
	})
	go l.produce("http", func(q string, n int) (int64, bool) {
		var res struct {
			ID int64 `json:"id"`
		}
		ok := l.call(l.ctx, "/v1/queues/"+q+"/messages", map[string]any{"body": map[string]any{"n": n}}, 201, &res)
		return res.ID, ok && res.ID > 0
	})
}

func (l *load) produce(who string, send func(q string, n int) (int64, bool)) {
	defer l.producers.Done()
	for n := 0; ; n++ {
		select {
		case <-l.stopSend:
			return
		case <-time.After(10 * time.Millisecond):
		}
		q := l.queues[n%len(l.queues)]
		id, ok := send(q, n)
		if !ok {
			return
		}
		l.mu.Lock()
		l.sent[q+" "+strconv.FormatInt(id, 10)] = who
		l.mu.Unlock()
	}
}

// finish stops the producers, waits until every message sent was handled
// (or a minute), stops the consumers (and with stopOthers those the caller
// started, named others), and checks: no failure, each message handled
// exactly once and acked (the queues hold nothing, not even a dead letter),
// every consumer handled some.
func (l *load) finish(stopOthers func(), others ...string) {
	t := l.t
	close(l.stopSend)
	l.producers.Wait()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && l.failures.Load() == 0 && !l.allHandled() {
		time.Sleep(50 * time.Millisecond)
	}
	l.stopRecv()
	l.consumers.Wait()
	if stopOthers != nil {
		stopOthers()
	}
	for _, w := range l.external {
		w.stop(l)
	}
	if s := l.srv.stderr.String(); strings.Contains(s, "level=ERROR") || strings.Contains(s, "level=WARN") {
		t.Errorf("sluice server logged errors:\n%s", s)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	byConsumer := map[string]int{}
	for k, who := range l.got {
		for _, c := range who {
			byConsumer[c]++
		}
		if _, ok := l.sent[k]; !ok {
			t.Errorf("message %s handled by %v but not sent", k, who)
		} else if len(who) != 1 {
			t.Errorf("message %s handled %d times, by %v", k, len(who), who)
		}
	}
	bySender := map[string]int{}
	lost := 0
	for k, who := range l.sent {
		bySender[who]++
		if len(l.got[k]) == 0 {
			if lost++; lost <= 10 {
				t.Errorf("message %s (sent by %s) never handled", k, who)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d messages never handled", lost, len(l.sent))
	}
	t.Logf("sent by producer: %v; handled by consumer: %v", bySender, byConsumer)
	for _, who := range l.producerNames {
		if bySender[who] == 0 {
			t.Errorf("the %s producer sent nothing", who)
		}
	}
	consumers := append([]string{"go", "http"}, others...)
	for _, w := range l.external {
		consumers = append(consumers, w.name)
	}
	for _, c := range consumers {
		if byConsumer[c] == 0 {
			t.Errorf("the %s consumer handled nothing: it took no part in the test", c)
		}
	}
	for _, q := range l.queues {
		st, err := l.client.Status(context.WithoutCancel(l.ctx), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.Ready+s.Waiting+s.Delayed+s.InFlight+s.Dead != 0 {
				t.Errorf("%s/%s after the load: %+v, want nothing left (every message acked)", q, s.Group, s)
			}
		}
	}
}

// allHandled tells whether every message sent was handled.
func (l *load) allHandled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.sent {
		if len(l.got[k]) == 0 {
			return false
		}
	}
	return true
}

// extWorker is a worker in another language, run as a process that prints
// "ready", then "QUEUE ID" per message handled, and its errors on stderr.
type extWorker struct {
	name   string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{} // stdout read to its end
}

// startExternal starts interp with args and the queues, on the database of
// l, and waits until it is ready.
func (l *load) startExternal(name, interp string, args ...string) {
	t := l.t
	cmd := exec.Command(interp, append(args, l.queues...)...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+l.pool.Config().ConnString())
	w := &extWorker{name: name, cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = w.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the %s worker: %v", name, err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	ready := make(chan struct{})
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if line == "ready" {
				close(ready)
				continue
			}
			q, id, ok := strings.Cut(line, " ")
			n, err := strconv.ParseInt(id, 10, 64)
			if !ok || err != nil {
				l.fail("the %s worker printed %q", name, line)
				continue
			}
			l.record(name, q, n)
		}
	}()
	select {
	case <-ready:
	case <-w.done:
		_ = cmd.Wait()
		t.Fatalf("the %s worker exited before it was ready: %v\n%s", name, cmd.ProcessState, w.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("the %s worker was not ready in 30s\n%s", name, w.stderr)
	}
	l.external = append(l.external, w)
}

// stop stops the worker with SIGTERM (it drains and acks) and checks that
// it exited 0 with nothing on stderr.
func (w *extWorker) stop(l *load) {
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		l.fail("signalling the %s worker: %v", w.name, err)
	}
	<-w.done
	if err := w.cmd.Wait(); err != nil {
		l.fail("the %s worker: %v", w.name, err)
	}
	if s := w.stderr.String(); s != "" {
		l.fail("the %s worker's errors:\n%s", w.name, s)
	}
}

// engineTarFS reads a released engine's sql/tables and sql/functions from a
// tarball (made with git archive of the release), as sql/upgrade_test.go's
// engineFS does.
func engineTarFS(t *testing.T, path string) fstest.MapFS {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return fsys
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		fsys[strings.TrimPrefix(h.Name, "sql/")] = &fstest.MapFile{Data: data}
	}
}
