"""The rows the client returns: frozen dataclasses named after sluice's SQL types."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

__all__ = ["Message", "QueueStatus", "DeadLetter", "PeekedMessage", "Lease", "QueueInfo", "MaintainResult", "JSON"]

JSON = Any
"""A JSON value as psycopg reads jsonb: dict, list, str, int, float, bool or None."""


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
    """A queue, its options (defaults filled in) and its groups (sluice.queue_info)."""

    queue: str
    created_at: datetime
    options: dict[str, Any]
    groups: list[str]


@dataclass(frozen=True, slots=True)
class MaintainResult:
    """What sluice.maintain did to one queue."""

    queue: str
    rotated: bool
    reclaimed: int
