"""The asyncio client: every call of sluice's SQL API, on a psycopg pool.

Every method takes an optional ``conn``: a :class:`psycopg.AsyncConnection` of
the caller's. The call then runs on it, inside the caller's transaction, so
that sends, acks and the application's own writes commit or roll back
together. Without ``conn`` the call takes a connection from the pool and
commits on its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from . import _sql
from ._sql import Duration
from .errors import translate
from .types import DeadLetter, Lease, MaintainResult, Message, PeekedMessage, QueueInfo, QueueOptions, QueueStatus

__all__ = ["AsyncClient"]


class AsyncClient:
    """Sends, receives and administers sluice queues through a psycopg async pool.

    ``pool`` is a :class:`psycopg_pool.AsyncConnectionPool` (the client never
    closes it; open it first) or a connection string: then the client makes
    and owns a pool, opened by :meth:`open` or ``async with`` and closed by
    :meth:`close`. Safe for use from many tasks.
    """

    def __init__(self, pool: AsyncConnectionPool | str, *, max_size: int = 10) -> None:
        if isinstance(pool, str):
            if True:  # ASYNC: opened by open() or ``async with``
                self.pool = AsyncConnectionPool(pool, min_size=1, max_size=max_size, open=False)
            else:  # opened here: Client has no open()
                self.pool = AsyncConnectionPool(pool, min_size=1, max_size=max_size, open=True)
            self._owned = True
        else:
            self.pool = pool
            self._owned = False

    if True:  # ASYNC: only AsyncClient has open() (Client's pool opens when made)

        async def open(self) -> AsyncClient:
            """Open the pool if the client made it; returns the client."""
            if self._owned:
                await self.pool.open()
            return self

    async def close(self) -> None:
        """Close the pool if the client made it."""
        if self._owned:
            await self.pool.close()

    async def __aenter__(self) -> AsyncClient:
        if True:  # ASYNC
            return await self.open()
        else:
            return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection of the pool in a transaction, committed when the block
        ends (rolled back if it raises). Pass it as ``conn=`` to join calls."""
        async with self.pool.connection() as conn, conn.transaction():
            yield conn

    # -- plumbing ---------------------------------------------------------

    @asynccontextmanager
    async def _conn(self, conn: psycopg.AsyncConnection[Any] | None) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if conn is not None:
            with translate():
                yield conn
            return
        with translate():
            async with self.pool.connection() as c:
                yield c

    async def _all(
        self, sql: str, params: Sequence[Any], conn: psycopg.AsyncConnection[Any] | None
    ) -> list[tuple[Any, ...]]:
        async with self._conn(conn) as c:
            cur = await c.execute(sql, params)
            return await cur.fetchall()

    async def _one(self, sql: str, params: Sequence[Any], conn: psycopg.AsyncConnection[Any] | None) -> Any:
        rows = await self._all(sql, params, conn)
        return rows[0][0]

    # -- queues -----------------------------------------------------------

    async def create_queue(
        self,
        queue: str,
        options: QueueOptions | Mapping[str, Any] | None = None,
        *,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> None:
        """Create a queue with the options set in ``options`` (the engine's defaults
        for the rest), e.g. ``QueueOptions(lease=30, max_attempts=5, lanes=1)``;
        durations as timedelta or seconds. A mapping of create_queue's option
        names (docs/sql.md) is the older form, still taken."""
        await self._all(_sql.CREATE_QUEUE, (queue, _sql.options(options)), conn)

    async def drop_queue(self, queue: str, *, conn: psycopg.AsyncConnection[Any] | None = None) -> bool:
        """Drop a queue with its groups, messages and dead letters; whether it existed.
        Waits for the transactions using the queue without holding its other calls
        up; with the session's lock_timeout set, raises psycopg's LockNotAvailable
        (SQLSTATE 55P03, naming the holder's pid; nothing changed) after that long."""
        return bool(await self._one(_sql.DROP_QUEUE, (queue,), conn))

    async def alter_queue(
        self,
        queue: str,
        options: QueueOptions | Mapping[str, Any],
        *,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> QueueOptions:
        """Change the options set in ``options`` (the rest keep their values);
        returns all the queue's options afterwards. lanes, slots and engine are
        fixed at creation, default_group is create_queue's only (InvalidOption)."""
        result = await self._one(_sql.ALTER_QUEUE, (_sql.DURATION_OPTIONS, queue, _sql.options(options)), conn)
        return _sql.queue_options(result)

    async def purge_queue(self, queue: str, *, conn: psycopg.AsyncConnection[Any] | None = None) -> int:
        """Remove every message of a queue; returns how many. Waits as drop_queue does,
        and raises LockNotAvailable (55P03) as it does."""
        return int(await self._one(_sql.PURGE_QUEUE, (queue,), conn))

    async def upgrade_queue(self, queue: str, *, conn: psycopg.AsyncConnection[Any] | None = None) -> bool:
        """Replace a queue of engine 1 by one of engine 2 of the same name, options and
        groups, in place, without copying messages; whether it did (False: of engine 2
        already). Each group receives what the old storage holds first; status counts
        both, and seek_group raises NotSupported, until maintain() drops the old storage
        once every group has drained it. A queue of the pgmq layer too. Admin only;
        QueueNotFound, InvalidName, NotSupported while an earlier upgrade drains;
        LockNotAvailable (55P03) as drop_queue."""
        return bool(await self._one(_sql.UPGRADE_QUEUE, (queue,), conn))

    async def list_queues(self, *, conn: psycopg.AsyncConnection[Any] | None = None) -> list[QueueInfo]:
        """Every queue, by name."""
        return [_sql.queue_info(r) for r in await self._all(_sql.LIST_QUEUES, (_sql.DURATION_OPTIONS,), conn)]

    async def create_group(
        self,
        queue: str,
        group: str,
        *,
        start_from: str = "earliest",
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> None:
        """Add a consumer group: start_from 'earliest', 'latest' or a timestamp."""
        await self._all(_sql.CREATE_GROUP, (queue, group, start_from), conn)

    async def drop_group(self, queue: str, group: str, *, conn: psycopg.AsyncConnection[Any] | None = None) -> bool:
        """Remove a consumer group and its dead letters; whether it existed."""
        return bool(await self._one(_sql.DROP_GROUP, (queue, group), conn))

    async def seek_group(
        self, queue: str, group: str, to_position: str, *, conn: psycopg.AsyncConnection[Any] | None = None
    ) -> None:
        """Move a consumer group to 'earliest', 'latest' or a timestamp: backward it
        receives again what it acked, forward it skips. It keeps its name, ttl and
        dead letters; leases held at the seek go stale, pending retries are forgotten."""
        await self._all(_sql.SEEK_GROUP, (queue, group, to_position), conn)

    # -- sending ----------------------------------------------------------

    async def send(
        self,
        queue: str,
        body: Any,
        *,
        headers: Mapping[str, Any] | None = None,
        key: str | None = None,
        delay: Duration | None = None,
        priority: int = 0,
        dedup_key: str | None = None,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> int:
        """Append one message (any JSON-serialisable value) and return its id."""
        params = _sql.send_params(queue, body, headers, key, delay, priority, dedup_key)
        return int(await self._one(_sql.SEND, params, conn))

    async def send_batch(
        self,
        queue: str,
        bodies: Sequence[Any],
        *,
        headers: Sequence[Mapping[str, Any] | None] | None = None,
        keys: Sequence[str | None] | None = None,
        delay: Duration | None = None,
        priorities: Sequence[int] | None = None,
        dedup_keys: Sequence[str | None] | None = None,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> list[int]:
        """Append many messages atomically; one id per body, in order. The
        per-message sequences, when given, have one element per body."""
        params = _sql.send_batch_params(queue, bodies, headers, keys, delay, priorities, dedup_keys)
        return [int(r[0]) for r in await self._all(_sql.SEND_BATCH, params, conn)]

    # -- receiving and completing ----------------------------------------

    async def receive(
        self,
        queue: str,
        group: str = "default",
        *,
        max_messages: int = 1,
        lease: Duration | None = None,
        consumer: str | None = None,
        ack: Sequence[str] | None = None,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> list[Message]:
        """Lease up to max_messages ready messages (none: an empty list). ``ack``
        completes receipts of a previous batch in the same call."""
        params = _sql.receive_params(queue, group, max_messages, lease, consumer, ack)
        return [_sql.message(r, queue, group) for r in await self._all(_sql.RECEIVE, params, conn)]

    async def ack(
        self,
        queue: str,
        group: str,
        receipts: Sequence[str],
        *,
        durable: bool = True,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> int:
        """Complete messages; returns how many were completed now (stale receipts are not).
        Durable by default: the commit waits for the disk. ``durable=False`` (an explicit
        opt-in) commits the ack's transaction asynchronously: no flush to wait for, but a
        server crash may lose the ack, and the messages come again."""
        return int(await self._one(_sql.ACK, (queue, group, list(receipts), durable), conn))

    async def nack(
        self,
        queue: str,
        group: str,
        receipt: str,
        *,
        delay: Duration | None = None,
        error: str | None = None,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> bool:
        """Give a message back after a failure: retried after ``delay`` (None:
        the queue's backoff; 0: at once) or dead-lettered. False for a stale receipt."""
        return bool(await self._one(_sql.NACK, _sql.nack_params(queue, group, receipt, delay, error), conn))

    async def extend(
        self,
        queue: str,
        group: str,
        receipts: Sequence[str],
        lease: Duration,
        *,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> int:
        """Renew leases to at least now + lease (never shorter); returns how many were renewed."""
        return int(await self._one(_sql.EXTEND, (queue, group, list(receipts), _sql.interval(lease)), conn))

    # -- status, dead letters, peek, leases, upkeep ----------------------

    async def status(self, queue: str | None = None, *, conn: psycopg.AsyncConnection[Any] | None = None) -> list[QueueStatus]:
        """One row per group of a queue (or of every queue)."""
        return [_sql.queue_status(r) for r in await self._all(_sql.STATUS, (queue,), conn)]

    async def dead_letters(
        self,
        queue: str,
        group: str | None = None,
        *,
        max_rows: int = 100,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> list[DeadLetter]:
        """Dead letters neither redriven nor discarded, oldest first (of one group, or all)."""
        return [_sql.dead_letter(r) for r in await self._all(_sql.DEAD_LETTERS, (queue, group, max_rows), conn)]

    async def redrive(
        self,
        queue: str,
        group: str | None = None,
        ids: Sequence[int] | None = None,
        *,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> int:
        """Make dead letters deliverable again (of one group or all, these ids or all)."""
        return int(await self._one(_sql.REDRIVE, (queue, group, None if ids is None else list(ids)), conn))

    async def discard_dead_letters(
        self,
        queue: str,
        group: str | None = None,
        ids: Sequence[int] | None = None,
        *,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> int:
        """Drop dead letters for good: all of ``group``'s when ``ids`` is None, else
        those of these message ids (of ``group``, or of every group when it is
        None). A discarded dead letter is no longer listed, counted in ``dead`` or
        redriven (``dead_lettered`` still counts it). Neither a group nor ids, or
        an empty ``ids``, raises InvalidArgument (SL006): it never discards a
        whole queue's by omission. Needs role sluice_admin. Returns how many."""
        return int(await self._one(_sql.DISCARD_DEAD_LETTERS, (queue, group, None if ids is None else list(ids)), conn))

    async def peek(
        self,
        queue: str,
        *,
        max_messages: int = 10,
        after_id: int | None = None,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> list[PeekedMessage]:
        """The messages a queue stores, by id, without receiving them (leases and
        changes nothing): not yet delivered, in flight, and completed ones until
        their epoch is reclaimed. ``after_id``: only ids above it (pass the last
        id of a page to get the next one). Reads every stored message."""
        return [_sql.peeked_message(r) for r in await self._all(_sql.PEEK, (queue, max_messages, after_id), conn)]

    async def leases(
        self,
        queue: str,
        group: str | None = None,
        *,
        max_messages: int = 100,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> list[Lease]:
        """The deliveries in flight (leased, not expired, not completed), the
        earliest expiry first (of one group, or all); without receipts."""
        return [_sql.lease(r) for r in await self._all(_sql.LEASES, (queue, group, max_messages), conn)]

    async def maintain(self, *, conn: psycopg.AsyncConnection[Any] | None = None) -> list[MaintainResult]:
        """Scheduled upkeep of every queue (rotation, reclaim)."""
        return [_sql.maintain_result(r) for r in await self._all(_sql.MAINTAIN, (), conn)]

    async def version(self, *, conn: psycopg.AsyncConnection[Any] | None = None) -> str:
        """The version of the installed sluice engine."""
        return str(await self._one(_sql.VERSION, (), conn))
