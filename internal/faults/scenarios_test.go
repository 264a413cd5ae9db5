package faults

import (
	"sync"
	"testing"
	"time"
)

// TestConsumerDeaths kills consumers mid-handler: a consumer that has
// received messages closes its connection without acking them, and a new
// one takes its place. With 1 s leases the messages must come again, to
// another consumer, with the next attempt, and not before the lease
// expired. Short: 6 deaths; long: 30.
func TestConsumerDeaths(t *testing.T) {
	deaths := ShortOrLong(6, 30)
	e := Run(t, Scenario{Name: "consumer deaths", Lease: time.Second, Inject: func(e *Env) {
		for i := 0; i < deaths; i++ {
			e.SleepRandom(150*time.Millisecond, 500*time.Millisecond)
			e.WantDeath()
		}
		e.Sleep(500 * time.Millisecond)
	}})
	if n := e.Faults("consumer-death"); n < deaths {
		t.Errorf("%d consumer deaths, want %d", n, deaths)
	}
	held, taken, bad := e.Takeovers()
	for _, b := range bad {
		t.Error(b)
	}
	t.Logf("dead consumers held %d deliveries: %d taken over by another consumer with the next attempt after the lease expired", held, taken)
	if held == 0 {
		t.Error("the dead consumers held no message: the scenario tested nothing")
	}
}

// TestConnectionCuts puts a loopback TCP proxy between every client and the
// server and, while producers and consumers run, cuts every connection
// (both ends get a reset) or stalls all traffic for up to 1.5 s. The pools
// reconnect; sends and acks whose outcome was lost are recorded as unknown.
// Short: 3 cuts; long: 8.
func TestConnectionCuts(t *testing.T) {
	cuts := ShortOrLong(3, 8)
	e := Run(t, Scenario{Name: "connection cuts", Proxy: true, Inject: func(e *Env) {
		for i := 0; i < cuts; i++ {
			e.SleepRandom(400*time.Millisecond, 1000*time.Millisecond)
			e.Proxy.Cut()
			e.Fault("conn-cut")
			if i%2 == 1 {
				e.SleepRandom(200*time.Millisecond, 500*time.Millisecond)
				e.Proxy.Stall(200*time.Millisecond + time.Duration(e.Rng.IntN(1300))*time.Millisecond)
				e.Fault("stall")
			}
		}
		e.Sleep(500 * time.Millisecond)
	}})
	if n := e.Faults("conn-cut"); n != cuts {
		t.Errorf("%d cuts, want %d", n, cuts)
	}
}

// TestStatementTimeouts gives the consumers' sessions a statement_timeout
// of 2, 5 or 25 ms, so that some receives and acks are cancelled (SQLSTATE
// 57014): a cancelled receive must hand out nothing, a cancelled ack must
// complete nothing (its lease expires and the message comes again). The
// drain runs without timeouts. Short: 4 s; long: 20 s.
func TestStatementTimeouts(t *testing.T) {
	run := time.Duration(ShortOrLong(4, 20)) * time.Second
	timeouts := []time.Duration{2 * time.Millisecond, 5 * time.Millisecond, 25 * time.Millisecond}
	e := Run(t, Scenario{Name: "statement timeouts", Consumers: 3,
		StatementTimeout: func(i int) time.Duration { return timeouts[i%len(timeouts)] },
		Inject:           func(e *Env) { e.Sleep(run) }})
	if e.Faults("stmt-timeout") == 0 {
		t.Error("no statement timed out: the scenario tested nothing")
	}
}

