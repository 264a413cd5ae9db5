package sqlsrc_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/pgtest"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

// The roles of tables/0002_roles.sql and what functions/grants.sql lets
// each of them (and PUBLIC) call. sluice_admin may call every public
// function.
var (
	producerFuncs = []string{"send", "send_batch", "version"}
	consumerFuncs = []string{"ack", "dead_letters", "extend", "leases", "list_queues", "nack", "peek", "receive", "status", "version"}
	publicFuncs   = []string{"version"}
)

// Calls of every public function but version, runnable on a database with
// queue 'q' (group 'default'), by function name. Only the privilege check
// matters: their arguments are valid but they may fail for other reasons
// once the check passes.
var apiCalls = map[string]string{
	"send":                 `SELECT sluice.send('q', '1')`,
	"send_batch":           `SELECT sluice.send_batch('q', ARRAY['1'::jsonb])`,
	"receive":              `SELECT * FROM sluice.receive('q')`,
	"ack":                  `SELECT sluice.ack('q', 'default', ARRAY[]::text[])`,
	"nack":                 `SELECT sluice.nack('q', 'default', '0.1.1.1')`,
	"extend":               `SELECT sluice.extend('q', 'default', ARRAY[]::text[], '1 minute')`,
	"status":               `SELECT * FROM sluice.status('q')`,
	"dead_letters":         `SELECT * FROM sluice.dead_letters('q')`,
	"peek":                 `SELECT * FROM sluice.peek('q')`,
	"leases":               `SELECT * FROM sluice.leases('q')`,
	"list_queues":          `SELECT * FROM sluice.list_queues()`,
	"create_queue":         `SELECT sluice.create_queue('q2')`,
	"drop_queue":           `SELECT sluice.drop_queue('q')`,
	"purge_queue":          `SELECT sluice.purge_queue('q')`,
	"create_group":         `SELECT sluice.create_group('q', 'g2')`,
	"drop_group":           `SELECT sluice.drop_group('q', 'default')`,
	"seek_group":           `SELECT sluice.seek_group('q', 'default', 'earliest')`,
	"redrive":              `SELECT sluice.redrive('q')`,
	"discard_dead_letters": `SELECT sluice.discard_dead_letters('q', 'default')`,
	"maintain":             `SELECT * FROM sluice.maintain()`,
}

// internalCalls reach past the API: tables, sequences, internal functions,
// templates and a queue's own schema (queue id qid). Nobody but the owner
// may run any of them.
func internalCalls(qid int64) []string {
	s := fmt.Sprintf("sluice_q%d", qid)
	return []string{
		`SELECT count(*) FROM sluice.messages`,
		`SELECT count(*) FROM sluice.queue`,
		`SELECT count(*) FROM sluice.consumer_group`,
		`SELECT count(*) FROM sluice.dead_letter`,
		`SELECT count(*) FROM sluice.schema_migration`,
		`INSERT INTO sluice.messages (queue_id, slot, id, txid, sent_at, body) VALUES (1, 0, 1, pg_current_xact_id(), now(), '1')`,
		`DELETE FROM sluice.queue`,
		fmt.Sprintf(`SELECT nextval('sluice.message_id_%d')`, qid),
		`SELECT sluice._get_queue('q')`,
		`SELECT sluice._check_name('queue', 'q')`,
		fmt.Sprintf(`SELECT sluice._instantiate(%d)`, qid),
		`SELECT sluice._create_storage(1000)`,
		`SELECT sluice_tmpl.e_cut(1)`,
		fmt.Sprintf(`SELECT count(*) FROM %s.messages`, s),
		fmt.Sprintf(`SELECT count(*) FROM %s.messages_0`, s),
		fmt.Sprintf(`SELECT count(*) FROM %s.deliveries`, s),
		fmt.Sprintf(`SELECT count(*) FROM %s.acks_0`, s),
		fmt.Sprintf(`SELECT %s.e_cut(%d)`, s, qid),
		fmt.Sprintf(`SELECT * FROM %s.e_receive(sluice._get_queue('q'), NULL, 1, '1 minute', NULL)`, s),
		fmt.Sprintf(`SELECT %s.e_ack(1, ARRAY['0.1.1.1'])`, s),
		fmt.Sprintf(`TRUNCATE %s.messages_0`, s),
		// engine 2's storage and copies (of the queue, were it of engine 2)
		fmt.Sprintf(`SELECT count(*) FROM %s.msg`, s),
		fmt.Sprintf(`SELECT count(*) FROM %s.lease_0`, s),
		fmt.Sprintf(`SELECT %s.e2_ack(1, ARRAY['0.1.0.1.1'])`, s),
		`SELECT count(*) FROM sluice_tmpl2.e2_ack(1, ARRAY['0.1.0.1.1'])`,
	}
}

