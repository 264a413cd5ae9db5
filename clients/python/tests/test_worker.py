"""Worker and AsyncWorker: delivery, retries, order, heartbeats, shutdown and crashes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import sluicemq as sluice

HERE = Path(__file__).resolve().parent


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout}s: {what}")
        time.sleep(0.02)


def idle(client: sluice.Client, queue: str) -> bool:
    """Nothing left to do in the group: ready, delayed (retries) and in flight all 0."""
    st = client.status(queue)[0]
    return st.ready == st.delayed == st.in_flight == st.lag == 0


def retried_and_idle(client: sluice.Client, queue: str, table: str, n: int) -> bool:
    """The transactional handler tests' end: n second attempts wrote their
    row, and the group is idle. (Status alone read idle for a moment between
    the nacks of the first attempts and their retries, now and then.)"""
    with client.pool.connection() as conn:
        row = conn.execute(f"SELECT count(*) FROM {table} WHERE attempt = 2").fetchone()
    return row is not None and row[0] == n and idle(client, queue)


@contextmanager
def running(worker: sluice.Worker) -> Iterator[sluice.Worker]:
    t = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
    t.start()
    try:
        yield worker
    finally:
        worker.stop()
        t.join(30)
        assert not t.is_alive()


@contextmanager
def running_async(dsn: str, setup: Callable[[sluice.AsyncWorker], None], **kw: Any) -> Iterator[sluice.AsyncWorker]:
    """Runs an AsyncWorker on a loop of its own in a thread."""
    loop = asyncio.new_event_loop()
    client = sluice.AsyncClient(dsn)
    loop.run_until_complete(client.open())
    worker = sluice.AsyncWorker(client, **kw)
    setup(worker)
    fut = asyncio.run_coroutine_threadsafe(worker.run(handle_signals=False), loop)
    t = threading.Thread(target=loop.run_forever)
    t.start()
    try:
        yield worker
    finally:
        loop.call_soon_threadsafe(worker.stop)
        fut.result(30)
        asyncio.run_coroutine_threadsafe(client.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
        loop.close()


def test_worker_acks_retries_with_error_text_and_dead_letters(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue, {"max_attempts": 2, "backoff_base": 0.1})
    done: list[Any] = []
    worker = sluice.Worker(client, concurrency=4)

    @worker.handler(queue)
    def handle(msg: sluice.Message) -> None:
        if msg.body == "bad":
            raise ValueError(f"cannot handle attempt {msg.attempt}")
        done.append(msg.body)

    client.send_batch(queue, [*range(30), "bad"])
    with running(worker):
        wait_until(lambda: idle(client, queue) and client.status(queue)[0].dead == 1, 10, "all handled")
    assert sorted(done) == list(range(30))
    (dl,) = client.dead_letters(queue)
    assert dl.body == "bad" and dl.attempts == 2 and dl.error == "ValueError: cannot handle attempt 2"


def test_worker_keeps_key_order_and_stops_a_run_at_the_first_failure(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue, {"backoff_base": 0.1})
    seen: list[tuple[str, int, int]] = []
    lock = threading.Lock()
    worker = sluice.Worker(client, concurrency=8)

    @worker.handler(queue)
    def handle(msg: sluice.Message) -> None:
        with lock:
            seen.append((msg.key or "", msg.body, msg.attempt))
        if msg.body == 3 and msg.attempt == 1:
            raise RuntimeError("fail once")
        time.sleep(0.01)

    keys = ["a", "b"] * 10
    bodies = [i // 2 for i in range(20)]  # a: 0..9, b: 0..9
    client.send_batch(queue, bodies, keys=keys)
    with running(worker):
        wait_until(lambda: idle(client, queue), 10, "all handled")
    for k in "ab":
        mine = [(b, a) for key, b, a in seen if key == k]
        ok = [b for b, a in mine if not (b == 3 and a == 1)]
        assert ok == list(range(10)), f"key {k}: {mine}"
        # After the failure of 3 nothing later of the key ran before its retry.
        fail = mine.index((3, 1))
        assert mine[fail + 1][0] == 3, f"key {k}: {mine}"


def test_heartbeat_keeps_a_message_past_its_lease(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue)
    calls: list[int] = []
    worker = sluice.Worker(client)

    @worker.handler(queue, lease=1, heartbeat=0.25)
    def handle(msg: sluice.Message) -> None:
        calls.append(msg.attempt)
        time.sleep(2.5)

    client.send(queue, "slow")
    with running(worker):
        wait_until(lambda: calls == [1], 5, "handler started")
        time.sleep(1.5)  # past the first lease
        assert client.receive(queue) == []  # still leased: renewed
        wait_until(lambda: idle(client, queue), 5, "acked")
    assert calls == [1]


def test_stop_lets_a_running_handler_finish(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue)
    started, finished = threading.Event(), threading.Event()
    worker = sluice.Worker(client, drain_timeout=5)

    @worker.handler(queue)
    def handle(msg: sluice.Message) -> None:
        started.set()
        time.sleep(0.8)
        finished.set()

    client.send(queue, "x")
    with running(worker):
        assert started.wait(5)
    assert finished.is_set()
    st = client.status(queue)[0]
    assert (st.lag, st.in_flight) == (0, 0)


def test_stop_after_the_drain_timeout_releases_the_message(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue)  # lease 30 s: a release, not an expiry, brings it back
    started, go_on, finished = threading.Event(), threading.Event(), threading.Event()
    worker = sluice.Worker(client, drain_timeout=0.3)

    @worker.handler(queue)
    def handle(msg: sluice.Message) -> None:
        started.set()
        go_on.wait(20)
        finished.set()

    client.send(queue, "long")
    with running(worker):
        assert started.wait(5)
    assert not finished.is_set()  # stop did not wait for the handler
    (m,) = client.receive(queue)
    assert m.attempt == 2
    go_on.set()  # the abandoned handler returns: its outcome is ignored
    assert finished.wait(5)
    time.sleep(0.2)
    assert client.ack(queue, "default", [m.receipt]) == 1


def test_transactional_handler_commits_its_writes_with_the_ack(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue, {"backoff_base": 0.1})
    table = "effects_" + queue
    with client.pool.connection() as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint, attempt int)")
    worker = sluice.Worker(client)

    @worker.handler(queue, transaction=True)
    def handle(msg: sluice.Message, conn: Any) -> None:
        conn.execute(f"INSERT INTO {table} VALUES (%s, %s)", (msg.id, msg.attempt))
        if msg.attempt == 1:
            raise RuntimeError("roll my insert back")

    ids = client.send_batch(queue, [1, 2, 3])
    with running(worker):
        wait_until(lambda: retried_and_idle(client, queue, table, len(ids)), 10, "all handled")
    with client.pool.connection() as conn:
        rows = conn.execute(f"SELECT id, attempt FROM {table} ORDER BY id").fetchall()
        conn.execute(f"DROP TABLE {table}")
    assert rows == [(i, 2) for i in ids]


def test_worker_wakes_on_notify(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue)
    got = threading.Event()
    worker = sluice.Worker(client, poll_interval=30)

    @worker.handler(queue)
    def handle(msg: sluice.Message) -> None:
        got.set()

    with running(worker):
        time.sleep(1.5)  # past the hot polling period
        client.send(queue, "ping")
        assert got.wait(3), "no wake-up within 3 s with a 30 s poll interval"


def test_worker_fails_on_a_missing_group(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue)
    worker = sluice.Worker(client)
    worker.handler(queue, "nobody")(lambda m: None)
    with pytest.raises(sluice.GroupNotFound):
        worker.run(handle_signals=False)


def test_async_worker(dsn: str, client: sluice.Client, queue: str) -> None:
    client.create_queue(queue, {"max_attempts": 2, "backoff_base": 0.1})
    done: list[Any] = []

    def setup(w: sluice.AsyncWorker) -> None:
        @w.handler(queue, lease=1, heartbeat=0.25)
        async def handle(msg: sluice.Message) -> None:
            if msg.body == "bad":
                raise ValueError("async failure")
            if msg.body == "slow":
                await asyncio.sleep(1.8)  # past the lease: heartbeats keep it
            done.append((msg.body, msg.attempt))

    client.send_batch(queue, [*range(20), "bad", "slow"])
    with running_async(dsn, setup, concurrency=5):
        wait_until(lambda: idle(client, queue), 10, "all handled")
    assert sorted(b for b, _ in done if b != "slow") == list(range(20))
    assert ("slow", 1) in done and ("slow", 2) not in done
    (dl,) = client.dead_letters(queue)
    assert dl.error == "ValueError: async failure"


def test_async_worker_cancels_and_releases_after_the_drain_timeout(dsn: str, client: sluice.Client, queue: str) -> None:
    client.create_queue(queue)
    cancelled = threading.Event()

    def setup(w: sluice.AsyncWorker) -> None:
        @w.handler(queue)
        async def handle(msg: sluice.Message) -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

    client.send(queue, "long")
    with running_async(dsn, setup, drain_timeout=0.3):
        wait_until(lambda: client.status(queue)[0].in_flight == 1, 5, "leased")
    assert cancelled.is_set()
    (m,) = client.receive(queue)
    assert m.attempt == 2


def spawn(dsn: str, queue: str, log: Path, mode: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, str(HERE / "worker_proc.py"), dsn, queue, str(log), mode], env=env)
    wait_until(lambda: log.exists() and "ready" in log.read_text(), 20, "worker process ready")
    return p


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_worker_killed_with_sigkill_loses_nothing(dsn: str, client: sluice.Client, queue: str, tmp_path: Path, mode: str) -> None:
    client.create_queue(queue)
    log = tmp_path / "log"
    ids = client.send_batch(queue, [{"sleep": 0.05}] * 10 + [{"sleep": 60}] * 2)
    p = spawn(dsn, queue, log, mode)
    try:
        long = [f"start {i} 1" for i in ids[-2:]]
        wait_until(lambda: all(x in log.read_text() for x in long), 20, "both long messages started")
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    finally:
        p.kill()
    lines = log.read_text().splitlines()
    finished = {int(line.split()[1]) for line in lines if line.startswith("done")}
    # The long messages were in flight: they come back once their lease (1 s) ends.
    time.sleep(1.3)
    again = client.receive(queue, max_messages=100)
    client.ack(queue, "default", [m.receipt for m in again])
    attempts = {m.id: m.attempt for m in again}
    assert attempts.get(ids[-2]) == 2 and attempts.get(ids[-1]) == 2, attempts
    assert finished | set(attempts) == set(ids), "a message was lost"
    assert idle(client, queue)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigterm_mid_handler_finishes_it_and_exits(dsn: str, client: sluice.Client, queue: str, tmp_path: Path, mode: str) -> None:
    client.create_queue(queue)
    log = tmp_path / "log"
    (mid,) = client.send_batch(queue, [{"sleep": 1.0}])
    p = spawn(dsn, queue, log, mode)
    try:
        wait_until(lambda: "start" in log.read_text(), 10, "handler started")
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0
    finally:
        p.kill()
    assert f"done {mid}" in log.read_text()
    st = client.status(queue)[0]
    assert (st.lag, st.in_flight) == (0, 0)
    assert client.receive(queue) == []


def test_worker_without_listen_polls(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue)
    got = threading.Event()
    worker = sluice.Worker(client, listen=False, poll_interval=0.1)

    @worker.handler(queue)
    def handle(msg: sluice.Message) -> None:
        got.set()

    with running(worker):
        time.sleep(1.2)
        client.send(queue, "ping")
        assert got.wait(3)


def test_async_worker_transactional_handler(dsn: str, client: sluice.Client, queue: str) -> None:
    client.create_queue(queue, {"backoff_base": 0.1})
    table = "effects_" + queue
    with client.pool.connection() as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint, attempt int)")

    def setup(w: sluice.AsyncWorker) -> None:
        @w.handler(queue, transaction=True)
        async def handle(msg: sluice.Message, conn: Any) -> None:
            await conn.execute(f"INSERT INTO {table} VALUES (%s, %s)", (msg.id, msg.attempt))
            if msg.attempt == 1:
                raise RuntimeError("roll my insert back")

    ids = client.send_batch(queue, [1, 2])
    with running_async(dsn, setup):
        wait_until(lambda: retried_and_idle(client, queue, table, len(ids)), 10, "all handled")
    with client.pool.connection() as conn:
        rows = conn.execute(f"SELECT id, attempt FROM {table} ORDER BY id").fetchall()
        conn.execute(f"DROP TABLE {table}")
    assert rows == [(i, 2) for i in ids]
