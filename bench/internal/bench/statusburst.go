package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// The statusburst scenario (issue 39): one token limited to one queue makes
// burstCallers concurrent GET /v1/status calls, back to back, while other
// tokens send, receive and ack at a steady pace; their latency is compared
// with the same work without the burst, in turns within the run.
const (
	burstCallers = 64 // the server's default per-token limit
	burstQueues  = 21 // the queues of the database (the 21)
	burstPool    = 16 // the command's default pool
	// burstLoops workers each do burstRounds rounds a second of send,
	// receive (max 1) and ack.
	burstLoops  = 2
	burstRounds = 50
	burstTurns  = 5
)

// The scenario's tokens: the status caller may use the first queue only;
// the producer and the consumer are other tokens.
const (
	burstStatusToken   = "bench-burst-status-token-0123456789"
	burstProducerToken = "bench-burst-producer-token-0123456789"
	burstConsumerToken = "bench-burst-consumer-token-0123456789"
)

func burstQueue(i int) string { return fmt.Sprintf("bench_burst_%02d", i) }

// burstBench is the server and the clients of the scenario.
type burstBench struct {
	r       *runner
	url     string
	srv     *server.Server
	work    *http.Client // the steady work's client
	callers *http.Client // the burst's client
}

// burstCell is one measured interval: the steady work's latencies, and the
// burst's calls when there was one.
type burstCell struct {
	ops             *recorder
	calls, refused  atomic.Int64
	callLat         *recorder
	elapsed         time.Duration
	send, recv, ack *recorder
}

func (r *runner) statusburst(ctx context.Context) (*Result, error) {
	d := r.dur(5 * time.Second)
	b, stop, skip, err := r.startBurst(ctx)
	if err != nil {
		return nil, err
	}
	if skip != "" {
		return &Result{Notes: []string{"Not run: " + skip}}, nil
	}
	defer stop()
	// Warm up: the statements get prepared and the connections opened.
	if _, err := b.cell(ctx, "warm-up", time.Second, false); err != nil {
		return nil, err
	}
	t := Table{Title: fmt.Sprintf("statusburst: send, receive and ack of other tokens (%d loops x %d rounds/s) without and with %d concurrent GET /v1/status of a token limited to 1 of %d queues; %s per cell, %d turns; pool of %d",
		burstLoops, burstRounds, burstCallers, burstQueues, d, burstTurns, burstPool),
		Columns: []string{"turn", "condition", "ops", "p50 ms", "p99 ms", "send p99", "receive p99", "ack p99", "status calls/s", "status p50 ms", "status refused", "p99 / idle p99"}}
	var ratios, p99s [2][]float64
	for turn := range burstTurns {
		var idleP99 float64
		for _, burst := range []bool{false, true} {
			name := "idle"
			if burst {
				name = "burst"
			}
			c, err := b.cell(ctx, fmt.Sprintf("%s (%d/%d)", name, turn+1, burstTurns), d, burst)
			if err != nil {
				return nil, err
			}
			s := c.ops.sorted()
			p99 := Percentile(s, .99)
			ratio := "1.00"
			if burst {
				ratio = fmtRatio(p99, idleP99)
				ratios[1] = append(ratios[1], p99/idleP99)
				p99s[1] = append(p99s[1], p99)
			} else {
				idleP99 = p99
				p99s[0] = append(p99s[0], p99)
			}
			calls, statusP50, refused := "–", "–", "–"
			if burst {
				calls = fmtRate(float64(c.calls.Load()) / c.elapsed.Seconds())
				statusP50 = fmtMS(Percentile(c.callLat.sorted(), .5))
				refused = fmt.Sprint(c.refused.Load())
			}
			t.Rows = append(t.Rows, []string{fmt.Sprint(turn + 1), name, fmt.Sprint(len(s)), fmtMS(Percentile(s, .5)), fmtMS(p99),
				fmtMS(Percentile(c.send.sorted(), .99)), fmtMS(Percentile(c.recv.sorted(), .99)), fmtMS(Percentile(c.ack.sorted(), .99)),
				calls, statusP50, refused, ratio})
		}
	}
	sum := Table{Title: "statusburst: medians over the turns",
		Columns: []string{"idle p99 ms", "burst p99 ms", "burst p99 / idle p99 (median of the turns)", "target"}}
	sum.Rows = append(sum.Rows, []string{fmtMS(Median(p99s[0])), fmtMS(Median(p99s[1])), fmt.Sprintf("%.2f", Median(ratios[1])), "<= 2.00"})
	return &Result{
		Params: map[string]any{"callers": burstCallers, "queues": burstQueues, "pool": burstPool, "loops": burstLoops,
			"rounds_per_s": burstRounds, "duration_s": d.Seconds(), "turns": burstTurns},
		Tables: []Table{t, sum},
		Notes: []string{
			fmt.Sprintf("sluice server runs in the benchmark's process with a tokens file (auth on), its defaults (per-token limit %d, reserved connections a quarter of the pool) and a pool of %d connections, as the command's. The database has %d queues.", burstCallers, burstPool, burstQueues),
			fmt.Sprintf("The steady work: %d loops, each %d rounds a second of a send (token of role sluice_producer), a receive of at most 1 and an ack of it (token of role sluice_consumer), on %s; ops are the three requests' latencies together.", burstLoops, burstRounds, burstQueue(0)),
			fmt.Sprintf("The burst: %d goroutines calling GET /v1/status back to back, keep-alive, with a token of role sluice_admin limited to %s (the queue the steady work uses); refused counts answers other than 200 (429, 503).", burstCallers, burstQueue(0)),
			"Idle and burst cells alternate, so that the drift of a shared machine's load weighs on each alike; a turn's ratio is its burst p99 over its idle p99, and the summary is the median of the turns' ratios. The server and both clients share the machine's CPUs with PostgreSQL.",
			"Target (issue 39): other tokens' send/receive/ack p99 within 2x of idle.",
		},
	}, nil
}

