"""Client tests beyond the conformance vectors: transactions, isolation, errors, types."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import sluicemq as sluice
from conftest import run


def test_send_in_rolled_back_transaction_is_never_delivered(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue)
    with pytest.raises(RuntimeError):
        with client.transaction() as conn:
            client.send(queue, {"n": 1}, conn=conn)
            raise RuntimeError("roll back")
    assert client.receive(queue) == []
    with client.transaction() as conn:
        sent = client.send(queue, {"n": 2}, conn=conn)
        assert client.receive(queue) == []  # not visible before the commit
    (m,) = client.receive(queue)
    assert (m.id, m.body) == (sent, {"n": 2})


def test_ack_rolled_back_with_the_callers_transaction_is_redelivered(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue, {"lease": 1})
    client.send(queue, "job")
    (m,) = client.receive(queue)
    with client.pool.connection() as conn:
        conn.execute("CREATE TEMP TABLE effects (id bigint)")
        with pytest.raises(RuntimeError), conn.transaction():
            conn.execute("INSERT INTO effects VALUES (%s)", (m.id,))
            assert client.ack(queue, "default", [m.receipt], conn=conn) == 1
            raise RuntimeError("the application failed after acking")
        assert conn.execute("SELECT count(*) FROM effects").fetchone() == (0,)
    # The ack went with the rollback: the message comes back after its lease.
    assert client.receive(queue) == []
    time.sleep(1.2)
    (again,) = client.receive(queue)
    assert (again.id, again.attempt) == (m.id, 2)
    # Committed together this time: the ack and the effect.
    with client.transaction() as conn:
        assert client.ack(queue, "default", [again.receipt], conn=conn) == 1
    assert client.status(queue)[0].lag == 0


def test_receive_outside_read_committed_is_refused(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue)
    client.send(queue, 1)
    with client.pool.connection() as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        try:
            with pytest.raises(sluice.InvalidIsolation) as err, conn.transaction():
                client.receive(queue, conn=conn)
            assert err.value.code == "SL010"
            with pytest.raises(sluice.InvalidIsolation), conn.transaction():
                client.send(queue, 2, dedup_key="d", conn=conn)
        finally:
            conn.isolation_level = None
    assert [m.body for m in client.receive(queue, max_messages=10)] == [1]


def test_json_nested_too_deep_is_refused(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue)
    deep: Any = []
    for _ in range(600):
        deep = [deep]
    with pytest.raises(sluice.JSONTooDeep) as err:
        client.send(queue, deep)
    assert err.value.code == "SL012"
    assert client.receive(queue, max_messages=10) == []


def test_errors_are_typed_and_carry_code_and_hint(client: sluice.Client, queue: str) -> None:
    with pytest.raises(sluice.QueueNotFound) as err:
        client.send(queue, 1)
    assert err.value.code == "SL002" and queue in err.value.message and err.value.hint
    assert isinstance(err.value.__cause__, psycopg.Error)
    client.create_queue(queue)
    cases: list[tuple[type[sluice.SluiceError], object]] = [
        (sluice.InvalidName, lambda: client.create_queue("no spaces please")),
        (sluice.QueueExists, lambda: client.create_queue(queue)),
        (sluice.GroupExists, lambda: client.create_group(queue, "default")),
        (sluice.GroupNotFound, lambda: client.receive(queue, "nobody")),
        (sluice.InvalidArgument, lambda: client.send(queue, 1, delay=timedelta(seconds=-1))),
        (sluice.InvalidArgument, lambda: client.nack(queue, "default", "0.1.1.1", error="x" * 10001)),
        (sluice.InvalidOption, lambda: client.alter_queue(queue, sluice.QueueOptions(lanes=3))),
        (sluice.InvalidReceipt, lambda: client.extend(queue, "default", ["nope"], 5)),
        (sluice.PayloadTooLarge, lambda: client.send(queue, "x" * 1_100_000)),
    ]
    for cls, call in cases:
        with pytest.raises(cls):
            call()  # type: ignore[operator]
    # Nothing changed.
    assert client.status(queue)[0].ready == 0
    assert client.receive(queue) == []


def test_failed_call_in_callers_transaction_aborts_it(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue)
    with client.pool.connection() as conn:
        with pytest.raises(sluice.InvalidArgument), conn.transaction():
            client.send(queue, 1, conn=conn)
            client.send(queue, 2, headers=["not", "an", "object"], conn=conn)  # type: ignore[arg-type]
    assert client.receive(queue, max_messages=10) == []


def test_rows_are_frozen_dataclasses(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue, sluice.QueueOptions(lanes=1, max_attempts=1, lease=timedelta(seconds=30)))
    client.create_group(queue, "audit", start_from="latest")
    client.send(queue, {"a": [1, 2]}, headers={"h": "v"}, key="k", priority=3)
    (m,) = client.receive(queue, "audit", consumer="tests")
    assert m.queue == queue and m.group == "audit" and m.key == "k" and m.headers == {"h": "v"}
    with pytest.raises(AttributeError):
        m.body = 1  # type: ignore[misc]
    assert client.nack(queue, "audit", m.receipt, delay=0, error="boom") is True
    (dl,) = client.dead_letters(queue, "audit")
    assert (dl.id, dl.group_name, dl.error, dl.attempts, dl.key) == (m.id, "audit", "boom", 1, "k")
    info = [q for q in client.list_queues() if q.queue == queue][0]
    assert info.groups == ["audit", "default"] and info.options.lease == timedelta(seconds=30)
    assert info.raw_options["lease"] == "30 seconds"
    st = {s.group_name: s for s in client.status(queue)}
    assert st["audit"].dead == 1 and st["default"].ready == 1
    assert client.redrive(queue, "audit", [m.id]) == 1
    assert isinstance(client.maintain(), list)
    assert client.version()


def test_async_client_joins_transactions(dsn: str, queue: str) -> None:
    async def main() -> None:
        async with sluice.AsyncClient(dsn) as c:
            await c.create_queue(queue, {"lease": 1})
            with pytest.raises(RuntimeError):
                async with c.transaction() as conn:
                    await c.send(queue, "never", conn=conn)
                    raise RuntimeError("roll back")
            await c.send(queue, "once")
            (m,) = await c.receive(queue)
            with pytest.raises(RuntimeError):
                async with c.transaction() as conn:
                    assert await c.ack(queue, "default", [m.receipt], conn=conn) == 1
                    raise RuntimeError("roll back the ack")
            assert await c.extend(queue, "default", [m.receipt], 30) == 1
            assert await c.ack(queue, "default", [m.receipt]) == 1
            assert await c.receive(queue, max_messages=10) == []
            with pytest.raises(sluice.InvalidReceipt):
                await c.nack(queue, "default", "junk")

    run(main())


def test_peek_and_leases_rows(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue, {"lanes": 1})
    first = client.send(queue, {"n": 1}, headers={"h": "v"}, key="k")
    later = client.send(queue, {"n": 2}, delay=timedelta(hours=1))
    with client.transaction() as conn:
        p1, p2 = client.peek(queue, conn=conn)
    assert isinstance(p1, sluice.PeekedMessage)
    assert (p1.id, p1.body, p1.headers, p1.key) == (first, {"n": 1}, {"h": "v"}, "k")
    assert p1.deliver_at is None and p1.resent_to is None
    assert p2.id == later and p2.deliver_at is not None and p2.deliver_at > p2.sent_at + timedelta(minutes=59)
    assert client.peek(queue, max_messages=1, after_id=first) == [p2]
    (m,) = client.receive(queue, consumer="tests", lease=60)
    (lease,) = client.leases(queue, "default")
    assert isinstance(lease, sluice.Lease)
    assert (lease.group_name, lease.id, lease.pos, lease.attempt) == ("default", m.id, m.pos, 1)
    assert lease.consumer == "tests"
    assert lease.lease_expires_at == m.lease_expires_at and lease.delivered_at <= m.lease_expires_at
    with pytest.raises(AttributeError):
        lease.consumer = "other"  # type: ignore[misc]
    assert client.nack(queue, "default", m.receipt, delay=0) is True
    assert client.leases(queue) == []


def test_seek_group(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue, {"lanes": 1, "max_attempts": 1})
    client.send(queue, "dies")
    client.send(queue, "fine")
    dies, fine = client.receive(queue, max_messages=10)
    assert client.nack(queue, "default", dies.receipt, error="boom") is True
    assert client.ack(queue, "default", [fine.receipt]) == 1
    client.seek_group(queue, "default", "earliest")
    assert [m.id for m in client.receive(queue, max_messages=10)] == [dies.id, fine.id]
    (dl,) = client.dead_letters(queue, "default")
    assert dl.id == dies.id and dl.error == "boom"
    client.seek_group(queue, "default", "latest")
    assert client.receive(queue, max_messages=10) == []
    with pytest.raises(sluice.GroupNotFound):
        client.seek_group(queue, "nobody", "earliest")
    with pytest.raises(sluice.InvalidArgument):
        client.seek_group(queue, "default", "soon")
