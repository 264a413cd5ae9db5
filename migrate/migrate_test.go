package migrate_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicemq/sluice/internal/pgtest"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

var server *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &server) }

// fixture is a small schema with two migrations and two functions, the
// second depending on the first.
func fixture() fstest.MapFS {
	return fstest.MapFS{
		"tables/0001_queue.sql": {Data: []byte(`CREATE TABLE sluice.queue (
    name text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE sluice.message (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL REFERENCES sluice.queue (name),
    body jsonb NOT NULL
);
INSERT INTO sluice.queue (name) VALUES ('default');
`)},
		// A dollar quote like the script's own, to show it is not confused.
		"tables/0002_index.sql": {Data: []byte(`CREATE INDEX message_queue_idx ON sluice.message (queue, id);
COMMENT ON TABLE sluice.message IS $sluice_sql$messages, one row each$sluice_sql$;`)},
		"functions/manifest.txt": {Data: []byte("# load order\nqueue_size.sql\n\nsend.sql\n")},
		"functions/queue_size.sql": {Data: []byte(`CREATE OR REPLACE FUNCTION sluice.queue_size(i_queue text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT count(*) FROM sluice.message WHERE queue = i_queue;
$$;
`)},
		"functions/send.sql": {Data: []byte(`CREATE OR REPLACE FUNCTION sluice.send(i_queue text, i_body jsonb) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    INSERT INTO sluice.message (queue, body) VALUES (i_queue, i_body) RETURNING id INTO v_id;
    RETURN v_id;
END
$$;
`)},
	}
}

// without returns fsys less the named files.
func without(fsys fstest.MapFS, names ...string) fstest.MapFS {
	out := maps.Clone(fsys)
	for _, n := range names {
		delete(out, n)
	}
	return out
}

func dump(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	ctx := context.Background()
	lines, err := pgtest.DumpSchema(ctx, conn, "sluice")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, "SELECT format('migration %s %s', version, name) FROM sluice.schema_migration")
	if err != nil {
		t.Fatal(err)
	}
	recorded, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	lines = append(lines, recorded...)
	slices.Sort(lines)
	return lines
}

func sameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s differ:\ngot:\n  %s\nwant:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// runScript runs a script from migrate.Script through pgx (simple protocol,
// one multi-statement query), dropping its psql meta-command lines.
func runScript(ctx context.Context, conn *pgx.Conn, script string) error {
	var sql strings.Builder
	for _, line := range strings.SplitAfter(script, "\n") {
		if !strings.HasPrefix(line, `\`) {
			sql.WriteString(line)
		}
	}
	_, err := conn.Exec(ctx, sql.String())
	return err
}

func TestApplyIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := pgtest.Connect(t, server.NewDatabaseFrom(t, nil))

	res, err := migrate.Apply(ctx, conn, fixture())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 2 || res.Applied[0].Name != "0001_queue.sql" || res.Applied[1].Version != 2 || res.Version != 2 {
		t.Errorf("first Apply: %+v", res)
	}
	if want := []string{"functions/queue_size.sql", "functions/send.sql"}; !slices.Equal(res.Functions, want) {
		t.Errorf("functions = %v, want %v", res.Functions, want)
	}
	first := dump(t, conn)

	res, err = migrate.Apply(ctx, conn, fixture())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 0 || res.Version != 2 {
		t.Errorf("second Apply: %+v", res)
	}
	sameLines(t, "schemas after one and two Applies", dump(t, conn), first)

	var id int64
	if err := conn.QueryRow(ctx, `SELECT sluice.send('default', '{"n": 1}')`).Scan(&id); err != nil {
		t.Fatalf("calling a loaded function: %v", err)
	}
}

func TestApplyUpgradesAndMatchesFreshInstall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fresh := pgtest.Connect(t, server.NewDatabaseFrom(t, nil))
	if _, err := migrate.Apply(ctx, fresh, fixture()); err != nil {
		t.Fatal(err)
	}

	upgraded := pgtest.Connect(t, server.NewDatabaseFrom(t, nil))
	old := without(fixture(), "tables/0002_index.sql")
	if res, err := migrate.Apply(ctx, upgraded, old); err != nil || res.Version != 1 {
		t.Fatalf("Apply of version 1: %+v, %v", res, err)
	}
	res, err := migrate.Apply(ctx, upgraded, fixture())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 1 || res.Applied[0].Path != "tables/0002_index.sql" {
		t.Errorf("upgrade applied %+v", res.Applied)
	}
	sameLines(t, "fresh and upgraded schemas", dump(t, upgraded), dump(t, fresh))
}

func TestScriptMatchesApply(t *testing.T) {
	t.Parallel()
	testScriptMatchesApply(t, fixture())
}

func TestRealSchema(t *testing.T) {
	t.Parallel()
	testScriptMatchesApply(t, sqlsrc.FS)
}

// testScriptMatchesApply checks that Apply and Script are idempotent and
// give the same schema, and that either can follow the other.
func testScriptMatchesApply(t *testing.T, schema fs.FS) {
	ctx := context.Background()
	applied := pgtest.Connect(t, server.NewDatabaseFrom(t, nil))
	if _, err := migrate.Apply(ctx, applied, schema); err != nil {
		t.Fatal(err)
	}
	want := dump(t, applied)
	if res, err := migrate.Apply(ctx, applied, schema); err != nil || len(res.Applied) != 0 {
		t.Fatalf("second Apply: %+v, %v", res, err)
	}
	sameLines(t, "schemas after one and two Applies", dump(t, applied), want)

	script, err := migrate.Script(schema)
	if err != nil {
		t.Fatal(err)
	}
	scripted := pgtest.Connect(t, server.NewDatabaseFrom(t, nil))
	for i := range 2 {
		if err := runScript(ctx, scripted, script); err != nil {
			t.Fatalf("script, run %d: %v", i+1, err)
		}
	}
	sameLines(t, "schemas from Script and Apply", dump(t, scripted), want)

	if res, err := migrate.Apply(ctx, scripted, schema); err != nil || len(res.Applied) != 0 {
		t.Errorf("Apply after the script: %+v, %v", res, err)
	}
	if err := runScript(ctx, applied, script); err != nil {
		t.Errorf("script after Apply: %v", err)
	}
	sameLines(t, "schemas after Apply then Script", dump(t, applied), want)
}

func TestConcurrentApply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := server.NewDatabaseFrom(t, nil)
	conns := make([]*pgx.Conn, 4)
	for i := range conns {
		conns[i] = pgtest.Connect(t, url)
	}
	results := make([]migrate.Result, len(conns))
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = migrate.Apply(ctx, conn, fixture())
		}()
	}
	wg.Wait()
	applied := 0
	for i := range conns {
		if errs[i] != nil {
			t.Errorf("Apply %d: %v", i, errs[i])
		}
		applied += len(results[i].Applied)
	}
	if applied != 2 {
		t.Errorf("%d migrations applied in all, want 2", applied)
	}
	var n int
	if err := conns[0].QueryRow(ctx, "SELECT count(*) FROM sluice.schema_migration").Scan(&n); err != nil || n != 2 {
		t.Errorf("schema_migration has %d rows (%v), want 2", n, err)
	}
}

func TestFailingMigrationIsRolledBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := pgtest.Connect(t, server.NewDatabaseFrom(t, nil))
	schema := fixture()
	schema["tables/0003_broken.sql"] = &fstest.MapFile{Data: []byte(
		"CREATE TABLE sluice.half (id int);\nINSERT INTO sluice.half\n  SELECT id FROM sluice.nowhere;\n")}

	res, err := migrate.Apply(ctx, conn, schema)
	var fe *migrate.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("Apply: %v, want a *migrate.FileError", err)
	}
	var pgErr *pgconn.PgError
	if fe.Path != "tables/0003_broken.sql" || fe.Line != 3 || !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Errorf("error = %#v (PostgreSQL error %v)", fe, pgErr)
	}
	for _, want := range []string{"tables/0003_broken.sql:3:", "sluice.nowhere", "SQLSTATE 42P01"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// The upgrade is one transaction: the two good migrations before the
	// broken one are rolled back with it.
	if len(res.Applied) != 0 {
		t.Errorf("Applied = %+v, want none", res.Applied)
	}

	var half bool
	var latest int
	if err := conn.QueryRow(ctx, `SELECT to_regclass('sluice.half') IS NOT NULL,
	       (SELECT coalesce(max(version), 0) FROM sluice.schema_migration)`).Scan(&half, &latest); err != nil {
		t.Fatal(err)
	}
	if half || latest != 0 {
		t.Errorf("after the failure: sluice.half exists = %v, latest version = %d; want false, 0", half, latest)
	}
	// The lock was released: a fixed schema applies.
	if res, err := migrate.Apply(ctx, conn, fixture()); err != nil || res.Version != 2 {
		t.Errorf("Apply after the failure: %+v, %v", res, err)
	}
}

func TestFailingFunctionIsRolledBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := pgtest.Connect(t, server.NewDatabaseFrom(t, nil))
	schema := fixture()
	schema["functions/send.sql"] = &fstest.MapFile{Data: []byte(
		"CREATE OR REPLACE FUNCTION sluice.send(i_queue text) RETURNS bigint\nLANGUAGE sql AS $$\n    SELECT nope FROM sluice.message;\n$$;\n")}

	_, err := migrate.Apply(ctx, conn, schema)
	var fe *migrate.FileError
	if !errors.As(err, &fe) || fe.Path != "functions/send.sql" || fe.Line != 3 {
		t.Fatalf("Apply: %#v, want a *migrate.FileError for functions/send.sql line 3", err)
	}
	// queue_size.sql ran in the same transaction before send.sql: gone too.
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'sluice'::regnamespace").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d functions exist after a failed reload, want 0", n)
	}
}

func TestNewerDatabaseIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := pgtest.Connect(t, server.NewDatabaseFrom(t, fixture()))
	before := dump(t, conn)
	old := without(fixture(), "tables/0002_index.sql")

	_, err := migrate.Apply(ctx, conn, old)
	if err == nil || !strings.Contains(err.Error(), "migration 2") || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Apply of an older schema: %v, want a 'newer sluice' error", err)
	}
	script, err := migrate.Script(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := runScript(ctx, conn, script); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("script of an older schema: %v, want a 'newer sluice' error", err)
	}
	sameLines(t, "schemas before and after the refusals", dump(t, conn), before)
}

func TestScriptWithPsql(t *testing.T) {
	t.Parallel()
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("psql is not installed")
	}
	ctx := context.Background()
	want := dump(t, pgtest.Connect(t, server.NewDatabaseFrom(t, fixture())))

	url := server.NewDatabaseFrom(t, nil)
	script, err := migrate.Script(fixture())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		cmd := exec.CommandContext(ctx, psql, "--no-psqlrc", "--quiet", "--dbname", url, "--file", "-")
		cmd.Stdin = strings.NewReader(script)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("psql: %v\n%s", err, out.String())
		}
		if out.Len() > 0 {
			t.Errorf("psql printed:\n%s", out.String())
		}
	}
	sameLines(t, "schemas from psql and Apply", dump(t, pgtest.Connect(t, url)), want)

	// With ON_ERROR_STOP, psql stops at a failing migration.
	broken := fixture()
	broken["tables/0003_broken.sql"] = &fstest.MapFile{Data: []byte("SELECT 1/0;\n")}
	script, err = migrate.Script(broken)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, psql, "--no-psqlrc", "--quiet", "--dbname", url, "--file", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "division by zero") {
		t.Errorf("psql with a broken migration: %v\n%s", err, out)
	}
}
