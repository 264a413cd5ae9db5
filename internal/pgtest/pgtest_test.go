package pgtest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/pgtest"
)

var server *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &server) }

// fixture is a small schema independent of the real SQL sources.
func fixture(table string) fstest.MapFS {
	return fstest.MapFS{
		"tables/0001_" + table + ".sql": {Data: []byte("CREATE TABLE sluice." + table + " (id int PRIMARY KEY);\n")},
		"functions/manifest.txt":        {Data: []byte("count.sql\n")},
		"functions/count.sql": {Data: []byte("CREATE OR REPLACE FUNCTION sluice.count_" + table +
			"() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM sluice." + table + " $$;\n")},
	}
}

func TestNewDatabaseFromIsIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := fixture("isolated")
	a := pgtest.NewPool(t, server.NewDatabaseFrom(t, schema))
	b := pgtest.NewPool(t, server.NewDatabaseFrom(t, schema))

	if _, err := a.Exec(ctx, "INSERT INTO sluice.isolated VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	for db, want := range map[string]int64{"a": 1, "b": 0} {
		pool := a
		if db == "b" {
			pool = b
		}
		var n int64
		if err := pool.QueryRow(ctx, "SELECT sluice.count_isolated()").Scan(&n); err != nil {
			t.Fatalf("database %s: %v", db, err)
		}
		if n != want {
			t.Errorf("database %s has %d rows, want %d", db, n, want)
		}
	}
}

func TestNewDatabaseFromNilIsEmpty(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, server.NewDatabaseFrom(t, nil))
	var n int
	if err := pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_namespace WHERE nspname = 'sluice'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("empty database has schema sluice")
	}
}

func TestNewDatabaseHasSluiceSchema(t *testing.T) {
	t.Parallel()
	pool := server.NewPool(t)
	var n int
	if err := pool.QueryRow(context.Background(),
		"SELECT count(*) FROM sluice.schema_migration").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Errorf("sluice.schema_migration is empty")
	}
}

func TestDatabaseIsDroppedAfterTest(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("user", func(t *testing.T) {
		conn := pgtest.Connect(t, server.NewDatabaseFrom(t, nil))
		if err := conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	admin := pgtest.Connect(t, server.URL())
	var exists bool
	if err := admin.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if name == "" || exists {
		t.Errorf("database %q still exists after its test", name)
	}
}

func TestConcurrentDatabasesFromNewTemplate(t *testing.T) {
	t.Parallel()
	// Six tests at once need a template nobody in this process has asked
	// for yet: on a private server one builds it while the others wait, and
	// all get a database.
	schema := fixture("concurrent")
	for i := range 6 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t, server.NewDatabaseFrom(t, schema))
			if err := pool.Ping(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestPrivateServerSettings(t *testing.T) {
	t.Parallel()
	if !server.Private() {
		t.Skip("DATABASE_URL server")
	}
	conn := pgtest.Connect(t, server.URL())
	ctx := context.Background()
	settings := map[string]string{}
	for _, name := range []string{"listen_addresses", "max_connections", "server_version_num"} {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		settings[name] = v
	}
	if settings["listen_addresses"] != "127.0.0.1" {
		t.Errorf("listen_addresses = %q", settings["listen_addresses"])
	}
	if n, _ := strconv.Atoi(settings["max_connections"]); n < 200 {
		t.Errorf("max_connections = %d, want >= 200", n)
	}
	want := os.Getenv("SLUICE_PG_VERSION")
	if want == "" {
		want = pgtest.DefaultVersion
	}
	if !strings.Contains(want, ".") && !strings.HasPrefix(settings["server_version_num"], want) {
		t.Errorf("server_version_num = %s, want major version %s", settings["server_version_num"], want)
	}
	t.Logf("PostgreSQL %s", server.Version())
}

// TestServerDiesWithTestProcess runs this test binary again, lets it start
// its own server and kill itself with SIGKILL, and checks that its postgres
// goes away.
func TestServerDiesWithTestProcess(t *testing.T) {
	if os.Getenv("PGTEST_CRASH_CHILD") == "1" {
		crashChild()
		return
	}
	if os.Getenv("DATABASE_URL") != "" || runtime.GOOS != "linux" {
		t.Skip("needs a private server on Linux")
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerDiesWithTestProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PGTEST_CRASH_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid, dataDir := 0, ""
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "postmaster pid "); ok {
			pid, _ = strconv.Atoi(s)
		}
		if s, ok := strings.CutPrefix(sc.Text(), "data directory "); ok {
			dataDir = s
		}
	}
	err = cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v", err)
	}
	if pid <= 0 {
		t.Fatal("child did not report its postmaster's pid")
	}
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			t.Fatalf("postgres (pid %d) still runs 30s after its test process died", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The child could not remove its directory; the next server start
	// would sweep it, but do not leave it behind.
	if dataDir != "" {
		_ = os.RemoveAll(filepath.Dir(dataDir))
	}
}

func crashChild() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, server.URL())
	if err != nil {
		panic(err)
	}
	var dataDir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir); err != nil {
		panic(err)
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		panic(err)
	}
	pid, _, _ := strings.Cut(string(b), "\n")
	fmt.Printf("postmaster pid %s\ndata directory %s\n", pid, dataDir)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
