package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// BenchmarkSendBatch100 measures what a batch send of 100 messages (the
// body of sluice-bench http's: {"pad": "x..."}, ~100 bytes) costs this Go
// process, beside the same batch over SQL, against a real PostgreSQL. Run
//
//	go test ./cmd/sluice/server -run '^$' -bench SendBatch100 -count 5 -cpuprofile cpu.out
//
// Each op is one request (or one SendBatch). go-cpu-us/op is this
// process's CPU time (user + system) per op, which leaves PostgreSQL's own
// work out: sql is the Go library alone; handler is the server's handler
// chain (routes, auth, limits, decode, SendBatchTx, response) called
// without a network; http and http-token add net/http on both sides over
// loopback, as sluice-bench http does (the client in the same process).
func BenchmarkSendBatch100(b *testing.B) {
	ctx := context.Background()
	url := pg.NewDatabase(b)
	newPool := func() *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			b.Fatal(err)
		}
		cfg.MaxConns = 32 // as sluice-bench http's pools
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		return pool
	}
	pool := newPool()
	client := sluice.NewClient(newPool())
	for _, q := range []string{"b_sql", "b_handler", "b_http", "b_token"} {
		if err := client.CreateQueue(ctx, q, &sluice.QueueOptions{DefaultGroup: sluice.Ptr(false)}); err != nil {
			b.Fatal(err)
		}
	}
	body := json.RawMessage(`{"pad":"` + strings.Repeat("x", 60) + `"}`)
	msgs := make([]sluice.BatchMessage, 100)
	withSub := make([]sluice.BatchMessage, 100) // what the token's server sends
	wire := make([]map[string]any, 100)
	for i := range msgs {
		msgs[i] = sluice.BatchMessage{Body: body}
		withSub[i] = sluice.BatchMessage{Body: body, Headers: json.RawMessage(`{"sluice_sub":"producer"}`)}
		wire[i] = map[string]any{"body": body}
	}
	reqBody, _ := json.Marshal(map[string]any{"messages": wire})

	tokens := filepath.Join(b.TempDir(), "tokens.json")
	tb, _ := json.Marshal(map[string]any{"tokens": []map[string]any{{"name": "producer", "token": tokProducer, "role": server.RoleProducer}}})
	if err := os.WriteFile(tokens, tb, 0o600); err != nil {
		b.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	open, err := server.New(server.Config{Pool: pool, Auth: server.AuthConfig{Insecure: true}, Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	authed, err := server.New(server.Config{Pool: pool, Auth: server.AuthConfig{TokensFile: tokens}, Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	serve := func(s *server.Server) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Serve(sctx, ln, 10*time.Second) }()
		b.Cleanup(func() { cancel(); <-done })
		return "http://" + ln.Addr().String()
	}
	openURL, authURL := serve(open), serve(authed)
	pgCPU := postgresCPU(ctx, b, pool)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128}}
	b.Cleanup(hc.CloseIdleConnections)

	post := func(url, token string) error {
		req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(reqBody))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := hc.Do(req)
		if err != nil {
			return err
		}
		out, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err == nil && res.StatusCode != http.StatusCreated {
			err = fmt.Errorf("POST %s: %d %s", url, res.StatusCode, out)
		}
		return err
	}
	cases := []struct {
		name string
		op   func() error
	}{
		{"sql", func() error {
			_, err := client.SendBatch(ctx, "b_sql", msgs, nil)
			return err
		}},
		{"sql-headers", func() error {
			_, err := client.SendBatch(ctx, "b_sql", withSub, nil)
			return err
		}},
		{"handler", func() error {
			req := httptest.NewRequestWithContext(ctx, "POST", "/v1/queues/b_handler/messages/batch", bytes.NewReader(reqBody))
			req.Header.Set("Content-Type", "application/json")
			req.Host = "127.0.0.1" // (not httptest's example.com: guardBrowser)
			rec := httptest.NewRecorder()
			open.Handler().ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				return fmt.Errorf("handler: %d %s", rec.Code, rec.Body)
			}
			return nil
		}},
		{"http", func() error { return post(openURL+"/v1/queues/b_http/messages/batch", "") }},
		{"http-token", func() error { return post(authURL+"/v1/queues/b_token/messages/batch", tokProducer) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if err := c.op(); err != nil { // warm: prepared statements, connections
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu0, pg0 := processCPU(), pgCPU()
			b.ResetTimer()
			for range b.N {
				if err := c.op(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "go-cpu-us/op")
			if pg0 >= 0 {
				b.ReportMetric(float64((pgCPU()-pg0).Microseconds())/float64(b.N), "pg-cpu-us/op")
			}
		})
	}
	// The same with 64 clients at once, as sluice-bench http runs them.
	for _, c := range cases {
		b.Run(c.name+"-64", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			cpu0, pg0 := processCPU(), pgCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.op(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "go-cpu-us/op")
			if pg0 >= 0 {
				b.ReportMetric(float64((pgCPU()-pg0).Microseconds())/float64(b.N), "pg-cpu-us/op")
			}
		})
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// postgresCPU returns a function that reads the CPU time used so far by
// the processes of the PostgreSQL server pool is connected to (the
// children of its postmaster: backends, WAL writer, checkpointer...), or
// -1 when that server's processes cannot be read (not on this machine, no
// /proc).
func postgresCPU(ctx context.Context, b *testing.B, pool *pgxpool.Pool) func() time.Duration {
	var backend int
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		b.Fatal(err)
	}
	postmaster := procStat(backend, 4) // ppid
	if postmaster <= 0 {
		return func() time.Duration { return -1 }
	}
	clk := 100.0 // USER_HZ on Linux
	return func() time.Duration {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return -1
		}
		var ticks int
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || procStat(pid, 4) != postmaster {
				continue
			}
			ticks += procStat(pid, 14) + procStat(pid, 15) // utime, stime
		}
		return time.Duration(float64(ticks) / clk * float64(time.Second))
	}
}

// procStat reads field i of /proc/pid/stat, numbered as in proc(5) (4
// ppid, 14 utime, 15 stime); -1 when it cannot.
func procStat(pid, i int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return -1
	}
	f := strings.Fields(s[end+1:])
	if i < 3 || i-3 >= len(f) {
		return -1
	}
	n, err := strconv.Atoi(f[i-3])
	if err != nil {
		return -1
	}
	return n
}