// startBurst makes the queues, the tokens file and the server; skip says
// why the scenario cannot run (the login role may not take the roles).
func (r *runner) startBurst(ctx context.Context) (b *burstBench, stop func(), skip string, err error) {
	cfg := r.o.Pool.Config()
	cfg.MaxConns = burstPool
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, "", err
	}
	var member bool
	if err := pool.QueryRow(ctx, `SELECT pg_has_role('sluice_admin', 'MEMBER') AND pg_has_role('sluice_producer', 'MEMBER')
	  AND pg_has_role('sluice_consumer', 'MEMBER')`).Scan(&member); err != nil || !member {
		pool.Close()
		return nil, nil, "the login role may not take sluice_admin, sluice_producer and sluice_consumer", err
	}
	sql := sluice.NewClient(r.o.Pool)
	var stops []func()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for i := range burstQueues {
			if _, err := sql.DropQueue(cctx, burstQueue(i)); err != nil {
				fmt.Fprintf(r.o.Out, "cleanup: %v\n", err)
			}
		}
		pool.Close()
	}
	for i := range burstQueues {
		_, _ = sql.DropQueue(ctx, burstQueue(i))
		err := sql.CreateQueue(ctx, burstQueue(i), &sluice.QueueOptions{Retention: orDefault(r.o.Retention), Lease: orDefault(r.o.Lease)})
		if err == nil && i == 0 {
			err = r.recordQueues(ctx, r.o.Pool, "sluice", burstQueue(i))
		}
		if err != nil {
			stopAll()
			return nil, nil, "", err
		}
	}
	dir, err := os.MkdirTemp("", "sluice-bench-burst")
	if err != nil {
		stopAll()
		return nil, nil, "", err
	}
	stops = append(stops, func() { _ = os.RemoveAll(dir) })
	tokens := filepath.Join(dir, "tokens.json")
	tb, _ := json.Marshal(map[string]any{"tokens": []map[string]any{
		{"name": "status", "token": burstStatusToken, "role": server.RoleAdmin, "queues": []string{burstQueue(0)}},
		{"name": "producer", "token": burstProducerToken, "role": server.RoleProducer},
		{"name": "consumer", "token": burstConsumerToken, "role": server.RoleConsumer},
	}})
	if err := os.WriteFile(tokens, tb, 0o600); err != nil {
		stopAll()
		return nil, nil, "", err
	}
	b = &burstBench{r: r,
		work:    &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4 * burstLoops}},
		callers: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * burstCallers}},
	}
	b.srv, b.url, err = serveHTTP(ctx, server.Config{Pool: pool, Auth: server.AuthConfig{TokensFile: tokens}, MaxConcurrent: burstCallers}, &stops)
	if err != nil {
		stopAll()
		return nil, nil, "", err
	}
	stops = append([]func(){b.work.CloseIdleConnections, b.callers.CloseIdleConnections}, stops...)
	return b, stopAll, "", nil
}

