"""The SQL the client runs, and the conversions shared by the sync and async clients.

Each statement calls one function of the SQL API (docs/sql.md), whose
header comment is the contract; the casts pin the parameter types.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from psycopg.types.json import Jsonb

from .types import Duration as Duration  # re-exported: the clients' duration type
from .types import (
    DeadLetter,
    Lease,
    MaintainResult,
    Message,
    PeekedMessage,
    QueueInfo,
    QueueOptions,
    QueueStatus,
)

SEND = "SELECT sluice.send(%s, %s::jsonb, %s::jsonb, %s::text, %s::interval, %s::int, %s::text)"
SEND_BATCH = (
    "SELECT id FROM sluice.send_batch(%s, %s::jsonb[], %s::jsonb[], %s::text[], %s::interval,"
    " %s::int[], %s::text[]) AS s(id)"
)
RECEIVE = (
    "SELECT id, body, headers, key, priority, attempt, sent_at, receipt, lease_expires_at, pos"
    " FROM sluice.receive(%s, %s, %s::int, %s::interval, %s::text, %s::text[])"
)
ACK = "SELECT sluice.ack(%s, %s, %s::text[], %s::boolean)"
NACK = "SELECT sluice.nack(%s, %s, %s, %s::interval, %s::text)"
EXTEND = "SELECT sluice.extend(%s, %s, %s::text[], %s::interval)"
CREATE_QUEUE = "SELECT sluice.create_queue(%s, %s::jsonb)"
DROP_QUEUE = "SELECT sluice.drop_queue(%s)"


def _typed_options(col: str) -> str:
    """An expression of the jsonb options in ``col`` with the intervals (the
    options named by the text[] parameter) as whole microseconds: the one
    place the client reads them, whatever text they were stored as."""
    return (
        "(SELECT jsonb_object_agg(key, CASE WHEN key = ANY(%s::text[]) AND jsonb_typeof(value) = 'string'"
        " THEN to_jsonb((extract(epoch FROM (value #>> '{}')::interval) * 1000000)::bigint) ELSE value END)"
        f" FROM jsonb_each({col}))"
    )


ALTER_QUEUE = f"SELECT {_typed_options('o')} FROM sluice.alter_queue(%s, %s::jsonb) AS a(o)"
"""Parameters: the duration options' names, the queue, the changes."""
PURGE_QUEUE = "SELECT sluice.purge_queue(%s)"
UPGRADE_QUEUE = "SELECT sluice.upgrade_queue(%s)"
LIST_QUEUES = f"SELECT queue, created_at, {_typed_options('options')}, groups, options FROM sluice.list_queues()"
"""Parameter: the duration options' names."""
CREATE_GROUP = "SELECT sluice.create_group(%s, %s, %s)"
DROP_GROUP = "SELECT sluice.drop_group(%s, %s)"
SEEK_GROUP = "SELECT sluice.seek_group(%s, %s, %s)"
STATUS = (
    "SELECT queue, group_name, ready, delayed, in_flight, dead, oldest_pending_age, lag,"
    " cursor, lwm, head, live_epochs, holds_reclaim, coalesce(waiting, 0), coalesce(estimated, false),"
    " coalesce(dead_lettered, 0)"
    " FROM sluice.status(%s::text)"
)
DEAD_LETTERS = (
    "SELECT id, group_name, body, headers, key, attempts, error, died_at, sent_at, dead_letter_id"
    " FROM sluice.dead_letters(%s, %s::text, %s::int)"
)
REDRIVE = "SELECT sluice.redrive(%s, %s::text, %s::bigint[])"
DISCARD_DEAD_LETTERS = "SELECT sluice.discard_dead_letters(%s, %s::text, %s::bigint[])"
PEEK = (
    "SELECT id, body, headers, key, priority, sent_at, deliver_at, resent_to"
    " FROM sluice.peek(%s, %s::int, %s::bigint)"
)
LEASES = (
    "SELECT group_name, id, pos, attempt, consumer, delivered_at, lease_expires_at"
    " FROM sluice.leases(%s, %s::text, %s::int)"
)
MAINTAIN = "SELECT queue, rotated, reclaimed FROM sluice.maintain()"
VERSION = "SELECT sluice.version()"
QUEUE_SETTINGS = (
    "SELECT (options->>'lease')::interval, (options->>'max_attempts')::int"
    " FROM sluice.list_queues() WHERE queue = %s"
)
LISTEN = "LISTEN sluice"
NOTIFY_CHANNEL = "sluice"
"""The channel a committed send notifies, with the queue's name as payload."""

# The options of create_queue and alter_queue, by kind (QueueOptions' fields).
_OPTION_KINDS = {f.name: f.metadata["kind"] for f in dataclasses.fields(QueueOptions)}
DURATION_OPTIONS = [name for name, kind in _OPTION_KINDS.items() if kind == "duration"]

