package sqlsrc_test

import (
	"fmt"
	"testing"
)

// A backlog is numbered at most 4,096 messages a cut, the rest of the same
// snapshot by the next cuts before anything newer; a transaction in
// progress at the first of them, older than the backlog's, is numbered once
// it commits. Every message is delivered once.
func TestV2BacklogNumberedInSteps(t *testing.T) {
	b := setup(t)
	b.createV2("v2big", `"lanes": 4`)
	old, err := b.pool.Begin(b.ctx) // in progress across the partial cuts
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback(b.ctx) //nolint:errcheck
	held := b.send(old, "v2big", `{"held": 1}`)
	b.exec(`SELECT count(*) FROM sluice.send_batch('v2big', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 10000) g))`)
	first := b.v2receive("v2big", "default", 1, "")
	if len(first) != 1 {
		t.Fatalf("first receive: %+v", first)
	}
	var heads int64
	qid := b.int64("SELECT id FROM sluice.queue WHERE name = 'v2big'")
	if err := b.pool.QueryRow(b.ctx, fmt.Sprintf(`SELECT (SELECT sum(h) FROM unnest(c.heads) h)
		FROM sluice_q%d.cut c ORDER BY c.cut_no DESC LIMIT 1`, qid)).Scan(&heads); err != nil {
		t.Fatal(err)
	}
	if heads != 4096 {
		t.Errorf("positions numbered by the first receive: %d, want 4096", heads)
	}
	if err := old.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int{first[0].ID: 1}
	b.ack("v2big", "default", first[0].Receipt)
	for _, m := range b.v2drain("v2big", "default", 500, "") {
		seen[m.ID]++
		b.ack("v2big", "default", m.Receipt)
	}
	if len(seen) != 10001 || seen[held] != 1 {
		t.Fatalf("received %d distinct messages (held message %d: %d times), want 10001", len(seen), held, seen[held])
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("message %d received %d times", id, n)
		}
	}
	if s := b.status("v2big")["default"]; s.Ready != 0 || s.InFlight != 0 {
		t.Errorf("status after the drain: %+v", s)
	}
}
