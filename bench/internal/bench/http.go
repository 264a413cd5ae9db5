package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// The http scenario: "sluice server" in this process (no auth) on
// 127.0.0.1, driven by httpClients concurrent HTTP clients, beside the same
// work over SQL (the Go library on a pool as large) in the same run.
const (
	httpClients   = 64
	httpQueue     = "bench_http"
	httpIdleQueue = "bench_http_idle"
	httpIdlePolls = 1000
	httpE2ERate   = 1000
	// httpPoolConns is the pool size of the server, and of the SQL side.
	httpPoolConns = 32
)

// httpToken is the producer token of the scenario's second server, which
// has auth on.
const httpToken = "bench-producer-token-0123456789"

// httpBench holds the server and the clients of the scenario.
type httpBench struct {
	r   *runner
	url string
	// authURL is the server with auth on ("" when the login role may not
	// take sluice_producer), stopAuth stops it (after the send cells, so
	// that one LISTEN connection is left for the idle long polls).
	authURL  string
	stopAuth func()
	client   *http.Client
	sql      *sluice.Client
	srvPool  *pgxpool.Pool
	sqlPool  *pgxpool.Pool
	srv      *server.Server
	body     json.RawMessage
	batch100 []byte
}

func (r *runner) http(ctx context.Context) (*Result, error) {
	d := r.dur(5 * time.Second)
	h, stop, err := r.startHTTP(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	t := Table{Title: fmt.Sprintf("http: %d concurrent clients, %s per cell in %d turns: HTTP (sluice server) beside SQL (the Go library), each on a pool of %d connections", httpClients, d, sendTurns, httpPoolConns),
		Columns: []string{"work", "HTTP msg/s", "HTTP with a token msg/s", "SQL msg/s", "HTTP / SQL", "HTTP with a token / SQL"}}
	var series []Series
	for _, b := range []int{1, 100} {
		sides := []sendSide{
			{fmt.Sprintf("http send batch %d", b), func(ctx context.Context, c *counters) error { return h.httpSend(ctx, h.url, "", b, c) }},
			{fmt.Sprintf("sql send batch %d", b), func(ctx context.Context, c *counters) error { return h.sqlSend(ctx, b, c) }},
		}
		if h.authURL != "" {
			sides = append(sides, sendSide{fmt.Sprintf("http send batch %d with a token", b), func(ctx context.Context, c *counters) error {
				return h.httpSend(ctx, h.authURL, httpToken, b, c)
			}})
		}
		cells, err := h.inTurns(ctx, d, sides)
		if err != nil {
			return nil, err
		}
		hc, sc := cells[0], cells[1]
		var tc *turnsCell
		if len(cells) > 2 {
			tc = cells[2]
		}
		tokenRate, tokenRatio := "–", "–"
		if tc != nil {
			tokenRate, tokenRatio = fmtRate(tc.rate()), fmtRatio(tc.rate(), sc.rate())
			series = append(series, Series{Name: fmt.Sprintf("HTTP+token b=%d", b), Points: tc.rates})
		}
		t.Rows = append(t.Rows, []string{fmt.Sprintf("send, batch %d", b), fmtRate(hc.rate()), tokenRate, fmtRate(sc.rate()),
			fmtRatio(hc.rate(), sc.rate()), tokenRatio})
		series = append(series, Series{Name: fmt.Sprintf("HTTP b=%d", b), Points: hc.rates}, Series{Name: fmt.Sprintf("SQL b=%d", b), Points: sc.rates})
	}
	h.stopAuth()
	lt := Table{Title: fmt.Sprintf("http: end to end, send to receipt, while 4 SQL producers send %d msg/s: long-poll receive + ack over HTTP (%d clients, max 10, wait 5s; acked messages per second), beside the Go worker over SQL (Client.Consume, %d handlers)", httpE2ERate, httpClients, httpClients),
		Columns: []string{"consumer", "consumed msg/s", "p50 ms", "p95 ms", "p99 ms", "max ms"}}
	for _, side := range []struct {
		name    string
		consume func(ctx context.Context, lat *recorder, c *counters) error
	}{
		{"HTTP long polls, ack per batch", func(ctx context.Context, lat *recorder, c *counters) error {
			return h.longPollConsumers(ctx, lat, c, false)
		}},
		{"HTTP long polls, acks with the next receive", func(ctx context.Context, lat *recorder, c *counters) error {
			return h.longPollConsumers(ctx, lat, c, true)
		}},
		{"SQL (Go worker)", h.workerConsumer},
	} {
		lat, e2e, err := h.e2e(ctx, side.name, d, side.consume)
		if err != nil {
			return nil, err
		}
		if s := lat.sorted(); len(s) > 0 {
			lt.Rows = append(lt.Rows, []string{side.name, fmtRate(e2e.rate()), fmtMS(Percentile(s, .5)), fmtMS(Percentile(s, .95)), fmtMS(Percentile(s, .99)), fmtMS(s[len(s)-1])})
		}
		if err := h.purge(ctx); err != nil {
			return nil, err
		}
	}
	idle, err := h.idlePolls(ctx, max(2*d, 2*time.Second))
	if err != nil {
		return nil, err
	}
	scrape, err := h.scrapeCost(ctx, r.o.Preload)
	if err != nil {
		return nil, err
	}
	return &Result{
		Params: map[string]any{"clients": httpClients, "duration_s": d.Seconds(), "e2e_rate": httpE2ERate, "idle_polls": httpIdlePolls, "scrape_backlog": r.o.Preload},
		Tables: []Table{t, lt, idle, scrape},
		Charts: []Chart{{File: "http-send.svg", Title: "http: send throughput over time", XLabel: "seconds", YLabel: "messages/s", Series: series}},
		Notes: []string{
			"The server runs in the benchmark's process, without auth (each request is still one transaction), on a pool of its own; HTTP clients use keep-alive connections.",
			"HTTP with a token: a second server on the same pool, with auth on and a static token of role sluice_producer: each request takes the role (set_config in the statement's pipeline) and each message records its sender (header sluice_sub). Not run when the login role may not take sluice_producer.",
			"SQL send batch 1 is Client.Send (sluice.send), batch 100 Client.SendBatch (one sluice.send_batch); the queue is purged between cells.",
			fmt.Sprintf("The send cells run in %d turns (HTTP, SQL, HTTP with a token, each for 1/%d of the duration, then again), so that the drift of a shared machine's load weighs on each side alike; a rate is the median of its turns' rates.", sendTurns, sendTurns),
			"/metrics reads sluice.status() once per scrape. The preloaded backlog has not been received, so none of it is numbered yet: status counts at most sluice.status_exact_limit (10,000) such messages of each kind exactly and estimates the rest (docs/sql.md, status), so a scrape should cost the same whatever the backlog. --preload sets it (issue 12's target: under 50 ms with 10,000,000).",
			"The end-to-end table's SQL row is the Go worker (LISTEN wake-ups, polling every 25 ms while messages flow, acks riding on the next receive) on the SQL side's pool: what a Go consumer gets from the same engine in the same run.",
			"Targets (issue 12): HTTP batch-100 send >= 0.8x SQL send_batch; long-poll end-to-end p50 <= 3 ms at 1,000 msg/s; idle long polls cost no database work beyond the listener and one sluice.status per queue and poll interval.",
		},
	}, nil
}

// sendTurns is how many turns the send cells take (see inTurns).
const sendTurns = 3

// sendSide is one side of a send comparison: its label and its work.
type sendSide struct {
	label string
	work  func(ctx context.Context, c *counters) error
}

// turnsCell is a side's cell over its turns: the per-second rates of all
// of them (for the chart), and each turn's mean rate.
type turnsCell struct {
	*cell
	turns []float64
}

// rate is the median of the turns' rates.
func (t *turnsCell) rate() float64 { return Median(t.turns) }

// inTurns runs the sides one after the other, sendTurns times, each for
// d/sendTurns (at least a second), purging the queue after each, and
// returns one cell per side.
func (h *httpBench) inTurns(ctx context.Context, d time.Duration, sides []sendSide) ([]*turnsCell, error) {
	slice := max(d/sendTurns, time.Second)
	cells := make([]*turnsCell, len(sides))
	for i := range cells {
		cells[i] = &turnsCell{cell: &cell{}}
	}
	for turn := range sendTurns {
		for i, side := range sides {
			c, err := h.r.watchCell(ctx, fmt.Sprintf("%s (%d/%d)", side.label, turn+1, sendTurns), slice, side.work)
			if err != nil {
				return nil, err
			}
			if err := h.purge(ctx); err != nil {
				return nil, err
			}
			all := cells[i]
			offset := all.elapsed.Seconds()
			for _, p := range c.rates {
				all.rates = append(all.rates, Point{X: offset + p.X, Y: p.Y})
			}
			all.count += c.count
			all.elapsed += c.elapsed
			if c.elapsed > 0 {
				all.turns = append(all.turns, float64(c.count)/c.elapsed.Seconds())
			}
		}
	}
	return cells, nil
}

// startHTTP makes the queues and pools and starts the server.
func (r *runner) startHTTP(ctx context.Context) (*httpBench, func(), error) {
	cfg := r.o.Pool.Config()
	cfg.MaxConns = httpPoolConns
	srvPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	sqlPool, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
	if err != nil {
		srvPool.Close()
		return nil, nil, err
	}
	h := &httpBench{r: r, srvPool: srvPool, sqlPool: sqlPool, sql: sluice.NewClient(sqlPool),
		client: &http.Client{Transport: &http.Transport{MaxIdleConns: 2 * httpIdlePolls, MaxIdleConnsPerHost: 2 * httpIdlePolls}}}
	h.body, _ = json.Marshal(map[string]any{"pad": r.pad})
	msgs := make([]map[string]any, 100)
	for i := range msgs {
		msgs[i] = map[string]any{"body": json.RawMessage(h.body)}
	}
	h.batch100, _ = json.Marshal(map[string]any{"messages": msgs})
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, q := range []string{httpQueue, httpIdleQueue} {
			if _, err := h.sql.DropQueue(cctx, q); err != nil {
				fmt.Fprintf(r.o.Out, "cleanup: %v\n", err)
			}
		}
	}
	cleanup()
	for _, q := range []string{httpQueue, httpIdleQueue} {
		err := h.sql.CreateQueue(ctx, q, &sluice.QueueOptions{Retention: orDefault(r.o.Retention), Lease: orDefault(r.o.Lease)})
		if err == nil {
			err = r.recordQueues(ctx, sqlPool, "sluice", q)
		}
		if err != nil {
			cleanup()
			srvPool.Close()
			sqlPool.Close()
			return nil, nil, err
		}
	}
	var stops []func()
	stopAll := func() {
		for _, stop := range stops {
			stop()
		}
		h.client.CloseIdleConnections()
		cleanup()
		srvPool.Close()
		sqlPool.Close()
	}
	var url string
	h.stopAuth = func() {}
	h.srv, url, err = serveHTTP(ctx, server.Config{Pool: srvPool, Auth: server.AuthConfig{Insecure: true}}, &stops)
	if err != nil {
		stopAll()
		return nil, nil, err
	}
	h.url = url
	var member bool
	if err := srvPool.QueryRow(ctx, `SELECT pg_has_role('sluice_producer', 'MEMBER')`).Scan(&member); err == nil && member {
		dir, err := os.MkdirTemp("", "sluice-bench-http")
		if err != nil {
			stopAll()
			return nil, nil, err
		}
		stops = append(stops, func() { _ = os.RemoveAll(dir) })
		tokens := filepath.Join(dir, "tokens.json")
		b, _ := json.Marshal(map[string]any{"tokens": []map[string]any{{"name": "bench", "token": httpToken, "role": "sluice_producer"}}})
		if err := os.WriteFile(tokens, b, 0o600); err != nil {
			stopAll()
			return nil, nil, err
		}
		if _, h.authURL, err = serveHTTP(ctx, server.Config{Pool: srvPool, Auth: server.AuthConfig{TokensFile: tokens}}, &stops); err != nil {
			stopAll()
			return nil, nil, err
		}
		h.stopAuth = sync.OnceFunc(stops[0])
		stops[0] = h.stopAuth
	}
	return h, stopAll, nil
}

