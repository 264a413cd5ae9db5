package sqlsrc_test

import (
	"strings"
	"testing"
)

// Every bad input raises its own SQLSTATE and changes nothing.
func TestBadInputRaisesSpecificErrorsAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	b.createQueue("small", `{"max_payload": 100}`)
	b.exec(`CREATE TABLE compressed AS SELECT jsonb_build_object('s', repeat('a', 3000000)) AS b`)
	if n := b.int64(`SELECT pg_column_size(b) FROM compressed`); n > 1048576 {
		t.Fatalf("the test body is stored in %d bytes, not compressed", n)
	}
	b.send(b.pool, "q", `{"pending": true}`)
	got := b.receive("q", "default", 1, "")
	receipt := got[0].Receipt
	long := strings.Repeat("a", 200)

	cases := []struct {
		name string
		sql  string
		args []any
		code string
	}{
		// names
		{"queue name with a quote", "SELECT sluice.create_queue($1)", []any{"it's"}, "SL001"},
		{"queue name with a semicolon", "SELECT sluice.create_queue($1)", []any{"q; DROP TABLE x"}, "SL001"},
		{"200-character queue name", "SELECT sluice.create_queue($1)", []any{long}, "SL001"},
		{"empty queue name", "SELECT sluice.create_queue($1)", []any{""}, "SL001"},
		{"NULL queue name", "SELECT sluice.create_queue(NULL)", nil, "SL001"},
		{"unicode queue name", "SELECT sluice.create_queue($1)", []any{"café"}, "SL001"},
		{"group name with a quote", "SELECT sluice.create_group('q', $1)", []any{`a"b`}, "SL001"},
		{"200-character group name", "SELECT sluice.create_group('q', $1)", []any{long}, "SL001"},
		{"send to a malformed queue name", "SELECT sluice.send($1, '{}')", []any{"x;y"}, "SL001"},
		// unknown queue or group
		{"send to an unknown queue", "SELECT sluice.send('nope', '{}')", nil, "SL002"},
		{"receive from an unknown queue", "SELECT * FROM sluice.receive('nope')", nil, "SL002"},
		{"receive for an unknown group", "SELECT * FROM sluice.receive('q', 'nope')", nil, "SL003"},
		{"ack for an unknown group", "SELECT sluice.ack('q', 'nope', ARRAY[$1])", []any{receipt}, "SL003"},
		{"create_group on an unknown queue", "SELECT sluice.create_group('nope', 'g')", nil, "SL002"},
		{"status of an unknown queue", "SELECT * FROM sluice.status('nope')", nil, "SL002"},
		{"purge an unknown queue", "SELECT sluice.purge_queue('nope')", nil, "SL002"},
		// duplicates
		{"create an existing queue", "SELECT sluice.create_queue('q')", nil, "SL004"},
		{"create an existing group", "SELECT sluice.create_group('q', 'default')", nil, "SL005"},
		// arguments
		{"NULL body", "SELECT sluice.send('q', NULL)", nil, "SL006"},
		{"headers not an object", `SELECT sluice.send('q', '{}', headers => '[1]')`, nil, "SL006"},
		{"negative delay", `SELECT sluice.send('q', '{}', delay => '-1 second')`, nil, "SL006"},
		{"NULL priority", `SELECT sluice.send('q', '{}', priority => NULL)`, nil, "SL006"},
		{"NULL element in send_batch", `SELECT sluice.send_batch('q', ARRAY['{}', NULL]::jsonb[])`, nil, "SL006"},
		{"send_batch keys of another length", `SELECT sluice.send_batch('q', ARRAY['{}']::jsonb[], keys => ARRAY['a','b'])`, nil, "SL006"},
		{"zero max_messages", "SELECT * FROM sluice.receive('q', 'default', 0)", nil, "SL006"},
		{"negative max_messages", "SELECT * FROM sluice.receive('q', 'default', -5)", nil, "SL006"},
		{"huge max_messages", "SELECT * FROM sluice.receive('q', 'default', 1000000000)", nil, "SL006"},
		{"zero lease", "SELECT * FROM sluice.receive('q', 'default', 1, '0 seconds')", nil, "SL006"},
		{"negative lease", "SELECT * FROM sluice.receive('q', 'default', 1, '-5 seconds')", nil, "SL006"},
		{"huge lease", "SELECT * FROM sluice.receive('q', 'default', 1, '100 years')", nil, "SL006"},
		{"zero extend lease", "SELECT sluice.extend('q', 'default', ARRAY[$1], '0 seconds')", []any{receipt}, "SL006"},
		{"NULL receipts", "SELECT sluice.ack('q', 'default', NULL)", nil, "SL006"},
		{"bad start_from", "SELECT sluice.create_group('q', 'g', 'yesterday-ish')", nil, "SL006"},
		{"bad to_position", "SELECT sluice.seek_group('q', 'default', 'yesterday-ish')", nil, "SL006"},
		{"seek an unknown group", "SELECT sluice.seek_group('q', 'nope', 'earliest')", nil, "SL003"},
		{"seek on an unknown queue", "SELECT sluice.seek_group('nope', 'default', 'earliest')", nil, "SL002"},
		{"seek a group with a bad name", "SELECT sluice.seek_group('q', $1, 'earliest')", []any{`a"b`}, "SL001"},
		{"negative nack delay", "SELECT sluice.nack('q', 'default', $1, '-1 second')", []any{receipt}, "SL006"},
		{"dead_letters max_rows 0", "SELECT * FROM sluice.dead_letters('q', NULL, 0)", nil, "SL006"},
		// receipts
		{"malformed receipt", "SELECT sluice.ack('q', 'default', ARRAY['not-a-receipt'])", nil, "SL008"},
		{"receipt with SQL in it", "SELECT sluice.ack('q', 'default', ARRAY['1.1.1.1; DROP TABLE x'])", nil, "SL008"},
		{"NULL receipt in an array", "SELECT sluice.ack('q', 'default', ARRAY[$1, NULL])", []any{receipt}, "SL008"},
		{"NULL receipt to nack", "SELECT sluice.nack('q', 'default', NULL)", nil, "SL008"},
		// options
		{"unknown option", `SELECT sluice.create_queue('q2', '{"max_atempts": 3}')`, nil, "SL007"},
		{"options not an object", `SELECT sluice.create_queue('q2', '[]')`, nil, "SL007"},
		{"max_attempts zero", `SELECT sluice.create_queue('q2', '{"max_attempts": 0}')`, nil, "SL007"},
		{"max_attempts not an integer", `SELECT sluice.create_queue('q2', '{"max_attempts": 2.5}')`, nil, "SL007"},
		{"lease not an interval", `SELECT sluice.create_queue('q2', '{"lease": "soon"}')`, nil, "SL007"},
		{"lease zero", `SELECT sluice.create_queue('q2', '{"lease": "0 s"}')`, nil, "SL007"},
		{"negative retention", `SELECT sluice.create_queue('q2', '{"retention": "-1 hour"}')`, nil, "SL007"},
		{"backoff base above max", `SELECT sluice.create_queue('q2', '{"backoff_base": "2 hours"}')`, nil, "SL007"},
		// size
		{"oversized payload", `SELECT sluice.send('q', jsonb_build_object('x', repeat('y', 2000000)))`, nil, "SL009"},
		// a body that arrives compressed counts uncompressed: 3 MB of one letter compresses to ~35 kB
		{"oversized payload, compressed in a table", `SELECT sluice.send('q', (SELECT b FROM compressed))`, nil, "SL009"},
		{"oversized payload in a batch, compressed", `SELECT sluice.send_batch('q', ARRAY[(SELECT b FROM compressed)])`, nil, "SL009"},
		{"payload over max_payload by its key", `SELECT sluice.send('small', '{}', key => repeat('k', 120))`, nil, "SL009"},
		{"key over 512 bytes", `SELECT sluice.send('q', '{}', key => repeat('k', 513))`, nil, "SL006"},
		{"dedup key over 512 bytes", `SELECT sluice.send('q', '{}', dedup_key => repeat('k', 2700))`, nil, "SL006"},
		{"batch key over 512 bytes", `SELECT sluice.send_batch('q', ARRAY['{}']::jsonb[], keys => ARRAY[repeat('k', 513)])`, nil, "SL006"},
		{"batch dedup key over 512 bytes", `SELECT sluice.send_batch('q', ARRAY['{}']::jsonb[], dedup_keys => ARRAY[repeat('k', 600)])`, nil, "SL006"},
		{"2-D bodies", `SELECT sluice.send_batch('q', ARRAY[['{}','{}'],['{}','{}']]::jsonb[])`, nil, "SL006"},
		{"2-D keys", `SELECT sluice.send_batch('q', ARRAY['{}','{}','{}','{}']::jsonb[], keys => ARRAY[['a','b'],['c','d']])`, nil, "SL006"},
	}
	before := b.dataFingerprint()
	for _, c := range cases {
		_, err := b.pool.Exec(b.ctx, c.sql, c.args...)
		if code := sqlstate(err); code != c.code {
			t.Errorf("%s: got %v (SQLSTATE %q), want SQLSTATE %s", c.name, err, code, c.code)
		}
	}
	if after := b.dataFingerprint(); after != before {
		t.Fatalf("bad input changed the data:\nbefore %s\nafter  %s", before, after)
	}
	// The valid receipt still works: nothing above disturbed the lease.
	if n := b.ack("q", "default", receipt); n != 1 {
		t.Fatalf("ack after the bad inputs = %d, want 1", n)
	}
}

