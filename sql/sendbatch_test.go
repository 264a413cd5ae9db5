package sqlsrc_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// send_batch tells a valid batch with a few cheap expressions and runs its
// checks one by one (sluice._send_batch_check) only when one of them may
// fail: every bad batch still gets the error of the first check it fails,
// in the order the checks have always run, and changes nothing (no id is
// drawn either).
func TestSendBatchErrorsInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	b.createQueue("small", `{"max_payload": 100}`)
	b.createQueue("md", `{"max_delay": "1 hour"}`)
	b.exec(`CREATE TABLE compressed AS SELECT jsonb_build_object('s', repeat('a', 3000000)) AS b`)
	b.exec(`CREATE TABLE stored AS SELECT ARRAY(SELECT jsonb_build_object('s', repeat('a', 30000), 'i', g)
	                                           FROM generate_series(1, 100) g) AS a`)
	if n := b.int64(`SELECT pg_column_size(b) FROM compressed`); n > 1048576 {
		t.Fatalf("the test body is stored in %d bytes, not compressed", n)
	}
	big := b.int64(`SELECT pg_column_size(jsonb_build_object('x', repeat('y', 2000000)))`)
	huge := b.int64(`SELECT pg_column_size(b #> '{}') FROM compressed`)
	const (
		tooLong   = "every key and dedup_key must be at most 512 bytes"
		notObject = "every headers element must be a JSON object or NULL"
		negative  = "delay must not be negative, got -00:00:01"
	)
	tooLarge := func(size int64, queue string, max int) string {
		return fmt.Sprintf("a message of %d bytes exceeds the max_payload of queue '%s' (%d bytes)", size, queue, max)
	}
	b.send(b.pool, "q", `{"before": true}`)
	before := b.dataFingerprint()
	cases := []struct {
		name, sql, code, message string
	}{
		{"NULL bodies", `SELECT sluice.send_batch('q', NULL)`, "SL006", "bodies must not be NULL"},
		{"2-D bodies and short keys", `SELECT sluice.send_batch('q', ARRAY[['{}','{}'],['{}','{}']]::jsonb[], keys => ARRAY['a'])`,
			"SL006", "bodies must be a one-dimensional array, got 2 dimensions"},
		{"2-D keys and priorities", `SELECT sluice.send_batch('q', ARRAY['{}','{}','{}','{}']::jsonb[], keys => ARRAY[['a','b'],['c','d']],
			priorities => ARRAY[[1,2],[3,4]])`, "SL006", "keys must be a one-dimensional array, got 2 dimensions"},
		{"2-D dedup_keys", `SELECT sluice.send_batch('q', ARRAY['{}','{}','{}','{}']::jsonb[], dedup_keys => ARRAY[['a','b'],['c','d']])`,
			"SL006", "dedup_keys must be a one-dimensional array, got 2 dimensions"},
		{"NULL bodies[3] and short keys", `SELECT sluice.send_batch('q', ARRAY['{}', '{}', NULL, NULL]::jsonb[], keys => ARRAY['a'])`,
			"SL006", "bodies[3] is NULL"},
		{"NULL bodies[1] of [0:1]", `SELECT sluice.send_batch('q', '[0:1]={"{}",NULL}'::jsonb[])`, "SL006", "bodies[1] is NULL"},
		{"short keys and priorities", `SELECT sluice.send_batch('q', ARRAY['{}', '{}']::jsonb[], keys => ARRAY['a'], priorities => ARRAY[1])`,
			"SL006", "keys has 1 elements but bodies has 2"},
		{"empty headers", `SELECT sluice.send_batch('q', ARRAY['{}', '{}']::jsonb[], headers => '{}'::jsonb[])`,
			"SL006", "headers has 0 elements but bodies has 2"},
		{"NULL priority and bad headers", `SELECT sluice.send_batch('q', ARRAY['{}', '{}']::jsonb[], priorities => ARRAY[1, NULL],
			headers => ARRAY['[1]', NULL]::jsonb[])`, "SL006", "priorities[2] is NULL"},
		{"headers JSON null", `SELECT sluice.send_batch('q', ARRAY['{}', '{}']::jsonb[], headers => ARRAY['{}', 'null']::jsonb[])`,
			"SL006", notObject},
		{"bad headers and negative delay", `SELECT sluice.send_batch('q', ARRAY['{}', '{}']::jsonb[], headers => ARRAY['[1]', NULL]::jsonb[],
			delay => '-1 second')`, "SL006", notObject},
		{"bad headers and long key", `SELECT sluice.send_batch('q', ARRAY['{}', '{}']::jsonb[], headers => ARRAY['{}', '"s"']::jsonb[],
			keys => ARRAY[NULL, repeat('k', 600)])`, "SL006", notObject},
		{"negative delay and long key", `SELECT sluice.send_batch('q', ARRAY['{}', '{}']::jsonb[], delay => '-1 second',
			keys => ARRAY[repeat('k', 513), NULL])`, "SL006", negative},
		{"delay over max_delay and long key", `SELECT sluice.send_batch('md', ARRAY['{}']::jsonb[], delay => '2 hours',
			keys => ARRAY[repeat('k', 513)])`, "SL006", "delay must be at most 01:00:00 (the max_delay of queue 'md'), got 02:00:00"},
		{"key of 513 bytes in two-byte letters", `SELECT sluice.send_batch('q', ARRAY['{}', '{}']::jsonb[], keys => ARRAY[NULL, repeat('é', 257)])`,
			"SL006", tooLong},
		{"long dedup key", `SELECT sluice.send_batch('q', ARRAY['{}', '{}']::jsonb[], dedup_keys => ARRAY['x', repeat('d', 513)])`,
			"SL006", tooLong},
		{"long key and a compressed body over max_payload", `SELECT sluice.send_batch('q', ARRAY['{}'::jsonb, (SELECT b FROM compressed)],
			keys => ARRAY[repeat('k', 513), NULL])`, "SL006", tooLong},
		// the size, last
		{"only the 57th of 100 too large", `SELECT sluice.send_batch('q', ARRAY(SELECT CASE WHEN g = 57
			THEN jsonb_build_object('x', repeat('y', 2000000)) ELSE jsonb_build_object('g', g) END FROM generate_series(1, 100) g))`,
			"SL009", tooLarge(big, "q", 1048576)},
		{"the 57th and the 80th too large: the larger", `SELECT sluice.send_batch('q', ARRAY(SELECT CASE WHEN g IN (57, 80)
			THEN jsonb_build_object('x', repeat('y', 1999920 + g)) ELSE jsonb_build_object('g', g) END FROM generate_series(1, 100) g))`,
			"SL009", tooLarge(big, "q", 1048576)},
		{"one too large among many with dedup keys", `SELECT sluice.send_batch('q', ARRAY(SELECT CASE WHEN g = 3
			THEN jsonb_build_object('x', repeat('y', 2000000)) ELSE '{}' END FROM generate_series(1, 5) g),
			dedup_keys => ARRAY['a', 'b', 'c', 'a', NULL])`, "SL009", tooLarge(big, "q", 1048576)},
		{"compressed, as an array element", `SELECT sluice.send_batch('q', ARRAY[(SELECT b FROM compressed)])`,
			"SL009", tooLarge(huge, "q", 1048576)},
		{"compressed, through array_agg", `SELECT sluice.send_batch('q', (SELECT array_agg(x.b) FROM (SELECT b FROM compressed
			UNION ALL SELECT '{}') x), keys => ARRAY[NULL, 'k'])`, "SL009", tooLarge(huge, "q", 1048576)},
		{"compressed, set into a PL/pgSQL array", `DO $$ DECLARE a jsonb[] := ARRAY['{}'::jsonb];
			BEGIN a[2] := (SELECT b FROM compressed); PERFORM sluice.send_batch('q', a); END $$`, "SL009", tooLarge(huge, "q", 1048576)},
		{"compressed headers, set into a PL/pgSQL array", `DO $$ DECLARE h jsonb[] := ARRAY[NULL, '{}']::jsonb[];
			BEGIN h[2] := (SELECT b FROM compressed); PERFORM sluice.send_batch('q', ARRAY['{}', '{}']::jsonb[], h); END $$`,
			"SL009", tooLarge(huge+5, "q", 1048576)},
		{"over max_payload by a key", `SELECT sluice.send_batch('small', ARRAY['{"a": 1}', '{}']::jsonb[], keys => ARRAY[NULL, repeat('k', 96)])`,
			"SL009", tooLarge(101, "small", 100)},
		{"over max_payload by headers", `SELECT sluice.send_batch('small', ARRAY['{"a": 1}', '{}']::jsonb[],
			headers => ARRAY[NULL, jsonb_build_object('h', repeat('h', 100))])`, "SL009", tooLarge(119, "small", 100)},
		{"one byte over max_payload among smaller ones", `SELECT sluice.send_batch('small',
			ARRAY(SELECT jsonb_build_object('p', repeat('x', 87 - g)) FROM generate_series(0, 5) g))`, "SL009", tooLarge(101, "small", 100)},
	}
	for _, c := range cases {
		_, err := b.pool.Exec(b.ctx, c.sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != c.code || pgErr.Message != c.message {
			t.Errorf("%s: got %v, want %s %q", c.name, err, c.code, c.message)
		}
	}
	if after := b.dataFingerprint(); after != before {
		t.Fatalf("bad batches changed the data:\nbefore %s\nafter  %s", before, after)
	}
}

