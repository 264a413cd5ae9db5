"""Acks are durable by default, in the clients and the workers; asynchronous commit is an
explicit opt-in (``durable=False``, ``async_commit_acks=True``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

import sluicemq as sluice
from sluicemq._routes import HOT_PERIOD
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


@contextmanager
def consuming(mode: str, client: sluice.Client, dsn: str, queue: str, on_message: Any, **kw: Any) -> Iterator[None]:
    """Runs a Worker (``mode`` "sync") or an AsyncWorker ("async") whose handler calls
    ``on_message(msg)`` (on a thread of its own, for the AsyncWorker)."""
    if mode == "sync":
        worker = sluice.Worker(client, **kw)
        worker.handler(queue)(on_message)
        with running(worker):
            yield
    else:

        def setup(w: sluice.AsyncWorker) -> None:
            @w.handler(queue)
            async def handle(msg: sluice.Message) -> None:
                await asyncio.to_thread(on_message, msg)

        with running_async(dsn, setup, **kw):
            yield


def blocking(client: sluice.Client, blocker: psycopg.Connection[Any]) -> bool:
    """A backend (the worker's ack) waits for the blocker's transaction."""
    with client.pool.connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
            (blocker.info.backend_pid,),
        ).fetchone()
    return row is not None and row[0] > 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_worker_receives_while_a_durable_ack_waits(client: sluice.Client, queue: str, dsn: str, mode: str) -> None:
    """The worker's durable ack of the first message waits for another transaction,
    which completed that message and stays open; the second message must be received
    and handled meanwhile (the receives do not wait for the acks)."""
    client.create_queue(queue)
    first = client.send(queue, 1)
    handled: list[int] = []
    blocker = psycopg.connect(dsn)  # not autocommit: its transaction stays open

    def handle(msg: sluice.Message) -> None:
        if msg.id == first:
            # Completes the first message in a transaction left open: the
            # worker's own ack of it then waits for that transaction's row lock.
            blocker.execute("SELECT sluice.ack(%s, 'default', ARRAY[%s])", (queue, msg.receipt))
            client.send(queue, 2)
        handled.append(msg.id)

    try:
        with consuming(mode, client, dsn, queue, handle, concurrency=1, poll_interval=0.02):
            try:
                wait_until(lambda: len(handled) == 2, 5, "the second message handled while the first one's ack waited")
                wait_until(lambda: blocking(client, blocker), 5, "the worker's ack of the first message waits for the blocker")
                assert blocker.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            finally:
                blocker.rollback()  # the worker's ack of the first message goes through
            wait_until(lambda: idle(client, queue), 10, "both messages acknowledged once the blocker ended")
    finally:
        blocker.close()
    assert len(handled) == 2 and handled[0] == first, handled


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_worker_receives_a_keys_next_message_once_its_ack_commits(
    client: sluice.Client, queue: str, dsn: str, mode: str
) -> None:
    """The next message of a key becomes receivable when the ack of the one before
    commits: the acker then wakes the fetch loop, which otherwise, without LISTEN,
    would wait for its 30 s poll interval."""
    client.create_queue(queue)
    first, second = client.send_batch(queue, [1, 2], keys=["k", "k"])
    handled: list[int] = []
    blocker = psycopg.connect(dsn)  # not autocommit: its transaction stays open

    def handle(msg: sluice.Message) -> None:
        if msg.id == first:
            # The worker's ack of it waits for this transaction, ended below.
            blocker.execute("SELECT sluice.ack(%s, 'default', ARRAY[%s])", (queue, msg.receipt))
        handled.append(msg.id)

    kw: dict[str, Any] = {"concurrency": 1, "poll_interval": 30, "listen": False}
    try:
        with consuming(mode, client, dsn, queue, handle, **kw):
            try:
                wait_until(lambda: blocking(client, blocker), 5, "the worker's ack of the first message waits for the blocker")
                time.sleep(HOT_PERIOD + 0.3)  # the fetch loop's empty receives now wait 30 s
                assert handled == [first]  # the second waits for the first one's ack
            finally:
                blocker.rollback()  # the worker's ack of the first message goes through
            wait_until(lambda: len(handled) == 2, 5, "the key's second message handled once the first one's ack committed")
            wait_until(lambda: idle(client, queue), 5, "both messages acknowledged")
    finally:
        blocker.close()
    assert handled == [first, second]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("case", ["transaction", "dead letter"])
def test_worker_takes_a_keys_next_message_once_the_earlier_is_done(
    client: sluice.Client, queue: str, dsn: str, mode: str, case: str
) -> None:
    """With a slot free, the fetch loop waits for its poll (30 s here, once the hot
    polls after the last message are over); the key's next message must be received
    as soon as the earlier one is done: acked in the handler's transaction (a
    transaction route), or given back as a dead letter. (Only an ack sent by the
    acker woke the loop.)"""
    client.create_queue(queue, {"max_attempts": 1})
    (first,) = client.send_batch(queue, [1], keys=["k"])
    ended: list[float] = []
    handled: dict[int, float] = {}

    def on_message(msg: sluice.Message) -> None:
        if msg.id == first:
            client.send_batch(queue, [2], keys=["k"])
            time.sleep(HOT_PERIOD + 0.5)  # past the fetch loop's hot polls
            ended.append(time.monotonic())
            if case == "dead letter":
                raise RuntimeError("the first message fails")
        handled[msg.id] = time.monotonic()

    kw: dict[str, Any] = {"concurrency": 2, "poll_interval": 30, "listen": False}
    transaction = case == "transaction"
    if mode == "sync":
        worker = sluice.Worker(client, **kw)
        if transaction:
            worker.handler(queue, transaction=True)(lambda msg, conn: on_message(msg))
        else:
            worker.handler(queue)(on_message)
        ctx: Any = running(worker)
    else:

        def setup(w: sluice.AsyncWorker) -> None:
            if transaction:

                @w.handler(queue, transaction=True)
                async def handle_tx(msg: sluice.Message, conn: Any) -> None:
                    await asyncio.to_thread(on_message, msg)

            else:

                @w.handler(queue)
                async def handle(msg: sluice.Message) -> None:
                    await asyncio.to_thread(on_message, msg)

        ctx = running_async(dsn, setup, **kw)
    def next_handled() -> bool:
        return any(i != first for i in handled)

    with ctx:
        wait_until(lambda: len(ended) == 1, 10, "the first message handled")
        wait_until(next_handled, 5, "the key's next message handled well before the 30 s poll")
    (at,) = [t for i, t in handled.items() if i != first]
    assert at - ended[0] < 5, (handled, ended)
