package pgmqcompat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgErr runs sql and returns the PostgreSQL error it raised.
func pgErr(t *testing.T, db *pgxpool.Pool, sql string, args ...any) *pgconn.PgError {
	t.Helper()
	_, err := db.Exec(ctxT(t), sql, args...)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("%s: got %v, want a PostgreSQL error", sql, err)
	}
	return pe
}

func TestVisibilityTimeoutRedelivers(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('vtq')")
	id := scalar[int64](t, db, "SELECT * FROM pgmq.send('vtq', '{}')")
	first := msgs(t, db, "pgmq.read('vtq', 1, 1)")
	if len(first) != 1 || first[0].ID != id || first[0].ReadCt != 1 || first[0].LastRd == nil {
		t.Fatalf("first read: %+v", first)
	}
	if got := msgs(t, db, "pgmq.read('vtq', 10, 1)"); len(got) != 0 {
		t.Fatalf("read before vt: %+v", got)
	}
	time.Sleep(1100 * time.Millisecond)
	second := msgs(t, db, "pgmq.read('vtq', 10, 1)")
	if len(second) != 1 || second[0].ID != id || second[0].ReadCt != 2 {
		t.Fatalf("read after vt: %+v, want msg %d with read_ct 2", second, id)
	}
	// the old delivery's vt passed: delete still finds the newest one
	if !scalar[bool](t, db, "SELECT pgmq.delete('vtq', $1::bigint)", id) {
		t.Fatal("delete after redelivery returned false")
	}
	time.Sleep(50 * time.Millisecond)
	if got := msgs(t, db, "pgmq.read('vtq', 0, 5)"); len(got) != 0 {
		t.Fatalf("deleted message read again: %+v", got)
	}
}

func TestSetVT(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('setvt')")
	a := scalar[int64](t, db, "SELECT * FROM pgmq.send('setvt', '{\"a\":1}')")
	b := scalar[int64](t, db, "SELECT * FROM pgmq.send('setvt', '{\"b\":1}')")
	if got := msgs(t, db, "pgmq.read('setvt', 1, 1)"); len(got) != 1 || got[0].ID != a {
		t.Fatalf("read a: %+v", got)
	}
	if got := msgs(t, db, "pgmq.read('setvt', 60, 1)"); len(got) != 1 || got[0].ID != b {
		t.Fatalf("read b: %+v", got)
	}
	// lengthen a, shorten b
	long := msgs(t, db, "pgmq.set_vt(queue_name => 'setvt', msg_id => $1::bigint, vt => 60)", a)
	if len(long) != 1 || long[0].ID != a || long[0].VT.Before(time.Now().Add(50*time.Second)) || long[0].Message != `{"a": 1}` {
		t.Fatalf("set_vt lengthen: %+v", long)
	}
	short := msgs(t, db, "pgmq.set_vt('setvt', $1::bigint, 0)", b)
	if len(short) != 1 || short[0].ID != b {
		t.Fatalf("set_vt shorten: %+v", short)
	}
	time.Sleep(1100 * time.Millisecond)
	got := msgs(t, db, "pgmq.read('setvt', 60, 10)")
	if len(got) != 1 || got[0].ID != b || got[0].ReadCt != 2 {
		t.Fatalf("after set_vt: read %+v, want only b with read_ct 2", got)
	}
	// array and timestamptz forms; an unread message is set too (PGMQ), an
	// unknown id gives no row
	c := scalar[int64](t, db, "SELECT * FROM pgmq.send('setvt', '{}')")
	rows := msgs(t, db, "pgmq.set_vt('setvt', ARRAY[$1::bigint, $2::bigint, 999], clock_timestamp() + interval '1 hour')", a, c)
	if len(rows) != 2 || rows[0].ID != a || rows[1].ID != c || rows[1].ReadCt != 0 {
		t.Fatalf("set_vt array: %+v", rows)
	}
}

