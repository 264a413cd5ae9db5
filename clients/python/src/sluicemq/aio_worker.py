"""AsyncWorker: consume queues with async handlers on one event loop.

    worker = sluicemq.AsyncWorker(client, concurrency=50)

    @worker.handler("emails")
    async def send_email(msg: sluicemq.Message) -> None:
        ...

    asyncio.run(worker.run())   # until SIGTERM or SIGINT

Like the Go library's Consume: it receives in batches, in short
transactions of their own; renews the leases of running handlers
(heartbeat); acks a message when its handler returns and nacks it with the
exception's text when it raises (the acks go in batches, durably, on a
task of their own beside the receives, which so never wait for an ack's
commit; with async_commit_acks they ride on the next receive instead);
hands the messages of one key to one task in order, acking each before the
next and stopping at the first failure (the engine releases the rest of the
run, which comes back after the failed one); waits
for a NOTIFY on channel 'sluice' from a committed send (LISTEN on a
connection of its own) or for the poll interval when the queue looks empty.
On stop it stops receiving, lets running handlers finish for up to the
drain timeout, then cancels those still running and gives their messages back for
immediate redelivery.

worker.py (Worker) is generated from this file by tools/async_to_sync.py:
edit this one. What differs between tasks and threads is in _acompat.py and
_compat.py, or in the ``if True:  # ASYNC`` blocks below (their ``else:``
branch is the sync code).
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import psycopg

from . import _sql
from ._acompat import (
    ACondition,
    AEvent,
    AHandlers,
    ATask,
    add_signal_handlers,
    ahalt,
    ajoin,
    aresolve,
    asleep,
    aspawn,
)
from ._routes import (
    HOT_PERIOD,
    HOT_POLL,
    SHUTDOWN_ERROR,
    AsyncHandler,
    LeaseLost,
    OnHandlerError,
    Registry,
    Route,
    error_text,
    log,
    report_failure,
    split,
)
from .aio import AsyncClient
from .errors import QueueNotFound, SluiceError
from .types import Message

__all__ = ["AsyncWorker"]

ACK_BATCH = 1000  # receipts per ack call of the acker and at shutdown


class AsyncWorker(Registry[AsyncHandler]):
    """Runs the async handlers registered with :meth:`handler` as tasks.

    ``concurrency`` is the default number of handlers per route running at
    once; ``poll_interval`` (seconds) how long an idle consumer waits for a
    wake-up before it looks again; ``drain_timeout`` (seconds) how long
    :meth:`stop` lets running handlers finish; ``listen=False`` turns off
    LISTEN wake-ups (behind a transaction-mode pooler such as PgBouncer);
    ``consumer`` names this worker in its receives. ``on_handler_error`` is
    called with a :class:`~sluicemq.HandlerFailure` each time a handler raises
    (a plain function, called on the worker's loop); by default a WARNING is logged on the
    ``sluicemq`` logger. Acks are durable (each batch its own transaction, waiting for the
    disk); ``async_commit_acks=True`` lets them ride on the next receive, which commits
    asynchronously: a server crash may then lose acks, and their messages come again.
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        concurrency: int = 10,
        poll_interval: float = 0.5,
        drain_timeout: float = 10.0,
        listen: bool = True,
        consumer: str | None = None,
        on_handler_error: OnHandlerError | None = None,
        async_commit_acks: bool = False,
    ) -> None:
        super().__init__(concurrency)
        self.client = client
        self.on_handler_error = on_handler_error
        self.async_commit_acks = async_commit_acks
        self.poll_interval = poll_interval
        self.drain_timeout = drain_timeout
        self.listen = listen
        self.consumer = consumer
        self._consumers: list[_Consumer] = []
        self._stop = AEvent()
        self._listener: ATask | None = None
        self.error: BaseException | None = None

    if True:  # ASYNC: AsyncWorker has no start(), and its stop() only asks run() to stop

        def stop(self) -> None:
            """Ask :meth:`run` to stop (drain, release, return). Call it on the worker's loop."""
            self._stop.set()

    else:

        def start(self) -> None:
            """Start consuming on background threads; returns at once."""
            self._start()

        def stop(self) -> None:
            """Stop receiving, drain running handlers (up to drain_timeout), release
            the rest, and return when done. Safe to call from any thread."""
            self._shutdown()

    async def run(self, *, handle_signals: bool = True) -> None:
        """Consume until SIGTERM or SIGINT (when ``handle_signals``) or :meth:`stop`,
        then shut down gracefully. Re-raises an error that stopped the worker (a
        queue or group that does not exist)."""
        self._stop = AEvent()
        restore = add_signal_handlers(lambda: self._stop.set(), handle_signals)
        try:
            await self._start()
            if True:  # ASYNC
                await self._stop.wait()
            else:  # with a timeout: signal handlers run on the main thread meanwhile
                while not self._stop.wait(0.2):
                    pass
        finally:
            await self._shutdown()
            restore()
        if self.error is not None:
            raise self.error

    async def _start(self) -> None:
        if not self.routes:
            raise ValueError("no handler registered: use @worker.handler(queue)")
        self._stop.clear()
        self._consumers = [await _Consumer.make(self, r) for r in self.routes]
        for c in self._consumers:
            c.start()
        if self.listen:
            self._listener = aspawn(self._listen, name="sluice-listen")

    async def _shutdown(self) -> None:
        """Stop receiving, drain the running handlers (up to drain_timeout) and
        release the rest; then stop listening."""
        self._stop.set()
        consumers, self._consumers = self._consumers, []
        listener, self._listener = self._listener, None
        if True:  # ASYNC: the consumers drain at once
            await asyncio.gather(*(c.shutdown() for c in consumers))
        else:
            for c in consumers:
                c.shutdown()
        await ahalt(listener)

    def _fail(self, err: BaseException) -> None:
        if self.error is None:
            self.error = err
        self._stop.set()

    async def _listen(self) -> None:
        """LISTEN on channel 'sluice' and wake the consumers of the notified queue;
        reconnect after a failure (polling covers the gap)."""
        pause = 0.1
        pool = self.client.pool
        while not self._stop.is_set():
            try:
                info, kwargs = _sql.listen_params(await aresolve(pool.conninfo), await aresolve(pool.kwargs))
                async with await psycopg.AsyncConnection.connect(info, autocommit=True, **kwargs) as conn:
                    await conn.execute(_sql.LISTEN)
                    pause = 0.1
                    for c in self._consumers:  # sends may have committed meanwhile
                        await c.kick()
                    while not self._stop.is_set():
                        async for n in conn.notifies(timeout=0.5):
                            for c in self._consumers:
                                if c.route.queue == n.payload:
                                    await c.kick()
            except Exception as err:  # noqa: BLE001 - any failure: poll, then reconnect
                if self._stop.is_set():
                    return
                log.warning("sluice: LISTEN connection failed; polling until it is back: %s", err)
                await self._stop.wait_timeout(pause)
                pause = min(2 * pause, 5.0)


