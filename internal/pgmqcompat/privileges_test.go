package pgmqcompat

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// asRole makes a role of this test, member of memberOf (none: PUBLIC's
// privileges only), and returns a connection of db's pool under it.
func asRole(t *testing.T, db *pgxpool.Pool, suffix string, memberOf ...string) *pgxpool.Conn {
	t.Helper()
	role := fmt.Sprintf("pgmq_%s_%d", suffix, time.Now().UnixNano()%1_000_000_000)
	create := "CREATE ROLE " + role + " NOLOGIN"
	if len(memberOf) > 0 {
		create += " IN ROLE " + strings.Join(memberOf, ", ")
	}
	exec(t, db, create)
	t.Cleanup(func() {
		if _, err := db.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
			t.Errorf("dropping %s: %v", role, err)
		}
	})
	conn, err := db.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "RESET ROLE")
		conn.Release()
	})
	if _, err := conn.Exec(ctxT(t), "SET ROLE "+role); err != nil {
		t.Fatal(err)
	}
	return conn
}

// pgmqCalls reach every kind of access to a pgmq queue 'q' (with messages
// 1 to 3), by name: the functions by role group, the view and archive, the
// side table a delete writes, and administration (on queues of their own).
var pgmqCalls = map[string]string{
	"send":       `SELECT pgmq.send('q', '{"n": 9}')`,
	"send_batch": `SELECT pgmq.send_batch('q', ARRAY['9'::jsonb])`,
	"send_topic": `SELECT pgmq.send_topic('q.x', '{}')`,
	"read":       `SELECT count(*) FROM pgmq.read('q', 30, 1)`,
	"pop":        `SELECT count(*) FROM pgmq.pop('q')`,
	"delete":     `SELECT pgmq.delete('q', 1::bigint)`,
	"archive":    `SELECT pgmq.archive('q', 2::bigint)`,
	"set_vt":     `SELECT count(*) FROM pgmq.set_vt('q', 3::bigint, 0)`,
	"metrics":    `SELECT count(*) FROM pgmq.metrics('q')`,
	"list":       `SELECT count(*) FROM pgmq.list_queues()`,
	"view":       `SELECT count(*) FROM pgmq.q_q`,
	"archived":   `SELECT count(*) FROM pgmq.a_q`,
	"tombstone":  `INSERT INTO pgmq._sl_d_q (slot, msg_id, kind, done_at) VALUES (0, 3, 'd', now())`,
	"create":     `SELECT pgmq.create('made_%s')`,
	"purge":      `SELECT pgmq.purge_queue('purged_%s')`,
	"drop":       `SELECT pgmq.drop_queue('dropped_%s')`,
}

// callable runs each of pgmqCalls on conn and returns those that passed
// the privilege checks (failing otherwise, or not at all).
func callable(t *testing.T, conn *pgxpool.Conn, suffix string) []string {
	t.Helper()
	var ok []string
	for name, sql := range pgmqCalls {
		if strings.Contains(sql, "%s") {
			sql = fmt.Sprintf(sql, suffix)
		}
		_, err := conn.Exec(ctxT(t), sql)
		var pg *pgconn.PgError
		if errors.As(err, &pg) && pg.Code == "42501" {
			continue
		}
		if err != nil && !errors.As(err, &pg) {
			t.Fatalf("%s: %v", name, err)
		}
		ok = append(ok, name)
	}
	sort.Strings(ok)
	return ok
}

// The pgmq layer's roles are sluice's, as narrow: a producer sends and can
// neither read nor complete messages (the documented grants let it read
// every message through q_<name> and delete by inserting into the side
// tables); a consumer reads and completes but does not send or administer;
// an admin calls every function; a role of none of them, nothing. No role
// writes the layer's tables directly.
func TestPgmqRoles(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	for _, q := range []string{"q", "purged_producer", "purged_consumer", "purged_admin", "purged_none",
		"dropped_producer", "dropped_consumer", "dropped_admin", "dropped_none"} {
		exec(t, db, "SELECT pgmq.create($1)", q)
	}
	exec(t, db, "SELECT pgmq.bind_topic('q.*', 'q')")
	exec(t, db, `SELECT pgmq.send_batch('q', ARRAY['1'::jsonb, '2', '3'])`)
	for _, c := range []struct {
		suffix   string
		memberOf []string
		want     string
	}{
		{"producer", []string{"sluice_producer"}, "send send_batch send_topic"},
		{"consumer", []string{"sluice_consumer"}, "archive archived delete list metrics pop read set_vt view"},
		{"admin", []string{"sluice_admin"}, "archive archived create delete drop list metrics pop purge read send send_batch send_topic set_vt view"},
		{"none", nil, ""},
	} {
		conn := asRole(t, db, c.suffix, c.memberOf...)
		if got := strings.Join(callable(t, conn, c.suffix), " "); got != c.want {
			t.Errorf("%s may: %s\nwant: %s", c.suffix, got, c.want)
		}
	}
}
