package sqlsrc_test

import (
	"strings"
	"testing"
)

// nested is JSON nested d levels deep, arrays or objects.
func nested(d int, objects bool) string {
	if objects {
		return strings.Repeat(`{"a":`, d-1) + "{}" + strings.Repeat("}", d-1)
	}
	return strings.Repeat("[", d) + strings.Repeat("]", d)
}

// Every send path refuses JSON nested deeper than 512 levels with SL012
// and sends nothing: 12,000 levels were stored, and wedged the HTTP
// consumers (the server could not write them back). 512 levels are sent.
func TestJSONDepthLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	b.exec(`CREATE TABLE deep (b jsonb)`)
	b.exec(`INSERT INTO deep VALUES ($1::jsonb)`, nested(600, false)) // stored compressed
	var compressed *string
	if err := b.pool.QueryRow(b.ctx, `SELECT pg_column_compression(b) FROM deep`).Scan(&compressed); err != nil || compressed == nil {
		t.Fatalf("the table's value is not compressed (%v): the test would not test that case", err)
	}
	for _, c := range []struct {
		name, sql string
		args      []any
		message   string
	}{
		{"send arrays", `SELECT sluice.send('q', $1::jsonb)`, []any{nested(513, false)}, "body is nested deeper than 512 levels"},
		{"send objects", `SELECT sluice.send('q', $1::jsonb)`, []any{nested(12000, true)}, "body is nested deeper than 512 levels"},
		{"send headers", `SELECT sluice.send('q', '1', jsonb_build_object('h', $1::jsonb))`, []any{nested(600, false)}, "headers is nested deeper"},
		{"send compressed", `SELECT sluice.send('q', b) FROM deep`, nil, "body is nested deeper"},
		{"batch", `SELECT sluice.send_batch('q', ARRAY['1'::jsonb, $1::jsonb])`, []any{nested(513, false)}, "bodies[2] is nested deeper"},
		{"batch headers", `SELECT sluice.send_batch('q', ARRAY['1'::jsonb, '2'], ARRAY[NULL, jsonb_build_object('h', $1::jsonb)])`,
			[]any{nested(600, true)}, "headers[2] is nested deeper"},
		{"batch compressed", `SELECT sluice.send_batch('q', ARRAY(SELECT b FROM deep))`, nil, "bodies[1] is nested deeper"},
		{"batch with dedup", `SELECT sluice.send_batch('q', ARRAY['1'::jsonb, $1::jsonb], dedup_keys => ARRAY['a', 'b'])`,
			[]any{nested(513, false)}, "bodies[2] is nested deeper"},
	} {
		_, err := b.pool.Exec(b.ctx, c.sql, c.args...)
		if sqlstate(err) != "SL012" || !strings.Contains(err.Error(), strings.TrimSuffix(c.message, " are")) {
			t.Errorf("%s: %v, want SL012 %q", c.name, err, c.message)
		}
	}
	if n := b.int64(`SELECT count(*) FROM sluice.peek('q', 100)`); n != 0 {
		t.Fatalf("%d messages sent", n)
	}
	// Engine 2 queues take the same checks before their own send path.
	b.createQueue("q2", `{"engine": 2}`)
	for _, sql := range []string{`SELECT sluice.send('q2', $1::jsonb)`, `SELECT sluice.send_batch('q2', ARRAY['1'::jsonb, $1::jsonb])`} {
		if _, err := b.pool.Exec(b.ctx, sql, nested(513, false)); sqlstate(err) != "SL012" {
			t.Errorf("engine 2: %s: %v, want SL012", sql, err)
		}
	}
	b.int64(`SELECT sluice.send('q2', $1::jsonb)`, nested(512, false))
	b.int64(`SELECT sluice.send('q', $1::jsonb)`, nested(512, false))
	b.int64(`SELECT sluice.send('q', $1::jsonb, jsonb_build_object('h', $2::jsonb))`, nested(512, true), nested(511, false))
	b.int64(`SELECT count(*) FROM sluice.send_batch('q', ARRAY[$1::jsonb, '1'])`, nested(512, false))
	if n := b.int64(`SELECT count(*) FROM sluice.peek('q', 100)`); n != 4 {
		t.Fatalf("%d messages of 512 levels sent, want 4", n)
	}
}