// Receive must see other transactions' commits between its statements.
func TestReceiveRefusesSnapshotIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	err := b.execRepeatableRead("SELECT * FROM sluice.receive('q', 'default', 1)")
	if code := sqlstate(err); code != "SL010" {
		t.Fatalf("receive in REPEATABLE READ: %v (SQLSTATE %q), want SL010", err, code)
	}
}

// Stale and forged receipts change nothing and are not counted.
func TestStaleAndForgedReceipts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	b.createQueue("other", "")
	b.send(b.pool, "q", `{}`)
	got := b.receive("q", "default", 1, "")
	r := got[0].Receipt
	parts := strings.Split(r, ".")
	forgedToken := strings.Join(append(parts[:3:3], "12345"), ".")
	forgedAttempt := strings.Join([]string{parts[0], parts[1], "2", parts[3]}, ".")
	before := b.dataFingerprint()
	if n := b.ack("q", "default", forgedToken, forgedAttempt, "3.999999.1.1"); n != 0 {
		t.Fatalf("ack with forged receipts = %d, want 0", n)
	}
	if n := b.ack("other", "default", r); n != 0 {
		t.Fatalf("ack of another queue's receipt = %d, want 0", n)
	}
	if b.nack("q", "default", forgedToken, "", "") {
		t.Fatal("nack with a forged receipt = true")
	}
	if after := b.dataFingerprint(); after != before {
		t.Fatalf("stale receipts changed the data:\nbefore %s\nafter  %s", before, after)
	}
	if n := b.ack("q", "default", r, r); n != 1 {
		t.Fatalf("ack of the real receipt given twice = %d, want 1", n)
	}
}
