package sqlsrc_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// syncCommit is synchronous_commit as db sees it.
func (b *bundle) syncCommit(db q) string {
	b.t.Helper()
	var v string
	if err := db.QueryRow(b.ctx, `SHOW synchronous_commit`).Scan(&v); err != nil {
		b.t.Fatal(err)
	}
	return v
}

// TestReceiveCommitsAsynchronously: a receive turns synchronous_commit off
// for the rest of its transaction; ack, nack, extend, send and send_batch in
// that transaction set the caller's value back (whatever it was), and
// sluice.durable_receive = on keeps it throughout. Nothing leaks past the
// transaction.
func TestReceiveCommitsAsynchronously(t *testing.T) {
	b := setup(t)
	b.createQueue("sc", `{"lease": "30 seconds"}`)
	for range 8 {
		b.send(b.pool, "sc", `{}`)
	}
	conn, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	show := b.syncCommit

	// completing (or sending) after a receive restores the caller's value,
	// not just "on"
	restore := map[string]string{
		"ack":        `SELECT sluice.ack('sc', 'default', ARRAY[$1])`,
		"nack":       `SELECT sluice.nack('sc', 'default', $1, '0 seconds')`,
		"extend":     `SELECT sluice.extend('sc', 'default', ARRAY[$1], '1 minute')`,
		"send":       `SELECT sluice.send('sc', '{}') WHERE $1::text IS NOT NULL`,
		"send_batch": `SELECT sluice.send_batch('sc', ARRAY['{}'::jsonb]) WHERE $1::text IS NOT NULL`,
	}
	for name, stmt := range restore {
		for _, caller := range []string{"on", "remote_write", "local"} {
			if _, err := conn.Exec(b.ctx, `SET synchronous_commit = `+caller); err != nil {
				t.Fatal(err)
			}
			tx, err := conn.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			ms, err := receiveOn(b.ctx, tx, "sc", "default", 1, "30 seconds")
			if err != nil || len(ms) != 1 {
				t.Fatalf("%s: receive: %v, %d messages", name, err, len(ms))
			}
			if v := show(tx); v != "off" {
				t.Fatalf("%s: after receive synchronous_commit = %s, want off", name, v)
			}
			if _, err := tx.Exec(b.ctx, stmt, ms[0].Receipt); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if v := show(tx); v != caller {
				t.Fatalf("%s: after %s synchronous_commit = %s, want the caller's %s", name, name, v, caller)
			}
			if err := tx.Commit(b.ctx); err != nil {
				t.Fatal(err)
			}
			if v := show(conn); v != caller {
				t.Fatalf("%s: after commit synchronous_commit = %s, want %s", name, v, caller)
			}
		}
	}
	if _, err := conn.Exec(b.ctx, `RESET synchronous_commit`); err != nil {
		t.Fatal(err)
	}

	// a receive in its own transaction leaves the session as it was
	if _, err := receiveOn(b.ctx, conn, "sc", "default", 1, "30 seconds"); err != nil {
		t.Fatal(err)
	}
	if v := show(conn); v != "on" {
		t.Fatalf("after an autocommit receive synchronous_commit = %s, want on", v)
	}

	// the opt-out, and a caller already at off
	for _, c := range []struct{ set, want string }{
		{`SET sluice.durable_receive = on`, "on"},
		{`SET synchronous_commit = off`, "off"},
	} {
		if _, err := conn.Exec(b.ctx, `RESET ALL`); err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(b.ctx, c.set); err != nil {
			t.Fatal(err)
		}
		if _, err := receiveOn(b.ctx, tx, "sc", "default", 1, "30 seconds"); err != nil {
			t.Fatal(err)
		}
		if v := show(tx); v != c.want {
			t.Fatalf("%s: after receive synchronous_commit = %s, want %s", c.set, v, c.want)
		}
		if err := tx.Rollback(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReceiveThatNumbersKeyedMessagesCommitsDurably: a receive whose cut
// numbers keyed messages keeps the caller's synchronous_commit (a cut lost
// in a crash is made again in transaction order, which could swap two
// messages of a key already handed out: internal/faults'
// TestKeyOrderSurvivesACrashAfterAReceive), on both engines; a receive that
// hands out keyed positions numbered before (already on disk) or numbers
// only unkeyed ones still commits asynchronously.
func TestReceiveThatNumbersKeyedMessagesCommitsDurably(t *testing.T) {
	b := setup(t)
	for _, engine := range []int{1, 2} {
		name := fmt.Sprintf("kc%d", engine)
		b.createQueue(name, fmt.Sprintf(`{"engine": %d, "lanes": 1}`, engine))
		receiveIn := func(what string) string {
			t.Helper()
			tx, err := b.pool.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(b.ctx)
			ms, err := receiveOn(b.ctx, tx, name, "default", 1, "30 seconds")
			if err != nil || len(ms) != 1 {
				t.Fatalf("engine %d, %s: receive: %v, %d messages", engine, what, err, len(ms))
			}
			v := b.syncCommit(tx)
			if err := tx.Commit(b.ctx); err != nil {
				t.Fatal(err)
			}
			return v
		}
		b.exec(`SELECT sluice.send($1, '{}', key => 'k')`, name)
		b.exec(`SELECT sluice.send($1, '{}', key => 'k')`, name)
		if v := receiveIn("numbering keyed messages"); v != "on" {
			t.Errorf("engine %d: a receive that numbered keyed messages: synchronous_commit = %s, want on", engine, v)
		}
		b.exec(`SELECT sluice.send($1, '{}')`, name)
		if v := receiveIn("numbering an unkeyed message"); v != "off" {
			t.Errorf("engine %d: a receive that numbered only an unkeyed message: synchronous_commit = %s, want off", engine, v)
		}
	}
}

// TestV2NumberFirstKeyedCommitsDurably: on engine 2, a receive that numbers
// first (its session's last receive of the group had to number:
// e2_before_look_<slot>) and numbers keyed messages commits durably too,
// as one that numbers after it looked (above).
func TestV2NumberFirstKeyedCommitsDurably(t *testing.T) {
	b := setup(t)
	b.createQueue("q", `{"engine": 2, "lanes": 1}`)
	c, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	receiveIn := func(what string) string {
		t.Helper()
		tx, err := c.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(b.ctx)
		ms, err := receiveOn(b.ctx, tx, "q", "default", 1, "30 seconds")
		if err != nil || len(ms) != 1 {
			t.Fatalf("%s: receive: %v, %d messages", what, err, len(ms))
		}
		v := b.syncCommit(tx)
		if err := tx.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		return v
	}
	b.exec(`SELECT sluice.send('q', '{}')`)
	if v := receiveIn("an unkeyed message"); v != "off" {
		t.Fatalf("a receive that numbered only an unkeyed message: synchronous_commit = %s, want off", v)
	}
	var note string
	if err := c.QueryRow(b.ctx, `SELECT coalesce(current_setting('sluice.idle_' || q.id || '_' || g.id, true), '')
	                             FROM sluice.queue q JOIN sluice.consumer_group g ON g.queue_id = q.id
	                             WHERE q.name = 'q' AND g.name = 'default'`).Scan(&note); err != nil || note != "n" {
		t.Fatalf("the session's note: %q (%v), want n: the next receive numbers first", note, err)
	}
	b.exec(`SELECT sluice.send('q', '{}', key => 'k')`)
	if v := receiveIn("a keyed message, numbered first"); v != "on" {
		t.Fatalf("a receive that numbered a keyed message first: synchronous_commit = %s, want on", v)
	}
}

// TestEngineFunctionsTurnJITOff: the entry points of each queue's copy of
// the engine (the functions the public API calls through EXECUTE) run with
// the engine's settings, applied by sluice._instantiate (engine 1) and
// sluice._instantiate_v2 (engine 2): sequential scans off and JIT off (a
// plan that keeps a disabled seq scan is costed at 1e10 and would be
// JIT-compiled on every run), generic plans, and the queue's schema first
// in search_path. The other copies inherit them and set nothing (a SET
// clause costs a call ~30 us), and no template (sluice_tmpl, sluice_tmpl2)
// sets anything. On engine 2 the hot entry points are copied per slot
// (e2_receive_<s>, e2_ack_<s>, ...; docs/design.md, "The path of a
// receive"): the public functions call them by their bare name and carry
// the settings (below), so none of them sets anything either; the one
// exception is the cut (e2_cut_store), which turns bitmap scans off for
// its ordered reads of a backlog, and that alone.
func TestEngineFunctionsTurnJITOff(t *testing.T) {
	b := setup(t)
	b.createQueue("jit", `{"engine": 1}`)
	b.createQueue("jit2", `{"engine": 2, "slots": 3}`)
	engineOf := map[string]int{
		fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'jit'")):  1,
		fmt.Sprintf("sluice_q%d", b.int64("SELECT id FROM sluice.queue WHERE name = 'jit2'")): 2,
	}
	rows, err := b.pool.Query(b.ctx, `
		SELECT n.nspname, p.proname, coalesce(array_to_string(p.proconfig, ' '), '')
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname IN ('sluice_tmpl', 'sluice_tmpl2') OR n.nspname LIKE 'sluice\_q%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	// e_receive, e_ack, e_nack and e_extend (engine 1), and every e2_*
	// copy but e2_start (engine 2), run with the settings of their public
	// callers instead (below).
	entry := map[int]map[string]bool{
		1: {"e_queue_status": true, "e_maintain": true, "e_purge": true, "e_start_pos": true, "e_base": true,
			"e_dedup_lookup_all": true, "e_dedup_record_all": true, "e_peek": true, "e_leases": true},
		2: {"e_queue_status": true, "e2_start": true, "e_maintain": true, "e_peek": true, "e_leases": true,
			"e_purge": true, "e_start_pos": true},
	}
	// e_peek reads every message the queue stores (there is no index by
	// id): it keeps sequential scans (sluice._instantiate, _instantiate_v2).
	seqscan := map[string]string{"e_peek": "enable_seqscan=on"}
	// What a copy that is no entry point sets (engine 2's cut).
	other := map[int]map[string]string{2: {"e2_cut_store": "enable_bitmapscan=off"}}
	seen := map[int]int{}
	perSlot := map[string]int{} // engine 2's per-slot copies of the hot paths, by template
	hotCopy := regexp.MustCompile(`^(e2_receive|e2_before_look|e2_wait_lane|e2_ack|e2_take_keyed)_[0-9]+$`)
	for rows.Next() {
		var schema, name, config string
		if err := rows.Scan(&schema, &name, &config); err != nil {
			t.Fatal(err)
		}
		engine := engineOf[schema]
		if engine == 0 && strings.HasPrefix(schema, "sluice_q") {
			t.Fatalf("a queue schema %s of no queue of the test", schema)
		}
		if m := hotCopy.FindStringSubmatch(name); engine == 2 && m != nil {
			perSlot[m[1]]++
		}
		switch {
		case engine == 0 || !entry[engine][name]:
			if want := other[engine][name]; config != want {
				t.Errorf("%s.%s sets %q, want %q; only the copies of entry points set anything", schema, name, config, want)
			}
		default:
			seen[engine]++
			scan := "enable_seqscan=off"
			if v, ok := seqscan[name]; ok {
				scan = v
			}
			for _, want := range []string{"search_path=" + schema + ", pg_catalog, pg_temp", scan,
				"jit=off", "plan_cache_mode=force_generic_plan", "max_parallel_workers_per_gather=0"} {
				if !strings.Contains(config, want) {
					t.Errorf("%s.%s: settings %q lack %q", schema, name, config, want)
				}
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for engine, names := range entry {
		if seen[engine] != len(names) {
			t.Errorf("found %d entry points in the schema of the queue of engine %d, want %d", seen[engine], engine, len(names))
		}
	}
	// Each slot of the queue of engine 2 (3) has its copy of the hot paths
	// (the receive's helpers that read the slot's tables among them; the
	// take's statement is in the receive's: sluice._splice_call).
	for _, hot := range []string{"e2_receive", "e2_before_look", "e2_wait_lane", "e2_ack", "e2_take_keyed"} {
		if perSlot[hot] != 3 {
			t.Errorf("%d copies %s_<slot>, want one per slot (3)", perSlot[hot], hot)
		}
	}
	// The public functions that call a queue's copy through the search path
	// (sluice._queue_path) carry the engine's other settings themselves,
	// parallel plans off included: without it, once a queue's messages
	// partition was large enough for the planner to go parallel (a backlog of
	// ~150,000 messages, after maintenance analyzed it), the receive's probe
	// for messages committed since the newest cut started parallel workers on
	// every receive: a drain of that backlog ran at a third of its speed
	// (8 consumers x batch 1, PostgreSQL 15: 211 against 628 receives/s).
	for _, name := range []string{"receive", "ack", "nack", "extend"} {
		var config string
		if err := b.pool.QueryRow(b.ctx, `SELECT array_to_string(proconfig, ' ') FROM pg_proc
		                                  WHERE pronamespace = 'sluice'::regnamespace AND proname = $1`, name).Scan(&config); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"search_path=pg_catalog, pg_temp", "enable_seqscan=off", "jit=off",
			"plan_cache_mode=force_generic_plan", "max_parallel_workers_per_gather=0"} {
			if !strings.Contains(config, want) {
				t.Errorf("sluice.%s: settings %q lack %q", name, config, want)
			}
		}
	}
}

// TestAckDurableFalseCommitsAsynchronously: ack(durable => false) turns
// synchronous_commit off for the rest of its transaction (also after a
// receive in it), the default keeps the caller's value, and a NULL durable
// is SL006 and completes nothing.
func TestAckDurableFalseCommitsAsynchronously(t *testing.T) {
	b := setup(t)
	b.createQueue("ad", `{"lease": "30 seconds"}`)
	for range 4 {
		b.send(b.pool, "ad", `{}`)
	}
	conn, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	show := b.syncCommit
	ms, err := receiveOn(b.ctx, conn, "ad", "default", 4, "30 seconds")
	if err != nil || len(ms) != 4 {
		t.Fatalf("receive: %v, %d messages", err, len(ms))
	}
	for i, c := range []struct {
		stmt string
		want string
	}{
		{`SELECT sluice.ack('ad', 'default', ARRAY[$1], durable => false)`, "off"},
		{`SELECT sluice.ack('ad', 'default', ARRAY[$1])`, "on"},
		{`SELECT sluice.ack('ad', 'default', ARRAY[$1], true)`, "on"},
	} {
		tx, err := conn.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := tx.QueryRow(b.ctx, c.stmt, ms[i].Receipt).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%s: %d, %v", c.stmt, n, err)
		}
		if v := show(tx); v != c.want {
			t.Fatalf("%s: synchronous_commit = %s in its transaction, want %s", c.stmt, v, c.want)
		}
		if err := tx.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		if v := show(conn); v != "on" {
			t.Fatalf("%s: synchronous_commit = %s after its transaction, want on", c.stmt, v)
		}
	}
	// after a receive in the same transaction, durable => false still wins
	b.send(b.pool, "ad", `{}`)
	tx, err := conn.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	more, err := receiveOn(b.ctx, tx, "ad", "default", 1, "30 seconds")
	if err != nil || len(more) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(more))
	}
	if _, err := tx.Exec(b.ctx, `SELECT sluice.ack('ad', 'default', ARRAY[$1], durable => false)`, more[0].Receipt); err != nil {
		t.Fatal(err)
	}
	if v := show(tx); v != "off" {
		t.Fatalf("receive then ack(durable => false): synchronous_commit = %s, want off", v)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	// NULL: SL006, and the message stays leased
	before := b.dataFingerprint()
	_, err = b.pool.Exec(b.ctx, `SELECT sluice.ack('ad', 'default', ARRAY[$1], durable => NULL)`, ms[3].Receipt)
	if code := sqlstate(err); code != "SL006" {
		t.Fatalf("durable => NULL: %v (SQLSTATE %s), want SL006", err, code)
	}
	if after := b.dataFingerprint(); after != before {
		t.Fatalf("durable => NULL changed data:\n%s\n->\n%s", before, after)
	}
	if n := b.ack("ad", "default", ms[3].Receipt); n != 1 {
		t.Fatalf("ack after the refused one = %d, want 1", n)
	}
}

// TestConcurrentAcksOfOneReceipt: two transactions ack the same receipts at
// once; the second waits for the first and, once it commits, completes
// nothing (0, no unique_violation), and neither loses the other's count.
func TestConcurrentAcksOfOneReceipt(t *testing.T) {
	b := setup(t)
	b.createQueue("ca", `{"lease": "30 seconds"}`)
	for range 3 {
		b.send(b.pool, "ca", `{}`)
	}
	ms := b.receive("ca", "default", 3, "")
	if len(ms) != 3 {
		t.Fatalf("received %d, want 3", len(ms))
	}
	first, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(b.ctx) //nolint:errcheck
	var n1 int
	if err := first.QueryRow(b.ctx, `SELECT sluice.ack('ca', 'default', $1)`,
		[]string{ms[0].Receipt, ms[1].Receipt}).Scan(&n1); err != nil || n1 != 2 {
		t.Fatalf("first ack: %d, %v", n1, err)
	}
	type res struct {
		n   int
		err error
	}
	second := make(chan res, 1)
	go func() {
		var n int
		err := b.pool.QueryRow(b.ctx, `SELECT sluice.ack('ca', 'default', $1)`,
			[]string{ms[1].Receipt, ms[2].Receipt, ms[0].Receipt}).Scan(&n)
		second <- res{n, err}
	}()
	time.Sleep(200 * time.Millisecond) // the second ack waits on the first's rows
	if err := first.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-second
	if r.err != nil || r.n != 1 {
		t.Fatalf("second ack: %d, %v; want 1 (the message the first did not ack) and no error", r.n, r.err)
	}
	if n := b.int64(`SELECT count(*) FROM sluice.receive('ca', 'default', 10)`); n != 0 {
		t.Fatalf("%d messages delivered after all were acked", n)
	}
}