// serveHTTP starts a sluice server on 127.0.0.1 (no log; no request
// limit unless cfg sets one) and adds its stop to stops.
func serveHTTP(ctx context.Context, cfg server.Config, stops *[]func()) (*server.Server, string, error) {
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = 1 << 20
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(cfg)
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln, 10*time.Second) }()
	*stops = append([]func(){func() { cancel(); <-done }}, *stops...)
	return srv, "http://" + ln.Addr().String(), nil
}

// watchCell runs work until d has passed, with the progress lines of watch.
func (r *runner) watchCell(ctx context.Context, label string, d time.Duration, work func(ctx context.Context, c *counters) error) (*cell, error) {
	var c counters
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	res, err := r.watch(ctx, label, &c, nil, func() error {
		err := work(wctx, &c)
		if wctx.Err() != nil && ctx.Err() == nil {
			err = nil // the cell's time is up
		}
		return err
	})
	return res, err
}

// post sends a JSON request to the server without auth and decodes a 2xx
// answer into out (if not nil).
func (h *httpBench) post(ctx context.Context, path string, body []byte, out any) error {
	return h.postTo(ctx, h.url, "", path, body, out)
}

// postTo is post to the server at url, with token if not "".
func (h *httpBench) postTo(ctx context.Context, url, token, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, "POST", url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %d %s", path, res.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func (h *httpBench) httpSend(ctx context.Context, url, token string, batch int, c *counters) error {
	one, _ := json.Marshal(map[string]any{"body": h.body})
	path, body := "/v1/queues/"+httpQueue+"/messages", one
	if batch > 1 {
		path, body = path+"/batch", h.batch100
	}
	// Requests in progress at the end of the cell finish: cancelling them
	// would close the pools' connections, and the next cell would open
	// them again (inTurns ends cells often).
	rctx := context.WithoutCancel(ctx)
	return fanOut(ctx, httpClients, func(int) error {
		for ctx.Err() == nil {
			if err := h.postTo(rctx, url, token, path, body, nil); err != nil {
				return ignoreDone(ctx, err)
			}
			c.done.Add(int64(batch))
		}
		return nil
	})
}