// set_vt on a message never read sets its vt, as PGMQ does: it is returned
// with its new vt and read_ct unchanged, reads do not see it before then,
// and its next read counts 1. A later set_vt brings it back at once.
func TestSetVTOnUnreadMessage(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('unread')")
	x := scalar[int64](t, db, "SELECT * FROM pgmq.send('unread', '{\"x\":1}')")
	y := scalar[int64](t, db, "SELECT * FROM pgmq.send('unread', '{\"y\":1}')")
	held := msgs(t, db, "pgmq.set_vt('unread', $1::bigint, 3600)", x)
	if len(held) != 1 || held[0].ID != x || held[0].ReadCt != 0 || held[0].Message != `{"x": 1}` ||
		held[0].VT.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("set_vt of an unread message: %+v, want it with vt in an hour and read_ct 0", held)
	}
	if got := msgs(t, db, "pgmq.read('unread', 30, 10)"); len(got) != 1 || got[0].ID != y || got[0].ReadCt != 1 {
		t.Fatalf("read: %+v, want y only (x held an hour)", got)
	}
	view := msgs(t, db, "pgmq.q_unread WHERE msg_id = $1", x)
	if len(view) != 1 || view[0].ReadCt != 0 || view[0].VT.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("q_unread row of x: %+v", view)
	}
	back := msgs(t, db, "pgmq.set_vt('unread', $1::bigint, clock_timestamp())", x)
	if len(back) != 1 || back[0].ID != x || back[0].ReadCt != 0 {
		t.Fatalf("set_vt back to now: %+v", back)
	}
	if got := msgs(t, db, "pgmq.read('unread', 30, 10)"); len(got) != 1 || got[0].ID != x || got[0].ReadCt != 1 {
		t.Fatalf("read after set_vt to now: %+v, want x with read_ct 1", got)
	}
	if !scalar[bool](t, db, "SELECT pgmq.delete('unread', $1::bigint)", x) {
		t.Fatal("delete of x returned false")
	}
	if got := msgs(t, db, "pgmq.set_vt('unread', $1::bigint, 60)", x); len(got) != 0 {
		t.Fatalf("set_vt of a deleted message: %+v", got)
	}
}

// drop_queue says nothing of the objects its storage's drop cascades to
// (PGMQ's drop_queue prints no NOTICE); of a queue that does not exist it
// says so, as PGMQ does.
func TestDropQueueIsQuiet(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	cfg := db.Config().ConnConfig.Copy()
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	conn, err := pgx.ConnectConfig(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{"SELECT pgmq.create('quiet')", "SELECT pgmq.send('quiet', '{}')", "SELECT pgmq.drop_queue('quiet')"} {
		if _, err := conn.Exec(ctxT(t), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if len(notices) != 0 {
		t.Fatalf("drop_queue raised %d notices, first %q", len(notices), notices[0])
	}
	if _, err := conn.Exec(ctxT(t), "SELECT pgmq.drop_queue('quiet')"); err != nil {
		t.Fatal(err)
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "does not exist") {
		t.Fatalf("drop_queue of a missing queue: notices %q, want one saying it does not exist", notices)
	}
}

func TestArchive(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('arch')")
	ids := []int64{}
	for i := 0; i < 4; i++ {
		ids = append(ids, scalar[int64](t, db, "SELECT * FROM pgmq.send('arch', jsonb_build_object('i', $1::int))", i))
	}
	msgs(t, db, "pgmq.read('arch', 30, 2)") // ids[0], ids[1] read; ids[2], ids[3] not
	if !scalar[bool](t, db, "SELECT pgmq.archive(queue_name => 'arch', msg_id => $1::bigint)", ids[0]) {
		t.Fatal("archive of a read message returned false")
	}
	rows, err := db.Query(ctxT(t), "SELECT * FROM pgmq.archive('arch', $1::bigint[])", []int64{ids[0], ids[2], 12345})
	if err != nil {
		t.Fatal(err)
	}
	var archived []int64
	for rows.Next() {
		var id int64
		_ = rows.Scan(&id)
		archived = append(archived, id)
	}
	rows.Close()
	if len(archived) != 1 || archived[0] != ids[2] {
		t.Fatalf("archive array returned %v, want [%d]", archived, ids[2])
	}
	var n int
	var readCt0 int
	if err := db.QueryRow(ctxT(t), "SELECT count(*), max(read_ct) FILTER (WHERE msg_id = $1) FROM pgmq.a_arch", ids[0]).Scan(&n, &readCt0); err != nil {
		t.Fatal(err)
	}
	if n != 2 || readCt0 != 1 {
		t.Fatalf("a_arch: %d rows, read_ct %d", n, readCt0)
	}
	if m := scalar[string](t, db, "SELECT message::text FROM pgmq.a_arch WHERE msg_id = $1", ids[2]); m != `{"i": 2}` {
		t.Fatalf("archived unread message body %s", m)
	}
	// q_ shows the rest; the archived unread message is never delivered
	if got := scalar[int64](t, db, "SELECT count(*) FROM pgmq.q_arch"); got != 2 {
		t.Fatalf("q_arch has %d rows, want 2", got)
	}
	got := msgs(t, db, "pgmq.read('arch', 30, 10)")
	if len(got) != 1 || got[0].ID != ids[3] {
		t.Fatalf("read after archive: %+v, want only %d", got, ids[3])
	}
}

func TestPopIsAtMostOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('popq')")
	exec(t, db, "SELECT * FROM pgmq.send_batch('popq', ARRAY['{\"a\":1}','{\"a\":2}','{\"a\":3}']::jsonb[])")
	one := msgs(t, db, "pgmq.pop('popq')")
	if len(one) != 1 || one[0].Message != `{"a": 1}` {
		t.Fatalf("pop: %+v", one)
	}
	two := msgs(t, db, "pgmq.pop(queue_name => 'popq', qty => 5)")
	if len(two) != 2 {
		t.Fatalf("pop qty 5: %+v", two)
	}
	if got := msgs(t, db, "pgmq.pop('popq')"); len(got) != 0 {
		t.Fatalf("pop of an empty queue: %+v", got)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.q_popq"); n != 0 {
		t.Fatalf("q_popq has %d rows", n)
	}
	var inFlight, ready int64
	if err := db.QueryRow(ctxT(t), "SELECT in_flight, ready FROM sluice.status('popq') WHERE group_name = 'pgmq'").Scan(&inFlight, &ready); err != nil {
		t.Fatal(err)
	}
	if inFlight != 0 || ready != 0 {
		t.Fatalf("sluice status after pop: in_flight %d, ready %d", inFlight, ready)
	}
	// a rolled back pop gives the message back
	exec(t, db, "SELECT * FROM pgmq.send('popq', '{\"b\":1}')")
	tx, err := db.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctxT(t), "SELECT * FROM pgmq.pop('popq')"); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctxT(t))
	if got := msgs(t, db, "pgmq.pop('popq')"); len(got) != 1 {
		t.Fatalf("pop after a rolled back pop: %+v", got)
	}
}

