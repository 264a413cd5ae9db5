package pgmqcompat

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func ids(ms []msg) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func TestGroupedReadsKeepGroupOrder(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('fifo')")
	send := func(group string) int64 {
		return scalar[int64](t, db, "SELECT * FROM pgmq.send('fifo', '{}', jsonb_build_object('x-pgmq-group', $1::text))", group)
	}
	a1, b1, a2, b2 := send("A"), send("B"), send("A"), send("B")
	head := msgs(t, db, "pgmq.read_grouped_head(queue_name => 'fifo', vt => 30, qty => 10)")
	got := ids(head)
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	if fmt.Sprint(got) != fmt.Sprint([]int64{a1, b1}) {
		t.Fatalf("read_grouped_head: %v, want [%d %d]", got, a1, b1)
	}
	for _, f := range []string{"read_grouped", "read_grouped_rr", "read"} {
		if more := msgs(t, db, "pgmq."+f+"('fifo', 30, 10)"); len(more) != 0 {
			t.Fatalf("%s while both heads are read: %v", f, ids(more))
		}
	}
	exec(t, db, "SELECT pgmq.delete('fifo', $1::bigint)", a1)
	next := msgs(t, db, "pgmq.read_grouped_with_poll(queue_name => 'fifo', vt => 30, qty => 10, max_poll_seconds => 1, poll_interval_ms => 20)")
	if fmt.Sprint(ids(next)) != fmt.Sprint([]int64{a2}) {
		t.Fatalf("after deleting a1: %v, want [%d]", ids(next), a2)
	}
	exec(t, db, "SELECT pgmq.archive('fifo', $1::bigint)", b1)
	rr := msgs(t, db, "pgmq.read_grouped_rr_with_poll('fifo', 30, 10, 1, 20)")
	if fmt.Sprint(ids(rr)) != fmt.Sprint([]int64{b2}) {
		t.Fatalf("after archiving b1: %v, want [%d]", ids(rr), b2)
	}
	// a group waits while its head is invisible (vt), then continues
	c1 := send("C")
	send("C")
	if got := msgs(t, db, "pgmq.read_grouped('fifo', 0, 1)"); len(got) != 1 || got[0].ID != c1 {
		t.Fatalf("read_grouped C: %v", ids(got))
	}
	time.Sleep(50 * time.Millisecond)
	again := msgs(t, db, "pgmq.read_grouped('fifo', 30, 1)")
	if len(again) != 1 || again[0].ID != c1 || again[0].ReadCt != 2 {
		t.Fatalf("C head after its vt: %+v", again)
	}
}

func TestConditionalRead(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('cond')")
	exec(t, db, `SELECT * FROM pgmq.send_batch('cond', ARRAY['{"t":"x"}','{"t":"y"}','{"t":"x"}']::jsonb[])`)
	got := msgs(t, db, `pgmq.read(queue_name => 'cond', vt => 30, qty => 3, conditional => '{"t":"y"}')`)
	if len(got) != 1 || got[0].Message != `{"t": "y"}` {
		t.Fatalf("conditional read: %+v", got)
	}
	rest := msgs(t, db, "pgmq.read('cond', 30, 10)")
	if len(rest) != 2 {
		t.Fatalf("the non-matching messages are not visible again: %+v", rest)
	}
}