func (h *httpBench) sqlSend(ctx context.Context, batch int, c *counters) error {
	msgs := make([]sluice.BatchMessage, batch)
	for i := range msgs {
		msgs[i] = sluice.BatchMessage{Body: h.body}
	}
	rctx := context.WithoutCancel(ctx) // as in httpSend
	return fanOut(ctx, httpClients, func(int) error {
		for ctx.Err() == nil {
			var err error
			if batch == 1 {
				_, err = h.sql.Send(rctx, httpQueue, h.body, nil)
			} else {
				_, err = h.sql.SendBatch(rctx, httpQueue, msgs, nil)
			}
			if err != nil {
				return ignoreDone(ctx, err)
			}
			c.done.Add(int64(batch))
		}
		return nil
	})
}

func ignoreDone(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (h *httpBench) purge(ctx context.Context) error {
	_, err := h.sql.PurgeQueue(ctx, httpQueue)
	return err
}

// e2e sends at httpE2ERate over SQL (a timestamp in each body) while
// consume receives, and records send-to-receipt times.
func (h *httpBench) e2e(ctx context.Context, name string, d time.Duration, consume func(ctx context.Context, lat *recorder, c *counters) error) (*recorder, *cell, error) {
	lat := &recorder{}
	cell, err := h.r.watchCell(ctx, fmt.Sprintf("e2e at %d msg/s, %s", httpE2ERate, name), d, func(ctx context.Context, c *counters) error {
		return fanOut(ctx, 5, func(i int) error {
			if i == 4 {
				return consume(ctx, lat, c)
			}
			return ignoreDone(ctx, paced(ctx, httpE2ERate/4, time.Now().Add(d), func() error {
				body := []byte(`{"t": ` + strconv.FormatInt(time.Now().UnixNano(), 10) + `}`)
				_, err := h.sql.Send(ctx, httpQueue, body, nil)
				return err
			}))
		})
	})
	return lat, cell, err
}

// sentAt is the body of the e2e cell's messages.
type sentAt struct {
	T int64 `json:"t"`
}

// longPollConsumers are httpClients clients that long-poll over HTTP and
// ack each batch: by an ack request, or (ride) with their next receive, in
// the receive's "ack" (one request and one transaction for both).
func (h *httpBench) longPollConsumers(ctx context.Context, lat *recorder, c *counters, ride bool) error {
	path := "/v1/queues/" + httpQueue + "/groups/default/"
	return fanOut(ctx, httpClients, func(int) error {
		var pending []string // receipts to ack with the next receive
		for ctx.Err() == nil {
			recv, _ := json.Marshal(map[string]any{"max": 10, "wait": "5s", "ack": pending})
			var got struct {
				Messages []struct {
					Body    sentAt `json:"body"`
					Receipt string `json:"receipt"`
				} `json:"messages"`
			}
			if err := h.post(ctx, path+"receive", recv, &got); err != nil {
				return ignoreDone(ctx, err)
			}
			c.done.Add(int64(len(pending)))
			pending = nil
			if len(got.Messages) == 0 {
				continue
			}
			now := time.Now().UnixNano()
			receipts := make([]string, len(got.Messages))
			for j, m := range got.Messages {
				lat.add(float64(now-m.Body.T) / 1e6)
				receipts[j] = m.Receipt
			}
			if ride {
				pending = receipts
				continue
			}
			ack, _ := json.Marshal(map[string]any{"receipts": receipts})
			if err := h.post(ctx, path+"ack", ack, nil); err != nil {
				return ignoreDone(ctx, err)
			}
			c.done.Add(int64(len(receipts)))
		}
		return nil
	})
}

// workerConsumer is the Go library's worker on the SQL side's pool, with
// httpClients handlers that record the time and return (which acks).
func (h *httpBench) workerConsumer(ctx context.Context, lat *recorder, c *counters) error {
	err := h.sql.Consume(ctx, httpQueue, "default", func(_ context.Context, m *sluice.Message) error {
		var b sentAt
		if err := json.Unmarshal(m.Body, &b); err == nil {
			lat.add(float64(time.Now().UnixNano()-b.T) / 1e6)
		}
		c.done.Add(1)
		return nil
	}, &sluice.ConsumeOptions{Concurrency: httpClients, DrainTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return ignoreDone(ctx, err)
}

// idlePolls keeps httpIdlePolls long polls waiting on an empty queue for d
// and counts the server's database work meanwhile: the connections its pool
// handed out (every request and every sweep takes one; the LISTEN
// connection is outside the pool).
func (h *httpBench) idlePolls(ctx context.Context, d time.Duration) (Table, error) {
	t := Table{Title: fmt.Sprintf("http: %d idle long polls for %s", httpIdlePolls, d.Round(time.Second)),
		Columns: []string{"server statements/s (pool acquires)", "long polls waiting", "LISTEN connections"}}
	wait := min(d+5*time.Second, 30*time.Second)
	body := []byte(`{"wait": "` + wait.String() + `"}`)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var started atomic.Int64
	errc := make(chan error, 1)
	go func() {
		errc <- fanOut(pctx, httpIdlePolls, func(int) error {
			started.Add(1)
			err := h.post(pctx, "/v1/queues/"+httpIdleQueue+"/groups/default/receive", body, nil)
			return ignoreDone(pctx, err)
		})
	}()
	// Let the polls arrive and make their first receive.
	for deadline := time.Now().Add(30 * time.Second); started.Load() < httpIdlePolls && time.Now().Before(deadline); {
		sleep(ctx, 50*time.Millisecond)
	}
	sleep(ctx, 2*time.Second)
	a0 := h.srvPool.Stat().AcquireCount()
	start := time.Now()
	sleep(ctx, d)
	a1 := h.srvPool.Stat().AcquireCount()
	secs := time.Since(start).Seconds()
	var listeners int
	_ = h.sqlPool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'listen%'`).Scan(&listeners)
	waiting := h.waiting(ctx)
	t.Rows = append(t.Rows, []string{fmt.Sprintf("%.2f", float64(a1-a0)/secs), waiting, fmt.Sprint(listeners)})
	cancel()
	<-errc
	return t, nil
}

// waiting reads sluice_long_polls_waiting from the server's metrics.
func (h *httpBench) waiting(ctx context.Context) string {
	mfs, err := h.srv.Registry().Gather()
	if err != nil {
		return "?"
	}
	for _, mf := range mfs {
		if mf.GetName() == "sluice_long_polls_waiting" && len(mf.GetMetric()) == 1 {
			return fmt.Sprint(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	_ = ctx
	return "?"
}

// scrapeCost preloads n messages into the idle queue and times 10 scrapes
// of /metrics (the server's work: the handler reads sluice.status()).
func (h *httpBench) scrapeCost(ctx context.Context, n int) (Table, error) {
	t := Table{Title: fmt.Sprintf("http: GET /metrics with a backlog of %d messages (10 scrapes)", n),
		Columns: []string{"backlog", "p50 ms", "max ms"}}
	msgs := make([]sluice.BatchMessage, 1000)
	for i := range msgs {
		msgs[i] = sluice.BatchMessage{Body: h.body}
	}
	for left := n; left > 0; left -= len(msgs) {
		if _, err := h.sql.SendBatch(ctx, httpIdleQueue, msgs[:min(left, len(msgs))], nil); err != nil {
			return t, fmt.Errorf("preloading: %w", err)
		}
	}
	lat := &recorder{}
	for range 10 {
		req, err := http.NewRequestWithContext(ctx, "GET", h.url+"/metrics", nil)
		if err != nil {
			return t, err
		}
		t0 := time.Now()
		res, err := h.client.Do(req)
		if err != nil {
			return t, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return t, fmt.Errorf("GET /metrics: %d", res.StatusCode)
		}
		lat.add(msSince(t0))
	}
	s := lat.sorted()
	t.Rows = append(t.Rows, []string{fmt.Sprint(n), fmtMS(Percentile(s, .5)), fmtMS(s[len(s)-1])})
	return t, nil
}
