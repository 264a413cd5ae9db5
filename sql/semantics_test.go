package sqlsrc_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestFanOutAndCompetingConsumers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("orders", `{"lanes": 1}`) // one lane: a receive returns commit order
	b.exec("SELECT sluice.create_group('orders', 'audit')")
	var sent []int64
	for i := 0; i < 10; i++ {
		sent = append(sent, b.send(b.pool, "orders", fmt.Sprintf(`{"n": %d}`, i)))
	}
	// Two consumers of 'default' compete: each message goes to one of them.
	first := b.receive("orders", "default", 4, "")
	second := b.receive("orders", "default", 100, "")
	if len(first) != 4 || len(second) != 6 {
		t.Fatalf("competing consumers got %d and %d messages, want 4 and 6", len(first), len(second))
	}
	seen := map[int64]bool{}
	for _, m := range append(first, second...) {
		if seen[m.ID] {
			t.Fatalf("message %d delivered twice within one group while its lease is valid", m.ID)
		}
		seen[m.ID] = true
	}
	// 'audit' receives every message too, in send order.
	audit := b.receive("orders", "audit", 100, "")
	if len(audit) != len(sent) {
		t.Fatalf("audit got %d messages, want %d", len(audit), len(sent))
	}
	for i, m := range audit {
		if m.ID != sent[i] || m.Attempt != 1 {
			t.Fatalf("audit message %d = id %d attempt %d, want id %d attempt 1", i, m.ID, m.Attempt, sent[i])
		}
	}
	if n := b.ack("orders", "audit", receipts(audit)...); n != len(audit) {
		t.Fatalf("ack = %d, want %d", n, len(audit))
	}
	if got := b.receive("orders", "audit", 100, ""); len(got) != 0 {
		t.Fatalf("audit got %d messages after acking everything", len(got))
	}
}

func TestRolledBackSendIsNeverDelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.send(tx, "q", `{"doomed": true}`)
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	kept := b.send(b.pool, "q", `{"kept": true}`)
	got := b.receive("q", "default", 10, "")
	if len(got) != 1 || got[0].ID != kept {
		t.Fatalf("received %+v, want only message %d", got, kept)
	}
}