// storedMessages is a query of the messages a queue stores, as sent (no
// retry or redrive copies), with engine 1's column names (id, body,
// headers, key, priority, deliver_at, sent_at, dedup_key), from the
// queue's own storage: sluice.messages on engine 1; on engine 2 its msg
// table (deliver_at is its due), with the dedup_key its dedup table
// recorded for the message.
func storedMessages(b *bundle, queue string) string {
	b.t.Helper()
	qid := b.int64("SELECT id FROM sluice.queue WHERE name = $1", queue)
	if b.int64("SELECT engine FROM sluice.queue WHERE id = $1", qid) == 1 {
		return fmt.Sprintf(`(SELECT id, body, headers, key, priority, deliver_at, sent_at, dedup_key
		                     FROM sluice.messages WHERE queue_id = %d)`, qid)
	}
	return fmt.Sprintf(`(SELECT m.id, m.body, m.headers, m.key, m.priority, m.due AS deliver_at, m.sent_at,
	                            (SELECT d.dedup_key FROM sluice_q%[1]d.dedup d WHERE d.msg_id = m.id LIMIT 1) AS dedup_key
	                     FROM sluice_q%[1]d.msg m WHERE m.orig IS NULL)`, qid)
}

// Batches whose arrays together are larger than max_payload, while each
// message fits (so that send_batch sizes every message), and batches read
// from a table: sent whole, every field as given, on either engine (each
// read from the queue's own storage).
func TestSendBatchSizesAndFields(t *testing.T) {
	t.Parallel()
	for _, engine := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine=%d", engine), func(t *testing.T) {
			t.Parallel()
			sendBatchSizesAndFields(t, engine)
		})
	}
}

