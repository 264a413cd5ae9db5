"""The Python client's runner of the shared worker behaviour vectors.

Reads every file of test/worker/ (format: test/worker/README.md) and runs
it with the thread Worker and with the AsyncWorker: the vector's messages go
to a fresh queue, the worker runs a handler that follows each message's
script, the runner stops it as the vector says and checks what the handler
saw and what the queue holds. The queue is created with raw SQL (setup, not
what is checked).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import sluicemq as sluice

VECTORS = Path(__file__).resolve().parents[3] / "test" / "worker"
FILES = sorted(VECTORS.glob("*.json"))
DURATIONS = {"lease", "backoff_base", "backoff_max", "retention", "rotate_interval", "dedup_window"}


def test_worker_vectors_found() -> None:
    assert FILES, f"no vectors in {VECTORS}"


class Log:
    """What the handler saw, by body."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: dict[str, list[int]] = {}
        self.finished: dict[str, int] = {}
        self.started = 0
        self.done = 0

    def begin(self, msg: sluice.Message) -> int:
        with self.lock:
            self.runs.setdefault(msg.body, []).append(msg.attempt)
            self.started += 1
            return len(self.runs[msg.body])

    def end(self, body: str) -> None:
        with self.lock:
            self.finished[body] = self.finished.get(body, 0) + 1
            self.done += 1


def action(v: dict[str, Any], body: str, run: int) -> dict[str, Any]:
    script: list[dict[str, Any]] = next(m["script"] for m in v["messages"] if m["body"] == body)
    return script[min(run, len(script)) - 1] if script else {}


def setup_queue(client: sluice.Client, v: dict[str, Any]) -> str:
    queue = "wv_" + uuid.uuid4().hex[:12]
    opts = {k: f"{x} seconds" if k in DURATIONS else x for k, x in v["queue"].items()}
    with client.pool.connection() as c:
        c.execute("SELECT sluice.create_queue(%s, %s::jsonb)", (queue, json.dumps(opts)))
    for m in v["messages"]:
        client.send(queue, m["body"])
    return queue


def route_options(v: dict[str, Any]) -> dict[str, Any]:
    w = v["worker"]
    return {k: w[src] for k, src in (("lease", "lease"), ("heartbeat", "heartbeat_interval")) if src in w}


def worker_options(v: dict[str, Any]) -> dict[str, Any]:
    w = v["worker"]
    keys = ("concurrency", "poll_interval", "drain_timeout")
    return {k: w[k] for k in keys if k in w} | {"on_handler_error": lambda f: None}


def wait_for_stop(v: dict[str, Any], log: Log, alive: Callable[[], bool]) -> None:
    stop = v["stop"]
    deadline = time.monotonic() + 20
    while True:
        with log.lock:
            if log.started >= stop.get("started", 1 << 30) or log.done >= stop.get("finished", 1 << 30):
                return
        assert alive(), "the worker returned before the stop"
        if time.monotonic() > deadline:
            raise AssertionError(f"the stop condition {stop} did not hold within 20 s; runs {log.runs}")
        time.sleep(0.01)


def run_sync(client: sluice.Client, v: dict[str, Any], queue: str, log: Log) -> None:
    worker = sluice.Worker(client, **worker_options(v))

    @worker.handler(queue, **route_options(v))
    def handle(msg: sluice.Message) -> None:
        run = log.begin(msg)
        try:
            a = action(v, msg.body, run)
            if a.get("sleep"):
                time.sleep(a["sleep"])  # a thread cannot be told to stop
            if "fail" in a:
                raise RuntimeError(a["fail"])
        finally:
            log.end(msg.body)

    t = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
    t.start()
    try:
        wait_for_stop(v, log, t.is_alive)
    finally:
        worker.stop()
        t.join(v["worker"].get("drain_timeout", 10) + 10)
    assert not t.is_alive(), "the worker did not return within the drain timeout and 10 s"
    assert worker.error is None, worker.error


def run_async(dsn: str, v: dict[str, Any], queue: str, log: Log) -> None:
    async def main() -> None:
        async with sluice.AsyncClient(dsn) as client:
            worker = sluice.AsyncWorker(client, **worker_options(v))

            @worker.handler(queue, **route_options(v))
            async def handle(msg: sluice.Message) -> None:
                run = log.begin(msg)
                try:
                    a = action(v, msg.body, run)
                    if a.get("sleep"):
                        await asyncio.sleep(a["sleep"])  # cancelled past the drain timeout
                    if "fail" in a:
                        raise RuntimeError(a["fail"])
                finally:
                    log.end(msg.body)

            task = asyncio.create_task(worker.run(handle_signals=False))
            try:
                await asyncio.to_thread(wait_for_stop, v, log, lambda: not task.done())
            finally:
                worker.stop()
                await asyncio.wait_for(task, v["worker"].get("drain_timeout", 10) + 10)

    asyncio.run(main())


def check(client: sluice.Client, v: dict[str, Any], queue: str, log: Log) -> None:
    e = v["expect"]
    if "runs" in e:
        assert log.runs == e["runs"], f"runs with attempts {log.runs}, want {e['runs']}"
    for body, want in e.get("finished", {}).items():
        assert log.finished.get(body, 0) == want, f"message {body}: {log.finished.get(body, 0)} runs finished, want {want}"
    if "status" in e:
        st = next(s for s in client.status(queue) if s.group_name == "default")
        got = {"ready": st.ready, "delayed": st.delayed, "in_flight": st.in_flight, "dead": st.dead, "lag": st.lag}
        for k, want in e["status"].items():
            assert got[k] == want, f"status {k} = {got[k]}, want {want} ({st})"
    if "dead_letters" in e:
        dls = client.dead_letters(queue)
        assert len(dls) == len(e["dead_letters"]), dls
        for d, want in zip(dls, e["dead_letters"]):
            assert (d.body, d.attempts) == (want["body"], want["attempts"]), d
            assert want["error"] in (d.error or ""), d


@pytest.mark.parametrize("runtime", ["Worker", "AsyncWorker"])
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_worker_vector(path: Path, runtime: str, client: sluice.Client, dsn: str) -> None:
    v = json.loads(path.read_text())
    assert v["name"] == path.stem
    queue = setup_queue(client, v)
    log = Log()
    try:
        if runtime == "Worker":
            run_sync(client, v, queue, log)
        else:
            run_async(dsn, v, queue, log)
        check(client, v, queue, log)
    finally:
        client.drop_queue(queue)