class _Job:
    __slots__ = ("msg", "released")

    def __init__(self, msg: Message) -> None:
        self.msg = msg
        self.released = False


class _Consumer:
    """One route's fetch loop, acker, handler tasks and heartbeat."""

    def __init__(self, worker: AsyncWorker, route: Route[AsyncHandler], lease: timedelta, max_attempts: int) -> None:
        self.w, self.route, self.c = worker, route, worker.client
        self.lease = lease
        self.max_attempts = max_attempts
        self.heartbeat = route.heartbeat or lease / 3
        if self.heartbeat >= lease:
            raise ValueError(f"heartbeat {self.heartbeat} must be shorter than the lease {lease}")
        self.cond = ACondition()
        self.free = route.concurrency
        self.inflight: dict[str, _Job] = {}
        self.acks: list[str] = []  # receipts to acknowledge, oldest first
        self.keyed = 0  # acks[keyed - 1] is the last keyed message's receipt (0: none is)
        self.acks_closed = False  # shutdown acknowledges what is left: the acker returns
        self.acker: ATask | None = None
        self.kicked = False
        self.stopping = False
        self.handlers = AHandlers(route.concurrency, f"sluice-{route.queue}")
        self.fetcher: ATask | None = None
        self.heartbeater: ATask | None = None
        self.hb_stop = AEvent()

    @classmethod
    async def make(cls, worker: AsyncWorker, route: Route[AsyncHandler]) -> _Consumer:
        rows = await worker.client._all(_sql.QUEUE_SETTINGS, (route.queue,), None)
        if not rows:
            raise QueueNotFound(f"queue '{route.queue}' does not exist")
        lease: timedelta = route.lease or rows[0][0]
        return cls(worker, route, lease, rows[0][1])

    def start(self) -> None:
        self.fetcher = aspawn(self._fetch, name=f"sluice-{self.route.queue}")
        self.heartbeater = aspawn(self._heartbeat, name=f"sluice-{self.route.queue}")
        if not self.w.async_commit_acks:
            self.acker = aspawn(self._acker, name=f"sluice-{self.route.queue}")

    async def kick(self) -> None:
        async with self.cond:
            self.kicked = True
            self.cond.notify_all()

    # -- fetching ---------------------------------------------------------

    async def _fetch(self) -> None:
        q, g = self.route.queue, self.route.group
        active = 0.0
        while True:
            async with self.cond:
                await self.cond.wait_until(lambda: self.stopping or self.free > 0)
                if self.stopping:
                    return
                n = min(self.free, self.route.batch_size)
                # With async_commit_acks the acks ride on the receive (one round
                # trip and one transaction for both, committed asynchronously);
                # durable ones are the acker's, sent beside the receive.
                acks = self._take_acks() if self.w.async_commit_acks else []
            try:
                msgs = await self.c.receive(
                    q, g, max_messages=n, lease=self.lease, consumer=self.w.consumer, ack=acks or None
                )
            except Exception as err:  # noqa: BLE001
                await self._ack_alone(acks)
                if isinstance(err, SluiceError):
                    self.w._fail(err)
                    return
                log.error("sluice: receive from %s/%s failed, retrying: %s", q, g, err)
                await asleep(self.w.poll_interval)
                continue
            jobs: list[list[_Job]] = []
            async with self.cond:
                stopping = self.stopping
                if not stopping:
                    self.free -= len(msgs)
                    jobs = [[_Job(m) for m in run] for run in split(msgs)]
                    for job in jobs:
                        for j in job:
                            self.inflight[j.msg.receipt] = j
            if stopping:
                await self._release(msgs)
                return
            for job in jobs:
                self.handlers.submit(self._run, job)
            if msgs:
                active = time.monotonic()
                continue
            wait = self.w.poll_interval
            if time.monotonic() - active < HOT_PERIOD:
                wait = min(wait, HOT_POLL)
            async with self.cond:
                await self.cond.wait_until(lambda: self.kicked or self.stopping or self._acks_ride(), timeout=wait)
                if self.kicked:
                    active = time.monotonic()
                self.kicked = False

    def _acks_ride(self) -> bool:
        """Receipts wait for the next receive to carry them (async_commit_acks)."""
        return self.w.async_commit_acks and bool(self.acks)

    def _take_acks(self, limit: int | None = None) -> list[str]:
        """Takes the receipts waiting (the first ``limit`` of them); the caller
        holds the lock."""
        n = len(self.acks) if limit is None else min(limit, len(self.acks))
        taken, self.acks = self.acks[:n], self.acks[n:]
        self.keyed = max(0, self.keyed - n)
        return taken

    async def _acker(self) -> None:
        """Acknowledges the receipts that handlers queue, durably, beside the fetch
        loop's receives: one ack call at a time, carrying the receipts queued
        meanwhile (up to 1,000 a call). So no receive waits for an ack's commit to
        reach the disk, nor for a transaction that holds an ack up (a row lock on
        the same message). The fetch loop is not woken for an ack, except when
        one carried a keyed message's receipt: the key's next message becomes
        receivable only once it committed. Returns once shutdown closed the acks
        (shutdown acknowledges what is left, after this call in flight)."""
        while True:
            async with self.cond:
                await self.cond.wait_until(lambda: self.acks_closed or bool(self.acks))
                if self.acks_closed:
                    return
                keyed = self.keyed > 0  # (a keyed receipt may be past this batch: a spare wake-up)
                acks = self._take_acks(ACK_BATCH)
            await self._ack_alone(acks)
            if keyed:
                await self.kick()

    async def _ack_alone(self, acks: list[str]) -> None:
        if not acks:
            return
        try:
            await self.c.ack(self.route.queue, self.route.group, acks, durable=not self.w.async_commit_acks)
        except Exception as err:  # noqa: BLE001
            log.error("sluice: ack failed; the messages are redelivered when their leases expire: %s", err)

    # -- handling ---------------------------------------------------------

    async def _run(self, jobs: list[_Job]) -> None:
        """Handle one job: an unkeyed message, or a key's run in order, stopping
        at the first failure (the engine's nack released the rest)."""
        for i, job in enumerate(jobs):
            if not await self._handle(job, ack_now=i < len(jobs) - 1):
                for rest in jobs[i + 1 :]:
                    await self._untrack(rest)
                return

    async def _untrack(self, job: _Job, ack: bool = False) -> bool:
        """The job is no longer in flight (``ack``: its ack is queued, for the acker
        or the next receive, unless it was released); whether it was released at
        shutdown."""
        async with self.cond:
            self.inflight.pop(job.msg.receipt, None)
            self.free += 1
            if ack and not job.released:
                self.acks.append(job.msg.receipt)
                if job.msg.key is not None:
                    self.keyed = len(self.acks)
            self.cond.notify_all()
            return job.released

    async def _call(self, msg: Message) -> BaseException | None:
        r = self.route
        try:
            if not r.transaction:
                await r.fn(msg)
                return None
            async with self.c.transaction() as conn:
                await r.fn(msg, conn)
                if await self.c.ack(r.queue, r.group, [msg.receipt], conn=conn) != 1:
                    raise LeaseLost(f"message {msg.id}: lease lost before the ack; its work is rolled back")
            return None
        except asyncio.CancelledError:
            return asyncio.CancelledError("handler cancelled at shutdown")
        except Exception as err:  # noqa: BLE001 - a failing handler is a nack
            return err

    async def _handle(self, job: _Job, ack_now: bool) -> bool:
        r, m = self.route, job.msg
        err = await self._call(m)
        if err is None and r.transaction:
            await self._untrack(job)
            if m.key is not None and not ack_now:
                await self.kick()  # (its ack committed: the key's next message is receivable)
            return True
        if err is None and not ack_now:
            await self._untrack(job, ack=True)
            return True
        if await self._untrack(job):
            return False
        if err is None:
            try:
                await self.c.ack(r.queue, r.group, [m.receipt], durable=not self.w.async_commit_acks)
                return True
            except Exception as aerr:  # noqa: BLE001
                log.error("sluice: ack of message %d failed; it and the rest of its run come back: %s", m.id, aerr)
                return False
        if isinstance(err, LeaseLost):
            report_failure(self.w.on_handler_error, r, m, err, self.max_attempts, False)
            return False
        nacked = False
        try:
            nacked = await self.c.nack(r.queue, r.group, m.receipt, error=error_text(err))
        except Exception as nerr:  # noqa: BLE001
            log.error("sluice: nack of message %d failed; it comes back when its lease expires: %s", m.id, nerr)
        if nacked and m.key is not None and m.attempt >= self.max_attempts:
            await self.kick()  # (a dead letter: the key's next message is receivable; a retry holds it)
        report_failure(self.w.on_handler_error, r, m, err, self.max_attempts, nacked)
        return False

    # -- heartbeat and shutdown ------------------------------------------

    async def _heartbeat(self) -> None:
        r = self.route
        while not await self.hb_stop.wait_timeout(self.heartbeat.total_seconds()):
            async with self.cond:
                receipts = [rc for rc, j in self.inflight.items() if not j.released]
            if not receipts:
                continue
            try:
                await self.c.extend(r.queue, r.group, receipts, self.lease)
            except Exception as err:  # noqa: BLE001
                log.error("sluice: extending %d leases failed: %s", len(receipts), err)

    async def _release(self, msgs: list[Message]) -> None:
        for m in msgs:
            try:
                await self.c.nack(self.route.queue, self.route.group, m.receipt, delay=0, error=SHUTDOWN_ERROR)
            except Exception as err:  # noqa: BLE001
                log.error("sluice: giving back message %d failed; it comes back when its lease expires: %s", m.id, err)

    async def shutdown(self) -> None:
        async with self.cond:
            self.stopping = True
            self.cond.notify_all()
        await ajoin(self.fetcher)  # a receive in flight finishes (and gives back what it got)
        async with self.cond:
            drained = await self.cond.wait_until(lambda: not self.inflight, timeout=self.w.drain_timeout)
            left: list[Message] = []
            for j in self.inflight.values():
                j.released = True
                left.append(j.msg)
        await self.handlers.shutdown(wait=drained)
        # No receipt is queued from now on (the handlers finished, or their
        # outcome is ignored): the acker's call in flight ends, then the rest go.
        async with self.cond:
            self.acks_closed = True
            self.cond.notify_all()
        await ajoin(self.acker)
        while True:
            async with self.cond:
                acks = self._take_acks(ACK_BATCH)
            if not acks:
                break
            await self._ack_alone(acks)
        await self._release(left)
        self.hb_stop.set()
        await ahalt(self.heartbeater)
