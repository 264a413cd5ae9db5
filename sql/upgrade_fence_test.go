package sqlsrc_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/pgtest"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

// oldCall is a call of release 0.1.0's API, as its clients make it, caught
// by an upgrade: run on a session of its own, it compiles 0.1.0's function
// and waits at the upgrade's fence; it finishes once the upgrade commits.
type oldCall struct {
	name string
	sql  string
	args []any
	// check judges the call's result (its rows, one column as text).
	check func(rows []string) bool
}

// Upgrades from release 0.1.0 while its clients call (issue 38, item 1):
// every public call of 0.1.0 a running deployment makes (send, send_batch,
// with and without dedup keys, receive, ack, nack, extend, status,
// dead_letters, list_queues, maintain, create_group, version) is started
// while the upgrade waits for its fence, so that each compiles 0.1.0's
// function and waits at it; the upgrade then runs and commits, and each
// goes on with 0.1.0's code on the new schema. None fails and each does
// what it did in 0.1.0; afterwards every message sent, before or during the
// upgrade, is received and acked exactly once. A session that holds
// sluice.queue (as a transaction that called the API and has not ended
// does) makes the upgrade wait for it first.
func TestUpgradeFrom010CatchesOldCalls(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := server.NewDatabaseFrom(t, engineFS(t, "testdata/engine-0.1.0.tar.gz"))
	b := &bundle{t: t, ctx: ctx, pool: pgtest.NewPool(t, url)}
	b.createQueue("fq", `{"lease": "10 minutes", "max_attempts": 5}`)
	var sent []int64
	for i := range 10 {
		sent = append(sent, b.int64("SELECT sluice.send('fq', jsonb_build_object('n', $1::int))", i))
	}
	dup := b.int64("SELECT sluice.send('fq', '{\"d\": 0}', dedup_key => 'd0')")
	sent = append(sent, dup)
	leased := b.receive("fq", "default", 3, "")
	if len(leased) != 3 {
		t.Fatalf("received %d before the upgrade, want 3", len(leased))
	}

	// The calls as 0.1.0's Go library made them (its queries.go), and as
	// SQL users wrote them (receive's defaults, named arguments).
	calls := []oldCall{
		{"receive", "SELECT id || ' ' || receipt FROM sluice.receive('fq', 'default', 2)", nil,
			func(r []string) bool { return len(r) == 2 }},
		{"receive (0.1.0's Go library)", `SELECT id || ' ' || receipt FROM (SELECT id, body, headers, key, priority, attempt,
		        sent_at, receipt, lease_expires_at, pos FROM sluice.receive($1, $2, $3::int, $4::interval, $5::text)) r`,
			[]any{"fq", "default", 2, nil, "old"},
			func(r []string) bool { return len(r) == 2 }},
		{"ack", "SELECT sluice.ack($1, $2, $3::text[])::text", []any{"fq", "default", []string{leased[0].Receipt}},
			func(r []string) bool { return slices.Equal(r, []string{"1"}) }},
		{"nack", "SELECT sluice.nack($1, $2, $3, $4::interval, $5::text)::text",
			[]any{"fq", "default", leased[1].Receipt, "0 seconds", "again"},
			func(r []string) bool { return slices.Equal(r, []string{"true"}) }},
		{"extend", "SELECT sluice.extend($1, $2, $3::text[], $4::interval)::text",
			[]any{"fq", "default", []string{leased[2].Receipt}, "1 hour"},
			func(r []string) bool { return slices.Equal(r, []string{"1"}) }},
		{"send", `SELECT sluice.send($1, $2::jsonb, $3::jsonb, $4::text, $5::interval, $6::int, $7::text)::text`,
			[]any{"fq", `{"during": 1}`, nil, nil, nil, 0, nil}, oneID},
		{"send with a dedup key", `SELECT sluice.send('fq', '{"during": 2}', dedup_key => 'd1')::text`, nil, oneID},
		{"send of a duplicate", `SELECT sluice.send('fq', '{"during": 3}', dedup_key => 'd0')::text`, nil,
			func(r []string) bool { return slices.Equal(r, []string{strconv.FormatInt(dup, 10)}) }},
		{"send_batch", `SELECT id::text FROM sluice.send_batch($1, $2::jsonb[], $3::jsonb[], $4::text[], $5::interval,
		                  $6::int[], $7::text[]) AS s(id)`,
			[]any{"fq", []string{`{"b": 1}`, `{"b": 2}`}, nil, nil, nil, nil, nil},
			func(r []string) bool { return len(r) == 2 }},
		{"send_batch with dedup keys", `SELECT id::text FROM sluice.send_batch('fq', ARRAY['{"b": 3}']::jsonb[],
		                                 dedup_keys => ARRAY['d2']) AS s(id)`, nil,
			func(r []string) bool { return len(r) == 1 }},
		{"status", `SELECT group_name FROM (SELECT queue, group_name, ready, delayed, in_flight, dead, oldest_pending_age,
		        lag, cursor, lwm, head, live_epochs, holds_reclaim FROM sluice.status($1::text)) s`, []any{"fq"},
			defaultGroup},
		{"status of every queue", "SELECT group_name FROM sluice.status()", nil, defaultGroup},
		{"dead_letters", "SELECT id::text FROM sluice.dead_letters($1, $2::text, $3::int)", []any{"fq", nil, 10},
			func(r []string) bool { return len(r) == 0 }},
		{"list_queues", "SELECT queue FROM sluice.list_queues()", nil,
			func(r []string) bool { return slices.Equal(r, []string{"fq"}) }},
		{"maintain", "SELECT queue FROM sluice.maintain()", nil,
			func(r []string) bool { return len(r) <= 1 }},
		{"create_group", "SELECT sluice.create_group($1, $2, $3)::text", []any{"fq", "later", "latest"},
			func(r []string) bool { return len(r) == 1 }},
		{"version", "SELECT sluice.version()", nil, // (it reads no table, and does not wait)
			func(r []string) bool { return len(r) == 1 }},
	}

	// A transaction that read sluice.queue, as one that called the API and
	// has not ended: the upgrade's fence waits for it, and the calls below
	// wait behind the fence.
	holder := pgtest.Connect(t, url)
	htx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := htx.Exec(ctx, "SELECT count(*) FROM sluice.queue"); err != nil {
		t.Fatal(err)
	}
	migConn := pgtest.Connect(t, url)
	upgraded := make(chan error, 1)
	go func() {
		_, err := migrate.Apply(ctx, migConn, sqlsrc.FS)
		upgraded <- err
	}()
	waitBlocked(t, b, []uint32{migConn.PgConn().PID()})

	type outcome struct {
		rows []string
		err  error
	}
	results := make([]chan outcome, len(calls))
	var pids []uint32
	for i, c := range calls {
		conn := pgtest.Connect(t, url)
		pids = append(pids, conn.PgConn().PID())
		results[i] = make(chan outcome, 1)
		go func() {
			rows, err := conn.Query(ctx, c.sql, c.args...)
			if err != nil {
				results[i] <- outcome{err: err}
				return
			}
			vs, err := pgx.CollectRows(rows, pgx.RowTo[string])
			results[i] <- outcome{vs, err}
		}()
	}
	waitBlocked(t, b, pids)
	select {
	case err := <-upgraded:
		t.Fatalf("the upgrade did not wait for the transaction holding sluice.queue: %v", err)
	default:
	}
	if err := htx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-upgraded; err != nil {
		t.Fatalf("upgrade: %v", err)
	}

	var during []int64
	got := map[int64]int{leased[0].ID: 1, leased[2].ID: 1} // acked across the upgrade, and extended
	var held []string                                      // receipts of the receives across the upgrade
	for i, c := range calls {
		o := <-results[i]
		switch {
		case o.err != nil:
			t.Errorf("0.1.0's %s across the upgrade: %v", c.name, o.err)
			continue
		case !c.check(o.rows):
			t.Errorf("0.1.0's %s across the upgrade returned %q", c.name, o.rows)
		}
		for _, r := range o.rows {
			switch {
			case strings.HasPrefix(c.name, "receive"):
				id, receipt, _ := strings.Cut(r, " ")
				got[b.int64("SELECT $1::bigint", id)]++
				held = append(held, receipt)
			case strings.HasPrefix(c.name, "send") && c.name != "send of a duplicate":
				during = append(during, b.int64("SELECT $1::bigint", r))
			}
		}
	}
	if t.Failed() {
		return
	}

	// Nothing lost, nothing twice: the leases given before and across the
	// upgrade are acked now, and every other message sent, before or
	// during it, is received once (the nacked one again).
	if n := b.ack("fq", "default", append(held, leased[2].Receipt)...); n != len(held)+1 {
		t.Fatalf("acks after the upgrade of the leases given across it: %d of %d", n, len(held)+1)
	}
	for range 100 {
		ms := b.receive("fq", "default", 50, "")
		if len(ms) == 0 {
			break
		}
		if n := b.ack("fq", "default", receipts(ms)...); n != len(ms) {
			t.Fatalf("ack after the upgrade: %d of %d", n, len(ms))
		}
		for _, m := range ms {
			got[m.ID]++
		}
	}
	all := append(slices.Clone(sent), during...)
	if len(all) != 11+5 {
		t.Fatalf("%d messages sent, want 16", len(all))
	}
	for _, id := range all {
		if got[id] != 1 {
			t.Errorf("message %d received %d times, want once", id, got[id])
		}
		delete(got, id)
	}
	if len(got) > 0 {
		t.Errorf("received messages never sent: %v", got)
	}
}
func oneID(r []string) bool { return len(r) == 1 && r[0] != "" }

// defaultGroup judges status's groups: default, and the group create_group
// makes meanwhile if it came first.
func defaultGroup(r []string) bool {
	return slices.Equal(r, []string{"default"}) || slices.Equal(r, []string{"default", "later"})
}

// waitBlocked waits until each of the backends pids waits for a lock (or
// has finished its call).
func waitBlocked(t *testing.T, b *bundle, pids []uint32) {
	t.Helper()
	defer func() {
		if t.Failed() {
			rows, _ := b.pool.Query(b.ctx, `SELECT pid || ' ' || state || ' ' || coalesce(wait_event_type, '') || ' ' || left(query, 60)
			                               FROM pg_stat_activity WHERE pid = ANY ($1::int[])`, pids)
			vs, _ := pgx.CollectRows(rows, pgx.RowTo[string])
			t.Logf("sessions: %q", vs)
		}
	}()
	waitFor(t, 30*time.Second, "the sessions to wait at the upgrade's fence", func() bool {
		var n int
		err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity
		                              WHERE pid = ANY ($1::int[]) AND (wait_event_type = 'Lock' OR state = 'idle')`,
			pids).Scan(&n)
		return err == nil && n == len(pids)
	})
}