// A send whose transaction commits after later sends were consumed is still
// delivered: positions follow commit order, not id order.
func TestOutOfOrderCommitIsNotSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 1}`) // one lane: a receive returns commit order
	slow, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(b.ctx) //nolint:errcheck
	early := b.send(slow, "q", `{"early": true}`)
	var later []int64
	for i := 0; i < 3; i++ {
		later = append(later, b.send(b.pool, "q", fmt.Sprintf(`{"later": %d}`, i)))
	}
	got := b.receive("q", "default", 10, "")
	if len(got) != 3 {
		t.Fatalf("got %d messages while the early send is uncommitted, want 3", len(got))
	}
	for i, m := range got {
		if m.ID != later[i] {
			t.Fatalf("message %d = %d, want %d", i, m.ID, later[i])
		}
		if m.ID < early {
			t.Fatalf("id %d is below the uncommitted send's id %d", m.ID, early)
		}
	}
	b.ack("q", "default", receipts(got)...)
	if got := b.receive("q", "default", 10, ""); len(got) != 0 {
		t.Fatalf("got %d messages before the early send committed", len(got))
	}
	if err := slow.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	got = b.receive("q", "default", 10, "")
	if len(got) != 1 || got[0].ID != early {
		t.Fatalf("after the commit got %+v, want message %d", got, early)
	}
}

// A committed message is delivered by the very next receive: there is no
// tick to wait for.
func TestDeliveryNeedsNoTick(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	for i := 0; i < 50; i++ {
		id := b.send(b.pool, "q", fmt.Sprintf(`{"i": %d}`, i))
		got := b.receive("q", "default", 10, "")
		if len(got) != 1 || got[0].ID != id {
			t.Fatalf("round %d: the receive right after the send's commit got %+v, want message %d", i, got, id)
		}
		b.ack("q", "default", got[0].Receipt)
	}
}

func TestLeaseExpiryRedelivers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	id := b.send(b.pool, "q", `{}`)
	first := b.receive("q", "default", 1, "600 milliseconds")
	if len(first) != 1 || first[0].Attempt != 1 {
		t.Fatalf("first receive = %+v", first)
	}
	if got := b.receive("q", "default", 1, ""); len(got) != 0 {
		t.Fatalf("another consumer got %+v while the lease is valid", got)
	}
	time.Sleep(700 * time.Millisecond)
	second := b.receive("q", "default", 1, "30 seconds")
	if len(second) != 1 || second[0].ID != id || second[0].Attempt != 2 {
		t.Fatalf("after expiry got %+v, want message %d with attempt 2", second, id)
	}
	// The expired receipt no longer works; the new one does.
	if n := b.ack("q", "default", first[0].Receipt); n != 0 {
		t.Fatalf("ack with the expired receipt = %d, want 0", n)
	}
	if ok := b.nack("q", "default", first[0].Receipt, "", ""); ok {
		t.Fatal("nack with the expired receipt = true, want false")
	}
	if n := b.ack("q", "default", second[0].Receipt); n != 1 {
		t.Fatalf("ack with the current receipt = %d, want 1", n)
	}
	if n := b.ack("q", "default", second[0].Receipt); n != 0 {
		t.Fatalf("second ack of the same receipt = %d, want 0", n)
	}
}

func TestExtendKeepsTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	b.send(b.pool, "q", `{}`)
	// Leases of 2 s extended every second: each extend comes a second
	// before the lease would end, a margin a busy machine does not eat.
	got := b.receive("q", "default", 1, "2 seconds")
	for i := 0; i < 3; i++ {
		time.Sleep(time.Second)
		var n int
		if err := b.pool.QueryRow(b.ctx, "SELECT sluice.extend('q', 'default', $1, '2 seconds')",
			[]string{got[0].Receipt}).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("extend = %d, want 1", n)
		}
		if other := b.receive("q", "default", 1, ""); len(other) != 0 {
			t.Fatalf("message redelivered while its lease was being extended: %+v", other)
		}
	}
	if n := b.ack("q", "default", got[0].Receipt); n != 1 {
		t.Fatalf("ack after extends = %d, want 1", n)
	}
}

func TestNackRetriesWithBackoffThenDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"max_attempts": 3, "backoff_base": "300 milliseconds", "backoff_max": "400 milliseconds"}`)
	id := b.send(b.pool, "q", `{"job": 1}`)

	m := b.receive("q", "default", 1, "")
	if !b.nack("q", "default", m[0].Receipt, "", "first failure") {
		t.Fatal("nack = false")
	}
	if b.nack("q", "default", m[0].Receipt, "", "again") {
		t.Fatal("a second nack of the same receipt = true, want false")
	}
	// Backoff: not before 300 ms.
	if got := b.receive("q", "default", 1, ""); len(got) != 0 {
		t.Fatalf("retry delivered before its backoff: %+v", got)
	}
	var m2 []msg
	waitFor(t, 3*time.Second, "first retry", func() bool {
		m2 = b.receive("q", "default", 1, "")
		return len(m2) == 1
	})
	if m2[0].ID != id || m2[0].Attempt != 2 || m2[0].Body != `{"job": 1}` {
		t.Fatalf("retry = %+v, want message %d attempt 2", m2[0], id)
	}
	b.nack("q", "default", m2[0].Receipt, "0", "second failure")
	m3 := b.receive("q", "default", 1, "")
	if len(m3) != 1 || m3[0].Attempt != 3 {
		t.Fatalf("immediate retry = %+v, want attempt 3", m3)
	}
	// The third failure exhausts max_attempts: a dead letter, with its error.
	if !b.nack("q", "default", m3[0].Receipt, "0", "third failure") {
		t.Fatal("final nack = false")
	}
	if got := b.receive("q", "default", 1, ""); len(got) != 0 {
		t.Fatalf("dead message delivered again: %+v", got)
	}
	var dlID int64
	var attempts int
	var errText string
	if err := b.pool.QueryRow(b.ctx, "SELECT id, attempts, error FROM sluice.dead_letters('q', 'default')").
		Scan(&dlID, &attempts, &errText); err != nil {
		t.Fatal(err)
	}
	if dlID != id || attempts != 3 || errText != "third failure" {
		t.Fatalf("dead letter = (%d, %d, %q), want (%d, 3, third failure)", dlID, attempts, errText, id)
	}
	if s := b.status("q")["default"]; s.Dead != 1 {
		t.Fatalf("status dead = %d, want 1", s.Dead)
	}
	// Redrive makes it deliverable again, with a fresh count of attempts.
	if n := b.int64("SELECT sluice.redrive('q', 'default')"); n != 1 {
		t.Fatalf("redrive = %d, want 1", n)
	}
	if n := b.int64("SELECT count(*) FROM sluice.dead_letters('q')"); n != 0 {
		t.Fatalf("%d dead letters after redrive, want 0", n)
	}
	again := b.receive("q", "default", 1, "")
	if len(again) != 1 || again[0].ID != id || again[0].Attempt != 1 {
		t.Fatalf("after redrive got %+v, want message %d attempt 1", again, id)
	}
	b.ack("q", "default", again[0].Receipt)
}

func TestExpiredLeasesCountAsAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"max_attempts": 2}`)
	id := b.send(b.pool, "q", `{}`)
	for attempt := 1; attempt <= 2; attempt++ {
		var got []msg
		waitFor(t, 3*time.Second, fmt.Sprintf("attempt %d", attempt), func() bool {
			got = b.receive("q", "default", 1, "200 milliseconds")
			return len(got) == 1
		})
		if got[0].Attempt != attempt {
			t.Fatalf("attempt = %d, want %d", got[0].Attempt, attempt)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if got := b.receive("q", "default", 1, ""); len(got) != 0 {
		t.Fatalf("message delivered a third time: %+v", got)
	}
	if n := b.int64("SELECT count(*) FROM sluice.dead_letters('q') WHERE id = $1", id); n != 1 {
		t.Fatalf("dead letters of message %d = %d, want 1", id, n)
	}
}

func TestDelayedMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	var delayed int64
	sentAt := time.Now() // before the send: the delay runs from a later now()
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.send('q', '{\"later\": true}', delay => '1500 milliseconds')").
		Scan(&delayed); err != nil {
		t.Fatal(err)
	}
	now := b.send(b.pool, "q", `{"now": true}`)
	got := b.receive("q", "default", 10, "")
	if len(got) != 1 || got[0].ID != now {
		t.Fatalf("got %+v, want only the undelayed message %d", got, now)
	}
	if s := b.status("q")["default"]; s.Delayed != 1 {
		t.Fatalf("status delayed = %d, want 1", s.Delayed)
	}
	var late []msg
	waitFor(t, 5*time.Second, "the delayed message", func() bool {
		late = b.receive("q", "default", 10, "")
		return len(late) > 0
	})
	if elapsed := time.Since(sentAt); elapsed < 1480*time.Millisecond {
		t.Fatalf("delayed message delivered after %s, before its time", elapsed)
	}
	if len(late) != 1 || late[0].ID != delayed {
		t.Fatalf("got %+v, want the delayed message %d", late, delayed)
	}
}

func TestSendBatchKeepsOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 1}`) // one lane: a receive returns commit order
	rows, err := b.pool.Query(b.ctx, `SELECT * FROM sluice.send_batch('q',
		ARRAY['{"i":0}', '{"i":1}', '{"i":2}']::jsonb[], NULL, ARRAY['a', NULL, 'c'])`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	got := b.receive("q", "default", 10, "")
	if len(got) != 3 {
		t.Fatalf("got %d messages, want 3", len(got))
	}
	for i, m := range got {
		if m.ID != ids[i] || m.Body != fmt.Sprintf(`{"i": %d}`, i) {
			t.Fatalf("message %d = %+v, want id %d", i, m, ids[i])
		}
	}
	if got[0].Key == nil || *got[0].Key != "a" || got[1].Key != nil {
		t.Fatalf("keys = %v, %v; want a, NULL", got[0].Key, got[1].Key)
	}
}

