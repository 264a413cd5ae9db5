package cli_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/cmd/sluice/cli"
	"github.com/sluicemq/sluice/internal/pgtest"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

var server *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &server) }

// run runs the sluice command and returns its status and output.
func run(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = cli.Main(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func schemaVersion(t *testing.T, url string) int {
	t.Helper()
	var v int
	conn := pgtest.Connect(t, url)
	if err := conn.QueryRow(context.Background(),
		"SELECT coalesce(max(version), 0) FROM sluice.schema_migration").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func latestMigration(t *testing.T) int {
	t.Helper()
	ms, err := migrate.Migrations(sqlsrc.FS)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	url := server.NewDatabaseFrom(t, nil)
	code, out, errOut := run("migrate", "--database-url", url)
	if code != 0 {
		t.Fatalf("first migrate: status %d\n%s%s", code, out, errOut)
	}
	latest := latestMigration(t)
	for _, want := range []string{"applied tables/", "schema sluice is at version " + strconv.Itoa(latest), "reloaded "} {
		if !strings.Contains(out, want) {
			t.Errorf("first migrate printed %q, want it to mention %q", out, want)
		}
	}
	code, out, errOut = run("migrate", "--database-url", url)
	if code != 0 || strings.Contains(out, "applied") || !strings.Contains(out, "up to date") {
		t.Errorf("second migrate: status %d\n%s%s", code, out, errOut)
	}
	if v := schemaVersion(t, url); v != latest {
		t.Errorf("schema version %d, want %d", v, latest)
	}
}

func TestMigrateFromEnvironment(t *testing.T) {
	// Not parallel: it sets environment variables.
	t.Run("DATABASE_URL", func(t *testing.T) {
		url := server.NewDatabaseFrom(t, nil)
		t.Setenv("DATABASE_URL", url)
		if code, out, errOut := run("migrate"); code != 0 {
			t.Fatalf("status %d\n%s%s", code, out, errOut)
		}
		if v := schemaVersion(t, url); v != latestMigration(t) {
			t.Errorf("schema version %d", v)
		}
	})
	t.Run("PG variables", func(t *testing.T) {
		url := server.NewDatabaseFrom(t, nil)
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("DATABASE_URL", "")
		os.Unsetenv("DATABASE_URL")
		for k, v := range map[string]string{
			"PGHOST": cfg.Host, "PGPORT": strconv.Itoa(int(cfg.Port)), "PGUSER": cfg.User,
			"PGPASSWORD": cfg.Password, "PGDATABASE": cfg.Database, "PGSSLMODE": "disable",
		} {
			t.Setenv(k, v)
		}
		if code, out, errOut := run("migrate"); code != 0 {
			t.Fatalf("status %d\n%s%s", code, out, errOut)
		}
		if v := schemaVersion(t, url); v != latestMigration(t) {
			t.Errorf("schema version %d", v)
		}
	})
}

func TestMigratePrint(t *testing.T) {
	t.Parallel()
	want, err := migrate.Script(sqlsrc.FS)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run("migrate", "--print", "--database-url", "postgres://nowhere.invalid/x")
	if code != 0 || out != want || errOut != "" {
		t.Errorf("migrate --print: status %d, stderr %q, script matches: %v", code, errOut, out == want)
	}
}

func TestMigrateUnreachable(t *testing.T) {
	t.Parallel()
	code, out, errOut := run("migrate", "--database-url", "postgres://someone:sekrit@127.0.0.1:1/app?connect_timeout=5")
	if code != 1 || out != "" {
		t.Errorf("status %d, stdout %q; want 1 and nothing", code, out)
	}
	for _, want := range []string{"cannot connect", `database "app" on 127.0.0.1:1`, "--database-url"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q does not mention %q", errOut, want)
		}
	}
	if strings.Contains(errOut, "sekrit") {
		t.Errorf("stderr shows the password: %q", errOut)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	code, out, _ := run("version")
	if code != 0 || !strings.HasPrefix(out, "sluice ") || !strings.Contains(out, "schema version "+strconv.Itoa(latestMigration(t))) {
		t.Errorf("version: status %d, output %q", code, out)
	}
}

func TestHelpAndUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{nil, 2, "", "Commands:"},
		{[]string{"--help"}, 0, "migrate   install", ""},
		{[]string{"help", "migrate"}, 0, "Examples:", ""},
		{[]string{"migrate", "--help"}, 0, "--database-url URL", ""},
		{[]string{"version", "-h"}, 0, "Usage: sluice version", ""},
		{[]string{"migrate", "--bogus"}, 2, "", "not defined"},
		{[]string{"migrate", "extra"}, 2, "", `unexpected argument "extra"`},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
	} {
		code, out, errOut := run(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("sluice %v: status %d, stdout %q, stderr %q; want %d, %q, %q",
				tc.args, code, out, errOut, tc.code, tc.stdout, tc.stderr)
		}
	}
}
