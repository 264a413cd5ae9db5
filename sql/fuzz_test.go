package sqlsrc_test

import (
	"encoding/json"
	"testing"
)

// fuzzBundle shares one database among the inputs of a fuzz target: a
// queue with one delivered message whose receipt the inputs try to forge.
type fuzzBundle struct {
	*bundle
	before string
}

func fuzzSetup(f *testing.F) *fuzzBundle {
	b := setup(f)
	b.createQueue("q", "")
	b.send(b.pool, "q", `{}`)
	b.receive("q", "default", 1, "")
	return &fuzzBundle{bundle: b, before: b.dataFingerprint()}
}

// Any receipt text either is malformed (SL008) or names no current delivery
// (counted 0): it never completes a message and never changes anything.
func FuzzAckReceipt(f *testing.F) {
	fb := fuzzSetup(f)
	for _, seed := range []string{"", "0.1.1.1", "1.1.1.1", "0.1.1.123456789012345678", "3.999999999999999999.1.1",
		"0.1.1.1234567890123456789", "-1.1.1.1", "0.1.1", "0.1.1.1.1", "a.b.c.d", "0.1.1.1; DROP TABLE x",
		"0 .1.1.1", "０.1.1.1", "0.1.1.1\n", "999999999.1.1.1"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, receipt string) {
		b := &bundle{t: t, ctx: fb.ctx, pool: fb.pool}
		var n int
		err := fb.pool.QueryRow(fb.ctx, "SELECT sluice.ack('q', 'default', ARRAY[$1])", receipt).Scan(&n)
		switch {
		case err == nil && n != 0:
			t.Fatalf("receipt %q completed %d messages", receipt, n)
		case err != nil && sqlstate(err) != "SL008" && sqlstate(err) != "22021": // 22021: not valid UTF-8 text
			t.Fatalf("receipt %q: %v (SQLSTATE %q), want SL008 or a count of 0", receipt, err, sqlstate(err))
		}
		if after := b.dataFingerprint(); after != fb.before {
			t.Fatalf("receipt %q changed the data", receipt)
		}
	})
}

// Any options object either creates a queue or raises SL007, never another
// error: out-of-range numbers and intervals are the caller's mistake.
func FuzzQueueOptions(f *testing.F) {
	fb := fuzzSetup(f)
	for _, seed := range []string{`{}`, `{"max_attempts": 3}`, `{"max_attempts": -1}`, `{"max_attempts": 1e30}`,
		`{"max_attempts": "3"}`, `{"lease": "30 seconds"}`, `{"lease": "9999999999 years"}`, `{"lease": 5}`,
		`{"lease": "-1 s"}`, `{"retention": "infinity"}`, `{"backoff_base": "2 hours", "backoff_max": "1 hour"}`,
		`{"notify": "yes"}`, `{"default_group": null}`, `{"max_payload": 0}`, `{"x": 1}`, `[]`, `null`, `"s"`,
		`{"rotate_interval": "0"}`, `{"lease": "1 day 100000000 hours"}`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, options string) {
		if !json.Valid([]byte(options)) {
			return // not JSON: the jsonb cast refuses it before sluice sees it
		}
		tx, err := fb.pool.Begin(fb.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(fb.ctx) //nolint:errcheck
		_, err = tx.Exec(fb.ctx, "SELECT sluice.create_queue('fuzzed', $1::jsonb)", options)
		// 22P05: \u0000 in jsonb text; 22021: not valid UTF-8. Both are
		// refused by the jsonb input before sluice sees the options.
		if err != nil && sqlstate(err) != "SL007" && sqlstate(err) != "22P05" && sqlstate(err) != "22021" {
			t.Fatalf("options %s: %v (SQLSTATE %q), want success or SL007", options, err, sqlstate(err))
		}
	})
}
