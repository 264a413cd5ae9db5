"""What Worker and AsyncWorker share: handler registration and the split of a batch."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar

from ._sql import MAX_ERROR_TEXT, Duration, interval
from .types import HandlerFailure, Message

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger("sluicemq")

# What the workers call: Worker a function, AsyncWorker a coroutine function.
Handler = Callable[..., Any]
AsyncHandler = Callable[..., Awaitable[Any]]

# While messages flow (for HOT_PERIOD seconds after the last ones or the last
# wake-up), an empty receive is retried after HOT_POLL rather than the poll
# interval: the engine sends one wake-up per queue among concurrent sends, so
# one can be missed exactly then (as the Go worker does).
HOT_PERIOD = 1.0
HOT_POLL = 0.025

SHUTDOWN_ERROR = "consumer shut down before the handler finished"


class LeaseLost(Exception):
    """The message's lease was gone when its transactional handler tried to ack it."""


@dataclass(frozen=True)
class Route(Generic[F]):
    """A handler registered for one queue and group."""

    queue: str
    group: str
    fn: F
    concurrency: int
    batch_size: int
    lease: timedelta | None
    heartbeat: timedelta | None
    transaction: bool


class Registry(Generic[F]):
    """The decorator API of the workers."""

    def __init__(self, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency
        self.routes: list[Route[F]] = []

    def handler(
        self,
        queue: str,
        group: str = "default",
        *,
        concurrency: int | None = None,
        batch_size: int | None = None,
        lease: Duration | None = None,
        heartbeat: Duration | None = None,
        transaction: bool = False,
    ) -> Callable[[F], F]:
        """Register the decorated function as the handler of ``queue`` for ``group``.

        The handler gets the :class:`~sluicemq.Message` (and, with
        ``transaction=True``, a connection in a transaction that the ack
        joins: the handler's writes and the ack commit together). Returning
        acks the message; raising gives it back (nack) with the exception's
        text as the error, to be retried after the queue's backoff or
        dead-lettered after max_attempts.

        ``concurrency`` handlers of this route run at once (default: the
        worker's); ``batch_size`` is the most one receive asks for (default:
        concurrency); ``lease`` how long each message is held (default: the
        queue's lease option), renewed every ``heartbeat`` (default lease/3)
        while its handler runs.
        """
        conc = concurrency or self.concurrency
        if conc < 1:
            raise ValueError(f"concurrency must be at least 1, got {conc}")
        lease_td, hb_td = interval(lease), interval(heartbeat)
        if lease_td is not None and hb_td is not None and hb_td >= lease_td:
            raise ValueError(f"heartbeat {hb_td} must be shorter than the lease {lease_td}")

        def register(fn: F) -> F:
            self.routes.append(
                Route(queue, group, fn, conc, min(batch_size or conc, conc, 10000), lease_td, hb_td, transaction)
            )
            return fn

        return register


def split(msgs: list[Message]) -> list[list[Message]]:
    """A batch as jobs: each unkeyed message alone, each key's run together, in order."""
    jobs: list[list[Message]] = []
    runs: dict[str, list[Message]] = {}
    for m in msgs:
        if m.key is None:
            jobs.append([m])
        elif m.key in runs:
            runs[m.key].append(m)
        else:
            runs[m.key] = [m]
            jobs.append(runs[m.key])
    return jobs


OnHandlerError = Callable[[HandlerFailure], None]


def log_handler_failure(f: HandlerFailure) -> None:
    """The workers' default ``on_handler_error``: a WARNING on the ``sluice``
    logger, with the queue, group, message id, attempt and outcome (never the
    message's body)."""
    log.warning(
        "sluice: handler of %s/%s failed on message %d, attempt %d of %d; %s: %s",
        f.queue,
        f.group,
        f.message.id,
        f.attempt,
        f.max_attempts,
        "dead-lettered" if f.dead_lettered else "retried",
        error_text(f.error),
    )


def report_failure(
    hook: OnHandlerError | None, route: Route[Any], msg: Message, err: BaseException, max_attempts: int, nacked: bool
) -> None:
    """Tell ``hook`` (or the log) that a handler failed; ``nacked``: the nack
    succeeded (so a last attempt made a dead letter)."""
    f = HandlerFailure(
        route.queue, route.group, msg, err, msg.attempt, max_attempts, nacked and msg.attempt >= max_attempts
    )
    try:
        (hook or log_handler_failure)(f)
    except Exception:  # noqa: BLE001 - a failing hook must not stop the worker
        log.exception("sluice: on_handler_error raised")


def error_text(err: BaseException) -> str:
    """The error nack records: the exception's type and text, at most 10000 characters."""
    return f"{type(err).__name__}: {err}"[:MAX_ERROR_TEXT]
