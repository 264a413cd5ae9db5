"""The pgmq Python client (PyPI package pgmq, pinned in requirements.txt),
unchanged, against sluice's PGMQ compatibility layer.

Run by `make test-pgmq-clients` through internal/pgmqcompat/cmd/pgmqcompat-run,
which sets DATABASE_URL to a fresh database with schemas sluice and pgmq.
The client is built with init_extension=False: the layer is not an extension
(the client would otherwise run CREATE EXTENSION pgmq).
"""

import os
import time
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from pgmq import Message, PGMQueue


@pytest.fixture(scope="module")
def client():
    q = PGMQueue(conn_string=os.environ["DATABASE_URL"], init_extension=False)
    yield q
    q.close()


@pytest.fixture
def queue(client):
    name = f"py_{uuid.uuid4().hex[:12]}"
    client.create_queue(name)
    yield name
    client.drop_queue(name)


def test_readme_flow(client, queue):
    """The client README's walk-through: send, read, archive, delete, pop."""
    msg_id = client.send(queue, {"hello": "world"})
    ids = client.send_batch(queue, [{"n": 1}, {"n": 2}, {"n": 3}])
    assert ids == sorted(ids) and ids[0] > msg_id

    first = client.read(queue, vt=30)
    assert isinstance(first, Message)
    assert first.msg_id == msg_id and first.message == {"hello": "world"} and first.read_ct == 1
    assert first.vt > datetime.now(timezone.utc) + timedelta(seconds=25)

    batch = client.read(queue, vt=30, qty=2)
    assert [m.msg_id for m in batch] == ids[:2]
    assert client.archive(queue, first.msg_id) is True
    assert client.delete(queue, batch[0].msg_id) is True
    assert client.delete(queue, batch[0].msg_id) is False
    assert client.delete_batch(queue, [batch[1].msg_id]) == [batch[1].msg_id]

    popped = client.pop(queue)
    assert popped.msg_id == ids[2]
    assert client.read(queue, vt=30) is None

    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        archived = conn.execute(f"SELECT msg_id, message FROM pgmq.a_{queue}").fetchall()
    assert archived == [(msg_id, {"hello": "world"})]


def test_visibility_timeout_and_set_vt(client, queue):
    msg_id = client.send(queue, {"job": 1})
    assert client.read(queue, vt=1).read_ct == 1
    assert client.read(queue, vt=30) is None
    time.sleep(1.2)
    again = client.read(queue, vt=60)
    assert again.msg_id == msg_id and again.read_ct == 2

    # shorten: visible again at once, read_ct counts on
    changed = client.set_vt(queue, msg_id, 0)
    assert changed.msg_id == msg_id
    third = client.read(queue, vt=60)
    assert third.msg_id == msg_id and third.read_ct == 3
    # lengthen, timestamp form
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    assert client.set_vt(queue, msg_id, later).vt == later
    assert client.read(queue, vt=1) is None
    client.delete(queue, msg_id)


def test_delay_headers_and_metrics(client, queue):
    client.send(queue, {"later": True}, delay=3600)
    client.send(queue, {"h": True}, headers={"trace": "abc"})
    msg = client.read(queue, vt=30)
    assert msg.message == {"h": True} and msg.headers == {"trace": "abc"}
    m = client.metrics(queue)
    assert (m.queue_name, m.queue_length, m.queue_visible_length, m.total_messages) == (queue, 2, 0, 2)
    assert queue in [r.queue_name for r in client.list_queues()]
    assert any(x.queue_name == queue for x in client.metrics_all())
    assert client.purge(queue) == 2
    assert client.metrics(queue).queue_length == 0


def test_read_with_poll(client, queue):
    start = time.monotonic()
    assert client.read_with_poll(queue, vt=30, qty=5, max_poll_seconds=1, poll_interval_ms=50) == []
    assert 0.9 < time.monotonic() - start < 3
    client.send_batch(queue, [{"a": 1}, {"a": 2}])
    got = client.read_with_poll(queue, vt=30, qty=5, max_poll_seconds=2, poll_interval_ms=50)
    assert [m.message for m in got] == [{"a": 1}, {"a": 2}]


def test_fifo_groups(client, queue):
    a1 = client.send(queue, {"a": 1}, headers={"x-pgmq-group": "A"})
    b1 = client.send(queue, {"b": 1}, headers={"x-pgmq-group": "B"})
    a2 = client.send(queue, {"a": 2}, headers={"x-pgmq-group": "A"})

    def ids(got):
        return [m.msg_id for m in (got if isinstance(got, list) else [got] if got else [])]

    # the two groups' heads, one read each; which group comes first is not
    # promised (PGMQ: the older head; sluice: the groups' lanes, docs/pgmq.md "Order")
    heads = ids(client.read_grouped_rr(queue, vt=30, qty=1)) + ids(client.read_grouped_rr(queue, vt=30, qty=1))
    assert sorted(heads) == [a1, b1]
    assert ids(client.read_grouped(queue, vt=30, qty=10)) == []  # a2 waits for a1
    client.delete(queue, a1)
    nxt = client.read_grouped_with_poll(queue, vt=30, qty=10, max_poll_seconds=1, poll_interval_ms=50)
    assert [m.msg_id for m in nxt] == [a2]


def test_topics_and_notify(client, queue):
    client.bind_topic("orders.*", queue)
    assert [b.queue_name for b in client.list_topic_bindings(queue)] == [queue]
    assert [r.queue_name for r in client.test_routing("orders.created")] == [queue]
    assert client.send_topic("orders.created", {"id": 7}) == 1
    assert client.send_topic("users.created", {"id": 8}) == 0
    assert client.read(queue, vt=30).message == {"id": 7}
    assert client.unbind_topic("orders.*", queue) is True

    client.enable_notify(queue, throttle_interval_ms=0)
    assert [t.queue_name for t in client.list_notify_throttles()] == [queue]
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as listener:
        listener.execute(f'LISTEN "pgmq.q_{queue}.INSERT"')
        client.send(queue, {"ping": 1})
        got = next(listener.notifies(timeout=5), None)
    assert got is not None and got.channel == f"pgmq.q_{queue}.INSERT"
    client.disable_notify(queue)


def test_error_texts(client):
    with pytest.raises(Exception) as e:
        client.validate_queue_name("a" * 48)
    assert "queue name is too long, maximum length is 47 characters" in str(e.value)
    with pytest.raises(psycopg.errors.UndefinedTable) as e:
        client.send("no_such_queue", {"x": 1})
    assert 'relation "pgmq.q_no_such_queue" does not exist' in str(e.value)
    assert client.drop_queue("no_such_queue") is False