func TestGroupStartPositions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 1}`) // the two messages in commit order (lanes deal them to two lanes)
	old := b.send(b.pool, "q", `{"old": true}`)
	time.Sleep(50 * time.Millisecond)
	b.receive("q", "default", 10, "") // numbers the old message
	time.Sleep(50 * time.Millisecond)
	mark := time.Now()
	time.Sleep(50 * time.Millisecond)
	b.exec("SELECT sluice.create_group('q', 'late', 'latest')")
	b.exec("SELECT sluice.create_group('q', 'replay', $1)", mark.Format(time.RFC3339Nano))
	b.exec("SELECT sluice.create_group('q', 'all', 'earliest')")
	fresh := b.send(b.pool, "q", `{"new": true}`)

	ids := func(group string) []int64 {
		var out []int64
		for _, m := range b.receive("q", group, 10, "") {
			out = append(out, m.ID)
		}
		return out
	}
	if got := ids("late"); fmt.Sprint(got) != fmt.Sprint([]int64{fresh}) {
		t.Fatalf("'latest' group got %v, want [%d]", got, fresh)
	}
	if got := ids("replay"); fmt.Sprint(got) != fmt.Sprint([]int64{fresh}) {
		t.Fatalf("group starting at %s got %v, want [%d]", mark, got, fresh)
	}
	if got := ids("all"); fmt.Sprint(got) != fmt.Sprint([]int64{old, fresh}) {
		t.Fatalf("'earliest' group got %v, want [%d %d]", got, old, fresh)
	}
}

// Completed messages are reclaimed by rotation and TRUNCATE once the
// retention has passed; a group that stops consuming holds the space back,
// status shows it, and dropping the group releases it. On engine 2 (each
// number of slots) and engine 1 (two slots).
func TestRetentionReclaimAndStalledGroup(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ engine, slots int }{{2, 2}, {2, 3}, {2, 4}, {1, 2}} {
		t.Run(fmt.Sprintf("engine=%d/slots=%d", c.engine, c.slots), func(t *testing.T) {
			t.Parallel()
			retentionReclaimAndStalledGroup(t, c.engine, c.slots)
		})
	}
}

func retentionReclaimAndStalledGroup(t *testing.T, engine, slots int) {
	b := setup(t)
	b.createQueue("q", fmt.Sprintf(`{"retention": "0 seconds", "rotate_interval": "100 milliseconds", "slots": %d,
		"engine": %d}`, slots, engine))
	stored := b.messagesTableOf("q")
	b.exec("SELECT sluice.create_group('q', 'stalled')")
	stalledFirst := b.send(b.pool, "q", `{"first": true}`)
	if got := b.receive("q", "stalled", 1, ""); len(got) != 1 || got[0].ID != stalledFirst {
		t.Fatalf("stalled group's only receive got %+v", got)
	}
	// 'default' consumes steadily; 'stalled' never acks and never receives again.
	i := 0
	consumeUntil := func(what string, cond func() bool) {
		waitFor(t, 20*time.Second, what, func() bool {
			i++
			b.send(b.pool, "q", fmt.Sprintf(`{"i": %d}`, i))
			if got := b.receive("q", "default", 100, ""); len(got) > 0 {
				b.ack("q", "default", receipts(got)...)
			}
			return cond()
		})
	}
	consumeUntil("every slot in use", func() bool { return b.status("q")["stalled"].LiveEpochs == slots })
	// Give maintenance a few more chances to reclaim: it must not.
	deadline := time.Now().Add(1500 * time.Millisecond)
	consumeUntil("more traffic", func() bool { return time.Now().After(deadline) })
	if n := b.int64("SELECT count(*) FROM sluice.reclaim"); n != 0 {
		t.Fatalf("%d epochs reclaimed while 'stalled' still needs the first message", n)
	}
	st := b.status("q")
	if !st["stalled"].HoldsReclaim || st["default"].HoldsReclaim {
		t.Fatalf("holds_reclaim: stalled=%v default=%v, want true and false", st["stalled"].HoldsReclaim,
			st["default"].HoldsReclaim)
	}
	// The pending message is still there for the stalled group.
	if n := b.int64("SELECT count(*) FROM "+stored+" WHERE id = $1", stalledFirst); n != 1 {
		t.Fatal("the stalled group's pending message was dropped")
	}
	b.exec("SELECT sluice.drop_group('q', 'stalled')")
	consumeUntil("a reclaim after the drop", func() bool {
		return b.int64("SELECT count(*) FROM "+stored+" WHERE id = $1", stalledFirst) == 0
	})
	if n := b.int64("SELECT count(*) FROM sluice.reclaim"); n == 0 {
		t.Fatal("the first message is gone but no reclaim was logged")
	}
	// Everything 'default' consumed is still accounted for: nothing pending.
	if s := b.status("q")["default"]; s.Ready != 0 || s.InFlight != 0 {
		t.Fatalf("default: ready %d in flight %d, want 0 and 0", s.Ready, s.InFlight)
	}
}

// messagesTableOf names the table that stores a queue's messages: engine
// 1's shared parent sluice.messages, or the msg table in an engine 2
// queue's own schema (which keeps a message's retry copies too, with the
// message's id in orig, not id).
func (b *bundle) messagesTableOf(queue string) string {
	b.t.Helper()
	var id, engine int
	if err := b.pool.QueryRow(b.ctx, "SELECT id, engine FROM sluice.queue WHERE name = $1", queue).Scan(&id, &engine); err != nil {
		b.t.Fatal(err)
	}
	if engine == 1 {
		return "sluice.messages"
	}
	return fmt.Sprintf("sluice_q%d.msg", id)
}

func TestPurgeAndDrop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	for i := 0; i < 5; i++ {
		b.send(b.pool, "q", `{}`)
	}
	b.receive("q", "default", 2, "")
	if n := b.int64("SELECT sluice.purge_queue('q')"); n != 5 {
		t.Fatalf("purge = %d, want 5", n)
	}
	if got := b.receive("q", "default", 10, ""); len(got) != 0 {
		t.Fatalf("got %d messages after purge", len(got))
	}
	after := b.send(b.pool, "q", `{"after": true}`)
	if got := b.receive("q", "default", 10, ""); len(got) != 1 || got[0].ID != after {
		t.Fatalf("after purge got %+v, want message %d", got, after)
	}
	var dropped bool
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.drop_queue('q')").Scan(&dropped); err != nil || !dropped {
		t.Fatalf("drop_queue = %v, %v", dropped, err)
	}
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.drop_queue('q')").Scan(&dropped); err != nil || dropped {
		t.Fatalf("second drop_queue = %v, %v; want false", dropped, err)
	}
	if n := b.int64("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'sluice_q%'"); n != 0 {
		t.Fatalf("%d queue schemas left after drop", n)
	}
}

func TestListQueuesAndVersion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("b-queue", `{"max_attempts": 7}`)
	b.createQueue("a.queue", `{"default_group": false}`)
	rows, err := b.pool.Query(b.ctx, "SELECT queue, options->>'max_attempts', groups FROM sluice.list_queues()")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var name, maxAttempts string
		var groups []string
		if err := rows.Scan(&name, &maxAttempts, &groups); err != nil {
			t.Fatal(err)
		}
		sort.Strings(groups)
		got = append(got, fmt.Sprintf("%s:%s:%v", name, maxAttempts, groups))
	}
	if fmt.Sprint(got) != "[a.queue:5:[] b-queue:7:[default]]" {
		t.Fatalf("list_queues = %v", got)
	}
	var v string
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice.version()").Scan(&v); err != nil || v == "" {
		t.Fatalf("version = %q, %v", v, err)
	}
}

// A consumer whose connection dies mid-transaction loses its lease at once:
// the receive rolls back and the message goes to the next consumer.
func TestConsumerKilledMidTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	id := b.send(b.pool, "q", `{}`)
	conn, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := receiveOn(b.ctx, tx, "q", "default", 1, "")
	if err != nil || len(got) != 1 {
		t.Fatalf("receive in transaction = %+v, %v", got, err)
	}
	pid := conn.Conn().PgConn().PID()
	b.exec("SELECT pg_terminate_backend($1)", pid)
	conn.Release()
	var again []msg
	waitFor(t, 5*time.Second, "redelivery", func() bool {
		again = b.receive("q", "default", 1, "")
		return len(again) == 1
	})
	if again[0].ID != id {
		t.Fatalf("got %+v, want message %d", again, id)
	}
}

func TestAlterQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"max_attempts": 5}`)
	var opts string
	if err := b.pool.QueryRow(b.ctx, `SELECT sluice.alter_queue('q', '{"max_attempts": 1, "lease": "2 seconds"}')::text`).
		Scan(&opts); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(opts, `"max_attempts": 1`) || !strings.Contains(opts, `"lease": "2 seconds"`) ||
		!strings.Contains(opts, `"retention": "1 hour"`) {
		t.Fatalf("options after alter_queue = %s", opts)
	}
	// The new max_attempts applies: the first failure is final.
	b.send(b.pool, "q", `{}`)
	got := b.receive("q", "default", 1, "")
	b.nack("q", "default", got[0].Receipt, "0", "no retries now")
	if n := b.int64("SELECT count(*) FROM sluice.dead_letters('q')"); n != 1 {
		t.Fatalf("%d dead letters after one failure with max_attempts 1, want 1", n)
	}
	before := b.dataFingerprint()
	for _, bad := range []string{`{"default_group": false}`, `{"max_attempts": 0}`, `{"nope": 1}`, `[1]`} {
		_, err := b.pool.Exec(b.ctx, "SELECT sluice.alter_queue('q', $1::jsonb)", bad)
		if code := sqlstate(err); code != "SL007" {
			t.Errorf("alter_queue(%s): %v (SQLSTATE %q), want SL007", bad, err, code)
		}
	}
	if _, err := b.pool.Exec(b.ctx, "SELECT sluice.alter_queue('nope', '{}')"); sqlstate(err) != "SL002" {
		t.Errorf("alter_queue of an unknown queue: %v, want SL002", err)
	}
	if after := b.dataFingerprint(); after != before {
		t.Fatalf("bad alter_queue calls changed the data")
	}
}