func sendBatchSizesAndFields(t *testing.T, engine int) {
	b := setup(t)
	b.createQueue("small", fmt.Sprintf(`{"engine": %d, "max_payload": 100}`, engine))
	b.createQueue("q", fmt.Sprintf(`{"engine": %d}`, engine))
	// '{"p": "x..."}' with 86 letters is 100 bytes in an array: at
	// max_payload, sent.
	if n := b.int64(`SELECT pg_column_size(x) FROM unnest(ARRAY[jsonb_build_object('p', repeat('x', 86))]) x`); n != 100 {
		t.Fatalf("the test body is %d bytes, want 100", n)
	}
	if n := b.int64(`SELECT count(*) FROM sluice.send_batch('small',
		ARRAY(SELECT jsonb_build_object('p', repeat('x', 86 - g)) FROM generate_series(0, 5) g))`); n != 6 {
		t.Fatalf("batch at max_payload: %d ids, want 6", n)
	}
	if n := b.int64(`SELECT count(*) FROM sluice.send_batch('small', ARRAY['{}', '{}']::jsonb[],
		keys => ARRAY[NULL, repeat('k', 95)])`); n != 2 {
		t.Fatalf("batch at max_payload with a key: %d ids, want 2", n)
	}
	// 100 bodies of ~30 kB, compressed in a table as one array: 3 MB in all.
	b.exec(`CREATE TABLE stored AS SELECT ARRAY(SELECT jsonb_build_object('s', repeat('a', 30000), 'i', g)
	                                           FROM generate_series(1, 100) g) AS a`)
	if n := b.int64(`SELECT count(*) FROM sluice.send_batch('q', (SELECT a FROM stored))`); n != 100 {
		t.Fatalf("batch from a table: %d ids, want 100", n)
	}
	// Every field, and the ids: increasing in body order.
	b.exec(`CREATE TABLE sent AS
		SELECT s.id, s.ord FROM sluice.send_batch('q',
			ARRAY(SELECT jsonb_build_object('g', g) FROM generate_series(1, 100) g),
			ARRAY(SELECT CASE WHEN g % 3 = 0 THEN jsonb_build_object('h', g) END FROM generate_series(1, 100) g),
			ARRAY(SELECT CASE WHEN g % 4 = 0 THEN 'k' || g % 7 END FROM generate_series(1, 100) g),
			'5 minutes',
			ARRAY(SELECT g % 5 - 2 FROM generate_series(1, 100) g)) WITH ORDINALITY AS s(id, ord)`)
	bad := b.int64(`SELECT count(*) FROM sent s
		LEFT JOIN ` + storedMessages(b, "q") + ` m ON m.id = s.id
		WHERE m.body IS DISTINCT FROM jsonb_build_object('g', s.ord)
		   OR m.headers IS DISTINCT FROM CASE WHEN s.ord % 3 = 0 THEN jsonb_build_object('h', s.ord) END
		   OR m.key IS DISTINCT FROM CASE WHEN s.ord % 4 = 0 THEN 'k' || s.ord % 7 END
		   OR m.priority IS DISTINCT FROM (s.ord % 5 - 2)::int
		   OR m.deliver_at IS DISTINCT FROM m.sent_at + interval '5 minutes'
		   OR m.dedup_key IS NOT NULL
		   OR s.id <> (SELECT min(id) FROM sent) + s.ord - 1`)
	if bad != 0 {
		t.Fatalf("%d of 100 messages not stored as sent, or ids not in body order", bad)
	}
	if n := b.int64(`SELECT count(DISTINCT m.sent_at) FROM sent s JOIN ` + storedMessages(b, "q") + ` m
		ON m.id = s.id`); n != 1 {
		t.Fatalf("the batch has %d sent_at values, want 1", n)
	}
}
