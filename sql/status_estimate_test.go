package sqlsrc_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// estStatus is the group 'default' of sluice.status with its estimated flag.
type estStatus struct {
	Ready, Waiting, Delayed, InFlight, Lag, Head int64
	Estimated                                    bool
}

// statusLimited reads the group 'default' of sluice.status(queue) with
// sluice.status_exact_limit set to limit for the call ("": the default).
func (b *bundle) statusLimited(queue, limit string) estStatus {
	b.t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck // read only
	if limit != "" {
		if _, err := tx.Exec(b.ctx, "SELECT set_config('sluice.status_exact_limit', $1, true)", limit); err != nil {
			b.t.Fatal(err)
		}
	}
	var s estStatus
	if err := tx.QueryRow(b.ctx, `SELECT ready, waiting, delayed, in_flight, lag, head, estimated
		FROM sluice.status($1) WHERE group_name = 'default'`, queue).Scan(
		&s.Ready, &s.Waiting, &s.Delayed, &s.InFlight, &s.Lag, &s.Head, &s.Estimated); err != nil {
		b.t.Fatalf("status: %v", err)
	}
	return s
}

func (b *bundle) wantLimited(what, queue, limit string, want estStatus) {
	b.t.Helper()
	if got := b.statusLimited(queue, limit); got != want {
		b.t.Fatalf("status %s (limit %q):\n got %+v\nwant %+v", what, limit, got, want)
	}
}

// sendN sends n messages to queue in one transaction (send_batch), with a
// delay if delay is not "".
func (b *bundle) sendN(queue string, n int, delay string) {
	b.t.Helper()
	var d any
	if delay != "" {
		d = delay
	}
	b.exec(`SELECT count(*) FROM sluice.send_batch($1, array(SELECT jsonb_build_object('n', g) FROM generate_series(1, $2) g),
		delay => $3::interval)`, queue, n, d)
}

// Messages not numbered yet are counted exactly up to
// sluice.status_exact_limit; beyond it, the rest is the ids the queue's
// sequence gave out after the last one counted, less the delayed messages
// among them, and estimated is true. So the estimate is exact for committed
// sends, and counts rolled-back sends too (docs/sql.md, sluice.status).
func TestStatusBacklogNotNumberedExactUpToTheLimitThenEstimated(t *testing.T) {
	t.Parallel()
	engines(t, statusBacklogNotNumberedExactUpToTheLimitThenEstimated)
}

func statusBacklogNotNumberedExactUpToTheLimitThenEstimated(t *testing.T, opts func(string) string) {
	b := setup(t)
	b.createQueue("a", opts(`{"lanes": 2}`))
	for range 3 {
		b.sendN("a", 10, "")
	}
	exact := estStatus{Ready: 30, Lag: 30}
	est := estStatus{Ready: 30, Lag: 30, Estimated: true}
	b.wantLimited("30 sent", "a", "", exact)
	b.wantLimited("30 sent", "a", "30", exact)
	b.wantLimited("30 sent", "a", "29", est)
	b.wantLimited("30 sent", "a", "10", est)
	b.wantLimited("30 sent", "a", "0", est)

	// A rolled-back send drew ids: the estimate counts them.
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, `SELECT count(*) FROM sluice.send_batch('a', array['1', '2', '3', '4', '5']::jsonb[])`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.sendN("a", 5, "")
	b.wantLimited("5 rolled back, 5 more sent", "a", "", estStatus{Ready: 35, Lag: 35})
	b.wantLimited("5 rolled back, 5 more sent", "a", "10", estStatus{Ready: 40, Lag: 40, Estimated: true})

	// Delayed messages after the last one counted are not in the estimate.
	b.sendN("a", 4, "1 hour")
	b.sendN("a", 6, "")
	b.wantLimited("4 delayed, 6 more sent", "a", "", estStatus{Ready: 41, Delayed: 4, Lag: 41})
	b.wantLimited("4 delayed, 6 more sent", "a", "10", estStatus{Ready: 46, Delayed: 4, Lag: 46, Estimated: true})

	// Once a receive numbered everything, nothing is estimated.
	ms := b.receive("a", "default", 1, "")
	if len(ms) != 1 {
		t.Fatalf("received %d", len(ms))
	}
	b.wantLimited("all numbered", "a", "0", estStatus{Ready: 40, Delayed: 4, InFlight: 1, Lag: 41, Head: 41})

	// A bad setting is an error, not a guess.
	tx, err = b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck // read only
	if _, err := tx.Exec(b.ctx, "SET LOCAL sluice.status_exact_limit = 'lots'"); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(b.ctx, "SELECT * FROM sluice.status('a')")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "SL006" {
		t.Fatalf("status with sluice.status_exact_limit = 'lots': %v, want SL006", err)
	}
}

