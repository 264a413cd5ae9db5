"""A Python worker for TestMigrateUnderLoad (cmd/sluice/cli/migrate_load_test.go).

    DATABASE_URL=... python migrate_load_worker.py QUEUE...

Runs a sluicemq.Worker (threads) on group default of each QUEUE and prints
"QUEUE ID" on stdout for each message its handler ran (the worker acks it
when the handler returns). Prints "ready" once started; stops gracefully on
SIGTERM. Everything the worker logs at WARNING or above (a failed receive,
ack or extend, a failed handler) goes to stderr: the test wants none.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

import sluicemq

logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                    format="python worker %(levelname)s %(name)s: %(message)s")
out = threading.Lock()


def route(w: sluicemq.Worker, q: str) -> None:
    @w.handler(q)
    def handle(msg: sluicemq.Message) -> None:
        with out:
            sys.stdout.write(f"{q} {msg.id}\n")
            sys.stdout.flush()


def main() -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with sluicemq.Client(os.environ["DATABASE_URL"]) as c:
        w = sluicemq.Worker(c, concurrency=4)
        for q in sys.argv[1:]:
            route(w, q)
        w.start()
        with out:
            print("ready", flush=True)
        while not stop.wait(0.1):
            pass
        w.stop()
        if w.error is not None:
            print(f"python worker stopped by an error: {w.error!r}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
