"""Acks are durable by default, in the clients and the workers; asynchronous commit is an
explicit opt-in (``durable=False``, ``async_commit_acks=True``)."""

from __future__ import annotations

from typing import Any

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
