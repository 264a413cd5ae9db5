package cli_test

import (
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/pgmqcompat"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

func TestMigratePGMQ(t *testing.T) {
	t.Parallel()
	url := server.NewDatabaseFrom(t, nil)
	for i, want := range []string{"applied sql/pgmq/tables/0001_pgmq.sql", "schema pgmq is at version 2"} {
		code, out, errOut := run("migrate", "--pgmq", "--database-url", url)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("migrate --pgmq run %d: status %d, want %q in\n%s%s", i+1, code, want, out, errOut)
		}
	}
	if v := schemaVersion(t, url); v != latestMigration(t) {
		t.Errorf("schema version %d", v)
	}
}

func TestMigratePrintPGMQ(t *testing.T) {
	t.Parallel()
	engine, err := migrate.Script(sqlsrc.FS)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := pgmqcompat.Script()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run("migrate", "--print", "--pgmq")
	if code != 0 || out != engine+"\n"+layer || errOut != "" {
		t.Errorf("migrate --print --pgmq: status %d, stderr %q, script matches: %v", code, errOut, out == engine+"\n"+layer)
	}
}
