package pgmqcompat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// viewIDs returns the msg_ids queue's view shows, in order.
func viewIDs(t *testing.T, db *pgxpool.Pool, queue string) []int64 {
	t.Helper()
	return scalar[[]int64](t, db, "SELECT coalesce(array_agg(msg_id ORDER BY msg_id), '{}') FROM pgmq.q_"+queue)
}

// installLayer installs this layer over the old one conn's database has.
func installLayer(ctx context.Context, t *testing.T, conn *pgx.Conn) {
	t.Helper()
	if _, err := Install(ctx, conn); err != nil {
		t.Fatalf("upgrade of the layer: %v", err)
	}
}

// upgradeQueue runs sluice.upgrade_queue(queue), which must upgrade it.
func upgradeQueue(t *testing.T, db *pgxpool.Pool, queue string) {
	t.Helper()
	if !scalar[bool](t, db, "SELECT sluice.upgrade_queue($1)", queue) {
		t.Fatalf("sluice.upgrade_queue(%q) returned false", queue)
	}
}

// finishUpgrade runs sluice.maintain() until queue has no predecessor (every
// group drained it), at most 10 s.
func finishUpgrade(t *testing.T, db *pgxpool.Pool, queue string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		exec(t, db, "SELECT * FROM sluice.maintain()")
		if scalar[bool](t, db, "SELECT predecessor IS NULL FROM sluice.queue WHERE name = $1", queue) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upgrade of %s did not finish in 10 s", queue)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUpgradeQueueOfTheLayer upgrades a pgmq queue of engine 1, made by an
// earlier layer (testdata/pgmq-layer-d41f738.tar.gz) with messages read,
// deleted, archived and waiting, to engine 2 with sluice.upgrade_queue:
// the view shows what is in the queue across both storages, a delivery made
// before the upgrade is deleted by msg_id after it, reads take the old
// messages first, in order, then the new ones, nothing is lost or read
// twice, msg_ids go on, and once every message of the old storage is done
// sluice.maintain() drops it and the view reads the new storage alone. The
// side tables do not rotate over the tombstones of messages the old storage
// keeps. purge_queue during an upgrade removes both storages' messages.
func TestUpgradeQueueOfTheLayer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, db := oldLayerDatabase(ctx, t)
	exec(t, db, "SELECT pgmq.create('up')")
	exec(t, db, "SELECT pgmq.create('pu')")
	var old []int64
	for i := 0; i < 6; i++ {
		old = append(old, scalar[int64](t, db, "SELECT * FROM pgmq.send('up', jsonb_build_object('i', $1::int))", i))
	}
	for i := 0; i < 3; i++ {
		exec(t, db, "SELECT * FROM pgmq.send('pu', '{}')")
	}
	if got := ids(msgs(t, db, "pgmq.read('up', 60, 2)")); !slices.Equal(got, old[:2]) {
		t.Fatalf("old layer read %v, want %v", got, old[:2])
	}
	exec(t, db, "SELECT pgmq.delete('up', $1::bigint)", old[0])  // read, deleted
	exec(t, db, "SELECT pgmq.delete('up', $1::bigint)", old[2])  // never read, deleted
	exec(t, db, "SELECT pgmq.archive('up', $1::bigint)", old[3]) // never read, archived
	// old[1]: read (vt 60 s), old[4] and old[5] waiting
	installLayer(ctx, t, conn)
	if e := engineOf(t, db, "up"); e != 1 {
		t.Fatalf("the old queue is of engine %d after the layer's upgrade, want 1", e)
	}

	upgradeQueue(t, db, "up")
	if e := engineOf(t, db, "up"); e != 2 {
		t.Fatalf("the queue is of engine %d after sluice.upgrade_queue, want 2", e)
	}
	if got, want := viewIDs(t, db, "up"), []int64{old[1], old[4], old[5]}; !slices.Equal(got, want) {
		t.Fatalf("q_up shows %v after the upgrade, want %v", got, want)
	}
	var fresh []int64
	for i := 0; i < 2; i++ {
		fresh = append(fresh, scalar[int64](t, db, "SELECT * FROM pgmq.send('up', jsonb_build_object('new', $1::int))", i))
	}
	if fresh[0] <= old[5] {
		t.Fatalf("msg_id %d sent after the upgrade is not after the old queue's last, %d", fresh[0], old[5])
	}
	if got, want := viewIDs(t, db, "up"), []int64{old[1], old[4], old[5], fresh[0], fresh[1]}; !slices.Equal(got, want) {
		t.Fatalf("q_up shows %v with messages in both storages, want %v", got, want)
	}
	// the delivery made before the upgrade, deleted by msg_id after it
	if !scalar[bool](t, db, "SELECT pgmq.delete('up', $1::bigint)", old[1]) {
		t.Fatal("delete of a message read before the upgrade returned false")
	}
	// the side tables rotate, but not over the tombstones of messages the
	// old storage still keeps (the view would show them again)
	for i := 0; i < 3; i++ {
		exec(t, db, "SELECT pgmq._rotate('up')")
	}
	if got, want := viewIDs(t, db, "up"), []int64{old[4], old[5], fresh[0], fresh[1]}; !slices.Equal(got, want) {
		t.Fatalf("q_up shows %v after the side tables' rotations, want %v", got, want)
	}
	// the old storage's messages first, in order, then the new ones
	var read []int64
	for i := 0; i < 10 && len(read) < 4; i++ {
		got := ids(msgs(t, db, "pgmq.read('up', 60, 10)"))
		read = append(read, got...)
		for _, id := range got {
			if id == old[5] {
				exec(t, db, "SELECT pgmq.archive('up', $1::bigint)", id)
			} else {
				exec(t, db, "SELECT pgmq.delete('up', $1::bigint)", id)
			}
		}
	}
	if want := []int64{old[4], old[5], fresh[0], fresh[1]}; !slices.Equal(read, want) {
		t.Fatalf("reads after the upgrade took %v, want %v", read, want)
	}
	if got := viewIDs(t, db, "up"); len(got) != 0 {
		t.Fatalf("q_up shows %v with every message done", got)
	}
	if got := scalar[[]int64](t, db, "SELECT array_agg(msg_id ORDER BY msg_id) FROM pgmq.a_up"); !slices.Equal(got, []int64{old[3], old[5]}) {
		t.Fatalf("a_up holds %v, want %v", got, []int64{old[3], old[5]})
	}

	finishUpgrade(t, db, "up")
	if def := scalar[string](t, db, "SELECT pg_get_viewdef('pgmq.q_up')"); strings.Contains(def, "sluice.messages") {
		t.Fatalf("q_up still reads engine 1's storage once the upgrade finished:\n%s", def)
	}
	last := scalar[int64](t, db, "SELECT * FROM pgmq.send('up', '{}')")
	if got := viewIDs(t, db, "up"); !slices.Equal(got, []int64{last}) {
		t.Fatalf("q_up shows %v after the upgrade finished, want [%d]", got, last)
	}
	if got := ids(msgs(t, db, "pgmq.read('up', 60, 10)")); !slices.Equal(got, []int64{last}) {
		t.Fatalf("read after the upgrade finished: %v, want [%d]", got, last)
	}
	exec(t, db, "SELECT pgmq.delete('up', $1::bigint)", last)
	exec(t, db, "SELECT pgmq._rotate('up')") // (reads both storages no more)

	// purge_queue during an upgrade: both storages
	upgradeQueue(t, db, "pu")
	exec(t, db, "SELECT * FROM pgmq.send('pu', '{}')")
	if n := scalar[int64](t, db, "SELECT pgmq.purge_queue('pu')"); n != 4 {
		t.Fatalf("purge_queue during the upgrade removed %d, want 4", n)
	}
	if got := msgs(t, db, "pgmq.read('pu', 60, 10)"); len(got) != 0 {
		t.Fatalf("read after purge_queue during the upgrade: %v", ids(got))
	}
	finishUpgrade(t, db, "pu")
}

