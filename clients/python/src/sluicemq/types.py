"""The rows the client returns: frozen dataclasses named after sluice's SQL types."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Union

__all__ = [
    "Message",
    "QueueStatus",
    "DeadLetter",
    "PeekedMessage",
    "Lease",
    "QueueInfo",
    "QueueOptions",
    "MaintainResult",
    "JSON",
    "Duration",
]

JSON = Any
"""A JSON value as psycopg reads jsonb: dict, list, str, int, float, bool or None."""

Duration = Union[timedelta, float, int]
"""A duration: a timedelta, or a number of seconds."""


def _option(kind: str) -> Any:
    """A field of QueueOptions: unset (None) by default; kind is the engine's
    (integer, duration or boolean), which says how the client sends it."""
    return field(default=None, metadata={"kind": kind})


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueOptions:
    """The options of a queue (docs/sql.md, create_queue): what ``create_queue``
    and ``alter_queue`` take, and what ``alter_queue`` and ``list_queues``
    return (every field set, durations as timedelta).

    None is unset: ``create_queue`` gives the option the engine's default
    (in parentheses), ``alter_queue`` leaves it as it is. Zero is a value
    (``retention=0`` keeps nothing). Durations are a timedelta or seconds.
    One field per row of test/queue_options.json (tests/test_options.py).
    """

    #: deliveries before a message is dead-lettered (5)
    max_attempts: int | None = _option("integer")
    #: default lease of receive (30 s, at most 7 days)
    lease: Duration | None = _option("duration")
    #: first nack retry delay, doubled per attempt (1 s)
    backoff_base: Duration | None = _option("duration")
    #: cap of the retry delay (1 h)
    backoff_max: Duration | None = _option("duration")
    #: how long completed messages stay readable (1 h)
    retention: Duration | None = _option("duration")
    #: how often a new storage epoch starts (1 min)
    rotate_interval: Duration | None = _option("duration")
    #: largest body + headers in bytes (1048576)
    max_payload: int | None = _option("integer")
    #: how long a dedup_key of send is remembered (1 h)
    dedup_window: Duration | None = _option("duration")
    #: longest delay of send, send_batch and an explicit nack delay (365 days, also its upper bound)
    max_delay: Duration | None = _option("duration")
    #: dispatch lanes, 1 to 256 (8); fixed at creation; 1 keeps strict commit order
    lanes: int | None = _option("integer")
    #: storage slots, 2 to 4 (2); fixed at creation
    slots: int | None = _option("integer")
    #: storage engine, 1 or 2 (2); fixed at creation (2 is engine v2, 1 the first engine: docs/design.md)
    engine: int | None = _option("integer")
    #: NOTIFY channel 'sluice' when a send commits, to wake waiting consumers (True)
    notify: bool | None = _option("boolean")
    #: create the group 'default' (True); create_queue only
    default_group: bool | None = _option("boolean")


@dataclass(frozen=True, slots=True)
class Message:
    """A message leased by receive (sluice.message).

    ``receipt`` names this delivery: pass it to ack, nack or extend. It is
    current while the lease lasts and the message is not completed.
    """

    id: int
    body: JSON
    headers: dict[str, Any] | None
    key: str | None
    priority: int
    attempt: int
    sent_at: datetime
    receipt: str
    lease_expires_at: datetime
    pos: int
    queue: str = ""
    group: str = ""


@dataclass(frozen=True, slots=True)
class HandlerFailure:
    """A failed handler, as the workers' ``on_handler_error`` hook gets it.

    ``attempt`` is the delivery that failed (from 1) and ``max_attempts`` the
    queue's when the worker started. ``dead_lettered`` is true when that was
    the last attempt and the message became a dead letter; otherwise it is
    retried (after the queue's backoff, or when its lease expires if giving
    it back failed).
    """

    queue: str
    group: str
    message: Message
    error: BaseException
    attempt: int
    max_attempts: int
    dead_lettered: bool

    @property
    def retried(self) -> bool:
        """Whether the message comes again (it was not dead-lettered)."""
        return not self.dead_lettered


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """Depth and progress of one consumer group of a queue (sluice.queue_status)."""

    queue: str
    group_name: str | None
    ready: int
    delayed: int
    in_flight: int
    dead: int
    oldest_pending_age: timedelta | None
    lag: int
    cursor: int
    lwm: int
    head: int
    live_epochs: int
    holds_reclaim: bool
    #: keyed messages that would be ready but wait for an earlier message of their key
    waiting: int
    #: whether ready and lag include an estimate of a large backlog not numbered yet
    #: (sluice.status reads at most sluice.status_exact_limit of it: docs/sql.md)
    estimated: bool
    #: every message the group dead-lettered, redriven ones included, whichever client did it:
    #: grows only while the group exists (a counter, where dead is a gauge)
    dead_lettered: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that used up its attempts in one group (sluice.dead_letter_info)."""

    id: int
    group_name: str
    body: JSON
    headers: dict[str, Any] | None
    key: str | None
    attempts: int
    error: str | None
    died_at: datetime
    sent_at: datetime
    dead_letter_id: int


@dataclass(frozen=True, slots=True)
class PeekedMessage:
    """A message a queue stores, as peek shows it (sluice.stored_message).

    ``deliver_at`` is set only for a message sent with a delay; ``resent_to``
    names the groups it was sent to again (a retry after a nack, or a
    redrive), or is None.
    """

    id: int
    body: JSON
    headers: dict[str, Any] | None
    key: str | None
    priority: int
    sent_at: datetime
    deliver_at: datetime | None
    resent_to: list[str] | None


@dataclass(frozen=True, slots=True)
class Lease:
    """A delivery in flight, as leases shows it (sluice.lease_info).

    It has no receipt: leases is for looking, not for completing another
    consumer's messages.
    """

    group_name: str
    id: int
    pos: int
    attempt: int
    consumer: str | None
    delivered_at: datetime
    lease_expires_at: datetime


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue, its options (defaults filled in) and its groups (sluice.queue_info).

    ``raw_options`` are the options as the engine stores them: intervals as
    the text they were given as, and any option newer than this client.
    """

    queue: str
    created_at: datetime
    options: QueueOptions
    groups: list[str]
    raw_options: dict[str, Any]


@dataclass(frozen=True, slots=True)
class MaintainResult:
    """What sluice.maintain did to one queue."""

    queue: str
    rotated: bool
    reclaimed: int