func randomSuffix() string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// createLogin creates a login role for this test, member of memberOf, and
// drops it when the test ends. Roles belong to the cluster, so its name
// starts with the test's database name. It returns the name and password.
func (b *bundle) createLogin(suffix, attrs string, memberOf ...string) (name, password string) {
	b.t.Helper()
	var db string
	if err := b.pool.QueryRow(b.ctx, "SELECT current_database()").Scan(&db); err != nil {
		b.t.Fatal(err)
	}
	name, password = db+"_"+suffix, randomSuffix()+randomSuffix()
	ident := pgx.Identifier{name}.Sanitize()
	b.exec(fmt.Sprintf("CREATE ROLE %s LOGIN %s PASSWORD '%s'", ident, attrs, password))
	b.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := b.pool.Exec(ctx, "DROP ROLE IF EXISTS "+ident); err != nil {
			b.t.Errorf("dropping role %s: %v", name, err)
		}
	})
	for _, r := range memberOf {
		b.exec(fmt.Sprintf("GRANT %s TO %s", pgx.Identifier{r}.Sanitize(), ident))
	}
	return name, password
}

// connectAs connects to the database of connString as user.
func connectAs(t testing.TB, ctx context.Context, connString, user, password string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = user, password
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connecting as %s: %v", user, err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	})
	return conn
}

// login creates a login role member of memberOf (see createLogin) and
// returns a connection as it to the test's database.
func (b *bundle) login(suffix string, memberOf ...string) *pgx.Conn {
	b.t.Helper()
	name, password := b.createLogin(suffix, "", memberOf...)
	return connectAs(b.t, b.ctx, b.pool.Config().ConnString(), name, password)
}

func (b *bundle) allowed(conn *pgx.Conn, who, sql string, args ...any) {
	b.t.Helper()
	if _, err := conn.Exec(b.ctx, sql, args...); err != nil {
		b.t.Errorf("%s: %s: %v", who, sql, err)
	}
}

func (b *bundle) denied(conn *pgx.Conn, who, sql string, args ...any) {
	b.t.Helper()
	_, err := conn.Exec(b.ctx, sql, args...)
	if got := sqlstate(err); got != "42501" {
		b.t.Errorf("%s: %s: want SQLSTATE 42501 (insufficient_privilege), got %q (%v)", who, sql, got, err)
	}
}

