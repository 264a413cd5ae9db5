"""A worker process for the crash and SIGTERM tests.

    python worker_proc.py DSN QUEUE LOG MODE

Handles QUEUE with a sync Worker (MODE sync) or an AsyncWorker (MODE async):
each message's handler appends "start <id> <attempt>" to LOG, sleeps
body["sleep"] seconds (default 0), appends "done <id>", and returns. It
runs until SIGTERM.
"""

from __future__ import annotations

import asyncio
import sys
import time

import sluicemq as sluice


def note(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()


def main() -> None:
    dsn, queue, log, mode = sys.argv[1:5]
    if mode == "sync":
        with sluice.Client(dsn) as client:
            worker = sluice.Worker(client, concurrency=2, drain_timeout=5)

            @worker.handler(queue, lease=1, heartbeat=0.3)
            def handle(msg: sluice.Message) -> None:
                note(log, f"start {msg.id} {msg.attempt}")
                time.sleep(msg.body.get("sleep", 0))
                note(log, f"done {msg.id}")

            note(log, "ready")
            worker.run()
        return

    async def amain() -> None:
        async with sluice.AsyncClient(dsn) as client:
            worker = sluice.AsyncWorker(client, concurrency=2, drain_timeout=5)

            @worker.handler(queue, lease=1, heartbeat=0.3)
            async def handle(msg: sluice.Message) -> None:
                note(log, f"start {msg.id} {msg.attempt}")
                await asyncio.sleep(msg.body.get("sleep", 0))
                note(log, f"done {msg.id}")

            note(log, "ready")
            await worker.run()

    asyncio.run(amain())


if __name__ == "__main__":
    main()
