package pgmqcompat

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/pgtest"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

// TestInstallAsDatabaseOwner: a database owner without superuser or
// CREATEROLE installs sluice and the layer and uses it.
func TestInstallAsDatabaseOwner(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// sluice's three cluster roles exist once a database has been migrated
	// by the (superuser) test user: the owner needs them but cannot make them.
	_ = server.NewDatabase(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role, password := "pgmq_owner_"+hex.EncodeToString(b), hex.EncodeToString(b)+"x"
	admin := pgtest.NewPool(t, server.URL())
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN NOSUPERUSER NOCREATEROLE PASSWORD '%s'", role, password)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		if _, err := admin.Exec(cctx, "DROP ROLE IF EXISTS "+role); err != nil {
			t.Errorf("dropping role %s: %v", role, err)
		}
	})
	url := server.NewDatabaseFrom(t, nil) // made after the role: dropped before it
	super := pgtest.Connect(t, url)
	var db string
	if err := super.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := super.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s OWNER TO %s", pgx.Identifier{db}.Sanitize(), role)); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = role, password
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := migrate.Apply(ctx, conn, sqlsrc.FS); err != nil {
		t.Fatalf("migrating sluice as the owner: %v", err)
	}
	if _, err := Install(ctx, conn); err != nil {
		t.Fatalf("installing the layer as the owner: %v", err)
	}
	var id, got int64
	if err := conn.QueryRow(ctx, "SELECT pgmq.create('own'), (SELECT * FROM pgmq.send('own', '{}'))").Scan(nil, &id); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT msg_id FROM pgmq.read('own', 30, 1)").Scan(&got); err != nil || got != id {
		t.Fatalf("read as the owner: %d, %v", got, err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pgmq.archive('own', $1::bigint)", id).Scan(&ok); err != nil || !ok {
		t.Fatalf("archive as the owner: %v, %v", ok, err)
	}
}
