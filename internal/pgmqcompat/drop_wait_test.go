package pgmqcompat

import (
	"testing"
	"time"
)

// pgmq.drop_queue waits for a transaction that sent to the queue and stays
// open, without holding the layer's objects meanwhile: that transaction
// goes on to read the queue's view (it waited for the drop, which waited
// for it: a deadlock) and commits, and the drop then goes through.
func TestDropQueueWaitsHoldingNoneOfTheLayer(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := ctxT(t)
	exec(t, db, "SELECT pgmq.create('dw')")
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, "SELECT * FROM pgmq.send('dw', '{}')"); err != nil {
		t.Fatal(err)
	}
	dropped := make(chan error, 1)
	go func() {
		var ok bool
		err := db.QueryRow(ctx, "SELECT pgmq.drop_queue('dw')").Scan(&ok)
		if err == nil && !ok {
			t.Error("pgmq.drop_queue('dw') returned false")
		}
		dropped <- err
	}()
	time.Sleep(1500 * time.Millisecond) // (the drop waits for tx)
	var n int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM pgmq.q_dw").Scan(&n); err != nil {
		t.Fatalf("the sender's read of the view while the drop waited: %v", err)
	}
	if n != 1 {
		t.Fatalf("the sender's read of the view: %d rows, want its message", n)
	}
	select {
	case err := <-dropped:
		t.Fatalf("pgmq.drop_queue returned (%v) while the sender was open", err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-dropped; err != nil {
		t.Fatalf("pgmq.drop_queue once the sender committed: %v", err)
	}
	if scalar[bool](t, db, "SELECT to_regclass('pgmq.q_dw') IS NOT NULL OR EXISTS (SELECT 1 FROM sluice.queue WHERE name = 'dw')") {
		t.Fatal("pgmq.drop_queue left the view or the sluice queue")
	}
}