// TestClockSkew shows that a consumer's clock does not matter: leases are
// timed by the server's clock. A skewed consumer believes its lease lasts
// 2 s longer than it does (its clock is 2 s behind); it works until it
// believes 300 ms are left, then heartbeats (extend) and acks — in truth
// 1.7 s after its 1 s lease expired. The server must refuse both (counted
// 0), and the message must have gone to another consumer with the next
// attempt. Short: 3 skewed consumers x 2 messages; long: x 5.
func TestClockSkew(t *testing.T) {
	const skew, margin = 2 * time.Second, 300 * time.Millisecond
	rounds := ShortOrLong(2, 5)
	var mu sync.Mutex
	extended, acked, held := 0, 0, 0
	var skewed []*Delivery
	e := Run(t, Scenario{Name: "clock skew", Groups: []string{"g1"}, Lease: time.Second, Inject: func(e *Env) {
		var wg sync.WaitGroup
		for c := 0; c < 3; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pool, err := e.NewPool(1, 0)
				if err != nil {
					t.Error(err)
					return
				}
				defer pool.Close()
				localNow := func() time.Time { return time.Now().Add(-skew) } // 2 s behind
				for r := 0; r < rounds && e.Ctx.Err() == nil; {
					_, ds, err := e.Receive(pool, "g1", "skewed-"+string(rune('a'+c)), 1)
					if err != nil || len(ds) == 0 {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					r++
					d := ds[0]
					believedLeft := d.Expires.Sub(localNow())
					time.Sleep(believedLeft - margin)
					n, err := clientOf(pool).Extend(e.Ctx, queue, "g1", time.Second, d.Receipt)
					if err != nil {
						t.Errorf("extend: %v", err)
					}
					e.Ack(pool, "g1", ds)
					e.Fault("skewed-heartbeat+ack")
					mu.Lock()
					held++
					extended += n
					skewed = append(skewed, d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}})
	for _, d := range skewed {
		for _, a := range e.Hist.acksOf(d) {
			if a != AckStale {
				t.Errorf("message %d: the skewed consumer's late ack had outcome %d, want stale (counted 0)", d.ID, a)
			} else {
				acked++
			}
		}
		next := false
		for _, o := range e.Hist.Deliveries("g1", d.ID) {
			if o.Consumer != d.Consumer && o.Attempt == d.Attempt+1 && !o.At.Before(d.Expires.Add(-leaseTolerance)) {
				next = true
			}
		}
		if !next {
			t.Errorf("message %d (attempt %d, held by %s): not delivered to another consumer with the next attempt after the lease", d.ID, d.Attempt, d.Consumer)
		}
	}
	if extended != 0 {
		t.Errorf("%d late heartbeats renewed a lease, want 0", extended)
	}
	t.Logf("skewed consumers: %d messages held past their lease; %d heartbeats renewed (want 0); %d late acks refused (counted 0)", held, extended, acked)
	if held == 0 {
		t.Error("no skewed consumer held a message")
	}
}

// TestMixedFaults kills PostgreSQL, kills consumers and cuts connections
// together. Short: 1 kill, 3 consumer deaths, 2 cuts; long: 5, 20, 8.
func TestMixedFaults(t *testing.T) {
	kills, deaths, cuts := ShortOrLong(1, 5), ShortOrLong(3, 20), ShortOrLong(2, 8)
	Run(t, Scenario{Name: "mixed", Proxy: true, Lease: time.Second, Inject: func(e *Env) {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { // deaths, with a random source of their own
			defer wg.Done()
			for i := 0; i < deaths; i++ {
				time.Sleep(time.Duration(150+i*37%350) * time.Millisecond)
				e.WantDeath()
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; i < cuts; i++ {
				time.Sleep(time.Duration(400+i*113%600) * time.Millisecond)
				e.Proxy.Cut()
				e.Fault("conn-cut")
			}
		}()
		for i := 0; i < kills; i++ {
			e.SleepRandom(700*time.Millisecond, 1500*time.Millisecond)
			e.KillPostgres()
		}
		wg.Wait()
		e.Sleep(500 * time.Millisecond)
	}})
}

// TestHeldXmin runs producers and consumers while another session holds a
// transaction with an xid (and so the xmin horizon) for the whole run: the
// same checks hold, and a held horizon neither blocks delivery nor loses
// anything. (Throughput and dead tuples under a held xmin are measured by
// sql's TestHeldXminDoesNotDegrade and by sluice-bench xmin.)
func TestHeldXmin(t *testing.T) {
	run := time.Duration(ShortOrLong(5, 30)) * time.Second
	e := Run(t, Scenario{Name: "held xmin", Inject: func(e *Env) {
		pool, err := e.NewPool(1, 0)
		if err != nil {
			e.T.Error(err)
			return
		}
		defer pool.Close()
		tx, err := pool.Begin(e.Ctx)
		if err != nil {
			e.T.Error(err)
			return
		}
		defer tx.Rollback(e.Ctx) //nolint:errcheck // gone with the kill
		if _, err := tx.Exec(e.Ctx, "SELECT pg_current_xact_id()"); err != nil {
			e.T.Error(err)
			return
		}
		e.Fault("held-xmin")
		e.Sleep(run)
	}})
	if e.Faults("held-xmin") != 1 {
		t.Error("the transaction holding xmin never started")
	}
}
