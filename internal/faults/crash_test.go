package faults

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestMain prints the summary table of every scenario that ran.
func TestMain(m *testing.M) {
	code := m.Run()
	if rows := Summary(); len(rows) > 0 {
		fmt.Printf("\nfault scenarios (long: %v):\n%s\n", Long(), FormatSummary(rows))
	}
	os.Exit(code)
}

// TestPostgresCrashes kills PostgreSQL — every process, with SIGKILL, as a
// power loss would — again and again while producers send and two groups
// consume, and restarts it on the same data directory and port. The checks
// are those of Run; redeliveries of messages in flight at a crash are
// allowed (at-least-once: leases are unlogged).
// SLUICE_FAULT_KILLS sets the number of kills (default 3, long 10).
func TestPostgresCrashes(t *testing.T) {
	kills := ShortOrLong(3, 10)
	if v := os.Getenv("SLUICE_FAULT_KILLS"); v != "" {
		var err error
		if kills, err = strconv.Atoi(v); err != nil || kills < 1 {
			t.Fatalf("SLUICE_FAULT_KILLS=%q: want a whole number >= 1", v)
		}
	}
	e := Run(t, Scenario{Name: "postgres kills", Inject: func(e *Env) {
		for i := 0; i < kills; i++ {
			e.SleepRandom(500*time.Millisecond, 1200*time.Millisecond)
			e.KillPostgres()
		}
		e.Sleep(time.Second)
	}})
	if n := e.Faults("pg-kill"); n != kills {
		t.Errorf("%d kills, want %d", n, kills)
	}
}
