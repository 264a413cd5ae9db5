package pgmqcompat

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	url := server.NewOwnedDatabase(t, "pgmq_owner_", "NOSUPERUSER NOCREATEROLE")
	conn, err := pgx.Connect(ctx, url)
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
