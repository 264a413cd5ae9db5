package sqlsrc_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/sluicemq/sluice/internal/pgtest"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

// engineFS reads a released engine's sql/tables and sql/functions from a
// tarball in testdata (made with git archive of the release).
func engineFS(t *testing.T, path string) fstest.MapFS {
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
		fsys[strings.TrimPrefix(h.Name, "sql/")] = &fstest.MapFile{Data: data}
	}
	return fsys
}

// An engine of release 0.1.0 (one dispatch lock per group) with queued,
// leased, acked, keyed and dead-lettered messages in two groups upgrades in
// place: nothing is lost or delivered twice, leases given before the
// upgrade stay valid, the queue keeps one lane (and so its order).
func TestUpgradeFromOneLockPerGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := server.NewDatabaseFrom(t, engineFS(t, "testdata/engine-0.1.0.tar.gz"))
	b := &bundle{t: t, ctx: ctx, pool: pgtest.NewPool(t, url)}

	b.createQueue("up", `{"max_attempts": 1}`)
	b.exec("SELECT sluice.create_group('up', 'audit')")
	var sent []int64
	for i := 0; i < 30; i++ {
		key := ""
		if i%3 == 0 {
			key = "k" + string(rune('a'+i%2))
		}
		var id int64
		if err := b.pool.QueryRow(ctx, "SELECT sluice.send('up', jsonb_build_object('n', $1::int), key => nullif($2, ''))",
			i, key).Scan(&id); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, id)
	}
	leased := b.receive("up", "default", 10, "1 hour")
	if len(leased) == 0 {
		t.Fatal("nothing leased before the upgrade")
	}
	acked := leased[:len(leased)/2]
	if n := b.ack("up", "default", receipts(acked)...); n != len(acked) {
		t.Fatalf("ack before the upgrade: %d", n)
	}
	dead := leased[len(leased)/2]
	if !b.nack("up", "default", dead.Receipt, "", "poison") {
		t.Fatal("nack before the upgrade")
	}
	stillLeased := leased[len(leased)/2+1:]
	audit := b.receive("up", "audit", 100, "")
	b.ack("up", "audit", receipts(audit)...)

	conn := pgtest.Connect(t, url)
	if _, err := migrate.Apply(ctx, conn, sqlsrc.FS); err != nil {
		t.Fatalf("upgrade: %v", err)
	}

	if n := b.int64(`SELECT (options->>'lanes')::int FROM sluice.list_queues() WHERE queue = 'up'`); n != 1 {
		t.Fatalf("upgraded queue has %d lanes, want 1", n)
	}
	// It keeps its four slots (migration 0016), and its options say so, so
	// that alter_queue finds them unchanged.
	if n := b.int64(`SELECT (options->>'slots')::int * 10 + (SELECT slots FROM sluice.queue WHERE name = 'up')
	                 FROM sluice.list_queues() WHERE queue = 'up'`); n != 44 {
		t.Fatalf("upgraded queue: slots option and column %d, want 4 and 4", n)
	}
	b.exec(`SELECT sluice.alter_queue('up', '{"max_attempts": 1}')`)
	// leases (new in the upgrade) reads the deliveries the old engine made.
	var inFlight []int64
	for _, l := range b.leases("up", nil, 1000) {
		inFlight = append(inFlight, l.ID)
	}
	var wantInFlight []int64
	for _, m := range stillLeased {
		wantInFlight = append(wantInFlight, m.ID)
	}
	slices.Sort(inFlight)
	slices.Sort(wantInFlight)
	if !slices.Equal(inFlight, wantInFlight) {
		t.Fatalf("leases after the upgrade: %v, want %v", inFlight, wantInFlight)
	}
	if n := len(b.peek("up", 1000, nil)); n != len(sent) {
		t.Fatalf("peek after the upgrade: %d messages, want the %d sent", n, len(sent))
	}
	if n := b.ack("up", "default", receipts(stillLeased)...); n != len(stillLeased) {
		t.Fatalf("acks of leases given before the upgrade: %d of %d", n, len(stillLeased))
	}
	if dl := b.int64("SELECT count(*) FROM sluice.dead_letters('up')"); dl != 1 {
		t.Fatalf("%d dead letters after the upgrade, want 1", dl)
	}
	// status's dead_lettered (a later column) counts the dead letters made before.
	b.wantDead("after the upgrade", "up", map[string][2]int64{"default": {1, 1}, "audit": {0, 0}})
	done := map[int64]bool{}
	for _, m := range leased {
		done[m.ID] = true
	}
	var rest []msg
	for {
		ms := b.receive("up", "default", 7, "")
		if len(ms) == 0 {
			break
		}
		b.ack("up", "default", receipts(ms)...)
		rest = append(rest, ms...)
	}
	var want []int64
	for _, id := range sent {
		if !done[id] {
			want = append(want, id)
		}
	}
	if len(rest) != len(want) {
		t.Fatalf("default got %d messages after the upgrade, want %d", len(rest), len(want))
	}
	for i, m := range rest {
		if m.ID != want[i] {
			t.Fatalf("after the upgrade, message %d = %d, want %d (commit order, one lane)", i, m.ID, want[i])
		}
	}
	if got := b.receive("up", "audit", 100, ""); len(got) != len(sent)-len(audit) {
		t.Fatalf("audit got %d after the upgrade, want %d", len(got), len(sent)-len(audit))
	}
	// New messages and new queues work, the new ones with lanes.
	id := b.send(b.pool, "up", `{"after": true}`)
	if got := b.receive("up", "default", 5, ""); len(got) != 1 || got[0].ID != id {
		t.Fatalf("a message sent after the upgrade: %+v", got)
	}
	b.createQueue("fresh", "")
	if n := b.int64(`SELECT (options->>'lanes')::int FROM sluice.list_queues() WHERE queue = 'fresh'`); n != 8 {
		t.Fatalf("a queue created after the upgrade has %d lanes, want 8", n)
	}
	if n := b.int64(`SELECT slots FROM sluice.queue WHERE name = 'fresh'`); n != 2 {
		t.Fatalf("a queue created after the upgrade has %d slots, want 2", n)
	}
	var redriven int64
	if err := b.pool.QueryRow(ctx, "SELECT sluice.redrive('up', 'default', NULL)").Scan(&redriven); err != nil || redriven != 1 {
		t.Fatalf("redrive after the upgrade: %d, %v", redriven, err)
	}
	b.wantDead("after a redrive", "up", map[string][2]int64{"default": {0, 1}, "audit": {0, 0}})
}
