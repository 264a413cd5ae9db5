package sqlsrc_test

import "testing"

// statusRow is every column of sluice.status that can be checked exactly,
// with the oldest pending age reduced to whether there is one.
type statusRow struct {
	Ready, Delayed, InFlight, Dead, Lag int64
	Lwm, Head                           int64
	Pending                             bool
}

func (b *bundle) statusRow(queue string) statusRow {
	b.t.Helper()
	var r statusRow
	if err := b.pool.QueryRow(b.ctx, `SELECT ready, delayed, in_flight, dead, lag, lwm, head,
		oldest_pending_age IS NOT NULL FROM sluice.status($1) WHERE group_name = 'default'`, queue).Scan(
		&r.Ready, &r.Delayed, &r.InFlight, &r.Dead, &r.Lag, &r.Lwm, &r.Head, &r.Pending); err != nil {
		b.t.Fatalf("status: %v", err)
	}
	return r
}

func (b *bundle) wantStatus(what, queue string, want statusRow) {
	b.t.Helper()
	if got := b.statusRow(queue); got != want {
		b.t.Fatalf("status %s:\n got %+v\nwant %+v", what, got, want)
	}
}

// status is exact at every step, without a receive in between to refresh
// it: nothing stale once every message is acked, parked retries count as
// delayed (not in flight), and the low-water mark is the first position not
// completed.
func TestStatusIsExactAtEveryStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("s", `{"lanes": 4, "max_attempts": 5}`)
	b.exec(`SELECT sluice.send_batch('s', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 100) g))`)
	keyed := b.sendKeyed("s", `{"k": 1}`, "k", 0)
	b.exec(`SELECT sluice.send('s', '{"later": true}', delay => '1 hour')`)
	b.wantStatus("before any receive", "s", statusRow{Ready: 101, Delayed: 1, Lag: 101, Lwm: 1, Head: 0, Pending: true})

	got := b.receive("s", "default", 200, "")
	if len(got) != 101 {
		t.Fatalf("received %d, want 101", len(got))
	}
	b.wantStatus("all leased", "s", statusRow{Delayed: 1, InFlight: 101, Lag: 101, Lwm: 1, Head: 101, Pending: true})

	var rest []string
	var keyedPos int64
	for _, m := range got {
		if m.ID == keyed {
			keyedPos = m.Pos
			if !b.nack("s", "default", m.Receipt, "1 hour", "later") {
				t.Fatal("nack")
			}
			continue
		}
		rest = append(rest, m.Receipt)
	}
	b.wantStatus("one keyed message parked for an hour", "s",
		statusRow{Delayed: 2, InFlight: 100, Lag: 101, Lwm: 1, Head: 101, Pending: true})
	if n := b.ack("s", "default", rest...); n != 100 {
		t.Fatalf("acked %d", n)
	}
	b.wantStatus("all acked but the parked one", "s",
		statusRow{Delayed: 2, Lag: 1, Lwm: keyedPos, Head: 101, Pending: true})

	b.createQueue("d", `{"lanes": 3}`)
	b.exec(`SELECT sluice.send_batch('d', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 50) g))`)
	for {
		ms := b.receive("d", "default", 7, "")
		if len(ms) == 0 {
			break
		}
		b.ack("d", "default", receipts(ms)...)
	}
	b.wantStatus("drained", "d", statusRow{Lwm: 51, Head: 50})

	// A message taken out of order for its priority counts as in flight,
	// then completed, not as ready; a retry meant for another group is not
	// this group's.
	b.createQueue("p", `{"lanes": 1}`)
	b.exec("SELECT sluice.create_group('p', 'other')")
	b.exec(`SELECT sluice.send_batch('p', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 10) g))`)
	b.exec(`SELECT sluice.send('p', '"urgent"', priority => 5)`)
	urgent := b.receive("p", "default", 1, "")
	if len(urgent) != 1 || urgent[0].Priority != 5 {
		t.Fatalf("receive: %+v", urgent)
	}
	b.wantStatus("the prioritized one leased", "p", statusRow{Ready: 10, InFlight: 1, Lag: 11, Lwm: 1, Head: 11, Pending: true})
	b.ack("p", "default", urgent[0].Receipt)
	b.wantStatus("the prioritized one acked", "p", statusRow{Ready: 10, Lag: 10, Lwm: 1, Head: 11, Pending: true})
	other := b.receive("p", "other", 1, "")
	if !b.nack("p", "other", other[0].Receipt, "0 seconds", "retry") {
		t.Fatal("nack")
	}
	b.receive("p", "other", 1, "") // numbers the retry copy, meant for 'other' only
	b.wantStatus("with a retry of another group numbered", "p", statusRow{Ready: 10, Lag: 10, Lwm: 1, Head: 12, Pending: true})
}
