"""Acks are durable by default, in the clients and the workers; asynchronous commit is an
explicit opt-in (``durable=False``, ``async_commit_acks=True``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

import sluicemq as sluice
from test_worker import idle, running, running_async, wait_until


def _sync_commit_after_ack(client: sluice.Client, queue: str, **kw: Any) -> str:
    client.send(queue, 1)
    (m,) = client.receive(queue)
    with client.transaction() as conn:
        assert client.ack(queue, "default", [m.receipt], conn=conn, **kw) == 1
        row = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
        assert row is not None
        return str(row[0])


def test_ack_is_durable_unless_asked(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue)
    assert _sync_commit_after_ack(client, queue) == "on"
    assert _sync_commit_after_ack(client, queue, durable=False) == "off"


class Spy:
    """Records how a client acknowledges: the durable flag of each ack call, and the
    receipts that receives carried."""

    def __init__(self, c: Any) -> None:
        self.durable: list[bool] = []
        self.ride = 0
        ack, receive = c.ack, c.receive

        def spy_ack(*a: Any, **kw: Any) -> Any:
            if kw.get("conn") is None:
                self.durable.append(kw.get("durable", True))
            return ack(*a, **kw)

        def spy_receive(*a: Any, **kw: Any) -> Any:
            self.ride += len(kw.get("ack") or [])
            return receive(*a, **kw)

        c.ack, c.receive = spy_ack, spy_receive


def test_worker_acks_are_durable_by_default(client: sluice.Client, queue: str, dsn: str) -> None:
    client.create_queue(queue)
    for async_acks in (False, True):
        c = sluice.Client(dsn)
        spy = Spy(c)
        worker = sluice.Worker(c, concurrency=4, async_commit_acks=async_acks)

        @worker.handler(queue)
        def handle(msg: sluice.Message) -> None:
            pass

        client.send_batch(queue, list(range(40)))
        with running(worker):
            wait_until(lambda: idle(client, queue), 10, "all handled")
        c.close()
        if async_acks:
            assert True not in spy.durable, (spy.durable, spy.ride)
        else:
            assert spy.durable and all(spy.durable) and spy.ride == 0, (spy.durable, spy.ride)


def test_async_worker_acks_are_durable_by_default(client: sluice.Client, queue: str, dsn: str) -> None:
    client.create_queue(queue)
    for async_acks in (False, True):
        spies: list[Spy] = []

        def setup(w: sluice.AsyncWorker) -> None:
            spies.append(Spy(w.client))

            @w.handler(queue)
            async def handle(msg: sluice.Message) -> None:
                pass

        client.send_batch(queue, list(range(40)))
        with running_async(dsn, setup, concurrency=4, async_commit_acks=async_acks):
            wait_until(lambda: idle(client, queue), 10, "all handled")
        (spy,) = spies
        if async_acks:
            assert True not in spy.durable, (spy.durable, spy.ride)
        else:
            assert spy.durable and all(spy.durable) and spy.ride == 0, (spy.durable, spy.ride)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_worker_receives_while_a_durable_ack_waits(client: sluice.Client, queue: str, dsn: str, mode: str) -> None:
    """The worker's durable ack of the first message waits for another transaction,
    which completed that message and stays open; the second message must be received
    and handled meanwhile (the receives do not wait for the acks)."""
    client.create_queue(queue)
    first = client.send(queue, 1)
    handled: list[int] = []
    blocker = psycopg.connect(dsn)  # not autocommit: its transaction stays open

    def complete_first_and_send(receipt: str) -> None:
        # Completes the first message in a transaction left open: the
        # worker's own ack of it then waits for that transaction's row lock.
        blocker.execute("SELECT sluice.ack(%s, 'default', ARRAY[%s])", (queue, receipt))
        client.send(queue, 2)

    def blocked() -> bool:
        """A backend (the worker's ack) waits for the blocker's transaction."""
        with client.pool.connection() as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (blocker.info.backend_pid,),
            ).fetchone()
        return row is not None and row[0] > 0

    @contextmanager
    def consuming() -> Iterator[None]:
        kw: dict[str, Any] = {"concurrency": 1, "poll_interval": 0.02}
        if mode == "sync":
            worker = sluice.Worker(client, **kw)

            @worker.handler(queue)
            def handle(msg: sluice.Message) -> None:
                if msg.id == first:
                    complete_first_and_send(msg.receipt)
                handled.append(msg.id)

            with running(worker):
                yield
        else:

            def setup(w: sluice.AsyncWorker) -> None:
                @w.handler(queue)
                async def handle(msg: sluice.Message) -> None:
                    if msg.id == first:
                        await asyncio.to_thread(complete_first_and_send, msg.receipt)
                    handled.append(msg.id)

            with running_async(dsn, setup, **kw):
                yield

    try:
        with consuming():
            try:
                wait_until(lambda: len(handled) == 2, 5, "the second message handled while the first one's ack waited")
                wait_until(blocked, 5, "the worker's ack of the first message waits for the blocker")
                assert blocker.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            finally:
                blocker.rollback()  # the worker's ack of the first message goes through
            wait_until(lambda: idle(client, queue), 10, "both messages acknowledged once the blocker ended")
    finally:
        blocker.close()
    assert len(handled) == 2 and handled[0] == first, handled
