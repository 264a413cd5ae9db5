package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/internal/pgserver"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

// Env is a running scenario: the server, the clients, the history.
type Env struct {
	T    *testing.T
	Ctx  context.Context
	Sc   *Scenario
	Hist *History
	Rng  *rand.Rand // for the injector goroutine only
	// Proxy is the proxy between the clients and the server, if any.
	Proxy *Proxy

	cfg   pgserver.Config
	srvMu sync.Mutex
	srv   *pgserver.Server
	gen   atomic.Int64 // server incarnation: incremented before each kill
	admin *pgxpool.Pool
	seed  uint64

	faultMu sync.Mutex
	faults  map[string]int
	dead    map[*Delivery]bool // deliveries held by consumers when they died

	producing, consuming, faulting atomic.Bool
	deathsWanted                   atomic.Int64
	wg                             sync.WaitGroup
}

// Fault counts one injected fault of kind.
func (e *Env) Fault(kind string) {
	e.faultMu.Lock()
	e.faults[kind]++
	e.faultMu.Unlock()
}

// Faults returns the count of kind so far.
func (e *Env) Faults(kind string) int {
	e.faultMu.Lock()
	defer e.faultMu.Unlock()
	return e.faults[kind]
}

// Faulting reports whether faults are still being injected (false during
// the drain).
func (e *Env) Faulting() bool { return e.faulting.Load() }

// Sleep waits d, or less if the scenario's context ends.
func (e *Env) Sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-e.Ctx.Done():
	}
}

// SleepRandom sleeps between min and max.
func (e *Env) SleepRandom(min, max time.Duration) {
	e.Sleep(min + time.Duration(e.Rng.Int64N(int64(max-min)+1)))
}

// Go runs f in a goroutine the scenario waits for before its checks.
func (e *Env) Go(f func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f()
	}()
}

// disturb other tests.
func (e *Env) startServer() {
	t := e.T
	dir, err := os.MkdirTemp("", "sluice-faults-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the server may run as another user
		t.Fatal(err)
	}
	e.cfg = pgserver.Config{Version: os.Getenv("SLUICE_PG_VERSION"), DataDir: filepath.Join(dir, "data")}
	srv, err := pgserver.Start(e.Ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.Port, e.cfg.Password = srv.Port(), srv.Password()
	e.srv = srv
}

func (e *Env) stopServer() {
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	if e.admin != nil {
		e.admin.Close()
	}
	if e.srv != nil {
		if err := e.srv.Stop(); err != nil {
			e.T.Errorf("stopping the server: %v", err)
		}
		e.srv = nil
	}
}

// KillPostgres kills every process of the server with SIGKILL, waits a
// random moment and starts it again on the same data directory and port.
func (e *Env) KillPostgres() {
	e.srvMu.Lock()
	defer e.srvMu.Unlock()
	// The incarnation changes before the kill and again once every process
	// is gone: a backend can still answer for a moment after the kill
	// starts, and what it committed may not survive.
	e.gen.Add(1)
	err := e.srv.Kill()
	e.gen.Add(1)
	if err != nil {
		e.T.Fatal(err)
	}
	e.srv = nil
	e.Fault("pg-kill")
	e.Sleep(time.Duration(e.Rng.IntN(300)) * time.Millisecond)
	var srv *pgserver.Server
	srv, err = pgserver.Start(e.Ctx, e.cfg)
	if err != nil {
		e.T.Fatalf("restart after kill %d: %v", e.Faults("pg-kill"), err)
	}
	e.srv = srv
}

func (e *Env) directURL() string {
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", e.cfg.Password, e.cfg.Port)
}

// newPool returns a pool for the clients: through the proxy if there is
// one, with a session statement_timeout if stmtTimeout > 0.
func (e *Env) newPool(maxConns int32, stmtTimeout time.Duration) *pgxpool.Pool {
	pool, err := e.NewPool(maxConns, stmtTimeout)
	if err != nil {
		e.T.Fatal(err)
	}
	return pool
}

// NewPool is newPool, returning the error.
func (e *Env) NewPool(maxConns int32, stmtTimeout time.Duration) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(e.directURL())
	if err != nil {
		return nil, err
	}
	if e.Proxy != nil {
		pcfg.ConnConfig.Port = uint16(e.Proxy.Port())
	}
	pcfg.MaxConns = maxConns
	pcfg.ConnConfig.ConnectTimeout = 3 * time.Second
	if stmtTimeout > 0 {
		pcfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(stmtTimeout.Milliseconds(), 10)
	}
	return pgxpool.NewWithConfig(e.Ctx, pcfg)
}

// setupQueue migrates and creates the queue and its groups, directly on the
// server; e.admin stays open for the drain's status checks.
func (e *Env) setupQueue() {
	t := e.T
	conn, err := pgx.Connect(e.Ctx, e.directURL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Apply(e.Ctx, conn, sqlsrc.FS); err != nil {
		t.Fatal(err)
	}
	conn.Close(e.Ctx)
	pcfg, err := pgxpool.ParseConfig(e.directURL())
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 2
	if e.admin, err = pgxpool.NewWithConfig(e.Ctx, pcfg); err != nil {
		t.Fatal(err)
	}
	client := sluice.NewClient(e.admin)
	if err := client.CreateQueue(e.Ctx, queue, &sluice.QueueOptions{DefaultGroup: sluice.Ptr(false), MaxAttempts: sluice.Ptr(1000),
		RotateInterval: sluice.Ptr(time.Second), Retention: sluice.Ptr(time.Microsecond)}); err != nil {
		t.Fatal(err)
	}
	for _, g := range e.Sc.Groups {
		if err := client.CreateGroup(e.Ctx, queue, g, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// status returns the queue's status, retrying while the server restarts.
func (e *Env) status() []sluice.Status {
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(e.Ctx, 30*time.Second)
		sts, err := sluice.NewClient(e.admin).Status(ctx, queue)
		cancel()
		if err == nil {
			return sts
		}
		if i == 20 || e.Ctx.Err() != nil {
			e.T.Errorf("status: %v", err)
			return nil
		}
		e.Sleep(250 * time.Millisecond)
	}
}

// drain waits until every committed message is acked (surely or maybe) by
// every group and the database shows nothing left for any group.
func (e *Env) drain(limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && e.Ctx.Err() == nil {
		left := 0
		for _, g := range e.Sc.Groups {
			left += e.Hist.remaining(g)
		}
		if left == 0 {
			sts := e.status()
			done := len(sts) == len(e.Sc.Groups)
			for _, st := range sts {
				done = done && st.Pending() == 0 // waiting messages included
			}
			if done {
				return true
			}
		}
		e.Sleep(100 * time.Millisecond)
	}
	return false
}

// opTimeout bounds every client call: a call cut off by it has an unknown
// outcome, as one whose connection broke.
