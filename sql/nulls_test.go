package sqlsrc_test

import (
	"strings"
	"testing"
)

// NULL in every parameter of every public function: either a specific
// SQLSTATE and no change, or the documented meaning of NULL (a default, or
// "all"). Also 10 kB strings and a 100 MB body.
func TestNullsAndHugeInputs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	b.send(b.pool, "q", `{"pending": true}`)
	r := b.receive("q", "default", 1, "")[0].Receipt
	long := strings.Repeat("x", 10000)

	cases := []struct {
		sql  string
		args []any
		code string // "" when NULL has a documented meaning and the call succeeds
	}{
		{"SELECT sluice.create_queue(NULL, '{}')", nil, "SL001"},
		{"SELECT sluice.drop_queue(NULL)", nil, "SL001"},
		{"SELECT sluice.purge_queue(NULL)", nil, "SL001"},
		{"SELECT sluice.alter_queue(NULL, '{}')", nil, "SL001"},
		{"SELECT sluice.alter_queue('q', NULL)", nil, "SL007"},
		{"SELECT sluice.send(NULL, '{}')", nil, "SL001"},
		{"SELECT sluice.send('q', NULL)", nil, "SL006"},
		{"SELECT sluice.send('q', '{}', priority => NULL)", nil, "SL006"},
		{"SELECT sluice.send_batch(NULL, ARRAY['{}']::jsonb[])", nil, "SL001"},
		{"SELECT sluice.send_batch('q', NULL)", nil, "SL006"},
		{"SELECT sluice.create_group(NULL, 'g')", nil, "SL001"},
		{"SELECT sluice.create_group('q', NULL)", nil, "SL001"},
		{"SELECT sluice.create_group('q', 'g', NULL)", nil, "SL006"},
		{"SELECT sluice.drop_group(NULL, 'default')", nil, "SL001"},
		{"SELECT sluice.drop_group('q', NULL)", nil, "SL001"},
		{"SELECT sluice.seek_group(NULL, 'default', 'earliest')", nil, "SL001"},
		{"SELECT sluice.seek_group('q', NULL, 'earliest')", nil, "SL001"},
		{"SELECT sluice.seek_group('q', 'default', NULL)", nil, "SL006"},
		{"SELECT * FROM sluice.receive(NULL)", nil, "SL001"},
		{"SELECT * FROM sluice.receive('q', NULL)", nil, "SL001"},
		{"SELECT * FROM sluice.receive('q', 'default', NULL)", nil, "SL006"},
		{"SELECT sluice.ack(NULL, 'default', ARRAY[$1])", []any{r}, "SL001"},
		{"SELECT sluice.ack('q', NULL, ARRAY[$1])", []any{r}, "SL001"},
		{"SELECT sluice.ack('q', 'default', NULL)", nil, "SL006"},
		{"SELECT sluice.nack(NULL, 'default', $1)", []any{r}, "SL001"},
		{"SELECT sluice.nack('q', NULL, $1)", []any{r}, "SL001"},
		{"SELECT sluice.nack('q', 'default', NULL)", nil, "SL008"},
		{"SELECT sluice.extend(NULL, 'default', ARRAY[$1], '1 minute')", []any{r}, "SL001"},
		{"SELECT sluice.extend('q', NULL, ARRAY[$1], '1 minute')", []any{r}, "SL001"},
		{"SELECT sluice.extend('q', 'default', NULL, '1 minute')", nil, "SL006"},
		{"SELECT sluice.extend('q', 'default', ARRAY[$1], NULL)", []any{r}, "SL006"},
		{"SELECT * FROM sluice.dead_letters(NULL)", nil, "SL001"},
		{"SELECT * FROM sluice.dead_letters('q', NULL, NULL)", nil, "SL006"},
		{"SELECT * FROM sluice.peek(NULL)", nil, "SL001"},
		{"SELECT * FROM sluice.peek('q', NULL)", nil, "SL006"},
		{"SELECT * FROM sluice.leases(NULL)", nil, "SL001"},
		{"SELECT * FROM sluice.leases('q', 'default', NULL)", nil, "SL006"},
		{"SELECT sluice.redrive(NULL)", nil, "SL001"},
		// huge inputs
		{"SELECT sluice.create_queue($1)", []any{long}, "SL001"},
		{"SELECT * FROM sluice.receive('q', $1)", []any{long}, "SL001"},
		{"SELECT * FROM sluice.receive('q', 'default', 1, NULL, $1)", []any{long}, "SL006"},
		{"SELECT sluice.nack('q', 'default', $1, NULL, $2)", []any{r, long + "x"}, "SL006"},
		{"SELECT sluice.ack('q', 'default', ARRAY[$1])", []any{long}, "SL008"},
		{"SELECT sluice.send('q', jsonb_build_object('x', repeat('y', 100000000)))", nil, "SL009"},
		{"SELECT sluice.send('q', '{}', headers => jsonb_build_object('x', repeat('y', 2000000)))", nil, "SL009"},
		{"SELECT sluice.create_queue('big', '{\"max_payload\": 104857601}')", nil, "SL007"},
	}
	before := b.dataFingerprint()
	for _, c := range cases {
		_, err := b.pool.Exec(b.ctx, c.sql, c.args...)
		if code := sqlstate(err); code != c.code {
			t.Errorf("%s: got %v (SQLSTATE %q), want SQLSTATE %s", c.sql, err, code, c.code)
		}
	}
	if after := b.dataFingerprint(); after != before {
		t.Fatalf("bad input changed the data:\nbefore %s\nafter  %s", before, after)
	}

	// NULL where it has a documented meaning: these succeed.
	ok := []string{
		"SELECT * FROM sluice.status(NULL)",
		"SELECT * FROM sluice.dead_letters('q', NULL)",
		"SELECT * FROM sluice.peek('q', 10, NULL)",
		"SELECT * FROM sluice.leases('q', NULL)",
		"SELECT sluice.redrive('q', NULL, NULL)",
		"SELECT * FROM sluice.receive('q', 'default', 1, NULL, NULL)",
		"SELECT sluice.send('q', '{}', headers => NULL, key => NULL, delay => NULL, dedup_key => NULL)",
		"SELECT sluice.send_batch('q', ARRAY['{}']::jsonb[], NULL, NULL, NULL)",
		"SELECT sluice.create_queue('q2', NULL)",
		"SELECT sluice.send('q', '{}', key => repeat('k', 512))", // the longest key (longer: SL006, badinput_test.go)
	}
	for _, sql := range ok {
		if _, err := b.pool.Exec(b.ctx, sql); err != nil {
			t.Errorf("%s: %v, want success", sql, err)
		}
	}
}