// Leases of completed messages expire too; the receives after that must
// look at each of them once and move their horizon past them, not read them
// again on every call (which made receive slower with every message sent).
func TestExpiryScanMovesPastCompletedLeases(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) {
			t.Parallel()
			expiryScanMovesPastCompletedLeases(t, engine)
		})
	}
}

func expiryScanMovesPastCompletedLeases(t *testing.T, engine int) {
	b := setup(t)
	b.createQueue("q", fmt.Sprintf(`{"engine": %d}`, engine))
	for i := 0; i < 50; i++ {
		b.send(b.pool, "q", `{}`)
	}
	got := b.receive("q", "default", 50, "1500 milliseconds")
	if n := b.ack("q", "default", receipts(got)...); n != 50 {
		t.Fatalf("ack = %d, want 50", n)
	}
	// A receive a second later moves the low-water mark past the 50
	// positions; then their leases expire.
	time.Sleep(1100 * time.Millisecond)
	b.receive("q", "default", 1, "")
	time.Sleep(600 * time.Millisecond)
	b.send(b.pool, "q", `{}`)
	if got := b.receive("q", "default", 10, ""); len(got) != 1 {
		t.Fatalf("got %d messages, want the new one", len(got))
	}
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'q'"))
	// Engine 1: one horizon for the group; a run's row leases all of its
	// positions. Engine 2: a scan point per lane (its newest lease row),
	// and a lease row per receive and lane; an empty receive more, as the
	// receive of the new message may stop at its lane.
	query := fmt.Sprintf(`
		SELECT (SELECT count(*) FROM %[1]s.deliveries d WHERE d.expires_at <= h.t)
		     + (SELECT coalesce(sum(r.last_pos - r.pos + 1), 0) FROM %[1]s.runs r WHERE r.expires_at <= h.t)
		FROM (SELECT scan_from AS t FROM %[1]s.group_states ORDER BY seq DESC LIMIT 1) h`, schema)
	if engine == 2 {
		b.receive("q", "default", 10, "")
		query = fmt.Sprintf(`
			SELECT coalesce(sum(l.n), 0)
			FROM (SELECT DISTINCT ON (lane) lane, scan_t, scan_no FROM %[1]s.lease ORDER BY lane, lease_no DESC) st
			JOIN %[1]s.lease l ON l.lane = st.lane AND l.kind = 'r' AND l.n > 0
			                  AND (l.expires_at, l.lease_no) <= (st.scan_t, st.scan_no)`, schema)
	}
	var behind int64
	if err := b.pool.QueryRow(b.ctx, query).Scan(&behind); err != nil {
		t.Fatal(err)
	}
	if behind != 50 {
		t.Fatalf("the scan horizon reached %d of the 50 expired leases, want all 50", behind)
	}
}