func TestDeleteUnread(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('del')")
	a := scalar[int64](t, db, "SELECT * FROM pgmq.send('del', '{}')")
	b := scalar[int64](t, db, "SELECT * FROM pgmq.send('del', '{}')")
	rows, err := db.Query(ctxT(t), "SELECT * FROM pgmq.delete(queue_name => 'del', msg_ids => $1::bigint[])", []int64{a, 777})
	if err != nil {
		t.Fatal(err)
	}
	var del []int64
	for rows.Next() {
		var id int64
		_ = rows.Scan(&id)
		del = append(del, id)
	}
	rows.Close()
	if len(del) != 1 || del[0] != a {
		t.Fatalf("delete array returned %v", del)
	}
	if scalar[bool](t, db, "SELECT pgmq.delete('del', 777::bigint)") {
		t.Fatal("delete of an unknown id returned true")
	}
	got := msgs(t, db, "pgmq.read('del', 30, 10)")
	if len(got) != 1 || got[0].ID != b {
		t.Fatalf("read after deleting unread %d: %+v", a, got)
	}
}

func TestDelayAndBatch(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('dly')")
	exec(t, db, "SELECT * FROM pgmq.send(queue_name => 'dly', msg => '{}', delay => 1)")
	exec(t, db, "SELECT * FROM pgmq.send('dly', '{}', '{\"k\":1}'::jsonb, clock_timestamp() + interval '1 hour')")
	exec(t, db, "SELECT * FROM pgmq.send_batch(queue_name => 'dly', msgs => ARRAY['{}']::jsonb[], headers => ARRAY['{\"x\":1}']::jsonb[], delay => 1)")
	exec(t, db, "SELECT * FROM pgmq.send_batch('dly', ARRAY['{}']::jsonb[], clock_timestamp() + interval '1 hour')")
	if got := msgs(t, db, "pgmq.read('dly', 30, 10)"); len(got) != 0 {
		t.Fatalf("delayed messages read at once: %+v", got)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.q_dly WHERE vt > now()"); n != 4 {
		t.Fatalf("q_dly: %d invisible rows, want 4", n)
	}
	time.Sleep(1100 * time.Millisecond)
	got := msgs(t, db, "pgmq.read_with_poll('dly', 30, 10, 1, 50)")
	if len(got) != 2 {
		t.Fatalf("after the delay: %+v", got)
	}
	if e := pgErr(t, db, "SELECT * FROM pgmq.send_batch('dly', ARRAY['{}','{}']::jsonb[], ARRAY['{}']::jsonb[])"); e.Message != "headers array length (1) must match msgs array length (2)" {
		t.Fatalf("mismatch error: %s", e.Message)
	}
	if e := pgErr(t, db, "SELECT * FROM pgmq.send_batch('dly', ARRAY[]::jsonb[])"); e.Message != "msgs cannot be NULL or empty" {
		t.Fatalf("empty batch error: %s", e.Message)
	}
}