// checkAPI checks that who can call exactly the functions in may (and
// version) through conn, and nothing past the API.
func (b *bundle) checkAPI(conn *pgx.Conn, who string, qid int64, may []string) {
	b.t.Helper()
	for _, name := range sortedKeys(apiCalls) {
		if !slices.Contains(may, name) {
			b.denied(conn, who, apiCalls[name])
		}
	}
	b.allowed(conn, who, "SELECT sluice.version()")
	for _, sql := range internalCalls(qid) {
		b.denied(conn, who, sql)
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (b *bundle) queueID(name string) int64 {
	b.t.Helper()
	return b.int64("SELECT id FROM sluice.queue WHERE name = $1", name)
}

func TestPrivilegeProducer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	qid := b.queueID("q")
	producer := b.login("producer", "sluice_producer")

	b.allowed(producer, "producer", `SELECT sluice.send('q', '{"a": 1}')`)
	b.allowed(producer, "producer", `SELECT sluice.send('q', '2', '{"h": 1}', 'k', '1 second', 3, 'd')`)
	b.allowed(producer, "producer", `SELECT sluice.send_batch('q', ARRAY['3'::jsonb, '4'])`)
	// (the queue's own storage: engine 2, the default, has its msg table)
	if n := b.int64("SELECT count(*) FROM " + storedMessages(b, "q") + " m"); n != 4 {
		t.Errorf("messages after the producer's sends: %d, want 4", n)
	}
	b.checkAPI(producer, "producer", qid, producerFuncs)
	// The producer cannot read back what it (or anyone) sent.
	b.denied(producer, "producer", `SELECT body FROM sluice.messages`)
	b.denied(producer, "producer", fmt.Sprintf(`SELECT body FROM sluice_q%d.msg`, qid))
	b.denied(producer, "producer", fmt.Sprintf(`SELECT body FROM sluice_q%d.msg_0`, qid))
	if got := b.receive("q", "default", 10, ""); len(got) != 3 {
		t.Errorf("received %d messages, want 3 (one is delayed)", len(got))
	}
}

func TestPrivilegeConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", `{"max_attempts": 1}`)
	qid := b.queueID("q")
	consumer := b.login("consumer", "sluice_consumer")
	producer := b.login("producer", "sluice_producer")

	// LISTEN needs no privilege: the consumer hears the producer's send.
	b.allowed(consumer, "consumer", "LISTEN sluice")
	for i := range 3 {
		b.send(producer, "q", fmt.Sprint(i))
	}
	wctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	n, err := consumer.WaitForNotification(wctx)
	cancel()
	if err != nil || n.Channel != "sluice" || n.Payload != "q" {
		t.Errorf("consumer waiting for a notification: %+v, %v", n, err)
	}
	b.allowed(consumer, "consumer", "UNLISTEN sluice")

	ms, err := receiveOn(b.ctx, consumer, "q", "default", 3, "1 minute")
	if err != nil || len(ms) != 3 {
		t.Fatalf("consumer receive: %d messages, %v", len(ms), err)
	}
	var got int
	if err := consumer.QueryRow(b.ctx, "SELECT sluice.extend('q', 'default', $1, '2 minutes')", receipts(ms)).Scan(&got); err != nil || got != 3 {
		t.Errorf("consumer extend: %d, %v", got, err)
	}
	if err := consumer.QueryRow(b.ctx, "SELECT sluice.ack('q', 'default', $1)", receipts(ms[:2])).Scan(&got); err != nil || got != 2 {
		t.Errorf("consumer ack: %d, %v", got, err)
	}
	var ok bool
	if err := consumer.QueryRow(b.ctx, "SELECT sluice.nack('q', 'default', $1, NULL, 'boom')", ms[2].Receipt).Scan(&ok); err != nil || !ok {
		t.Errorf("consumer nack: %v, %v", ok, err)
	}
	var dead int64
	if err := consumer.QueryRow(b.ctx, "SELECT dead FROM sluice.status('q')").Scan(&dead); err != nil || dead != 1 {
		t.Errorf("consumer status: dead = %d, %v", dead, err)
	}
	var body string
	if err := consumer.QueryRow(b.ctx, "SELECT body::text FROM sluice.dead_letters('q')").Scan(&body); err != nil || body != ms[2].Body {
		t.Errorf("consumer dead_letters: %q, %v; want the nacked message %q", body, err, ms[2].Body)
	}
	b.allowed(consumer, "consumer", "SELECT * FROM sluice.list_queues()")
	b.allowed(consumer, "consumer", "SELECT * FROM sluice.status()")

	b.checkAPI(consumer, "consumer", qid, consumerFuncs)
	if n := b.int64("SELECT count(*) FROM sluice.queue"); n != 1 {
		t.Errorf("queues after the consumer's attempts: %d, want 1", n)
	}
}

