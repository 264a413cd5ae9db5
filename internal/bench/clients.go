package bench

import (
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
// (the same as clients/python/bench/bench.py sends).
var clientsBody = json.RawMessage(`{"pad": "` + strings.Repeat("x", 60) + `"}`)

// Defaults of the clients scenario: the Python interpreter (with the
// package sluice installed, as make test-python does) and the script.
const (
	DefaultPython       = "clients/python/.venv/bin/python"
	DefaultPythonScript = "clients/python/bench/bench.py"
)

// clientOp is one measurement of the clients scenario.
type clientOp struct {
	label   string
	preload bool // the queue holds n messages first
	goRun   func(ctx context.Context, c *sluice.Client, n int) error
	pyModes []string // bench.py modes measured beside it
}

// clients measures the Python client (clients/python) beside the Go
// library on the same work, one after the other on the same server: send
// batches of 100 (one producer), drain batches of 100 (receive, then ack;
// one consumer) and a worker with a no-op handler (concurrency 10) draining
// a preload.
func (r *runner) clients(ctx context.Context) (*Result, error) {
	n := min(r.o.Preload, 20000)
	n -= n % 100
	python := r.o.Python
	if python == "" {
		python = DefaultPython
	}
	res := &Result{Params: map[string]any{"messages": n, "python": python}}
	for _, f := range []string{python, DefaultPythonScript} {
		if _, err := os.Stat(f); err != nil {
			res.Notes = []string{fmt.Sprintf("skipped: no %s (run from the repository's root; make test-python makes clients/python/.venv, --python names another interpreter)", f)}
			return res, nil
		}
	}
	client := sluice.NewClient(r.o.Pool)
	ops := []clientOp{
		{label: "send, batch 100", goRun: goSend, pyModes: []string{"send"}},
		{label: "drain, batch 100", preload: true, goRun: goDrain, pyModes: []string{"drain", "drain-async"}},
		{label: "worker, no-op handler", preload: true, goRun: goWorker, pyModes: []string{"worker", "worker-async"}},
	}
	t := Table{Title: fmt.Sprintf("clients: %d messages, Go library vs Python client (msg/s)", n),
		Columns: []string{"work", "client", "msg/s", "vs Go"}}
	defer func() { _, _ = client.DropQueue(context.WithoutCancel(ctx), clientsQueue) }()
	for _, op := range ops {
		goRate, err := r.clientCell(ctx, client, op, n, func() error { return op.goRun(ctx, client, n) })
		if err != nil {
			return nil, fmt.Errorf("%s, Go: %w", op.label, err)
		}
		t.Rows = append(t.Rows, []string{op.label, "Go", fmtRate(goRate), "1.00"})
		for _, mode := range op.pyModes {
			var secs float64
			rate, err := r.clientCell(ctx, client, op, n, func() (err error) {
				secs, err = runPython(ctx, python, r.o.Pool.Config().ConnString(), mode, n)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("%s, Python %s: %w", op.label, mode, err)
			}
			if secs > 0 {
				rate = float64(n) / secs // the script's own timing, without the interpreter's start
			}
			t.Rows = append(t.Rows, []string{op.label, "Python " + mode, fmtRate(rate), fmtRatio(rate, goRate)})
		}
	}
	res.Tables = []Table{t}
	res.Notes = []string{
		"Each cell runs alone on a fresh queue (8 lanes, lease 30 s). Go: sluice.Client.SendBatch, Receive + Ack, Consume (Concurrency 10). Python: clients/python/bench/bench.py with Client, AsyncClient, Worker (threads) and AsyncWorker, concurrency 10.",
		"The Python figures time the work inside the script (not the interpreter's start).",
	}
	return res, nil
}

// clientCell makes the queue afresh (preloaded with n messages if the op
// says so), runs fn and returns n / its duration.
func (r *runner) clientCell(ctx context.Context, c *sluice.Client, op clientOp, n int, fn func() error) (float64, error) {
	if _, err := c.DropQueue(ctx, clientsQueue); err != nil {
		return 0, err
	}
	if err := c.CreateQueue(ctx, clientsQueue, &sluice.QueueOptions{Lease: 30 * time.Second}); err != nil {
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

// runPython runs bench.py in mode on n messages and returns the seconds it
// measured.
func runPython(ctx context.Context, python, dsn, mode string, n int) (float64, error) {
	cmd := exec.CommandContext(ctx, python, DefaultPythonScript, mode, clientsQueue, fmt.Sprint(n))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn)
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return 0, fmt.Errorf("%s %s: %w\n%s", python, DefaultPythonScript, err, exit.Stderr)
		}
		return 0, err
	}
	var res struct {
		Seconds float64 `json:"seconds"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return 0, fmt.Errorf("reading the output of bench.py (%q): %w", out, err)
	}
	return res.Seconds, nil
}
