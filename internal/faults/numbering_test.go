package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/pgserver"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

// TestKeyOrderSurvivesACrashAfterAReceive checks that the order a receive
// gives to a key's messages is the one they keep after PostgreSQL crashes.
// Two transactions send a message of one key: a (the older transaction,
// committed last) and b (committed first). A receive sees only b, numbers it
// and hands it out; a commits; the receive commits; PostgreSQL is killed at
// once. b was handed out first, so b comes first after the restart too
// (again, once its lease ends), and a only once b is completed: a receive
// that numbers keyed messages must not hand them out before its numbering is
// on disk (otherwise the numbering is redone after the crash, in
// transaction order: a before b).
func TestKeyOrderSurvivesACrashAfterAReceive(t *testing.T) {
	for _, engine := range []int{2, 1} {
		t.Run(fmt.Sprintf("engine %d", engine), func(t *testing.T) { keyOrderAfterCrash(t, engine) })
	}
}

func keyOrderAfterCrash(t *testing.T, engine int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "sluice-numbering-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // the server may run as another user
		t.Fatal(err)
	}
	cfg := pgserver.Config{Version: os.Getenv("SLUICE_PG_VERSION"), DataDir: filepath.Join(dir, "data")}
	srv, err := pgserver.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Port, cfg.Password = srv.Port(), srv.Password()
	defer func() { _ = srv.Stop() }()
	url := fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", cfg.Password, cfg.Port)
	connect := func() *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	exec := func(c *pgx.Conn, sql string, args ...any) {
		t.Helper()
		if _, err := c.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	admin := connect()
	if _, err := migrate.Apply(ctx, admin, sqlsrc.FS); err != nil {
		t.Fatal(err)
	}
	exec(admin, `SELECT sluice.create_queue('q', jsonb_build_object('engine', $1::int))`, engine)
	// receive returns the body of each message it leases, in order
	receive := func(c *pgx.Conn) (bodies, receipts []string) {
		t.Helper()
		rows, err := c.Query(ctx, `SELECT body->>'n', receipt FROM sluice.receive('q', max_messages => 10, lease => '1 second')`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var b, r string
			if err := rows.Scan(&b, &r); err != nil {
				t.Fatal(err)
			}
			bodies, receipts = append(bodies, b), append(receipts, r)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return bodies, receipts
	}

	older, newer, consumer := connect(), connect(), connect()
	exec(older, `BEGIN`)
	exec(older, `SELECT sluice.send('q', '{"n": "a"}', key => 'k')`)
	exec(newer, `SELECT sluice.send('q', '{"n": "b"}', key => 'k')`)
	exec(consumer, `BEGIN`)
	if got, _ := receive(consumer); len(got) != 1 || got[0] != "b" {
		t.Fatalf("first receive: %v, want [b]", got)
	}
	exec(older, `COMMIT`) // durable: its commit is on disk before the receive's
	exec(consumer, `COMMIT`)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if srv, err = pgserver.Start(ctx, cfg); err != nil {
		t.Fatalf("restart: %v", err)
	}

	c := connect()
	defer c.Close(ctx)
	var seen []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		got, receipts := receive(c)
		if len(got) == 0 {
			time.Sleep(100 * time.Millisecond) // (b's lease runs 1 s)
			continue
		}
		seen = append(seen, got...)
		exec(c, `SELECT sluice.ack('q', 'default', $1)`, receipts)
		if len(seen) >= 2 {
			break
		}
	}
	if len(seen) != 2 || seen[0] != "b" || seen[1] != "a" {
		t.Fatalf("after the crash: delivered %v, want [b a] (b was handed out before a committed)", seen)
	}
}