func TestPrivilegeAdmin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admin := b.login("admin", "sluice_admin")

	// The queue is made by the admin, after the grants: everything works.
	b.allowed(admin, "admin", `SELECT sluice.create_queue('q', '{"max_attempts": 1}')`)
	qid := b.queueID("q")
	b.allowed(admin, "admin", `SELECT sluice.create_group('q', 'g')`)
	b.allowed(admin, "admin", `SELECT sluice.send('q', '1')`)
	b.allowed(admin, "admin", `SELECT sluice.send_batch('q', ARRAY['2'::jsonb, '3'])`)
	ms, err := receiveOn(b.ctx, admin, "q", "default", 3, "")
	if err != nil || len(ms) != 3 {
		t.Fatalf("admin receive: %d messages, %v", len(ms), err)
	}
	b.allowed(admin, "admin", `SELECT sluice.extend('q', 'default', $1, '1 minute')`, receipts(ms))
	b.allowed(admin, "admin", `SELECT sluice.ack('q', 'default', $1)`, receipts(ms[:2]))
	b.allowed(admin, "admin", `SELECT sluice.nack('q', 'default', $1)`, ms[2].Receipt)
	b.allowed(admin, "admin", `SELECT * FROM sluice.dead_letters('q')`)
	var n int64
	if err := admin.QueryRow(b.ctx, `SELECT sluice.redrive('q')`).Scan(&n); err != nil || n != 1 {
		t.Errorf("admin redrive: %d, %v", n, err)
	}
	b.allowed(admin, "admin", `SELECT * FROM sluice.status()`)
	b.allowed(admin, "admin", `SELECT * FROM sluice.list_queues()`)
	b.allowed(admin, "admin", `SELECT * FROM sluice.maintain()`)
	b.allowed(admin, "admin", `SELECT sluice.purge_queue('q')`)
	b.allowed(admin, "admin", `SELECT sluice.drop_group('q', 'g')`)
	b.allowed(admin, "admin", `SELECT sluice.version()`)

	// Every API function, and still nothing past the API.
	for _, name := range sortedKeys(apiCalls) {
		if name != "drop_group" && name != "drop_queue" {
			b.allowed(admin, "admin", apiCalls[name])
		}
	}
	for _, sql := range internalCalls(qid) {
		b.denied(admin, "admin", sql)
	}
	b.allowed(admin, "admin", apiCalls["drop_group"])
	b.allowed(admin, "admin", apiCalls["drop_queue"])
	if n := b.int64("SELECT count(*) FROM sluice.queue WHERE name = 'q'"); n != 0 {
		t.Errorf("admin drop_queue left the queue")
	}
}

func TestPrivilegePublic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", "")
	qid := b.queueID("q")
	nobody := b.login("nobody")

	var v string
	if err := nobody.QueryRow(b.ctx, "SELECT sluice.version()").Scan(&v); err != nil || v == "" {
		t.Errorf("version as a role without grants: %q, %v", v, err)
	}
	b.checkAPI(nobody, "a role without grants", qid, publicFuncs)
	for _, name := range sortedKeys(apiCalls) {
		b.denied(nobody, "a role without grants", apiCalls[name])
	}
}

// TestPrivilegeQueueCreatedLater: a queue made after the migration (by the
// admin role) serves the producer and consumer roles, and its schema gives
// nobody access.
func TestPrivilegeQueueCreatedLater(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admin := b.login("admin", "sluice_admin")
	producer := b.login("producer", "sluice_producer")
	consumer := b.login("consumer", "sluice_consumer")

	b.allowed(admin, "admin", `SELECT sluice.create_queue('q')`)
	qid := b.queueID("q")
	id := b.send(producer, "q", `{"n": 1}`)
	ms, err := receiveOn(b.ctx, consumer, "q", "default", 10, "")
	if err != nil || len(ms) != 1 || ms[0].ID != id {
		t.Fatalf("consumer receive: %+v, %v", ms, err)
	}
	b.allowed(consumer, "consumer", `SELECT sluice.ack('q', 'default', $1)`, receipts(ms))

	for who, conn := range map[string]*pgx.Conn{"producer": producer, "consumer": consumer, "admin": admin} {
		for _, sql := range internalCalls(qid) {
			b.denied(conn, who, sql)
		}
	}
	schema := fmt.Sprintf("sluice_q%d", qid)
	for _, role := range []string{"public", "sluice_producer", "sluice_consumer", "sluice_admin"} {
		if n := b.int64(`SELECT count(*) FROM pg_namespace n WHERE n.nspname = $1
			AND (has_schema_privilege($2, n.oid, 'USAGE') OR has_schema_privilege($2, n.oid, 'CREATE'))`, schema, role); n != 0 {
			t.Errorf("%s has privileges on schema %s", role, schema)
		}
		if n := b.int64(`SELECT count(*) FROM pg_class c WHERE c.relnamespace = $1::regnamespace
			AND has_table_privilege($2, c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')`, schema, role); n != 0 {
			t.Errorf("%s has privileges on %d tables of schema %s", role, n, schema)
		}
	}
}

