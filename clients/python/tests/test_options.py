"""QueueOptions against the table of the engine's options (test/queue_options.json).

The conformance vectors option_<name>.json run each option through
create_queue, list_queues and alter_queue; these tests pin the typed form
itself: one field per option of the engine, None unset and zero a value.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import timedelta
from pathlib import Path

import pytest

import sluicemq as sluice

TABLE = json.loads((Path(__file__).resolve().parents[3] / "test" / "queue_options.json").read_text())["options"]


def test_one_field_per_option_of_the_engine() -> None:
    fields = {f.name: f.metadata.get("kind") for f in dataclasses.fields(sluice.QueueOptions)}
    table = {row["name"]: row["kind"] for row in TABLE}
    assert fields == table, "QueueOptions' fields (name: kind) differ from test/queue_options.json"


def test_unset_is_not_zero(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue, sluice.QueueOptions(retention=0, backoff_base=timedelta(0), max_attempts=None))
    (info,) = [q for q in client.list_queues() if q.queue == queue]
    assert info.options.retention == timedelta(0) and info.options.backoff_base == timedelta(0)
    assert info.options.max_attempts == 5  # unset: the engine's default
    # An alter that sets nothing changes nothing; one that sets a field changes it alone.
    assert client.alter_queue(queue, sluice.QueueOptions()) == info.options
    after = client.alter_queue(queue, sluice.QueueOptions(dedup_window=1.5, notify=False))
    assert after == dataclasses.replace(info.options, dedup_window=timedelta(seconds=1.5), notify=False)
    # Every field is set when read back.
    assert all(getattr(after, f.name) is not None for f in dataclasses.fields(after))


def test_mapping_form_still_taken(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue, {"max_delay": 60, "lanes": 2})
    (info,) = [q for q in client.list_queues() if q.queue == queue]
    assert info.options.max_delay == timedelta(seconds=60) and info.options.lanes == 2
    with pytest.raises(sluice.InvalidOption):
        client.alter_queue(queue, {"no_such_option": 1})


def test_bad_value_changes_nothing(client: sluice.Client, queue: str) -> None:
    client.create_queue(queue)
    before = [q for q in client.list_queues() if q.queue == queue][0].options
    with pytest.raises(sluice.InvalidOption):
        client.alter_queue(queue, sluice.QueueOptions(max_attempts=7, lease=0))
    with pytest.raises(sluice.InvalidOption):
        client.alter_queue(queue, sluice.QueueOptions(default_group=False))
    assert [q for q in client.list_queues() if q.queue == queue][0].options == before


def test_async_client_typed(dsn: str, queue: str) -> None:
    async def main() -> None:
        async with sluice.AsyncClient(dsn, max_size=2) as c:
            await c.create_queue(queue, sluice.QueueOptions(max_delay=timedelta(hours=1), engine=1))
            after = await c.alter_queue(queue, sluice.QueueOptions(max_delay=30))
            assert after.max_delay == timedelta(seconds=30) and after.engine == 1
            (info,) = [q for q in await c.list_queues() if q.queue == queue]
            assert info.options == after

    asyncio.run(main())
