package migrate_test

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/sluicemq/sluice/migrate"
)

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func TestMigrationsOrderAndValidation(t *testing.T) {
	got, err := migrate.Migrations(fstest.MapFS{
		"tables/0010_later.sql":  file(""),
		"tables/0002_second.sql": file(""),
		"tables/README.md":       file("not a migration"),
		"tables/1_first.sql":     file(""),
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range got {
		names = append(names, m.Path)
	}
	if want := []string{"tables/1_first.sql", "tables/0002_second.sql", "tables/0010_later.sql"}; !slices.Equal(names, want) {
		t.Errorf("order = %v, want %v", names, want)
	}
	if got[2].Version != 10 || got[2].Name != "0010_later.sql" {
		t.Errorf("last migration = %+v", got[2])
	}

	if m, err := migrate.Migrations(fstest.MapFS{}); err != nil || len(m) != 0 {
		t.Errorf("no tables directory: %v, %v", m, err)
	}

	for name, fsys := range map[string]fstest.MapFS{
		"must look like NNNN_name.sql": {"tables/init.sql": file("")},
		"also used by":                 {"tables/0001_a.sql": file(""), "tables/001_b.sql": file("")},
		"positive number":              {"tables/0000_zero.sql": file("")},
	} {
		if _, err := migrate.Migrations(fsys); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%v: error %v, want one saying %q", fsys, err, name)
		}
	}
}

func TestFunctionsManifest(t *testing.T) {
	got, err := migrate.Functions(fstest.MapFS{
		"functions/manifest.txt": file("# comment\n\n  b.sql  \na.sql\n"),
		"functions/a.sql":        file(""),
		"functions/b.sql":        file(""),
	})
	if want := []string{"functions/b.sql", "functions/a.sql"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("Functions = %v, %v; want %v", got, err, want)
	}
	if f, err := migrate.Functions(fstest.MapFS{}); err != nil || len(f) != 0 {
		t.Errorf("no functions directory: %v, %v", f, err)
	}

	for name, fsys := range map[string]fstest.MapFS{
		"does not exist": {"functions/manifest.txt": file("a.sql\n")},
		"already listed": {"functions/manifest.txt": file("a.sql\na.sql\n"), "functions/a.sql": file("")},
		"does not list functions/b.sql": {
			"functions/manifest.txt": file("a.sql\n"), "functions/a.sql": file(""), "functions/b.sql": file(""),
		},
		"manifest.txt is missing":  {"functions/a.sql": file("")},
		"must be a .sql file name": {"functions/manifest.txt": file("sub/a.sql\n")},
	} {
		if _, err := migrate.Functions(fsys); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%v: error %v, want one saying %q", fsys, err, name)
		}
	}
}

func TestScriptShape(t *testing.T) {
	script, err := migrate.Script(fixture())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(script, "\\set ON_ERROR_STOP on\n") {
		t.Errorf("script does not start with \\set ON_ERROR_STOP on")
	}
	// One transaction for every migration and the functions, the fence first.
	if strings.Count(script, "BEGIN;\n") != 1 || strings.Count(script, "COMMIT;\n") != 1 {
		t.Errorf("script has %d BEGIN and %d COMMIT, want one of each", strings.Count(script, "BEGIN;\n"),
			strings.Count(script, "COMMIT;\n"))
	}
	for _, want := range []string{
		"BEGIN;\nDO $sluice_fence$\n",
		"LOCK TABLE sluice.queue IN ACCESS EXCLUSIVE MODE;",
		"-- tables/0001_queue.sql\n",
		"VALUES (2, '0002_index.sql');",
		"-- functions/send.sql\n",
		"pg_advisory_lock(", "pg_advisory_unlock(",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q", want)
		}
	}
	// 0002_index.sql contains $sluice_sql$, so its EXECUTE must quote with
	// another tag.
	if !strings.Contains(script, "EXECUTE $sluice_sql_1$") {
		t.Errorf("script does not avoid the dollar tag used in 0002_index.sql")
	}
	if _, err := migrate.Script(fstest.MapFS{"tables/x.sql": file("")}); err == nil {
		t.Errorf("Script of an invalid schema succeeded")
	}
}
