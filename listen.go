package sluice

import (
	"context"
	"time"
)

// NotifyChannel is the channel a committed send notifies, with the queue's
// name as payload (unless the queue's notify option is off).
const NotifyChannel = "sluice"

// listen holds a connection taken from the pool that LISTENs on
// NotifyChannel, and wakes the fetch loop when a notification names the
// worker's queue, until ctx is done. When the connection fails it makes a
// new one after a pause; polling covers the gap.
func (w *worker) listen(ctx context.Context) {
	pause := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := w.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		w.o.Logger.Warn("sluice: LISTEN connection failed; polling until it is back",
			"queue", w.queue, "group", w.group, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

func (w *worker) listenOnce(ctx context.Context) error {
	pc, err := w.client.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection leaves the pool: it stays in LISTEN mode and is
	// closed here.
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, sqlListen); err != nil {
		return err
	}
	// Sends may have committed while no connection listened.
	w.signal()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == w.queue {
			w.signal()
		}
	}
}