// TestPrivilegeCatalog checks the privileges in the catalog: each role may
// execute exactly its functions, the public functions (but version) are
// SECURITY DEFINER with a pinned search_path, and no role has any privilege
// on a table, a sequence or an internal function, in the queue schemas too
// (for a queue made before a migrate and one made after).
func TestPrivilegeCatalog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("before", "")
	conn, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = migrate.Apply(b.ctx, conn.Conn(), sqlsrc.FS)
	conn.Release()
	if err != nil {
		t.Fatalf("migrating again: %v", err)
	}
	b.createQueue("after", "")

	rows, err := b.pool.Query(b.ctx, `
		SELECT p.proname::text, p.prosecdef, coalesce(array_to_string(p.proconfig, ';'), ''),
		       has_function_privilege('public', p.oid, 'EXECUTE'),
		       has_function_privilege('sluice_producer', p.oid, 'EXECUTE'),
		       has_function_privilege('sluice_consumer', p.oid, 'EXECUTE'),
		       has_function_privilege('sluice_admin', p.oid, 'EXECUTE')
		FROM pg_proc p WHERE p.pronamespace = 'sluice'::regnamespace ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var public, producer, consumer []string
	nfuncs := 0
	for rows.Next() {
		var name, config string
		var secdef, pub, prod, cons, adm bool
		if err := rows.Scan(&name, &secdef, &config, &pub, &prod, &cons, &adm); err != nil {
			t.Fatal(err)
		}
		nfuncs++
		for _, g := range []struct {
			has  bool
			list *[]string
		}{{pub, &public}, {prod, &producer}, {cons, &consumer}} {
			if g.has && !slices.Contains(*g.list, name) {
				*g.list = append(*g.list, name)
			}
		}
		internal := strings.HasPrefix(name, "_")
		switch {
		case internal && (pub || prod || cons || adm):
			t.Errorf("internal function sluice.%s is executable by a sluice role or PUBLIC", name)
		case !internal && !adm:
			t.Errorf("sluice_admin may not execute sluice.%s", name)
		case !internal && name != "version" && (!secdef || !slices.Contains(strings.Split(config, ";"), "search_path=pg_catalog, pg_temp")):
			t.Errorf("sluice.%s: SECURITY DEFINER %v, config %q", name, secdef, config)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if nfuncs < 20 {
		t.Fatalf("only %d functions in schema sluice", nfuncs)
	}
	for _, c := range []struct {
		who       string
		got, want []string
	}{{"PUBLIC", public, publicFuncs}, {"sluice_producer", producer, producerFuncs}, {"sluice_consumer", consumer, consumerFuncs}} {
		slices.Sort(c.got)
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s may execute %v, want %v", c.who, c.got, c.want)
		}
	}

	// Past the API, in every sluice schema: no privilege at all (a function
	// counts as reachable when its schema is usable and it is executable).
	leaks := b.int64(`
		WITH roles(r) AS (VALUES ('public'), ('sluice_producer'), ('sluice_consumer'), ('sluice_admin')),
		     schemas AS (SELECT oid, nspname FROM pg_namespace WHERE nspname ~ '^sluice(_tmpl|_q[0-9]+)?$')
		SELECT count(*) FROM roles, schemas s,
		LATERAL (
			SELECT c.oid FROM pg_class c WHERE c.relnamespace = s.oid AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
			   AND has_table_privilege(r, c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
			UNION ALL
			SELECT c.oid FROM pg_class c WHERE c.relnamespace = s.oid AND c.relkind = 'S'
			   AND has_sequence_privilege(r, c.oid, 'USAGE, SELECT, UPDATE')
			UNION ALL
			SELECT p.oid FROM pg_proc p WHERE p.pronamespace = s.oid AND s.nspname <> 'sluice'
			   AND has_schema_privilege(r, s.oid, 'USAGE') AND has_function_privilege(r, p.oid, 'EXECUTE')
			UNION ALL
			SELECT s.oid WHERE s.nspname <> 'sluice' AND (has_schema_privilege(r, s.oid, 'USAGE')
			                                              OR has_schema_privilege(r, s.oid, 'CREATE'))
			UNION ALL
			SELECT s.oid WHERE has_schema_privilege(r, s.oid, 'CREATE')
		) leak`)
	if leaks != 0 {
		t.Errorf("%d privileges past the API granted to PUBLIC or a sluice role", leaks)
	}
	// Those of the queue made before the migrate carry no grant at all.
	if n := b.int64(`SELECT count(*) FROM pg_proc p WHERE p.pronamespace = $1::regnamespace
		AND has_function_privilege('public', p.oid, 'EXECUTE')`, fmt.Sprintf("sluice_q%d", b.queueID("before"))); n != 0 {
		t.Errorf("PUBLIC may execute %d functions of the queue made before the migrate", n)
	}
}

// TestPrivilegeMigrateAsOwner: a database owner without CREATEROLE and
// without superuser can migrate once the roles exist, and its functions
// then serve the sluice roles.
func TestPrivilegeMigrateAsOwner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner, password := b.createLogin("owner", "NOSUPERUSER NOCREATEROLE")
	// Created after the role, so dropped before it.
	connString := server.NewDatabaseFrom(t, nil)
	super := pgtest.Connect(t, connString)
	var db string
	if err := super.QueryRow(b.ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := super.Exec(b.ctx, fmt.Sprintf("ALTER DATABASE %s OWNER TO %s",
		pgx.Identifier{db}.Sanitize(), pgx.Identifier{owner}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	conn := connectAs(t, b.ctx, connString, owner, password)
	if _, err := migrate.Apply(b.ctx, conn, sqlsrc.FS); err != nil {
		t.Fatalf("migrating as the database owner: %v", err)
	}
	if _, err := conn.Exec(b.ctx, "SELECT sluice.create_queue('q')"); err != nil {
		t.Fatal(err)
	}
	var fowner string
	if err := conn.QueryRow(b.ctx, "SELECT proowner::regrole::text FROM pg_proc WHERE oid = 'sluice.send'::regproc").Scan(&fowner); err != nil || fowner != owner {
		t.Errorf("sluice.send is owned by %q (%v), want %s", fowner, err, owner)
	}

	pname, ppass := b.createLogin("producer", "", "sluice_producer")
	producer := connectAs(t, b.ctx, connString, pname, ppass)
	var id int64
	if err := producer.QueryRow(b.ctx, "SELECT sluice.send('q', '1')").Scan(&id); err != nil {
		t.Errorf("producer send on the owner's schema: %v", err)
	}
	if _, err := producer.Exec(b.ctx, "SELECT * FROM sluice.receive('q')"); sqlstate(err) != "42501" {
		t.Errorf("producer receive on the owner's schema: %v, want SQLSTATE 42501", err)
	}
}

// TestPrivilegeRolesMigration runs tables/0002_roles.sql with role names of
// this test's own: a role with CREATEROLE creates the roles, again is a
// no-op, and a role without CREATEROLE is refused with a hint unless they
// exist.
func TestPrivilegeRolesMigration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src, err := fs.ReadFile(sqlsrc.FS, "tables/0002_roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	creatorName, creatorPass := b.createLogin("creator", "NOSUPERUSER CREATEROLE")
	plainName, plainPass := b.createLogin("plain", "NOSUPERUSER NOCREATEROLE")
	var db string
	if err := b.pool.QueryRow(b.ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	names := []string{db + "_producer", db + "_consumer", db + "_admin"}
	sql := strings.NewReplacer("sluice_producer", names[0], "sluice_consumer", names[1], "sluice_admin", names[2]).Replace(string(src))
	if sql == string(src) {
		t.Fatal("no role name replaced")
	}
	// Dropped before the creator (cleanups run last first).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, n := range names {
			if _, err := b.pool.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{n}.Sanitize()); err != nil {
				t.Errorf("dropping role %s: %v", n, err)
			}
		}
	})
	connString := b.pool.Config().ConnString()
	creator := connectAs(t, b.ctx, connString, creatorName, creatorPass)
	plain := connectAs(t, b.ctx, connString, plainName, plainPass)

	if _, err := plain.Exec(b.ctx, sql); sqlstate(err) != "42501" || !strings.Contains(err.Error(), names[0]) {
		t.Errorf("roles migration without CREATEROLE: %v, want SQLSTATE 42501 naming %s", err, names[0])
	}
	for i := range 2 {
		if _, err := creator.Exec(b.ctx, sql); err != nil {
			t.Fatalf("roles migration with CREATEROLE, run %d: %v", i+1, err)
		}
	}
	if n := b.int64("SELECT count(*) FROM pg_roles WHERE rolname = ANY ($1) AND NOT rolcanlogin AND NOT rolsuper", names); n != 3 {
		t.Errorf("%d of the 3 roles exist as NOLOGIN roles", n)
	}
	if _, err := plain.Exec(b.ctx, sql); err != nil {
		t.Errorf("roles migration without CREATEROLE once the roles exist: %v", err)
	}
}
