"""The Python client's runner of the shared conformance vectors.

Reads every file of test/conformance/ (format: test/conformance/README.md)
and runs its steps through the client's public API, once with the sync
Client and once with the AsyncClient. No step needs raw SQL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import sluicemq as sluice

VECTORS = Path(__file__).resolve().parents[3] / "test" / "conformance"
FILES = sorted(VECTORS.glob("*.json"))


def test_vectors_found() -> None:
    assert FILES, f"no vectors in {VECTORS}"


def normalise(v: Any) -> Any:
    """A result as JSON values with the SQL column names."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        d = {f.name: normalise(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, sluice.Message):
            del d["queue"], d["group"]
        return d
    if isinstance(v, list):
        return [normalise(x) for x in v]
    if isinstance(v, dict):
        return {k: normalise(x) for k, x in v.items()}
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, timedelta):
        return v.total_seconds()
    return v


def equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return bool(a == b)


def partial(want: Any, got: Any) -> bool:
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and partial(x, got[k]) for k, x in want.items())
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(partial(w, g) for w, g in zip(want, got))
    return equal(want, got)


class Runner:
    def __init__(self) -> None:
        self.queue = "conf_" + uuid.uuid4().hex[:12]
        self.saved: dict[str, Any] = {}
        self.created: list[str] = []

    def subst(self, v: Any) -> Any:
        if isinstance(v, dict):
            return {k: self.subst(x) for k, x in v.items()}
        if isinstance(v, list):
            return [self.subst(x) for x in v]
        if isinstance(v, str) and v.startswith("$"):
            if v == "$queue":
                return self.queue
            if v.startswith("$queue_"):
                return self.queue + v[len("$queue"):]
            name, *path = v[1:].split(".")
            cur = self.saved[name]
            for p in path:
                cur = cur[int(p)] if isinstance(cur, list) else cur[p]
            return cur
        return v

    def check(self, expect: dict[str, Any], got: Any) -> None:
        if "result" in expect:
            want = self.subst(expect["result"])
            assert equal(want, got), f"result {got!r}, want {want!r}"
        if "count" in expect:
            assert isinstance(got, list) and len(got) == expect["count"], f"result {got!r}, want {expect['count']} elements"
        if "match" in expect:
            want = self.subst(expect["match"])
            assert isinstance(got, list) and len(got) >= len(want), f"result {got!r}, want {want!r}"
            for i, w in enumerate(want):
                assert partial(w, got[i]), f"element {i} is {got[i]!r}, want it to contain {w!r}"
        if "contains" in expect:
            want = self.subst(expect["contains"])
            ok = partial(want, got) or (isinstance(got, list) and any(partial(want, g) for g in got))
            assert ok, f"result {got!r} does not contain {want!r}"


def seconds(args: dict[str, Any], name: str) -> timedelta | None:
    return None if name not in args else timedelta(seconds=args[name])


TABLE = json.loads((VECTORS.parent / "queue_options.json").read_text())["options"]
KINDS = {row["name"]: row["kind"] for row in TABLE}
FIELDS = {f.name: f.metadata["kind"] for f in dataclasses.fields(sluice.QueueOptions)}


def queue_options(options: dict[str, Any] | None) -> sluice.QueueOptions | dict[str, Any] | None:
    """A vector's options as QueueOptions, each option of the table through
    its field (durations as timedelta). What the typed form cannot carry on
    purpose (a name the engine does not know, a value of the wrong kind:
    bad-input vectors) goes as a mapping, the older form. An option of the
    table without its field fails: the client misses it."""
    if options is None:
        return None
    kwargs: dict[str, Any] = {}
    for name, v in options.items():
        kind = KINDS.get(name)
        if kind is None:
            return options
        assert FIELDS.get(name) == kind, f"QueueOptions has no {kind} field for the engine's option {name}"
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        if kind == "duration" and number:
            kwargs[name] = timedelta(seconds=v)
        elif (kind == "integer" and number and v == int(v)) or (kind == "boolean" and isinstance(v, bool)):
            kwargs[name] = v
        else:
            return options
    return sluice.QueueOptions(**kwargs)


async def read_options(c: Any, queue: str, is_async: bool) -> Any:
    """The queue's options as list_queues reads them back (typed)."""
    infos = c.list_queues()
    if is_async:
        infos = await infos
    for info in infos:
        if info.queue == queue:
            return info.options
    raise AssertionError(f"no queue {queue} in list_queues")