// cell runs the steady work for d, with the burst if burst.
func (b *burstBench) cell(ctx context.Context, label string, d time.Duration, burst bool) (*burstCell, error) {
	c := &burstCell{ops: &recorder{}, callLat: &recorder{}, send: &recorder{}, recv: &recorder{}, ack: &recorder{}}
	start := time.Now()
	_, err := b.r.watchCell(ctx, label, d, func(ctx context.Context, cn *counters) error {
		n := burstLoops
		if burst {
			n += burstCallers
		}
		return fanOut(ctx, n, func(i int) error {
			if i >= burstLoops {
				return b.callStatus(ctx, c)
			}
			return ignoreDone(ctx, paced(ctx, burstRounds, time.Now().Add(d), func() error {
				if err := b.round(ctx, c); err != nil {
					return err
				}
				cn.done.Add(1)
				return nil
			}))
		})
	})
	c.elapsed = time.Since(start)
	return c, err
}

// round sends a message, receives one and acks it, recording each
// request's latency.
func (b *burstBench) round(ctx context.Context, c *burstCell) error {
	path := "/v1/queues/" + burstQueue(0)
	t0 := time.Now()
	if err := b.do(ctx, b.work, "POST", path+"/messages", burstProducerToken, []byte(`{"body": {"n": 1}}`), nil); err != nil {
		return err
	}
	c.record(c.send, t0)
	var got struct {
		Messages []struct {
			Receipt string `json:"receipt"`
		} `json:"messages"`
	}
	t0 = time.Now()
	if err := b.do(ctx, b.work, "POST", path+"/groups/default/receive", burstConsumerToken, []byte(`{"max": 1}`), &got); err != nil {
		return err
	}
	c.record(c.recv, t0)
	if len(got.Messages) == 0 {
		return nil // the other loop took it
	}
	ack, _ := json.Marshal(map[string]any{"receipts": []string{got.Messages[0].Receipt}})
	t0 = time.Now()
	if err := b.do(ctx, b.work, "POST", path+"/groups/default/ack", burstConsumerToken, ack, nil); err != nil {
		return err
	}
	c.record(c.ack, t0)
	return nil
}

func (c *burstCell) record(r *recorder, t0 time.Time) {
	ms := msSince(t0)
	r.add(ms)
	c.ops.add(ms)
}

// callStatus calls GET /v1/status back to back until ctx ends (the call
// in progress then finishes, as in do).
func (b *burstBench) callStatus(ctx context.Context, c *burstCell) error {
	rctx := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		t0 := time.Now()
		req, err := http.NewRequestWithContext(rctx, "GET", b.url+"/v1/status", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+burstStatusToken)
		res, err := b.callers.Do(req)
		if err != nil {
			return ignoreDone(ctx, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			c.calls.Add(1)
			c.callLat.add(msSince(t0))
		} else {
			c.refused.Add(1)
		}
	}
	return nil
}

// do makes a request with token and decodes a 2xx answer into out (if not
// nil). A request in progress when the cell ends finishes (cancelling it
// would close a pool connection).
func (b *burstBench) do(ctx context.Context, client *http.Client, method, path, token string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), method, b.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	rb, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, rb)
	}
	if out != nil {
		return json.Unmarshal(rb, out)
	}
	return nil
}
