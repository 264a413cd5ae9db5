"""Handler failures are visible: the on_handler_error hook of Worker and
AsyncWorker, and by default a WARNING on the ``sluice`` logger."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

import sluicemq as sluice
from test_worker import idle, running, running_async, wait_until


def _check(failures: list[sluice.HandlerFailure], queue: str, msg_id: int) -> None:
    assert [(f.attempt, f.dead_lettered, f.retried) for f in failures] == [(1, False, True), (2, True, False)]
    for f in failures:
        assert (f.queue, f.group, f.message.id, f.max_attempts) == (queue, "default", msg_id, 2)
        assert isinstance(f.error, ValueError) and str(f.error) == "no such customer"


def test_worker_reports_handler_failures(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue, {"max_attempts": 2, "backoff_base": 0.05})
    failures: list[sluice.HandlerFailure] = []
    lock = threading.Lock()

    def hook(f: sluice.HandlerFailure) -> None:
        with lock:
            failures.append(f)

    worker = sluice.Worker(client, on_handler_error=hook)

    @worker.handler(queue)
    def handle(msg: sluice.Message) -> None:
        raise ValueError("no such customer")

    msg_id = client.send(queue, "secret body")
    with running(worker):
        wait_until(lambda: len(failures) == 2 and idle(client, queue), 10, "two failures")
    _check(failures, queue, msg_id)


def test_async_worker_reports_handler_failures(dsn: str, client: sluice.Client, queue: str) -> None:
    client.create_queue(queue, {"max_attempts": 2, "backoff_base": 0.05})
    failures: list[sluice.HandlerFailure] = []

    def setup(w: sluice.AsyncWorker) -> None:
        @w.handler(queue)
        async def handle(msg: sluice.Message) -> None:
            await asyncio.sleep(0)
            raise ValueError("no such customer")

    msg_id = client.send(queue, "secret body")
    with running_async(dsn, setup, on_handler_error=failures.append):
        wait_until(lambda: len(failures) == 2 and idle(client, queue), 10, "two failures")
    _check(failures, queue, msg_id)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sluicemq" and r.levelno == logging.WARNING]


def test_worker_logs_handler_failures_by_default(
    client: sluice.Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sluicemq")
    client.create_queue(queue, {"max_attempts": 2, "backoff_base": 0.05})
    worker = sluice.Worker(client)

    @worker.handler(queue)
    def handle(msg: sluice.Message) -> None:
        raise ValueError("no such customer")

    msg_id = client.send(queue, "secret body")
    with running(worker):
        wait_until(lambda: client.status(queue)[0].dead == 1 and len(_warnings(caplog)) == 2, 10, "two warnings")
    assert _warnings(caplog) == [
        f"sluice: handler of {queue}/default failed on message {msg_id}, attempt 1 of 2; retried: "
        "ValueError: no such customer",
        f"sluice: handler of {queue}/default failed on message {msg_id}, attempt 2 of 2; dead-lettered: "
        "ValueError: no such customer",
    ]
    assert "secret body" not in caplog.text


def test_async_worker_logs_handler_failures_by_default(
    dsn: str, client: sluice.Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sluicemq")
    client.create_queue(queue, {"max_attempts": 1})

    def setup(w: sluice.AsyncWorker) -> None:
        @w.handler(queue)
        async def handle(msg: sluice.Message) -> None:
            raise ValueError("no such customer")

    msg_id = client.send(queue, "secret body")
    with running_async(dsn, setup):
        wait_until(lambda: client.status(queue)[0].dead == 1 and len(_warnings(caplog)) == 1, 10, "a warning")
    assert _warnings(caplog) == [
        f"sluice: handler of {queue}/default failed on message {msg_id}, attempt 1 of 1; dead-lettered: "
        "ValueError: no such customer"
    ]
    assert "secret body" not in caplog.text
