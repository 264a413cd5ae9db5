package sqlsrc_test

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// statementLog is a connection whose every statement, its functions'
// statements included, is reported by auto_explain as a notice
// (log_nested_statements; loaded into the session: LOAD needs a superuser,
// as the test server's is).
type statementLog struct {
	conn *pgx.Conn
	mu   sync.Mutex
	seen []string // the query text of each statement run, in order
}

func (b *bundle) statementLog() *statementLog {
	b.t.Helper()
	l := &statementLog{}
	cfg := b.pool.Config().ConnConfig.Copy()
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		var plan struct {
			Text string `json:"Query Text"`
		}
		// (a notice that is no plan has no JSON object: not a statement)
		i := strings.IndexByte(n.Message, '{')
		if i >= 0 && json.Unmarshal([]byte(n.Message[i:]), &plan) == nil && plan.Text != "" {
			l.mu.Lock()
			l.seen = append(l.seen, strings.Join(strings.Fields(plan.Text), " "))
			l.mu.Unlock()
		}
	}
	conn, err := pgx.ConnectConfig(b.ctx, cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { conn.Close(b.ctx) })
	l.conn = conn
	for _, s := range []string{"LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_nested_statements = on", "SET auto_explain.log_level = notice",
		"SET auto_explain.log_format = json"} {
		if _, err := conn.Exec(b.ctx, s); err != nil {
			b.t.Fatalf("%s: %v", s, err)
		}
	}
	return l
}

