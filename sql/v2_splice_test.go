package sqlsrc_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The takes' statements (e2_take__s, and e2_take_one__s for one position)
// are spliced into each slot's copy of the receive (sluice._splice_call): a
// receive takes with no call of a take function, and the copies are made
// with none per slot.
func TestV2TakeIsSplicedIntoTheReceive(t *testing.T) {
	b := setup(t)
	b.createV2("q", `"lanes": 2`)
	schema := fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'q'"))
	for i := 0; i < 5; i++ {
		b.send(b.pool, "q", fmt.Sprintf(`{"n": %d}`, i))
	}
	var got int
	calls := b.calls(func(tx pgx.Tx) {
		ms, err := receiveOn(b.ctx, tx, "q", "default", 5, "")
		if err != nil {
			t.Fatal(err)
		}
		got = len(ms)
	}, "e2_receive_0", "e2_take_0", "e2_take")
	if got != 5 || calls["e2_receive_0"] != 1 || calls["e2_take_0"] != 0 || calls["e2_take"] != 0 {
		t.Fatalf("a receive of 5: %d messages, calls %v; want 5, one of e2_receive_0 and none of a take", got, calls)
	}
	var src string
	var takes int64
	if err := b.pool.QueryRow(b.ctx, `
		SELECT (SELECT p.prosrc FROM pg_proc p WHERE p.pronamespace = $1::regnamespace AND p.proname = 'e2_receive_1'),
		       (SELECT count(*) FROM pg_proc p WHERE p.pronamespace = $1::regnamespace AND p.proname ~ '^e2_take(_one)?_[0-9]+$')`,
		schema).Scan(&src, &takes); err != nil {
		t.Fatal(err)
	}
	if strings.Count(src, "INSERT INTO lease_1") != 2 || strings.Contains(src, "e2_take_1(") ||
		strings.Contains(src, "e2_take_one_1(") || takes != 0 {
		t.Fatalf("slot 1's receive: take spliced in %v, calls e2_take_1 %v; per-slot take copies %d",
			strings.Contains(src, "INSERT INTO lease_1"), strings.Contains(src, "e2_take_1("), takes)
	}
}

// _splice_call refuses a call it cannot splice exactly, so that a template
// edited apart from its callee fails the migration.
func TestSpliceCallRefusesWhatItCannotSplice(t *testing.T) {
	b := setup(t)
	args := []string{"p_group => g.id", "p_lane => s.lane", "p_no => s.lease_no", "p_cursor => s.cursor",
		"p_scan_t => x", "p_scan_no => y", "p_old_due => z", "p_next_exp => v_next", "p_moved => a OR b",
		"p_need => v_need", "p_lease => p_lease", "p_consumer => p_consumer", "p_now => v_now", "p_slot => p_slot"}
	def := func(args ...string) string {
		return "BEGIN\n RETURN QUERY SELECT * FROM e2_take__s(" + strings.Join(args, ", ") + ");\nEND"
	}
	var out string
	if err := b.pool.QueryRow(b.ctx, "SELECT sluice._splice_call($1, 'e2_take__s')", def(args...)).Scan(&out); err != nil {
		t.Fatalf("every parameter by name: %v", err)
	}
	if strings.Contains(out, "e2_take__s(") || !strings.Contains(out, "(a OR b)") || !strings.Contains(out, "(v_need) + 3") {
		t.Fatalf("spliced: %s", out)
	}
	for what, d := range map[string]string{
		"no call":            "BEGIN\n PERFORM 1;\nEND",
		"positional":         "BEGIN\n RETURN QUERY SELECT * FROM e2_take__s(g.id, s.lane);\nEND",
		"a parameter missed": def(args[1:]...),
		"one twice":          def(append(args, args[0])...),
		"a name unknown":     def(append(args[1:], "p_grp => g.id")...),
	} {
		if _, err := b.pool.Exec(b.ctx, "SELECT sluice._splice_call($1, 'e2_take__s')", d); err == nil ||
			!strings.Contains(err.Error(), "cannot splice e2_take__s") {
			t.Errorf("%s: got %v, want cannot splice", what, err)
		}
	}
}