def calls(c: Any) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """The format's calls as calls of client c (Client or AsyncClient)."""
    g = lambda a: a.get("group_name", "default")  # noqa: E731
    return {
        "create_queue": lambda a: c.create_queue(a["queue"], queue_options(a.get("options"))),
        "drop_queue": lambda a: c.drop_queue(a["queue"]),
        "purge_queue": lambda a: c.purge_queue(a["queue"]),
        "upgrade_queue": lambda a: c.upgrade_queue(a["queue"]),
        "alter_queue": lambda a: c.alter_queue(a["queue"], queue_options(a["options"])),
        "create_group": lambda a: c.create_group(a["queue"], a["group_name"], start_from=a.get("start_from", "earliest")),
        "drop_group": lambda a: c.drop_group(a["queue"], a["group_name"]),
        "seek_group": lambda a: c.seek_group(a["queue"], a["group_name"], a["to_position"]),
        "send": lambda a: c.send(
            a["queue"], a["body"], headers=a.get("headers"), key=a.get("key"), delay=seconds(a, "delay"),
            priority=a.get("priority", 0), dedup_key=a.get("dedup_key")),
        "send_batch": lambda a: c.send_batch(
            a["queue"], a["bodies"], headers=a.get("headers"), keys=a.get("keys"), delay=seconds(a, "delay"),
            priorities=a.get("priorities"), dedup_keys=a.get("dedup_keys")),
        "receive": lambda a: c.receive(
            a["queue"], g(a), max_messages=a.get("max_messages", 1), lease=seconds(a, "lease"),
            consumer=a.get("consumer"), ack=a.get("ack")),
        "ack": lambda a: c.ack(a["queue"], a["group_name"], a["receipts"]),
        "nack": lambda a: c.nack(a["queue"], a["group_name"], a["receipt"], delay=seconds(a, "delay"), error=a.get("error")),
        "extend": lambda a: c.extend(a["queue"], a["group_name"], a["receipts"], timedelta(seconds=a["lease"])),
        "status": lambda a: c.status(a.get("queue")),
        "dead_letters": lambda a: c.dead_letters(a["queue"], a.get("group_name"), max_rows=a.get("max_rows", 100)),
        "redrive": lambda a: c.redrive(a["queue"], a.get("group_name"), a.get("ids")),
        "discard_dead_letters": lambda a: c.discard_dead_letters(a["queue"], a.get("group_name"), a.get("ids")),
        "peek": lambda a: c.peek(a["queue"], max_messages=a.get("max_messages", 10), after_id=a.get("after_id")),
        "leases": lambda a: c.leases(a["queue"], a.get("group_name"), max_messages=a.get("max_messages", 100)),
    }


async def run_vector(path: Path, c: Any, is_async: bool) -> None:
    vector = json.loads(path.read_text())
    assert vector["name"] == path.stem
    # A misspelt key would check nothing.
    assert set(vector) <= {"name", "description", "steps"}, set(vector)
    for step in vector["steps"]:
        assert set(step) <= {"call", "args", "save", "expect", "expect_error"}, step
        assert set(step.get("expect", {})) <= {"result", "count", "match", "contains"}, step
    r = Runner()
    table = calls(c)
    try:
        for i, step in enumerate(vector["steps"]):
            name, args = step["call"], r.subst(step.get("args", {}))
            where = f"step {i} ({name} {args})"
            if name == "create_queue":
                r.created.append(args["queue"])
            try:
                if name == "sleep":
                    await asyncio.sleep(args["seconds"]) if is_async else time.sleep(args["seconds"])
                    result = None
                elif name == "queue_options":
                    result = await read_options(c, args["queue"], is_async)
                else:
                    result = table[name](args)
                    if is_async:
                        result = await result
            except sluice.SluiceError as e:
                assert step.get("expect_error") == e.code, f"{where}: failed with {e.code} {e}"
                continue
            assert "expect_error" not in step, f"{where}: succeeded with {result!r}, want {step['expect_error']}"
            got = normalise(result)
            if "save" in step:
                r.saved[step["save"]] = got
            if "expect" in step:
                try:
                    r.check(step["expect"], got)
                except AssertionError as e:
                    raise AssertionError(f"{where}: {e}") from None
    finally:
        for q in r.created:
            try:
                res = c.drop_queue(q)
                if is_async:
                    await res
            except sluice.SluiceError:
                pass


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_sync(path: Path, client: sluice.Client) -> None:
    asyncio.run(run_vector(path, client, False))


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_async(path: Path, dsn: str) -> None:
    async def main() -> None:
        async with sluice.AsyncClient(dsn, max_size=2) as c:
            await run_vector(path, c, True)

    asyncio.run(main())