// nested runs sql on the connection and returns the statements it ran
// below itself (the statements of the functions it called).
func (l *statementLog) nested(b *bundle, sql string) []string {
	b.t.Helper()
	l.mu.Lock()
	l.seen = nil
	l.mu.Unlock()
	rows, err := l.conn.Query(b.ctx, sql)
	if err != nil {
		b.t.Fatalf("%s: %v", sql, err)
	}
	rows.Close()
	if rows.Err() != nil {
		b.t.Fatalf("%s: %v", sql, rows.Err())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// (the last one is sql itself)
	if len(l.seen) == 0 {
		b.t.Fatalf("%s: auto_explain reported no statement", sql)
	}
	return append([]string(nil), l.seen[:len(l.seen)-1]...)
}

// The hot paths of send, receive and ack run their statements and no
// other: each statement PL/pgSQL runs starts an executor (a PERFORM too,
// for a one-row Result), where an expression is evaluated in place, so a
// call made for what it does, not its value, is an expression there
// (docs/design.md, "A call is an expression, not a PERFORM"). On engine 2,
// a batch-1 receive from a backlog numbered before, from a lane that needs
// only a take: the queue, the group, the epoch, the call of the slot's
// copy, the lane statement and the take (of one position: the narrower
// take's statement, and not the general one after it); its ack: the queue, the group,
// the INSERT of the ack row (the INSERT alone when a receive carries it);
// a send: the queue and the INSERT; in the steady state (a send, then a
// receive that numbers it, then its ack) the receive numbers first: the
// cut's call, its read and its INSERT; a receive that finds nothing (no
// idle note of the session): the lookups, the copy, one lane statement,
// the probe for what is not numbered and the note's (until when it holds);
// a poll while the idle note holds:
// the lookups and the probe; a send of a batch: the queue, the look at
// the bodies' depth (over 4,096 bytes in all), the copy's call and its
// INSERT. The least of three rounds, after six to warm
// the session's plans (the queue's upkeep, once a second a session, adds
// its own to a round).
func TestV2HotPathsRunTheirStatementsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, q := range []string{"backlog", "steady", "empty", "batch"} {
		b.createQueue(q, `{"engine": 2, "lanes": 2}`)
	}
	b.exec(`SELECT sluice.send_batch('backlog', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 100) g))`)
	l := b.statementLog()
	receive := func(q string) string {
		return `SELECT set_config('sluice_test.receipts', coalesce(array_agg(m.receipt), '{}')::text, false)
		        FROM sluice.receive('` + q + `', 'default', 1) m`
	}
	// (acking what the last call received)
	receiveAcking := func(q string) string {
		return `SELECT set_config('sluice_test.receipts', coalesce(array_agg(m.receipt), '{}')::text, false)
		        FROM sluice.receive('` + q + `', 'default', 1,
		                            ack => current_setting('sluice_test.receipts')::text[]) m`
	}
	ack := func(q string) string {
		return `SELECT sluice.ack('` + q + `', 'default', current_setting('sluice_test.receipts')::text[])`
	}
	// (the session's idle note of the group default of the queue empty)
	note := func(value string) string {
		return `SELECT set_config(x.n, ` + value + `, false)
		        FROM (SELECT sluice._idle_note_name(q.id, g.id) AS n FROM sluice.queue q
		              JOIN sluice.consumer_group g ON g.queue_id = q.id WHERE q.name = 'empty' AND g.name = 'default') x`
	}
	// (a part of each statement's text) the public API's lookups, and a
	// receive's statements that take from a lane
	lookups := []string{"FROM sluice.queue qq", "FROM sluice.consumer_group gg"}
	ackLookup := "LEFT JOIN sluice.consumer_group gg" // (ack's lookups: one statement)
	// (a receive of one takes by the narrower take, e2_take_one__s's "WITH b")
	take := append(lookups[:2:2], "FROM sluice.epoch e", "FROM e2_receive_0(", "FROM e2_next_lane_0(",
		"WITH b AS MATERIALIZED")
	calls := []struct {
		name, sql string
		want      []string // a part of each statement's text
	}{
		{"receive", receive("backlog"), take},
		{"receive carrying the ack of the one before", receiveAcking("backlog"), append(take[:len(take):len(take)], "INSERT INTO ack_0")},
		{"ack", ack("backlog"), []string{ackLookup, "INSERT INTO ack_0"}},
		{"send", `SELECT sluice.send('steady', '{"n": 0}')`, []string{"FROM sluice.queue q WHERE", "INSERT INTO msg"}},
		// (100 bodies without headers, over 4,096 bytes in all: their
		// depth is looked at in one statement, with no call a message)
		{"send of a batch", `SELECT sluice.send_batch('batch', array(SELECT jsonb_build_object('n', g, 'pad', repeat('x', 64))
		                                                                 FROM generate_series(1, 100) g))`,
			[]string{"FROM sluice.queue WHERE name", "EXISTS (SELECT FROM unnest(send_batch.bodies", "FROM e2_send_batch(",
				"WITH ins AS"}},
		{"steady receive", receive("steady"),
			append(take[:len(take):len(take)], "FROM e2_cut_now_0(", "SELECT x.cut_no, x.heads", "INSERT INTO cut_0")},
		{"steady ack", ack("steady"), []string{ackLookup, "INSERT INTO ack_0"}},
		// (the session's idle note of the group cleared; not checked)
		{"", note("''"), nil},
		{"empty receive", receive("empty"), append(take[:5:5], "FROM e2_unnumbered_0(", "FROM e2_idle_until_0(")},
		// (the note made to hold an hour: a second may pass before the next call)
		{"", note("split_part(current_setting(x.n), ':', 1) || ':' || ((extract(epoch FROM now()) + 3600) * 1000000)::bigint"), nil},
		{"idle poll", receive("empty"), append(take[:3:3], "FROM e2_idle_probe_0(")},
	}
	fewest := make([][]string, len(calls))
	for round := 0; round < 9; round++ {
		for i, c := range calls {
			ran := l.nested(b, c.sql)
			if round >= 6 && (fewest[i] == nil || len(ran) < len(fewest[i])) {
				fewest[i] = ran
			}
		}
	}
	for i, c := range calls {
		if c.want == nil {
			continue
		}
		ok := len(fewest[i]) == len(c.want)
		for _, w := range c.want {
			ok = ok && slices.ContainsFunc(fewest[i], func(r string) bool { return strings.Contains(r, w) })
		}
		if !ok {
			t.Errorf("%s: ran %d statements, want %d (%s):\n  %s", c.name, len(fewest[i]), len(c.want),
				strings.Join(c.want, "; "), strings.Join(fewest[i], "\n  "))
		}
	}
}
