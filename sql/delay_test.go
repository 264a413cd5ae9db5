package sqlsrc_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestMaxDelay: send, send_batch and an explicit nack delay are bounded by
// the queue's max_delay option (365 days unless set), with SL006, and
// nothing is enqueued; the option is validated and can be changed (issue 15,
// item 4).
func TestMaxDelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("d", "")
	b.createQueue("short", `{"max_delay": "1 hour"}`)
	if got := b.int64(`SELECT count(*) FROM sluice.list_queues() WHERE queue = 'd' AND options->>'max_delay' = '365 days'`); got != 1 {
		t.Errorf("list_queues does not show max_delay 365 days for a new queue")
	}
	for _, tc := range []struct{ sql, state string }{
		{`SELECT sluice.send('d', '1', delay => '200000 years')`, "SL006"},
		{`SELECT sluice.send('d', '1', delay => '366 days')`, "SL006"},
		{`SELECT sluice.send('short', '1', delay => '61 minutes')`, "SL006"},
		{`SELECT sluice.send_batch('short', ARRAY['1', '2']::jsonb[], delay => '2 hours')`, "SL006"},
		{`SELECT sluice.send_batch('d', ARRAY['1']::jsonb[], delay => '1000 years')`, "SL006"},
		{`SELECT sluice.send('d', '1', delay => '-1 second')`, "SL006"},
		{`SELECT sluice.create_queue('bad', '{"max_delay": "400 days"}')`, "SL007"},
		{`SELECT sluice.create_queue('bad', '{"max_delay": "-1 hour"}')`, "SL007"},
		{`SELECT sluice.alter_queue('short', '{"max_delay": 5}')`, "SL007"},
	} {
		if _, err := b.pool.Exec(b.ctx, tc.sql); sqlstate(err) != tc.state {
			t.Errorf("%s: %v, want SQLSTATE %s", tc.sql, err, tc.state)
		}
	}
	if n := b.int64(`SELECT count(*) FROM sluice.messages`); n != 0 {
		t.Errorf("%d messages enqueued by refused sends", n)
	}
	b.exec(`SELECT sluice.send('d', '1', delay => '365 days')`)
	b.exec(`SELECT sluice.send('short', '1', delay => '1 hour')`)
	b.exec(`SELECT sluice.send_batch('short', ARRAY['1']::jsonb[], delay => '30 minutes')`)

	// nack: an explicit delay up to max_delay.
	b.exec(`SELECT sluice.send('short', '2')`)
	ms := b.receive("short", "default", 1, "")
	if len(ms) != 1 {
		t.Fatalf("received %d messages, want 1", len(ms))
	}
	if _, err := b.pool.Exec(b.ctx, `SELECT sluice.nack('short', 'default', $1, '2 hours')`, ms[0].Receipt); sqlstate(err) != "SL006" {
		t.Errorf("nack with a delay over max_delay: %v, want SL006", err)
	}
	if !b.nack("short", "default", ms[0].Receipt, "1 hour", "") {
		t.Errorf("nack with a delay of max_delay: receipt not current")
	}

	b.exec(`SELECT sluice.alter_queue('short', '{"max_delay": "2 hours"}')`)
	b.exec(`SELECT sluice.send('short', '1', delay => '2 hours')`)
	b.exec(`SELECT sluice.alter_queue('short', '{"max_delay": "0 seconds"}')`)
	if _, err := b.pool.Exec(b.ctx, `SELECT sluice.send('short', '1', delay => '1 second')`); sqlstate(err) != "SL006" {
		t.Errorf("send with a delay on a queue with max_delay 0: %v, want SL006", err)
	}
	b.exec(`SELECT sluice.send('short', '1', delay => '0 seconds')`)
}

// TestDelayedMessageDoesNotPinReclaim: a message delayed far into the future
// does not keep its storage slot from being reclaimed: reclaim moves it into
// the current slot, where it is still delivered when due (exactly once),
// and the queue keeps rotating and reclaiming (issue 15, item 4). On both
// engines (engine 2 writes the message's copy and its pending row in the
// current slot).
func TestDelayedMessageDoesNotPinReclaim(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) {
			t.Parallel()
			delayedMessageDoesNotPinReclaim(t, engine)
		})
	}
}