func TestIdempotentSend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"retention": "0 seconds", "rotate_interval": "100 milliseconds"}`)
	sendKey := func(body, key string) int64 {
		t.Helper()
		var id int64
		if err := b.pool.QueryRow(b.ctx, "SELECT sluice.send('q', $1::jsonb, dedup_key => $2)", body, key).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := sendKey(`{"n": 1}`, "order-42")
	if again := sendKey(`{"n": 2}`, "order-42"); again != first {
		t.Fatalf("second send with the same key returned %d, want %d", again, first)
	}
	other := sendKey(`{"n": 3}`, "order-43")
	// A batch: a key sent before, a key twice, no key.
	rows, err := b.pool.Query(b.ctx, `SELECT * FROM sluice.send_batch('q', ARRAY['{"b":1}','{"b":2}','{"b":3}','{"b":4}']::jsonb[],
		dedup_keys => ARRAY['order-42', 'order-44', 'order-44', NULL])`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if rows.Err() != nil || len(ids) != 4 || ids[0] != first || ids[1] != ids[2] || ids[3] == ids[1] {
		t.Fatalf("send_batch ids = %v (err %v), want [%d x x y]", ids, rows.Err(), first)
	}
	got := b.receive("q", "default", 100, "")
	var bodies []string
	for _, m := range got {
		bodies = append(bodies, m.Body)
	}
	sort.Strings(bodies) // lanes: one receive returns commit order per lane only
	if fmt.Sprint(bodies) != `[{"b": 2} {"b": 4} {"n": 1} {"n": 3}]` {
		t.Fatalf("enqueued %v, want one message per key and the one without", bodies)
	}
	b.ack("q", "default", receipts(got)...)
	// Keys are remembered across a rotation, and the slot that holds them
	// is not reclaimed within the window: with two slots (the default) the
	// queue then stops rotating.
	traffic := func() {
		b.send(b.pool, "q", `{}`)
		if got := b.receive("q", "default", 100, ""); len(got) > 0 {
			b.ack("q", "default", receipts(got)...)
		}
	}
	waitFor(t, 10*time.Second, "a rotation", func() bool {
		traffic()
		return b.int64("SELECT count(*) FROM sluice.epoch") >= 2
	})
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); {
		traffic()
	}
	if n, r := b.int64("SELECT count(*) FROM sluice.epoch"), b.int64("SELECT count(*) FROM sluice.reclaim"); n != 2 || r != 0 {
		t.Fatalf("within the dedup window: %d epochs, %d reclaimed, want 2 and 0", n, r)
	}
	if again := sendKey(`{"n": 4}`, "order-43"); again != other {
		t.Fatalf("after rotations a resend returned %d, want %d", again, other)
	}
	// After the window, the key may be sent again.
	b.exec(`SELECT sluice.alter_queue('q', '{"dedup_window": "1 millisecond"}')`)
	time.Sleep(10 * time.Millisecond)
	if fresh := sendKey(`{"n": 5}`, "order-42"); fresh == first {
		t.Fatal("a key was deduplicated after its window")
	}
	// Outside READ COMMITTED a send with a key is refused.
	if err := b.execRepeatableRead("SELECT sluice.send('q', '{}', dedup_key => 'x')"); sqlstate(err) != "SL010" {
		t.Fatalf("dedup send in REPEATABLE READ: %v, want SL010", err)
	}
}

// Sends of one dedup key from many connections at once enqueue one message
// (each holds the key a moment before it commits). On both engines
// (engine 2's was the first half of TestV2ConcurrentIdempotentSend).
func TestConcurrentIdempotentSend(t *testing.T) {
	onBothEngines(t, "", func(b *bundle, _ int) {
		t := b.t
		b.v2widen(20) // (every sender holds a connection at once)
		const senders = 16
		ids := make(chan int64, senders)
		errs := make(chan error, senders)
		start := make(chan struct{})
		for i := 0; i < senders; i++ {
			go func() {
				<-start
				tx, err := b.pool.Begin(b.ctx)
				if err != nil {
					errs <- err
					return
				}
				var id int64
				if err := tx.QueryRow(b.ctx, "SELECT sluice.send('q', '{}', dedup_key => 'once')").Scan(&id); err != nil {
					tx.Rollback(b.ctx) //nolint:errcheck
					errs <- err
					return
				}
				time.Sleep(20 * time.Millisecond) // hold the key while the others wait
				errs <- tx.Commit(b.ctx)
				ids <- id
			}()
		}
		close(start)
		for i := 0; i < senders; i++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		first := <-ids
		for i := 1; i < senders; i++ {
			if id := <-ids; id != first {
				t.Fatalf("concurrent sends of one key returned %d and %d", first, id)
			}
		}
		if got := b.v2drainAck("q", "default", 100); len(got) != 1 || got[0].ID != first {
			t.Fatalf("%d messages enqueued by %d concurrent sends of one key, want 1 (%d)", len(got), senders, first)
		}
	})
}

// A transaction that receives and then sends to the same queue: the send is
// delivered once the transaction commits (the cut must not count its own
// transaction as committed).
func TestSendAfterReceiveInOneTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"lanes": 1}`) // one lane: a receive returns commit order
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck // after Commit, a no-op
	first := b.send(tx, "q", `{"m": 1}`)
	// Another transaction commits after this one got its id, so the
	// snapshot's xmax passes this transaction's id.
	other := b.send(b.pool, "q", `{"other": true}`)
	if got, err := receiveOn(b.ctx, tx, "q", "default", 10, ""); err != nil || len(got) != 1 || got[0].ID != other {
		t.Fatalf("receive in the transaction = %+v, %v; want only message %d", got, err, other)
	}
	second := b.send(tx, "q", `{"m": 2}`)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	third := b.send(b.pool, "q", `{"m": 3}`)
	var ids []int64
	for _, m := range b.receive("q", "default", 10, "") {
		ids = append(ids, m.ID)
	}
	if fmt.Sprint(ids) != fmt.Sprint([]int64{first, second, third}) {
		t.Fatalf("received %v, want %v", ids, []int64{first, second, third})
	}
}