MAX_ERROR_TEXT = 10000
"""The longest error text nack accepts."""


def interval(d: Duration | None) -> timedelta | None:
    """A duration as a timedelta (psycopg sends it as an interval); None stays None."""
    if d is None or isinstance(d, timedelta):
        return d
    return timedelta(seconds=d)


def interval_text(d: timedelta) -> str:
    """A timedelta as an interval string exact to the microsecond, e.g. '1500000 microseconds'."""
    us = (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
    if us % 1_000_000 == 0:
        return f"{us // 1_000_000} seconds"
    return f"{us} microseconds"


def options(opts: QueueOptions | Mapping[str, Any] | None) -> Jsonb:
    """Queue options as jsonb: the set fields of a QueueOptions (or the keys
    of a mapping, the older form), durations (timedelta or seconds) as
    interval strings. A mapping's unknown names pass as they are, for the
    engine to reject (SL007)."""
    if isinstance(opts, QueueOptions):
        items = {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts) if getattr(opts, f.name) is not None}
    else:
        items = dict(opts or {})
    out: dict[str, Any] = {}
    for name, value in items.items():
        if isinstance(value, timedelta):
            value = interval_text(value)
        elif _OPTION_KINDS.get(name) == "duration" and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = interval_text(timedelta(seconds=value))
        out[name] = value
    return Jsonb(out)


def queue_options(typed: Mapping[str, Any]) -> QueueOptions:
    """Options as the queries with _typed_options read them (intervals in
    microseconds) as QueueOptions; names the client does not know are left
    out (they stay in QueueInfo.raw_options)."""
    kwargs: dict[str, Any] = {}
    for name, kind in _OPTION_KINDS.items():
        if name in typed and typed[name] is not None:
            v = typed[name]
            kwargs[name] = timedelta(microseconds=v) if kind == "duration" else v
    return QueueOptions(**kwargs)


def jsonb_or_none(v: Any) -> Jsonb | None:
    return None if v is None else Jsonb(v)


def send_params(
    queue: str,
    body: Any,
    headers: Mapping[str, Any] | None,
    key: str | None,
    delay: Duration | None,
    priority: int,
    dedup_key: str | None,
) -> tuple[Any, ...]:
    return (queue, Jsonb(body), jsonb_or_none(headers), key, interval(delay), priority, dedup_key)


def send_batch_params(
    queue: str,
    bodies: Sequence[Any],
    headers: Sequence[Mapping[str, Any] | None] | None,
    keys: Sequence[str | None] | None,
    delay: Duration | None,
    priorities: Sequence[int] | None,
    dedup_keys: Sequence[str | None] | None,
) -> tuple[Any, ...]:
    return (
        queue,
        [Jsonb(b) for b in bodies],
        None if headers is None else [jsonb_or_none(h) for h in headers],
        None if keys is None else list(keys),
        interval(delay),
        None if priorities is None else list(priorities),
        None if dedup_keys is None else list(dedup_keys),
    )


def receive_params(
    queue: str,
    group: str,
    max_messages: int,
    lease: Duration | None,
    consumer: str | None,
    ack: Sequence[str] | None,
) -> tuple[Any, ...]:
    return (queue, group, max_messages, interval(lease), consumer, None if ack is None else list(ack))


def nack_params(
    queue: str, group: str, receipt: str, delay: Duration | None, error: str | None
) -> tuple[Any, ...]:
    return (queue, group, receipt, interval(delay), error)


def message(row: Sequence[Any], queue: str, group: str) -> Message:
    id_, body, headers, key, priority, attempt, sent_at, receipt, expires, pos = row
    return Message(id_, body, headers, key, priority, attempt, sent_at, receipt, expires, pos, queue, group)


def listen_params(conninfo: Any, kwargs: Any) -> tuple[str, dict[str, Any]]:
    """The connection string and arguments of a dedicated LISTEN connection
    like the pool's (conninfo and kwargs may be callables in psycopg_pool)."""
    info = conninfo() if callable(conninfo) else conninfo
    kw = kwargs() if callable(kwargs) else kwargs
    return info, {k: v for k, v in (kw or {}).items() if k != "autocommit"}


def queue_status(row: Sequence[Any]) -> QueueStatus:
    return QueueStatus(*row)


def dead_letter(row: Sequence[Any]) -> DeadLetter:
    return DeadLetter(*row)


def peeked_message(row: Sequence[Any]) -> PeekedMessage:
    return PeekedMessage(*row)


def lease(row: Sequence[Any]) -> Lease:
    return Lease(*row)


def queue_info(row: Sequence[Any]) -> QueueInfo:
    name, created_at, typed, groups, raw = row
    return QueueInfo(name, created_at, queue_options(typed), groups, raw)


def maintain_result(row: Sequence[Any]) -> MaintainResult:
    return MaintainResult(*row)