// TestUpgradeQueueOfTheLayerUnderLoad upgrades an engine 1 pgmq queue
// while two producers send and three consumers read and delete: none of
// their calls fails, every message sent is read and deleted exactly once
// (no read after its delete), and the upgrade finishes.
func TestUpgradeQueueOfTheLayerUnderLoad(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, db := oldLayerDatabase(ctx, t)
	exec(t, db, "SELECT pgmq.create('load')")
	for i := 0; i < 50; i++ {
		exec(t, db, "SELECT * FROM pgmq.send('load', '{}')")
	}
	installLayer(ctx, t, conn)

	var (
		mu       sync.Mutex
		sent     = map[int64]bool{}
		deleted  = map[int64]int{}
		stop     atomic.Bool
		sending  sync.WaitGroup
		reading  sync.WaitGroup
		failures = make(chan error, 16)
	)
	fail := func(err error) {
		select {
		case failures <- err:
		default:
		}
	}
	// (the preload was sent before: its ids are the view's)
	for _, id := range viewIDs(t, db, "load") {
		sent[id] = true
	}
	for p := 0; p < 2; p++ {
		sending.Add(1)
		go func() {
			defer sending.Done()
			for !stop.Load() {
				var id int64
				if err := db.QueryRow(ctx, "SELECT * FROM pgmq.send('load', '{}')").Scan(&id); err != nil {
					fail(fmt.Errorf("send: %w", err))
					return
				}
				mu.Lock()
				sent[id] = true
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	var idle atomic.Int64
	for c := 0; c < 3; c++ {
		reading.Add(1)
		go func() {
			defer reading.Done()
			for {
				var got []int64
				if err := db.QueryRow(ctx, "SELECT coalesce(array_agg(msg_id), '{}') FROM pgmq.read('load', 30, 5)").Scan(&got); err != nil {
					fail(fmt.Errorf("read: %w", err))
					return
				}
				if len(got) == 0 {
					if stop.Load() && idle.Add(1) > 60 {
						return
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				for _, id := range got {
					var ok bool
					if err := db.QueryRow(ctx, "SELECT pgmq.delete('load', $1::bigint)", id).Scan(&ok); err != nil {
						fail(fmt.Errorf("delete %d: %w", id, err))
						return
					}
					if !ok {
						fail(fmt.Errorf("delete %d returned false: read after its delete", id))
					}
					mu.Lock()
					deleted[id]++
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	upgradeQueue(t, db, "load")
	time.Sleep(500 * time.Millisecond)
	stop.Store(true)
	sending.Wait()
	reading.Wait()
	close(failures)
	var errs []error
	for err := range failures {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("calls failed during the upgrade: %v", err)
	}
	for id := range sent {
		if deleted[id] != 1 {
			t.Errorf("message %d was deleted %d times, want once", id, deleted[id])
		}
	}
	for id := range deleted {
		if !sent[id] {
			t.Errorf("message %d was read but not sent", id)
		}
	}
	if len(sent) < 100 {
		t.Fatalf("only %d messages were sent: the run proves little", len(sent))
	}
	finishUpgrade(t, db, "load")
	if got := viewIDs(t, db, "load"); len(got) != 0 {
		t.Fatalf("q_load shows %v with every message deleted", got)
	}
}

// TestUpgradeQueueOfTheLayerWaitsForNoViewReader: a transaction that read
// a queue's view holds it (and the storage it read) and no lock on the
// queue. sluice.upgrade_queue, which holds the queue's lock while it makes
// the view again, gives up after 500 ms with 55P03 and changes nothing,
// also when the reader then calls on the queue (no deadlock error for it);
// the upkeep that drops the old storage leaves that for a later call
// instead of waiting for the reader, so the queue's traffic goes on (also
// while the transaction of a finish left undone stays open: it released
// the queue's lock). Once the reader ends, both go through.
func TestUpgradeQueueOfTheLayerWaitsForNoViewReader(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, db := oldLayerDatabase(ctx, t)
	exec(t, db, "SELECT pgmq.create('vw')")
	a := scalar[int64](t, db, "SELECT * FROM pgmq.send('vw', '{}')")
	installLayer(ctx, t, conn)
	readView := func() func() {
		t.Helper()
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // (after a failure: else the database's drop waits)
		var n int64
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM pgmq.q_vw").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return func() {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}

	end := readView()
	if e := pgErr(t, db, "SELECT sluice.upgrade_queue('vw')"); e.Code != "55P03" || !strings.Contains(e.Message, "pgmq.q_vw") {
		t.Fatalf("upgrade_queue with the view held: %s %s, want 55P03 naming the view", e.Code, e.Message)
	}
	if e := engineOf(t, db, "vw"); e != 1 {
		t.Fatalf("the refused upgrade left the queue of engine %d, want 1", e)
	}
	end()

	// The reader calls on the queue while the upgrade waits for its view:
	// the upgrade gives up (55P03) before a deadlock is detected, and the
	// reader's call goes on.
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	var n int64
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM pgmq.q_vw").Scan(&n); err != nil {
		t.Fatal(err)
	}
	upgraded := make(chan error, 1)
	go func() {
		_, err := db.Exec(ctx, "SELECT sluice.upgrade_queue('vw')")
		upgraded <- err
	}()
	// (until the upgrade, holding the queue's lock, waits for the view)
	for deadline := time.Now().Add(10 * time.Second); !scalar[bool](t, db,
		"SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = 'pgmq.q_vw'::regclass AND NOT granted)"); {
		if time.Now().After(deadline) {
			t.Fatal("the upgrade did not come to wait for the view in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := tx.Exec(ctx, "SELECT * FROM pgmq.send('vw', '{}')"); err != nil {
		t.Fatalf("the view's reader's send while the upgrade waited: %v, want it to go on", err)
	}
	var pe *pgconn.PgError
	if err := <-upgraded; !errors.As(err, &pe) || pe.Code != "55P03" {
		t.Fatalf("upgrade_queue against a reader that then sent: %v, want 55P03", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	upgradeQueue(t, db, "vw")
	if got := ids(msgs(t, db, "pgmq.read('vw', 60, 10)")); !slices.Equal(got, []int64{a}) {
		t.Fatalf("read after the upgrade: %v, want [%d]", got, a)
	}
	exec(t, db, "SELECT pgmq.delete('vw', $1::bigint)", a)

	// A finish left undone (a reader just opened holds the old storage)
	// inside a transaction that stays open releases the queue's lock: a
	// send on the queue goes on meanwhile. (A maintain first marks the
	// group drained, so that the next one tries the drop.)
	exec(t, db, "SELECT * FROM sluice.maintain()")
	if scalar[bool](t, db, "SELECT predecessor IS NULL FROM sluice.queue WHERE name = 'vw'") {
		t.Fatal("the first maintain finished the upgrade: this test's premise is gone")
	}
	end = readView()
	mtx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mtx.Rollback(context.Background()) })
	if _, err := mtx.Exec(ctx, "SELECT * FROM sluice.maintain()"); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	var c int64
	err = db.QueryRow(sctx, "SELECT * FROM pgmq.send('vw', '{}')").Scan(&c)
	scancel()
	if err != nil {
		t.Fatalf("send while a transaction whose finish was left undone stays open: %v (its queue lock held?)", err)
	}
	if err := mtx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	end()

	end = readView()
	for i := 0; i < 5; i++ {
		mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := db.Exec(mctx, "SELECT * FROM sluice.maintain()")
		mcancel()
		if err != nil {
			t.Fatalf("sluice.maintain() with the view held: %v (waited for the reader?)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if scalar[bool](t, db, "SELECT predecessor IS NULL FROM sluice.queue WHERE name = 'vw'") {
		t.Fatal("the old storage was dropped while a transaction held what it read")
	}
	b := scalar[int64](t, db, "SELECT * FROM pgmq.send('vw', '{}')")
	if got := ids(msgs(t, db, "pgmq.read('vw', 60, 10)")); !slices.Equal(got, []int64{c, b}) {
		t.Fatalf("read while the finish waits: %v, want [%d %d]", got, c, b)
	}
	exec(t, db, "SELECT pgmq.delete('vw', $1::bigint)", c)
	exec(t, db, "SELECT pgmq.delete('vw', $1::bigint)", b)
	end()
	finishUpgrade(t, db, "vw")
}

// TestUpgradeQueueOfTheLayerShowsARedrivenDeadLetterOnce: a message that
// died in the old storage (engine 1), redriven after the upgrade into the
// new one, is in both storages: the view shows it once (the copy, which a
// read then takes), not its old row beside it.
func TestUpgradeQueueOfTheLayerShowsARedrivenDeadLetterOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, db := oldLayerDatabase(ctx, t)
	exec(t, db, "SELECT pgmq.create('dl')")
	exec(t, db, `SELECT sluice.alter_queue('dl', '{"max_attempts": 1}')`)
	m := scalar[int64](t, db, "SELECT * FROM pgmq.send('dl', '{}')")
	if !scalar[bool](t, db, `SELECT sluice.nack('dl', 'pgmq', (SELECT receipt FROM sluice.receive('dl', 'pgmq', 1)), error => 'poison')`) {
		t.Fatal("nack of the only delivery returned false")
	}
	installLayer(ctx, t, conn)
	upgradeQueue(t, db, "dl")
	if n := scalar[int64](t, db, "SELECT sluice.redrive('dl')"); n != 1 {
		t.Fatalf("redrive after the upgrade: %d, want 1", n)
	}
	if got := viewIDs(t, db, "dl"); !slices.Equal(got, []int64{m}) {
		t.Fatalf("q_dl shows %v with the dead letter redriven, want [%d] once", got, m)
	}
	if got := ids(msgs(t, db, "pgmq.read('dl', 60, 10)")); !slices.Equal(got, []int64{m}) {
		t.Fatalf("read of the redriven message: %v, want [%d]", got, m)
	}
	exec(t, db, "SELECT pgmq.delete('dl', $1::bigint)", m)
	if got := viewIDs(t, db, "dl"); len(got) != 0 {
		t.Fatalf("q_dl shows %v after the delete", got)
	}
}

// TestUpgradeQueueOfTheLayerWithAReadInFlight: a message read before the
// upgrade with a long vt holds back the new messages (docs/operations.md:
// the pause of an upgrade with messages in flight); set_vt on it by msg_id
// after the upgrade reaches its old delivery: a vt of 0 gives it back, the
// next read takes it again (read_ct 2), and then the new message.
func TestUpgradeQueueOfTheLayerWithAReadInFlight(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, db := oldLayerDatabase(ctx, t)
	exec(t, db, "SELECT pgmq.create('fl')")
	a := scalar[int64](t, db, "SELECT * FROM pgmq.send('fl', '{}')")
	if got := ids(msgs(t, db, "pgmq.read('fl', 600, 1)")); !slices.Equal(got, []int64{a}) {
		t.Fatalf("old layer read %v, want [%d]", got, a)
	}
	installLayer(ctx, t, conn)
	upgradeQueue(t, db, "fl")
	b := scalar[int64](t, db, "SELECT * FROM pgmq.send('fl', '{}')")
	if got := msgs(t, db, "pgmq.read('fl', 60, 10)"); len(got) != 0 {
		t.Fatalf("read with a message of before the upgrade in flight: %v, want none yet", ids(got))
	}
	if got := ids(msgs(t, db, "pgmq.set_vt('fl', $1::bigint, 0)", a)); !slices.Equal(got, []int64{a}) {
		t.Fatalf("set_vt of the message read before the upgrade: %v, want [%d]", got, a)
	}
	got := msgs(t, db, "pgmq.read('fl', 60, 10)")
	if len(got) != 1 || got[0].ID != a || got[0].ReadCt != 2 {
		t.Fatalf("read after set_vt 0: %+v, want message %d read a second time", got, a)
	}
	exec(t, db, "SELECT pgmq.delete('fl', $1::bigint)", a)
	if got := ids(msgs(t, db, "pgmq.read('fl', 60, 10)")); !slices.Equal(got, []int64{b}) {
		t.Fatalf("read once the old message is done: %v, want [%d]", got, b)
	}
	exec(t, db, "SELECT pgmq.delete('fl', $1::bigint)", b)
	finishUpgrade(t, db, "fl")
}