func TestErrorTexts(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	long := strings.Repeat("a", 48)
	for _, sql := range []string{"SELECT pgmq.validate_queue_name($1)", "SELECT pgmq.create($1)", "SELECT pgmq.create_unlogged($1)"} {
		if e := pgErr(t, db, sql, long); e.Message != "queue name is too long, maximum length is 47 characters" {
			t.Fatalf("%s: %s", sql, e.Message)
		}
	}
	exec(t, db, "SELECT pgmq.validate_queue_name($1)", strings.Repeat("a", 47))
	if e := pgErr(t, db, "SELECT pgmq.create('bad;name')"); e.Message != `queue name contains invalid characters: $, ;, --, or \'` { // PGMQ's text, backslash included
		t.Fatalf("invalid characters: %s", e.Message)
	}
	e := pgErr(t, db, "SELECT * FROM pgmq.send('nosuch', '{}')")
	if e.Code != "42P01" || e.Message != `relation "pgmq.q_nosuch" does not exist` {
		t.Fatalf("send to a missing queue: %s %s", e.Code, e.Message)
	}
	for _, sql := range []string{"SELECT * FROM pgmq.read('NoSuch', 1, 1)", "SELECT pgmq.delete('NoSuch', 1::bigint)",
		"SELECT pgmq.metrics('NoSuch')", "SELECT pgmq.purge_queue('NoSuch')"} {
		if e := pgErr(t, db, sql); e.Code != "42P01" || e.Message != `relation "pgmq.q_nosuch" does not exist` {
			t.Fatalf("%s: %s %s", sql, e.Code, e.Message)
		}
	}
	if scalar[bool](t, db, "SELECT pgmq.drop_queue('nosuch')") {
		t.Fatal("drop_queue of a missing queue returned true")
	}
}

func TestAdminAndMetrics(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('MixedCase')")
	exec(t, db, "SELECT pgmq.create_unlogged('unl')")
	exec(t, db, "SELECT pgmq.create_partitioned('part', '10000', '100000')")
	exec(t, db, "SELECT pgmq.create_non_partitioned('plain')")
	exec(t, db, "SELECT pgmq.create_fifo_index('plain')")
	exec(t, db, "SELECT pgmq.create_fifo_indexes_all()")
	exec(t, db, "SELECT pgmq.detach_archive('plain')")
	exec(t, db, "SELECT pgmq.convert_archive_partitioned('plain')")
	rows, err := db.Query(ctxT(t), "SELECT queue_name, is_partitioned, is_unlogged FROM pgmq.list_queues() ORDER BY queue_name")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var n string
		var p, u bool
		_ = rows.Scan(&n, &p, &u)
		got = append(got, strings.Join([]string{n, map[bool]string{true: "p"}[p], map[bool]string{true: "u"}[u]}, "/"))
	}
	rows.Close()
	if strings.Join(got, ",") != "MixedCase//,part/p/,plain//,unl//u" {
		t.Fatalf("list_queues: %v", got)
	}
	exec(t, db, "SELECT * FROM pgmq.send_batch('mixedcase', ARRAY['{}','{}','{}']::jsonb[])")
	exec(t, db, "SELECT * FROM pgmq.send('MIXEDCASE', '{}', 3600)")
	msgs(t, db, "pgmq.read('MixedCase', 30, 1)")
	var name string
	var length, visible, total int64
	var oldest, newest int
	if err := db.QueryRow(ctxT(t), "SELECT queue_name, queue_length, queue_visible_length, total_messages, oldest_msg_age_sec, newest_msg_age_sec FROM pgmq.metrics(queue_name => 'MixedCase')").
		Scan(&name, &length, &visible, &total, &oldest, &newest); err != nil {
		t.Fatal(err)
	}
	if name != "MixedCase" || length != 4 || visible != 2 || total != 4 || oldest < 0 || newest < 0 {
		t.Fatalf("metrics: %s %d %d %d %d %d", name, length, visible, total, oldest, newest)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.metrics_all()"); n != 4 {
		t.Fatalf("metrics_all: %d rows", n)
	}
	if n := scalar[int64](t, db, "SELECT pgmq.purge_queue('MixedCase')"); n != 4 {
		t.Fatalf("purge_queue returned %d", n)
	}
	if got := msgs(t, db, "pgmq.read('MixedCase', 30, 10)"); len(got) != 0 {
		t.Fatalf("read after purge: %+v", got)
	}
	if !scalar[bool](t, db, "SELECT pgmq.drop_queue(queue_name => 'MixedCase')") {
		t.Fatal("drop_queue returned false")
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'pgmq' AND c.relname LIKE '%mixedcase%'"); n != 0 {
		t.Fatalf("drop_queue left %d relations", n)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM sluice.list_queues() WHERE queue = 'mixedcase'"); n != 0 {
		t.Fatal("drop_queue left the sluice queue")
	}
}