// A group created at 'earliest' after a slot was reclaimed may start at
// positions whose messages are gone: it must pass them, not stop its
// low-water mark there (which would hold reclaim back for good). On both
// engines: once the late group completed what it got, it lags by nothing,
// and the next epoch is reclaimed while it exists.
// (Engine 1's lwm is a position of the queue: the late group's passes 1.
// Engine 2's status sums positions over the lanes, so the check there is
// the one that holds on both: lwm reaches head.)
func TestEarliestGroupPassesReclaimedPositions(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) {
			t.Parallel()
			earliestGroupPassesReclaimedPositions(t, engine)
		})
	}
}

func earliestGroupPassesReclaimedPositions(t *testing.T, engine int) {
	b := setup(t)
	b.createQueue("q", fmt.Sprintf(`{"retention": "0 seconds", "rotate_interval": "100 milliseconds", "engine": %d}`, engine))
	stored := b.messagesTableOf("q")
	gone := b.send(b.pool, "q", `{"a": 1}`) // in slot 0
	time.Sleep(150 * time.Millisecond)
	b.exec("SELECT sluice.maintain()") // epoch 1: slot 1
	got := b.receive("q", "default", 10, "")
	if len(got) != 1 || got[0].ID != gone {
		t.Fatalf("got %+v", got)
	}
	b.ack("q", "default", got[0].Receipt) // numbered by a batch stored in slot 1
	time.Sleep(1100 * time.Millisecond)
	b.receive("q", "default", 1, "") // moves default's low-water mark past it
	waitFor(t, 5*time.Second, "slot 0 reclaimed", func() bool {
		b.exec("SELECT sluice.maintain()")
		return b.int64("SELECT count(*) FROM "+stored+" WHERE id = $1", gone) == 0
	})
	b.exec("SELECT sluice.create_group('q', 'late', 'earliest')")
	next := b.send(b.pool, "q", `{"b": 1}`)
	got = b.receive("q", "late", 10, "")
	if len(got) != 1 || got[0].ID != next {
		t.Fatalf("the late group got %+v, want only message %d", got, next)
	}
	if engine == 1 {
		waitFor(t, 5*time.Second, "the late group's low-water mark passing the reclaimed position", func() bool {
			b.receive("q", "late", 1, "")
			s := b.status("q")["late"]
			return s.Lwm != nil && *s.Lwm > 1
		})
	}
	b.ack("q", "late", got[0].Receipt)
	b.v2drainAck("q", "default", 10)
	waitFor(t, 5*time.Second, "the late group completing everything", func() bool {
		b.receive("q", "late", 1, "")
		s := b.status("q")["late"]
		return s.Lag != nil && *s.Lag == 0 && s.Ready == 0 && s.InFlight == 0 &&
			s.Lwm != nil && s.Head != nil && *s.Lwm >= *s.Head
	})
	reclaimed := b.int64("SELECT count(*) FROM sluice.reclaim")
	waitFor(t, 5*time.Second, "a reclaim with the late group there", func() bool {
		b.send(b.pool, "q", `{"c": 1}`)
		for _, g := range []string{"default", "late"} {
			for _, m := range b.receive("q", g, 10, "") {
				b.ack("q", g, m.Receipt)
			}
		}
		b.exec("SELECT sluice.maintain()")
		time.Sleep(50 * time.Millisecond)
		return b.int64("SELECT count(*) FROM sluice.reclaim") > reclaimed
	})
}

// Numbering messages from a snapshot held since the transaction began would
// reuse old positions: create_group 'latest' refuses REPEATABLE READ.
func TestCreateGroupLatestRefusesRepeatableRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	if err := b.execRepeatableRead("SELECT sluice.create_group('q', 'g', 'latest')"); sqlstate(err) != "SL010" {
		t.Fatalf("create_group latest in REPEATABLE READ: %v, want SL010", err)
	}
}
