package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice"
)

// clientsQueue is the queue of the clients scenario.
const clientsQueue = "bench_clients"

// clientsBody is the body every message of the clients scenario carries
// (the same as the Python and TypeScript bench scripts send).
var clientsBody = json.RawMessage(`{"pad": "` + strings.Repeat("x", 60) + `"}`)

// Defaults of the clients scenario: the Python interpreter (with the
// package sluicemq installed, as make test-python does), node, and their
// bench scripts (the TypeScript one compiled by make test-typescript).
const (
	DefaultPython           = "clients/python/.venv/bin/python"
	DefaultPythonScript     = "clients/python/bench/bench.py"
	DefaultNode             = "node"
	DefaultTypeScriptScript = "clients/typescript/build/bench/bench.js"
)

// clientOp is one measurement of the clients scenario.
type clientOp struct {
	label   string
	work    string // send, drain or worker: the modes of an external client
	preload bool   // the queue holds n messages first
	goRun   func(ctx context.Context, c *sluice.Client, n int) error
}

// externalClient is a client measured by running its bench script as
// interp script MODE QUEUE N, which prints {"seconds": ...} as JSON.
type externalClient struct {
	name, interp, script string
	modes                map[string][]string // by clientOp.work
	missing              string              // what to do when interp or script is missing
}

// available returns "" when the client's interpreter and script exist,
// else a note saying that it is skipped.
func (e externalClient) available() string {
	if _, err := exec.LookPath(e.interp); err != nil {
		return fmt.Sprintf("%s skipped: no %s (%s)", e.name, e.interp, e.missing)
	}
	if _, err := os.Stat(e.script); err != nil {
		return fmt.Sprintf("%s skipped: no %s (%s)", e.name, e.script, e.missing)
	}
	return ""
}

// clients measures the Python client (clients/python) and the TypeScript
// client (clients/typescript) beside the Go library on the same work, one
// after the other on the same server: send batches of 100 (one producer),
// drain batches of 100 (receive, then ack; one consumer) and a worker with
// a no-op handler (concurrency 10) draining a preload. A client whose
// interpreter or script is missing is skipped with a note.
func (r *runner) clients(ctx context.Context) (*Result, error) {
	n := min(r.o.Preload, 20000)
	n -= n % 100
	python, node := cmp.Or(r.o.Python, DefaultPython), cmp.Or(r.o.Node, DefaultNode)
	res := &Result{Params: map[string]any{"messages": n, "python": python, "node": node}}
	var ext []externalClient
	for _, e := range []externalClient{
		{name: "Python", interp: python, script: DefaultPythonScript,
			modes:   map[string][]string{"send": {"send"}, "drain": {"drain", "drain-async"}, "worker": {"worker", "worker-async"}},
			missing: "run from the repository's root; make test-python makes clients/python/.venv, --python names another interpreter"},
		{name: "TypeScript", interp: node, script: DefaultTypeScriptScript,
			modes:   map[string][]string{"send": {"send"}, "drain": {"drain"}, "worker": {"worker"}},
			missing: "run from the repository's root; make test-typescript compiles clients/typescript, --node names another node"},
	} {
		if note := e.available(); note != "" {
			res.Notes = append(res.Notes, note)
			continue
		}
		ext = append(ext, e)
	}
	if len(ext) == 0 {
		return res, nil
	}
	names := make([]string, len(ext))
	for i, e := range ext {
		names[i] = e.name
	}
	client := sluice.NewClient(r.o.Pool)
	ops := []clientOp{
		{label: "send, batch 100", work: "send", goRun: goSend},
		{label: "drain, batch 100", work: "drain", preload: true, goRun: goDrain},
		{label: "worker, no-op handler", work: "worker", preload: true, goRun: goWorker},
	}
	title := fmt.Sprintf("clients: %d messages, Go library vs %s client", n, strings.Join(names, " and "))
	if len(ext) > 1 {
		title += "s"
	}
	t := Table{Title: title + " (msg/s)",
		Columns: []string{"work", "client", "msg/s", "vs Go"}}
	defer func() { _, _ = client.DropQueue(context.WithoutCancel(ctx), clientsQueue) }()
	dsn := r.o.Pool.Config().ConnString()
	for _, op := range ops {
		goRate, err := r.clientCell(ctx, client, op, n, func() error { return op.goRun(ctx, client, n) })
		if err != nil {
			return nil, fmt.Errorf("%s, Go: %w", op.label, err)
		}
		t.Rows = append(t.Rows, []string{op.label, "Go", fmtRate(goRate), "1.00"})
		for _, e := range ext {
			for _, mode := range e.modes[op.work] {
				var secs float64
				rate, err := r.clientCell(ctx, client, op, n, func() (err error) {
					secs, err = e.run(ctx, dsn, mode, n)
					return err
				})
				if err != nil {
					return nil, fmt.Errorf("%s, %s %s: %w", op.label, e.name, mode, err)
				}
				if secs > 0 {
					rate = float64(n) / secs // the script's own timing, without the interpreter's start
				}
				t.Rows = append(t.Rows, []string{op.label, e.name + " " + mode, fmtRate(rate), fmtRatio(rate, goRate)})
			}
		}
	}
	res.Tables = []Table{t}
	res.Notes = append(res.Notes,
		"Each cell runs alone on a fresh queue (8 lanes, lease 30 s). Go: sluice.Client.SendBatch, Receive + Ack, Consume (Concurrency 10). Python: clients/python/bench/bench.py with Client, AsyncClient, Worker (threads) and AsyncWorker, concurrency 10. TypeScript: clients/typescript/bench/bench.ts with Sluice and Worker (concurrency 10), on node.",
		"The Python and TypeScript figures time the work inside the script (not the interpreter's start).",
	)
	return res, nil
}

