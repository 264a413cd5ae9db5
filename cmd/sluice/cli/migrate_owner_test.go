package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/pgtest"
)

// TestMigrateWarnsAsSuperuser: migrating as a superuser makes every SECURITY
// DEFINER function of the API run as superuser; sluice migrate says so on
// standard error. A dedicated owner without SUPERUSER or CREATEROLE (the
// sluice roles exist already) migrates without the warning (issue 15, item 6).
func TestMigrateWarnsAsSuperuser(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	url := server.NewDatabaseFrom(t, nil)
	code, out, errOut := run("migrate", "--database-url", url)
	if code != 0 {
		t.Fatalf("migrate as superuser: status %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "warning:") || !strings.Contains(errOut, "superuser") ||
		!strings.Contains(errOut, "docs/operations.md") {
		t.Errorf("migrate as superuser: stderr %q, want a warning about the superuser owner", errOut)
	}
	if strings.Contains(out, "warning") {
		t.Errorf("the warning went to standard output: %q", out)
	}

	// A dedicated owner: a login without SUPERUSER or CREATEROLE that owns
	// its database (dropped before the role: cleanups run last first).
	super := pgtest.Connect(t, url)
	var db string
	if err := super.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	owner, password := db+"_owner", fmt.Sprintf("pw%d", time.Now().UnixNano())
	if _, err := super.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN NOSUPERUSER NOCREATEROLE PASSWORD '%s'",
		pgx.Identifier{owner}.Sanitize(), password)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		if _, err := super.Exec(cctx, "DROP ROLE IF EXISTS "+pgx.Identifier{owner}.Sanitize()); err != nil {
			t.Errorf("dropping role %s: %v", owner, err)
		}
	})
	ownedURL := server.NewDatabaseFrom(t, nil)
	if _, err := super.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s OWNER TO %s",
		pgx.Identifier{dbName(t, ctx, ownedURL)}.Sanitize(), pgx.Identifier{owner}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(ownedURL)
	if err != nil {
		t.Fatal(err)
	}
	ownerURL := fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", owner, password, cfg.Host, cfg.Port, cfg.Database)
	code, out, errOut = run("migrate", "--database-url", ownerURL)
	if code != 0 {
		t.Fatalf("migrate as a dedicated owner: status %d\n%s%s", code, out, errOut)
	}
	if strings.Contains(errOut, "warning") {
		t.Errorf("migrate as a dedicated owner warned: %q", errOut)
	}
}

func dbName(t *testing.T, ctx context.Context, url string) string {
	t.Helper()
	var db string
	if err := pgtest.Connect(t, url).QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestMigrateNotesEngine1Queues: sluice migrate names the queues still of
// engine 1 on standard error, with the command that moves them, and not
// the queues of engine 2 nor an upgrade's old storage.
func TestMigrateNotesEngine1Queues(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := server.NewDatabaseFrom(t, nil)
	if code, out, errOut := run("migrate", "--database-url", url); code != 0 || strings.Contains(errOut, "engine 1") {
		t.Fatalf("first migrate: status %d, stderr %q (no queue yet)\n%s", code, errOut, out)
	}
	conn := pgtest.Connect(t, url)
	for _, q := range []string{`SELECT sluice.create_queue('old_one', '{"engine": 1}')`, `SELECT sluice.create_queue('new_one')`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := run("migrate", "--database-url", url)
	if code != 0 || !strings.Contains(errOut, "1 queue(s) still on engine 1") || !strings.Contains(errOut, "old_one") ||
		strings.Contains(errOut, "new_one") || !strings.Contains(errOut, "sluice queue upgrade") || strings.Contains(out, "engine 1") {
		t.Fatalf("migrate with a queue of engine 1: status %d, stderr %q, stdout %q", code, errOut, out)
	}
	if _, err := conn.Exec(ctx, "SELECT sluice.upgrade_queue('old_one')"); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run("migrate", "--database-url", url); code != 0 || strings.Contains(errOut, "engine 1") {
		t.Fatalf("migrate after the upgrade (its old storage still there): status %d, stderr %q\n%s", code, errOut, out)
	}
}