func TestTopics(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	for _, q := range []string{"logs_all", "logs_err", "other"} {
		exec(t, db, "SELECT pgmq.create($1)", q)
	}
	exec(t, db, "SELECT pgmq.bind_topic(pattern => 'logs.#', queue_name => 'logs_all')")
	exec(t, db, "SELECT pgmq.bind_topic('*.error', 'logs_err')")
	exec(t, db, "SELECT pgmq.bind_topic('*.error', 'logs_err')") // twice is harmless
	if n := scalar[int](t, db, "SELECT pgmq.send_topic(routing_key => 'logs.error', msg => '{\"m\":1}')"); n != 2 {
		t.Fatalf("send_topic logs.error reached %d queues", n)
	}
	if n := scalar[int](t, db, "SELECT pgmq.send_topic('logs.api.info', '{}', '{\"h\":1}'::jsonb)"); n != 1 {
		t.Fatalf("send_topic logs.api.info reached %d queues", n)
	}
	if n := scalar[int](t, db, "SELECT pgmq.send_topic('db.info', '{}', 0)"); n != 0 {
		t.Fatalf("send_topic db.info reached %d queues", n)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.send_batch_topic(routing_key => 'x.error', msgs => ARRAY['{}','{}']::jsonb[])"); n != 2 {
		t.Fatalf("send_batch_topic: %d rows", n)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.q_logs_all"); n != 2 {
		t.Fatalf("logs_all holds %d", n)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.q_logs_err"); n != 3 {
		t.Fatalf("logs_err holds %d", n)
	}
	if r := scalar[string](t, db, "SELECT string_agg(queue_name, ',' ORDER BY queue_name) FROM pgmq.test_routing('logs.error')"); r != "logs_all,logs_err" {
		t.Fatalf("test_routing: %s", r)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.list_topic_bindings()"); n != 2 {
		t.Fatalf("list_topic_bindings: %d", n)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.list_topic_bindings(queue_name => 'logs_err')"); n != 1 {
		t.Fatalf("list_topic_bindings(queue): %d", n)
	}
	if !scalar[bool](t, db, "SELECT pgmq.unbind_topic('*.error', 'logs_err')") || scalar[bool](t, db, "SELECT pgmq.unbind_topic('*.error', 'logs_err')") {
		t.Fatal("unbind_topic results")
	}
	for sql, want := range map[string]string{
		"SELECT pgmq.validate_routing_key('a..b')":       "routing_key cannot contain consecutive dots. Got: a..b",
		"SELECT pgmq.validate_routing_key('')":           "routing_key cannot be NULL or empty",
		"SELECT pgmq.validate_topic_pattern('a.**')":     "pattern cannot contain consecutive stars (**). Use # for multi-segment matching. Got: a.**",
		"SELECT pgmq.validate_topic_pattern('a.*#')":     "pattern cannot contain adjacent wildcards (*# or #*). Separate wildcards with dots. Got: a.*#",
		"SELECT pgmq.bind_topic('a.b', 'nosuch')":        `Queue "nosuch" does not exist. Create the queue first using pgmq.create()`,
		"SELECT pgmq.send_topic('a.b', NULL::jsonb)":     "msg cannot be NULL",
		"SELECT pgmq.send_topic('a.b', '{}'::jsonb, -1)": "delay cannot be negative, got: -1",
	} {
		if e := pgErr(t, db, sql); e.Message != want {
			t.Errorf("%s: %q, want %q", sql, e.Message, want)
		}
	}
	if !scalar[bool](t, db, "SELECT pgmq.validate_topic_pattern('app.*.#')") {
		t.Fatal("valid pattern refused")
	}
}

func TestNotifyInsert(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('Notified')")
	exec(t, db, "SELECT pgmq.enable_notify_insert(queue_name => 'Notified', throttle_interval_ms => 0)")
	exec(t, db, "SELECT pgmq.update_notify_insert('Notified', 100)")
	if v := scalar[int](t, db, "SELECT throttle_interval_ms FROM pgmq.list_notify_insert_throttles() WHERE queue_name = 'Notified'"); v != 100 {
		t.Fatalf("throttle %d", v)
	}
	conn, err := db.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctxT(t), `LISTEN "pgmq.q_Notified.INSERT"`); err != nil {
		t.Fatal(err)
	}
	exec(t, db, "SELECT * FROM pgmq.send('Notified', '{}')")
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(wctx)
	if err != nil || n.Channel != "pgmq.q_Notified.INSERT" {
		t.Fatalf("notification: %+v, %v", n, err)
	}
	// send_batch notifies too (its own statement, in its own transaction)
	exec(t, db, "SELECT * FROM pgmq.send_batch('notified', ARRAY['{}', '{}']::jsonb[])")
	bctx, bcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer bcancel()
	if n, err := conn.Conn().WaitForNotification(bctx); err != nil || n.Channel != "pgmq.q_Notified.INSERT" {
		t.Fatalf("notification of send_batch: %+v, %v", n, err)
	}
	// sends learn that a queue notifies from its marker view, which
	// enable_notify_insert makes and disable_notify_insert drops
	marker := func() bool { return scalar[bool](t, db, "SELECT to_regclass('pgmq._sl_n_notified') IS NOT NULL") }
	if !marker() {
		t.Fatal("enable_notify_insert made no marker")
	}
	exec(t, db, "SELECT pgmq.disable_notify_insert('Notified')")
	if marker() {
		t.Fatal("disable_notify_insert left the marker")
	}
	exec(t, db, "SELECT * FROM pgmq.send_batch('Notified', ARRAY['{}']::jsonb[])")
	exec(t, db, "SELECT * FROM pgmq.send('Notified', '{}')")
	sctx, scancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer scancel()
	if n, err := conn.Conn().WaitForNotification(sctx); err == nil {
		t.Fatalf("notification after disable: %+v", n)
	}
	if e := pgErr(t, db, "SELECT pgmq.update_notify_insert('Notified', 5)"); e.Message != `Queue "Notified" does not have notify_insert enabled. Enable it first using pgmq.enable_notify_insert()` {
		t.Fatalf("update after disable: %s", e.Message)
	}
	if e := pgErr(t, db, "SELECT pgmq.enable_notify_insert('nosuch')"); e.Message != `Queue "nosuch" does not exist. Create it first using pgmq.create()` {
		t.Fatalf("enable on a missing queue: %s", e.Message)
	}
	exec(t, db, "SELECT pgmq.disable_notify_insert('nosuch')")
	exec(t, db, "SELECT pgmq.disable_notify_insert(NULL)")
	// drop_queue drops the marker with the queue; a queue created again
	// under the name does not notify
	exec(t, db, "SELECT pgmq.enable_notify_insert('Notified')")
	exec(t, db, "SELECT pgmq.drop_queue('Notified')")
	if marker() {
		t.Fatal("drop_queue left the marker")
	}
	exec(t, db, "SELECT pgmq.create('Notified')")
	exec(t, db, "SELECT * FROM pgmq.send('Notified', '{}')")
	dctx, dcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer dcancel()
	if n, err := conn.Conn().WaitForNotification(dctx); err == nil {
		t.Fatalf("notification from a queue created again: %+v", n)
	}
}