// clientCell makes the queue afresh (preloaded with n messages if the op
// says so), runs fn and returns n / its duration.
func (r *runner) clientCell(ctx context.Context, c *sluice.Client, op clientOp, n int, fn func() error) (float64, error) {
	if _, err := c.DropQueue(ctx, clientsQueue); err != nil {
		return 0, err
	}
	if err := c.CreateQueue(ctx, clientsQueue, &sluice.QueueOptions{Lease: sluice.Ptr(30 * time.Second)}); err != nil {
		return 0, err
	}
	if err := r.recordQueues(ctx, r.o.Pool, "sluice", clientsQueue); err != nil {
		return 0, err
	}
	if op.preload {
		if _, err := r.o.Pool.Exec(ctx, `SELECT count(*) FROM sluice.send_batch($1, ARRAY(SELECT $2::jsonb FROM generate_series(1, $3::int)))`,
			clientsQueue, clientsBody, n); err != nil {
			return 0, fmt.Errorf("preloading: %w", err)
		}
	}
	fmt.Fprintf(r.o.Out, "clients: %s ...\n", op.label)
	start := time.Now()
	if err := fn(); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func goSend(ctx context.Context, c *sluice.Client, n int) error {
	batch := make([]sluice.BatchMessage, 100)
	for i := range batch {
		batch[i].Body = clientsBody
	}
	for i := 0; i < n/100; i++ {
		if _, err := c.SendBatch(ctx, clientsQueue, batch, nil); err != nil {
			return err
		}
	}
	return nil
}

func goDrain(ctx context.Context, c *sluice.Client, n int) error {
	for done := 0; done < n; {
		msgs, err := c.Receive(ctx, clientsQueue, "default", &sluice.ReceiveOptions{Max: 100})
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			continue
		}
		receipts := make([]string, len(msgs))
		for i, m := range msgs {
			receipts[i] = m.Receipt
		}
		k, err := c.Ack(ctx, clientsQueue, "default", receipts...)
		if err != nil {
			return err
		}
		done += k
	}
	return nil
}

func goWorker(ctx context.Context, c *sluice.Client, n int) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var count atomic.Int64
	err := c.Consume(wctx, clientsQueue, "default", func(context.Context, *sluice.Message) error {
		if count.Add(1) >= int64(n) {
			cancel()
		}
		return nil
	}, &sluice.ConsumeOptions{Concurrency: 10})
	if err == nil && count.Load() < int64(n) {
		err = ctx.Err()
	}
	return err
}

// run runs the client's bench script in mode on n messages and returns the
// seconds it measured.
func (e externalClient) run(ctx context.Context, dsn, mode string, n int) (float64, error) {
	cmd := exec.CommandContext(ctx, e.interp, e.script, mode, clientsQueue, fmt.Sprint(n))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn)
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return 0, fmt.Errorf("%s %s: %w\n%s", e.interp, e.script, err, exit.Stderr)
		}
		return 0, err
	}
	var res struct {
		Seconds float64 `json:"seconds"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return 0, fmt.Errorf("reading the output of %s (%q): %w", e.script, out, err)
	}
	return res.Seconds, nil
}
