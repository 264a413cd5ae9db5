package sluice

import "github.com/sluicemq/sluice/internal/notifier"

// NotifyChannel is the channel a committed send notifies, with the queue's
// name as payload (unless the queue's notify option is off).
const NotifyChannel = "sluice"

// listen subscribes the worker to its client's notifier, which holds the
// client's one LISTEN connection (shared by all its consumers), until the
// returned function is called: a notification naming the worker's queue
// wakes the fetch loop, and so does the start of listening (on the first
// connection or a new one after a failure), since sends may have committed
// while nobody listened. While the connection is down, polling covers the
// gap.
func (w *worker) listen() (unlisten func()) {
	sub := w.client.notifier.Listen(NotifyChannel, func(ev notifier.Event) {
		switch ev.Kind {
		case notifier.Notified:
			if ev.Payload == w.queue {
				w.signal()
			}
		case notifier.Listening:
			w.signal()
		case notifier.Lost:
			w.o.Logger.Warn("sluice: LISTEN connection failed; polling until it is back",
				"queue", w.queue, "group", w.group, "error", ev.Err)
		}
	})
	return sub.Unlisten
}
