"""Measure the Python client for `sluice-bench clients` (bench/internal/bench/clients.go).

    python bench.py MODE QUEUE N        (DATABASE_URL names the database)

MODE is one of
  send          send_batch of 100 messages, N/100 times (one producer, one connection)
  drain         receive 100, then ack them, until N are done (one consumer)
  drain-async   the same with AsyncClient
  worker        a Worker (threads, concurrency 10) with a no-op handler, until N are handled
  worker-async  an AsyncWorker (concurrency 10) with a no-op handler, until N are handled

The queue exists; for the drain and worker modes it holds N messages. Prints
one JSON line: {"mode": ..., "messages": N, "seconds": elapsed}, timing
only the work (not the interpreter's start or the pool's).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time

import sluicemq as sluice

BODY = {"pad": "x" * 60}


def send(c: sluice.Client, q: str, n: int) -> None:
    with c.pool.connection():  # warm the pool
        pass
    for _ in range(n // 100):
        c.send_batch(q, [BODY] * 100)


def drain(c: sluice.Client, q: str, n: int) -> None:
    done = 0
    while done < n:
        msgs = c.receive(q, max_messages=100)
        if msgs:
            done += c.ack(q, "default", [m.receipt for m in msgs])


async def drain_async(c: sluice.AsyncClient, q: str, n: int) -> None:
    done = 0
    while done < n:
        msgs = await c.receive(q, max_messages=100)
        if msgs:
            done += await c.ack(q, "default", [m.receipt for m in msgs])


def worker(c: sluice.Client, q: str, n: int) -> float:
    count = 0
    lock, all_done = threading.Lock(), threading.Event()
    w = sluice.Worker(c, concurrency=10)

    @w.handler(q)
    def handle(msg: sluice.Message) -> None:
        nonlocal count
        with lock:
            count += 1
            if count >= n:
                all_done.set()

    start = time.perf_counter()
    w.start()
    all_done.wait()
    elapsed = time.perf_counter() - start
    w.stop()
    return elapsed


async def worker_async(c: sluice.AsyncClient, q: str, n: int) -> float:
    count = 0
    w = sluice.AsyncWorker(c, concurrency=10)
    all_done = asyncio.Event()

    @w.handler(q)
    async def handle(msg: sluice.Message) -> None:
        nonlocal count
        count += 1
        if count >= n:
            all_done.set()

    start = time.perf_counter()
    task = asyncio.create_task(w.run(handle_signals=False))
    await all_done.wait()
    elapsed = time.perf_counter() - start
    w.stop()
    await task
    return elapsed


def main() -> None:
    mode, q, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dsn = os.environ["DATABASE_URL"]
    elapsed: float
    if mode in ("send", "drain", "worker"):
        with sluice.Client(dsn) as c:
            c.status(q)  # open a connection before timing
            start = time.perf_counter()
            if mode == "worker":
                elapsed = worker(c, q, n)
            else:
                (send if mode == "send" else drain)(c, q, n)
                elapsed = time.perf_counter() - start
    else:

        async def amain() -> float:
            async with sluice.AsyncClient(dsn) as c:
                await c.status(q)
                if mode == "worker-async":
                    return await worker_async(c, q, n)
                start = time.perf_counter()
                await drain_async(c, q, n)
                return time.perf_counter() - start

        elapsed = asyncio.run(amain())
    print(json.dumps({"mode": mode, "messages": n, "seconds": elapsed}))


if __name__ == "__main__":
    main()
