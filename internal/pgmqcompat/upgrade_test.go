package pgmqcompat

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/internal/pgtest"
)

// layerFS reads a released layer's sql/pgmq/tables and sql/pgmq/functions
// from a tarball in testdata (made with git archive of that commit).
func layerFS(t *testing.T, path string) fstest.MapFS {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		// The layer's queues were of engine 1 when it was released (the
		// default then); queues made today default to engine 2.
		data = bytes.ReplaceAll(data, []byte(`'{"default_group": false,`), []byte(`'{"engine": 1, "default_group": false,`))
		fsys[strings.TrimPrefix(h.Name, "sql/pgmq/")] = &fstest.MapFile{Data: data}
	}
	return fsys
}

// TestUpgradeInPlace installs the layer as it was before its queues had
// per-queue functions and lanes (testdata/pgmq-layer-d41f738.tar.gz), with
// messages read, deleted and waiting, then installs this one over it: the
// queue gets its functions, keeps its one lane (fixed at creation), a
// delivery made before the upgrade is deleted by msg_id after it, nothing
// is lost or read twice, a queue with insert notifications on gets their
// marker and notifies, both get retention 0 (one whose retention was not
// the default hour keeps it), and a queue created afterwards has lanes and
// retention 0.
func TestUpgradeInPlace(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, db := oldLayerDatabase(ctx, t)
	exec(t, db, "SELECT pgmq.create('old')")
	exec(t, db, "SELECT pgmq.create('oldnotify')")
	exec(t, db, "SELECT pgmq.create('oldkeep')")
	exec(t, db, `SELECT sluice.alter_queue('oldkeep', '{"retention": "5 minutes"}')`)
	exec(t, db, "SELECT pgmq.enable_notify_insert('oldnotify', 0)")
	var sent []int64
	for i := 0; i < 4; i++ {
		sent = append(sent, scalar[int64](t, db, "SELECT * FROM pgmq.send('old', jsonb_build_object('i', $1::int))", i))
	}
	g1 := scalar[int64](t, db, `SELECT * FROM pgmq.send('old', '{"g": 1}', '{"x-pgmq-group": "g"}'::jsonb)`)
	g2 := scalar[int64](t, db, `SELECT * FROM pgmq.send('old', '{"g": 2}', '{"x-pgmq-group": "g"}'::jsonb)`)
	if got := ids(msgs(t, db, "pgmq.read('old', 60, 2)")); len(got) != 2 || got[0] != sent[0] || got[1] != sent[1] {
		t.Fatalf("old layer read %v, want %v", got, sent[:2])
	}
	exec(t, db, "SELECT pgmq.delete('old', $1::bigint)", sent[0])
	exec(t, db, "SELECT pgmq.archive('old', $1::bigint)", sent[2]) // never read

	res, err := Install(ctx, conn)
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if len(res.Applied) != 1 || res.Applied[0].Name != "0002_retention.sql" {
		t.Fatalf("upgrade applied migrations %+v, want 0002_retention.sql", res.Applied)
	}
	// a queue made before retention 0 gets it (nothing reads a completed
	// message of a pgmq queue again), unless its retention is not the
	// default hour
	for q, want := range map[string]string{"old": "00:00:00", "oldnotify": "00:00:00", "oldkeep": "00:05:00"} {
		if r := scalar[string](t, db, "SELECT retention::text FROM sluice.queue WHERE name = $1", q); r != want {
			t.Fatalf("queue %s has retention %s after the upgrade, want %s", q, r, want)
		}
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgmq'::regnamespace AND proname LIKE '\\_sl\\_%\\_old'"); n != 3 {
		t.Fatalf("the old queue has %d per-queue functions after the upgrade, want 3", n)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgmq'::regnamespace AND proname IN ('_target', '_send', '_send_batch')"); n != 0 {
		t.Fatal("the upgrade left pgmq._target, _send or _send_batch")
	}
	// a queue that notified before the upgrade has its marker, and notifies
	if !scalar[bool](t, db, "SELECT to_regclass('pgmq._sl_n_oldnotify') IS NOT NULL") || scalar[bool](t, db, "SELECT to_regclass('pgmq._sl_n_old') IS NOT NULL") {
		t.Fatal("after the upgrade, the queue that notifies has no marker, or the one that does not has one")
	}
	lconn, err := db.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lconn.Release()
	if _, err := lconn.Exec(ctx, `LISTEN "pgmq.q_oldnotify.INSERT"`); err != nil {
		t.Fatal(err)
	}
	exec(t, db, "SELECT * FROM pgmq.send('oldnotify', '{}')")
	nctx, ncancel := context.WithTimeout(ctx, 5*time.Second)
	defer ncancel()
	if n, err := lconn.Conn().WaitForNotification(nctx); err != nil || n.Channel != "pgmq.q_oldnotify.INSERT" {
		t.Fatalf("notification after the upgrade: %+v, %v", n, err)
	}
	if n := lanes(t, db, "old"); n != 1 {
		t.Fatalf("the old queue has %d lanes after the upgrade, want its 1", n)
	}
	// sent[1] was read before the upgrade, with a 60 s vt: still invisible, and deleted by msg_id now
	if !scalar[bool](t, db, "SELECT pgmq.delete('old', $1::bigint)", sent[1]) {
		t.Fatal("deleting a message read before the upgrade returned false")
	}
	// (a read returns a run of one group, in order)
	got := ids(msgs(t, db, "pgmq.read('old', 60, 10)"))
	if len(got) != 3 || got[0] != sent[3] || got[1] != g1 || got[2] != g2 {
		t.Fatalf("read after the upgrade: %v, want [%d %d %d] (not the deleted or the archived)", got, sent[3], g1, g2)
	}
	exec(t, db, "SELECT * FROM pgmq.delete('old', $1::bigint[])", got[:2])
	if got := ids(msgs(t, db, "pgmq.read('old', 60, 10)")); len(got) != 0 {
		t.Fatalf("read while the rest is invisible: %v", got)
	}
	exec(t, db, "SELECT pgmq.archive('old', $1::bigint)", g2)
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.q_old"); n != 0 {
		t.Fatalf("q_old shows %d messages", n)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pgmq.a_old"); n != 2 {
		t.Fatalf("a_old has %d rows, want 2", n)
	}
	exec(t, db, "SELECT pgmq.create('new')")
	if n := lanes(t, db, "new"); n < 2 {
		t.Fatalf("a queue created after the upgrade has %d lane(s), want several", n)
	}
	if r := scalar[string](t, db, "SELECT retention::text FROM sluice.queue WHERE name = 'new'"); r != "00:00:00" {
		t.Fatalf("a queue created after the upgrade has retention %s, want 0", r)
	}
	// a copy of another signature than its template's (as an older layer's
	// could be) is replaced, not left beside the new one
	exec(t, db, `DROP FUNCTION pgmq._sl_read_new; CREATE FUNCTION pgmq._sl_read_new(x int) RETURNS int LANGUAGE sql AS 'SELECT 1'`)
	again, err := Install(ctx, conn)
	if err != nil || len(again.Applied) != 0 {
		t.Fatalf("a second install: %+v, %v", again, err)
	}
	if n := scalar[int64](t, db, `SELECT count(*) FROM pg_proc c, pg_proc t
		WHERE c.pronamespace = 'pgmq'::regnamespace AND c.proname = '_sl_read_new'
		  AND t.oid = 'pgmq._t_deliver'::regproc AND pg_get_function_identity_arguments(c.oid) = pg_get_function_identity_arguments(t.oid)`); n != 1 {
		t.Fatalf("the install left %d copies of _t_deliver for queue new with the template's signature, want 1", n)
	}
	if n := scalar[int64](t, db, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgmq'::regnamespace AND proname = '_sl_read_new'"); n != 1 {
		t.Fatalf("%d functions _sl_read_new, want 1", n)
	}
	exec(t, db, "SELECT * FROM pgmq.send('new', '{}')")
	if got := msgs(t, db, "pgmq.pop('new')"); len(got) != 1 {
		t.Fatalf("pop after a second install: %v", ids(got))
	}
}

// oldLayerDatabase makes a database with the layer of an earlier sluice
// (testdata/pgmq-layer-d41f738.tar.gz: engine 1 queues, per-queue functions
// and lanes) installed, and returns a connection (to upgrade it with
// Install) and a pool on it.
func oldLayerDatabase(ctx context.Context, t *testing.T) (*pgx.Conn, *pgxpool.Pool) {
	t.Helper()
	url := server.NewDatabase(t)
	conn := pgtest.Connect(t, url)
	if _, err := installFS(ctx, conn, layerFS(t, "testdata/pgmq-layer-d41f738.tar.gz")); err != nil {
		t.Fatalf("installing the old layer: %v", err)
	}
	return conn, pgtest.NewPool(t, url)
}