// A round of numbering larger than what a receive cuts (4 cuts of 1,000)
// is left in progress; what it has not numbered yet is counted, in phase 2
// (messages committed since the round's previous snapshot), in phase 1
// (delayed messages come due), and for transactions that were in progress
// at the last cut.
//
// How much one receive numbers is an engine's detail, not the contract
// (docs/sql.md, sluice.status, says what status counts, not how far a
// receive numbers): engine 1 numbers 4 cuts of 1,000, engine 2 a cut of
// 4,096 messages (and every pending message come due at once, so its
// phase 1 leaves nothing to estimate). The contract checked on both: the
// numbered part and the part not numbered yet add up exactly, and beyond
// the limit the estimate is flagged.
func TestStatusCountsARoundInProgress(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		statusCountsARoundInProgress(t, opts, strings.Contains(opts(""), `"engine": 2`))
	})
}

func statusCountsARoundInProgress(t *testing.T, opts func(string) string, v2 bool) {
	b := setup(t)
	cut := map[bool]int64{false: 4000, true: 4096}[v2] // what a receive numbers of a backlog

	// Phase 2: 5,000 sent in one transaction, a receive numbers 4,000.
	b.createQueue("r", opts(`{"lanes": 2}`))
	b.sendN("r", 5000, "")
	if ms := b.receive("r", "default", 1, ""); len(ms) != 1 {
		t.Fatalf("received %d", len(ms))
	}
	b.wantLimited("phase 2 in progress", "r", "", estStatus{Ready: 4999, InFlight: 1, Lag: 5000, Head: cut})
	// (the rest of the round is one transaction's ids: the estimate is exact)
	b.wantLimited("phase 2 in progress", "r", "100", estStatus{Ready: 4999, InFlight: 1, Lag: 5000, Head: cut, Estimated: true})
	b.receive("r", "default", 1, "")
	// (engine 2 numbers the rest once a receive finds no lane with positions)
	done := map[bool]int64{false: 5000, true: cut}[v2]
	b.wantLimited("round done", "r", "", estStatus{Ready: 4998, InFlight: 2, Lag: 5000, Head: done})

	// Phase 1: 5,000 delayed messages, visible at a cut before they are
	// due, numbered by the first cut after.
	b.createQueue("p", opts(`{"lanes": 2}`))
	b.sendN("p", 5000, "1 second")
	b.sendN("p", 1, "")
	first := b.receive("p", "default", 1, "")
	if len(first) != 1 || b.ack("p", "default", first[0].Receipt) != 1 {
		t.Fatalf("received %d", len(first))
	}
	b.wantLimited("5,000 delayed", "p", "", estStatus{Delayed: 5000, Head: 1})
	time.Sleep(1100 * time.Millisecond)
	b.wantLimited("5,000 due, not numbered", "p", "", estStatus{Ready: 5000, Lag: 5000, Head: 1})
	// Beyond the limit, delayed messages come due are a lower bound.
	b.wantLimited("5,000 due, not numbered", "p", "100", estStatus{Ready: 100, Lag: 100, Head: 1, Estimated: true})
	if ms := b.receive("p", "default", 1, ""); len(ms) != 1 {
		t.Fatalf("received %d", len(ms))
	}
	if v2 {
		// (engine 2 numbers every pending message come due in one cut)
		b.wantLimited("all numbered", "p", "100", estStatus{Ready: 4999, InFlight: 1, Lag: 5000, Head: 5001})
	} else {
		b.wantLimited("phase 1 in progress", "p", "", estStatus{Ready: 4999, InFlight: 1, Lag: 5000, Head: 4001})
		// the 3,999 numbered after the cursor and 100 of the 1,000 not numbered
		b.wantLimited("phase 1 in progress", "p", "100",
			estStatus{Ready: 4099, InFlight: 1, Lag: 4100, Head: 4001, Estimated: true})
	}

	// A transaction in progress at the last cut commits afterwards.
	b.createQueue("f", opts(`{"lanes": 2}`))
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck // committed below
	if _, err := tx.Exec(b.ctx, `SELECT count(*) FROM sluice.send_batch('f', array['1', '2', '3']::jsonb[])`); err != nil {
		t.Fatal(err)
	}
	b.sendN("f", 2, "")
	if ms := b.receive("f", "default", 1, ""); len(ms) != 1 {
		t.Fatalf("received %d", len(ms))
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.wantLimited("3 committed after the cut", "f", "", estStatus{Ready: 4, InFlight: 1, Lag: 5, Head: 2})
	// (more than the limit: the rest from the transaction's first and last id)
	b.wantLimited("3 committed after the cut", "f", "2", estStatus{Ready: 4, InFlight: 1, Lag: 5, Head: 2, Estimated: true})
}

// Keyed messages not numbered yet wait behind the first of their key, as
// far as they are counted; beyond the limit they are in the estimate, as
// ready.
func TestStatusKeysNotNumberedBeyondTheLimit(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		b := setup(t)
		statusKeysNotNumberedBeyondTheLimit(b, opts)
	})
}

