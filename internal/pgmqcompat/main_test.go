package pgmqcompat

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/internal/pgtest"
)

var server *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &server) }

// newDB returns a pool on a fresh database with the sluice schema and the
// pgmq layer installed.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	url := server.NewDatabase(t)
	conn := pgtest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Install(ctx, conn); err != nil {
		t.Fatalf("Install: %v", err)
	}
	return pgtest.NewPool(t, url)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func exec(t *testing.T, db *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(ctxT(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// msg is one pgmq.message_record.
type msg struct {
	ID      int64
	ReadCt  int
	Enq     time.Time
	LastRd  *time.Time
	VT      time.Time
	Message string
	Headers *string
}

func msgs(t *testing.T, db *pgxpool.Pool, sql string, args ...any) []msg {
	t.Helper()
	rows, err := db.Query(ctxT(t), "SELECT msg_id, read_ct, enqueued_at, last_read_at, vt, message::text, headers::text FROM "+sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	var out []msg
	for rows.Next() {
		var m msg
		if err := rows.Scan(&m.ID, &m.ReadCt, &m.Enq, &m.LastRd, &m.VT, &m.Message, &m.Headers); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

func scalar[T any](t *testing.T, db *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := db.QueryRow(ctxT(t), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}
