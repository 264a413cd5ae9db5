package pgmqcompat

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestSendReadDelete(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create(queue_name => 'orders')")
	exec(t, db, "SELECT pgmq.create('orders')") // idempotent
	id1 := scalar[int64](t, db, "SELECT * FROM pgmq.send(queue_name => 'orders', msg => '{\"n\":1}')")
	id2 := scalar[int64](t, db, "SELECT * FROM pgmq.send('orders', '{\"n\":2}', '{\"h\":\"x\"}'::jsonb)")
	if id2 <= id1 {
		t.Fatalf("ids %d, %d not increasing", id1, id2)
	}
	got := msgs(t, db, "pgmq.read(queue_name => 'orders', vt => 30, qty => 10)")
	if len(got) != 2 || got[0].ID != id1 || got[1].ID != id2 || got[0].ReadCt != 1 || got[0].Message != `{"n": 1}` {
		t.Fatalf("read: %+v", got)
	}
	if got[1].Headers == nil || *got[1].Headers != `{"h": "x"}` {
		t.Fatalf("headers: %+v", got[1])
	}
	if again := msgs(t, db, "pgmq.read('orders', 30, 10)"); len(again) != 0 {
		t.Fatalf("read within vt returned %+v", again)
	}
	if !scalar[bool](t, db, "SELECT pgmq.delete(queue_name => 'orders', msg_id => $1)", id1) {
		t.Fatal("delete returned false")
	}
	if scalar[bool](t, db, "SELECT pgmq.delete('orders', $1::bigint)", id1) {
		t.Fatal("second delete returned true")
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.q_orders"); n != 1 {
		t.Fatalf("q_orders has %d rows, want 1", n)
	}
}

// TestNullMessages checks that a NULL msg is sent as JSON null, by send and
// as an element of send_batch, and that the other elements keep their order.
func TestNullMessages(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	exec(t, db, "SELECT pgmq.create('nulls')")
	exec(t, db, "SELECT * FROM pgmq.send('nulls', NULL::jsonb)")
	exec(t, db, `SELECT * FROM pgmq.send_batch('nulls', ARRAY['{"a":1}', NULL, '{"a":3}']::jsonb[])`)
	got := msgs(t, db, "pgmq.read('nulls', 30, 10)")
	var bodies []string
	for _, m := range got {
		bodies = append(bodies, m.Message)
	}
	if len(bodies) != 4 || bodies[0] != "null" || bodies[1] != `{"a": 1}` || bodies[2] != "null" || bodies[3] != `{"a": 3}` {
		t.Fatalf("bodies %q, want null, {\"a\": 1}, null, {\"a\": 3}", bodies)
	}
}

// pgmq's sends go through sluice's: JSON nested deeper than 512 levels is
// refused there too (SL012), and nothing is sent.
func TestSendRefusesDeepJSON(t *testing.T) {
	db := newDB(t)
	exec(t, db, `SELECT pgmq.create('deep')`)
	deep := strings.Repeat("[", 12000) + strings.Repeat("]", 12000)
	for _, sql := range []string{`SELECT pgmq.send('deep', $1::jsonb)`, `SELECT pgmq.send_batch('deep', ARRAY['1'::jsonb, $1::jsonb])`} {
		_, err := db.Exec(ctxT(t), sql, deep)
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "SL012" {
			t.Errorf("%s: %v, want SL012", sql, err)
		}
	}
	if got := msgs(t, db, `pgmq.read('deep', 30, 10)`); len(got) != 0 {
		t.Fatalf("read %v", got)
	}
}