func statusKeysNotNumberedBeyondTheLimit(b *bundle, opts func(string) string) {
	b.createQueue("k", opts(`{"lanes": 2}`))
	for _, k := range []string{"a", "b", "a", "", "a", "b", "a", "", "a", "a"} {
		b.sendKeyed("k", `"m"`, k, 0)
	}
	// a: 6 (1 ready, 5 waiting), b: 2 (1 ready, 1 waiting), 2 unkeyed
	b.wantLimited("10 keyed and not", "k", "", estStatus{Ready: 4, Waiting: 6, Lag: 10})
	// counted a, b, a, "": one waits; the 6 others are estimated
	b.wantLimited("10 keyed and not", "k", "4", estStatus{Ready: 9, Waiting: 1, Lag: 10, Estimated: true})
	b.wantLimited("10 keyed and not", "k", "10", estStatus{Ready: 4, Waiting: 6, Lag: 10})
}

// What status reads of a backlog not numbered yet is bounded by the limit,
// not by the backlog.
func TestStatusReadsAtMostTheLimitOfABacklog(t *testing.T) {
	t.Parallel()
	engines(t, statusReadsAtMostTheLimitOfABacklog)
}

func statusReadsAtMostTheLimitOfABacklog(t *testing.T, opts func(string) string) {
	b := setup(t)
	b.createQueue("big", opts(`{"lanes": 2}`))
	b.exec("SELECT sluice.create_group('big', 'other')")
	b.sendN("big", 20000, "")
	qid := b.queueID("big")
	read := func(limit string) (int64, estStatus) {
		t.Helper()
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(b.ctx) //nolint:errcheck // read only
		if _, err := tx.Exec(b.ctx, "SELECT set_config('sluice.status_exact_limit', $1, true)", limit); err != nil {
			t.Fatal(err)
		}
		var s estStatus
		if err := tx.QueryRow(b.ctx, `SELECT ready, waiting, delayed, in_flight, lag, head, estimated
			FROM sluice.status('big') WHERE group_name = 'default'`).Scan(
			&s.Ready, &s.Waiting, &s.Delayed, &s.InFlight, &s.Lag, &s.Head, &s.Estimated); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := tx.QueryRow(b.ctx, `SELECT coalesce(sum(coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0)), 0)
			FROM pg_stat_xact_user_tables WHERE schemaname = $1 AND relname ~ '^(messages|msg)_'`, // (engine 1, 2)
			fmt.Sprintf("sluice_q%d", qid)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n, s
	}
	n, s := read("100")
	if want := (estStatus{Ready: 20000, Lag: 20000, Estimated: true}); s != want {
		t.Fatalf("status: %+v, want %+v", s, want)
	}
	// 3 kinds x 101 rows at most, for both groups together
	if n > 303 {
		t.Fatalf("status read %d message rows with a limit of 100", n)
	}
	n, s = read("30000")
	if want := (estStatus{Ready: 20000, Lag: 20000}); s != want || n < 20000 {
		t.Fatalf("status exact: %+v after reading %d rows, want %+v after 20000", s, n, want)
	}
}
