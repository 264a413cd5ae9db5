package pgmqcompat

import (
	"testing"
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