// TestNoUpdateOrDelete runs a workload and checks that no table of sluice's
// queues nor a side table of the layer had a row updated or deleted.
func TestNoUpdateOrDelete(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	conn, err := db.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	c := conn.Conn()
	run := func(sql string, args ...any) {
		t.Helper()
		if _, err := c.Exec(ctxT(t), sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	run("SELECT pgmq.create('work')")
	for i := 0; i < 20; i++ {
		run("SELECT * FROM pgmq.send_batch('work', array_fill('{}'::jsonb, ARRAY[10]))")
		run("SELECT * FROM pgmq.send('work', '{}', jsonb_build_object('x-pgmq-group', $1::text))", fmt.Sprint(i%3))
	}
	for i := 0; i < 40; i++ {
		rows, err := c.Query(ctxT(t), "SELECT msg_id FROM pgmq.read('work', 30, 5)")
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case len(got) == 0:
		case i%4 == 0:
			run("SELECT * FROM pgmq.archive('work', $1::bigint[])", got)
		case i%4 == 1:
			run("SELECT * FROM pgmq.set_vt('work', $1::bigint[], 0)", got)
		default:
			run("SELECT * FROM pgmq.delete('work', $1::bigint[])", got)
		}
		run("SELECT * FROM pgmq.pop('work')")
	}
	var forced bool
	_ = c.QueryRow(ctxT(t), "SELECT EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'pg_stat_force_next_flush')").Scan(&forced)
	type counts struct {
		name          string
		ins, upd, del int64
	}
	// PostgreSQL 14 sends a backend's table statistics at the end of a
	// transaction at most every 500 ms, to a collector that writes them out
	// in its own time: read until the workload's inserts show, up to 15 s.
	var got []counts
	var inserted int64
	for deadline := time.Now().Add(15 * time.Second); ; {
		if forced {
			run("SELECT pg_stat_force_next_flush()")
		} else {
			time.Sleep(600 * time.Millisecond)
		}
		run("SELECT 1") // (a transaction's end: the connection reports what it did)
		rows, err := db.Query(ctxT(t), `
			SELECT schemaname || '.' || relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables
			 WHERE schemaname LIKE 'sluice_q%' OR (schemaname = 'pgmq' AND (relname LIKE '\_sl\_%' OR relname LIKE 'a\_%'))`)
		if err != nil {
			t.Fatal(err)
		}
		got, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (counts, error) {
			var x counts
			err := r.Scan(&x.name, &x.ins, &x.upd, &x.del)
			return x, err
		})
		if err != nil {
			t.Fatal(err)
		}
		inserted = 0
		for _, x := range got {
			inserted += x.ins
		}
		if len(got) > 0 && inserted > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(got) == 0 || inserted == 0 {
		t.Fatalf("statistics show no inserts in %d tables: the check saw nothing", len(got))
	}
	for _, x := range got {
		if x.upd != 0 || x.del != 0 {
			t.Errorf("%s: %d updates, %d deletes", x.name, x.upd, x.del)
		}
	}
}