func delayedMessageDoesNotPinReclaim(t *testing.T, engine int) {
	b := setup(t)
	b.createQueue("far", fmt.Sprintf(`{"rotate_interval": "200 milliseconds", "retention": "0 seconds", "lanes": 2,
		"engine": %d}`, engine))
	qid := b.queueID("far")
	stored := b.messagesTableOf("far")
	b.exec(`SELECT sluice.send('far', '"far"', delay => '300 days')`)
	b.exec(`SELECT sluice.send('far', '"soon"', delay => '4 seconds')`)
	start := time.Now()
	var soon int
	sent, acked := 0, 0
	for time.Since(start) < 7*time.Second {
		b.exec(`SELECT sluice.send('far', '"now"')`)
		sent++
		for _, m := range b.receive("far", "default", 100, "") {
			switch m.Body {
			case `"far"`:
				t.Fatalf("the message delayed by 300 days was delivered")
			case `"soon"`:
				soon++
				if time.Since(start) < 4*time.Second {
					t.Errorf("the message delayed by 4 s was delivered after %v", time.Since(start))
				}
			}
			acked += b.ack("far", "default", m.Receipt)
		}
		b.exec(`SELECT * FROM sluice.maintain()`)
		time.Sleep(100 * time.Millisecond)
	}
	for _, m := range b.receive("far", "default", 100, "") {
		if m.Body == `"soon"` {
			soon++
		}
		b.ack("far", "default", m.Receipt)
	}
	if soon != 1 {
		t.Errorf("the message delayed by 4 s was delivered %d times, want once", soon)
	}
	reclaimed := b.int64(`SELECT count(*) FROM sluice.reclaim WHERE queue_id = $1`, qid)
	if b.int64(`SELECT count(*) FROM sluice.reclaim WHERE queue_id = $1 AND epoch = 0`, qid) != 1 || reclaimed < 3 {
		t.Errorf("reclaimed %d epochs (epoch 0, where the delayed messages were sent, among them: %v), want at least 3",
			reclaimed, b.int64(`SELECT count(*) FROM sluice.reclaim WHERE queue_id = $1 AND epoch = 0`, qid) == 1)
	}
	st := b.status("far")["default"]
	if st.Delayed != 1 || st.Ready != 0 || st.InFlight != 0 {
		t.Errorf("status: delayed %d, ready %d, in flight %d; want 1, 0, 0", st.Delayed, st.Ready, st.InFlight)
	}
	if n := b.int64(fmt.Sprintf(`SELECT count(*) FROM %s WHERE body = '"far"'`, stored)); n != 1 {
		t.Errorf("%d copies of the far message, want 1", n)
	}
	t.Logf("sent %d, acked %d, reclaimed %d epochs", sent, acked, reclaimed)
}

// A receive beside many messages delayed for later reads about as much as
// without them: its look for delayed messages that came due since the
// newest cut reads the due-time index from there to now, not every delayed
// message. (Written with clock_timestamp() in the condition, the scan was
// bounded below only and fetched every message delayed past the newest cut,
// on every receive: beside 100,000 messages delayed by an hour a receive
// took 92 ms, measured on PostgreSQL 15.) Counted in rows the receive's
// transaction fetched from the queue's messages by index
// (pg_stat_xact_user_tables), not in time.
func TestReceiveBesideDelayedMessagesIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lease": "1 hour"}`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 20000) g),
	                                 delay => interval '1 hour')`)
	b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 20) g))`)
	if got := len(b.receive("q", "default", 1, "1 hour")); got != 1 {
		t.Fatalf("the first receive got %d messages, want 1", got)
	}
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'q'"))
	// (counted as a difference within the transaction: the view also holds
	// the counts of the connection's earlier transactions not yet reported)
	fetchedSoFar := func(tx pgx.Tx) int64 {
		var v int64
		if err := tx.QueryRow(b.ctx, `SELECT coalesce(sum(idx_tup_fetch), 0) FROM pg_stat_xact_user_tables
		                              WHERE schemaname = $1 AND relname LIKE 'messages%'`, schema).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for i := 0; i < 3; i++ {
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		before := fetchedSoFar(tx)
		if err := tx.QueryRow(b.ctx, `SELECT count(*) FROM sluice.receive('q', 'default', 1, lease => '1 hour')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		fetched := fetchedSoFar(tx) - before
		if err := tx.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("a receive got %d messages, want 1", n)
		}
		// (the message leased, a few more: about 20,000 before)
		if fetched > 100 {
			t.Fatalf("a receive beside 20,000 delayed messages fetched %d of the queue's messages by index, want a bounded look (<= 100)", fetched)
		}
	}
}
