"""AsyncWorker: consume queues with async handlers on one event loop.

    worker = sluicemq.AsyncWorker(client, concurrency=50)

    @worker.handler("emails")
    async def send_email(msg: sluicemq.Message) -> None:
        ...

    asyncio.run(worker.run())   # until SIGTERM or SIGINT

The behaviour is the Worker's (see sluicemq.worker), with tasks for threads.
At stop, handlers still running after the drain timeout are cancelled and
their messages given back for immediate redelivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import psycopg

from . import _sql
from ._routes import (
    HOT_PERIOD,
    HOT_POLL,
    SHUTDOWN_ERROR,
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

AsyncHandler = Callable[..., Awaitable[Any]]


class AsyncWorker(Registry[AsyncHandler]):
    """Runs the async handlers registered with :meth:`handler` (same options as
    :class:`sluicemq.Worker`; ``on_handler_error`` is a plain function, called
    on the worker's loop)."""

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
        self._stop: asyncio.Event | None = None
        self.error: BaseException | None = None

    def stop(self) -> None:
        """Ask :meth:`run` to stop (drain, release, return). Call it on the worker's loop."""
        if self._stop is not None:
            self._stop.set()

    async def run(self, *, handle_signals: bool = True) -> None:
        """Consume until SIGTERM or SIGINT (when ``handle_signals``) or :meth:`stop`,
        then shut down gracefully. Re-raises an error that stopped the worker."""
        if not self.routes:
            raise ValueError("no handler registered: use @worker.handler(queue)")
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        consumers = [await _Consumer.make(self, r) for r in self.routes]
        sigs: list[signal.Signals] = []
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, self._stop.set)
                    sigs.append(sig)
        for c in consumers:
            c.fetcher = asyncio.create_task(c.fetch())
        tasks = [asyncio.create_task(c.heartbeat()) for c in consumers]
        listener = asyncio.create_task(self._listen(consumers)) if self.listen else None
        try:
            await self._stop.wait()
        finally:
            await asyncio.gather(*(c.shutdown() for c in consumers))
            for t in [*tasks, *([listener] if listener else [])]:
                t.cancel()
            await asyncio.gather(*tasks, *([listener] if listener else []), return_exceptions=True)
            for sig in sigs:
                loop.remove_signal_handler(sig)
        if self.error is not None:
            raise self.error

    def _fail(self, err: BaseException) -> None:
        if self.error is None:
            self.error = err
        self.stop()

    async def _listen(self, consumers: list[_Consumer]) -> None:
        pause = 0.1
        pool = self.client.pool
        while True:
            try:
                conninfo: Any = pool.conninfo
                kwargs: Any = pool.kwargs
                if callable(conninfo):
                    conninfo = conninfo()
                    if inspect.isawaitable(conninfo):
                        conninfo = await conninfo
                if callable(kwargs):
                    kwargs = kwargs()
                    if inspect.isawaitable(kwargs):
                        kwargs = await kwargs
                info, kw = _sql.listen_params(conninfo, kwargs)
                async with await psycopg.AsyncConnection.connect(info, autocommit=True, **kw) as conn:
                    await conn.execute(_sql.LISTEN)
                    pause = 0.1
                    for c in consumers:
                        c.kick()
                    async for n in conn.notifies():
                        for c in consumers:
                            if c.route.queue == n.payload:
                                c.kick()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - poll, then reconnect
                log.warning("sluice: LISTEN connection failed; polling until it is back: %s", err)
                await asyncio.sleep(pause)
                pause = min(2 * pause, 5.0)


class _Job:
    __slots__ = ("msg", "released")

    def __init__(self, msg: Message) -> None:
        self.msg = msg
        self.released = False


class _Consumer:
    """One route's fetch loop, handler tasks and heartbeat."""

    def __init__(self, worker: AsyncWorker, route: Route[AsyncHandler], lease: timedelta, max_attempts: int) -> None:
        self.w, self.route, self.c = worker, route, worker.client
        self.lease = lease
        self.max_attempts = max_attempts
        self.heartbeat_every = route.heartbeat or lease / 3
        if self.heartbeat_every >= lease:
            raise ValueError(f"heartbeat {self.heartbeat_every} must be shorter than the lease {lease}")
        self.cond = asyncio.Condition()
        self.free = route.concurrency
        self.inflight: dict[str, _Job] = {}
        self.acks: list[str] = []
        self.kicked = False
        self.stopping = False
        self.handlers: set[asyncio.Task[None]] = set()
        self.fetcher: asyncio.Task[None] | None = None
        self.wakers: set[asyncio.Task[None]] = set()

    @classmethod
    async def make(cls, worker: AsyncWorker, route: Route[AsyncHandler]) -> _Consumer:
        rows = await worker.client._all(_sql.QUEUE_SETTINGS, (route.queue,), None)
        if not rows:
            raise QueueNotFound(f"queue '{route.queue}' does not exist")
        lease: timedelta = route.lease or rows[0][0]
        return cls(worker, route, lease, rows[0][1])

    def kick(self) -> None:
        self.kicked = True
        t = asyncio.get_running_loop().create_task(self._notify())
        self.wakers.add(t)  # a reference until it is done
        t.add_done_callback(self.wakers.discard)

    async def _notify(self) -> None:
        async with self.cond:
            self.cond.notify_all()

    async def fetch(self) -> None:
        q, g = self.route.queue, self.route.group
        active = 0.0
        while True:
            async with self.cond:
                await self.cond.wait_for(lambda: self.stopping or self.free > 0)
                if self.stopping:
                    return
                n = min(self.free, self.route.batch_size)
                acks, self.acks = self.acks, []
            if acks and not self.w.async_commit_acks:
                await self._ack_alone(acks)  # durable, in its own transaction
                acks = []
            try:
                msgs = await self.c.receive(
                    q, g, max_messages=n, lease=self.lease, consumer=self.w.consumer, ack=acks or None
                )
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001
                await self._ack_alone(acks)
                if isinstance(err, SluiceError):
                    self.w._fail(err)
                    return
                log.error("sluice: receive from %s/%s failed, retrying: %s", q, g, err)
                await asyncio.sleep(self.w.poll_interval)
                continue
            if self.stopping:
                await self._release(msgs)
                return
            self.free -= len(msgs)
            for job in split(msgs):
                jobs = [_Job(m) for m in job]
                for j in jobs:
                    self.inflight[j.msg.receipt] = j
                t = asyncio.create_task(self._run(jobs))
                self.handlers.add(t)
                t.add_done_callback(self.handlers.discard)
            if msgs:
                active = time.monotonic()
                continue
            wait = self.w.poll_interval
            if time.monotonic() - active < HOT_PERIOD:
                wait = min(wait, HOT_POLL)
            async with self.cond:
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await asyncio.wait_for(
                        self.cond.wait_for(lambda: self.kicked or self.stopping or bool(self.acks)), wait
                    )
                if self.kicked:
                    active = time.monotonic()
                self.kicked = False

    async def _ack_alone(self, acks: list[str]) -> None:
        if not acks:
            return
        try:
            await self.c.ack(self.route.queue, self.route.group, acks, durable=not self.w.async_commit_acks)
        except Exception as err:  # noqa: BLE001
            log.error("sluice: ack failed; the messages are redelivered when their leases expire: %s", err)

    async def _run(self, jobs: list[_Job]) -> None:
        for i, job in enumerate(jobs):
            if not await self._handle(job, ack_now=i < len(jobs) - 1):
                for rest in jobs[i + 1 :]:
                    await self._untrack(rest)
                return

    async def _untrack(self, job: _Job, ack: bool = False) -> bool:
        async with self.cond:
            self.inflight.pop(job.msg.receipt, None)
            self.free += 1
            if ack and not job.released:
                self.acks.append(job.msg.receipt)
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
            return True
        if err is None and not ack_now:
            await self._untrack(job, ack=True)
            return True
        if await self._untrack(job):
            return False
        if isinstance(err, LeaseLost):
            report_failure(self.w.on_handler_error, r, m, err, self.max_attempts, False)
            return False
        nacked = False
        try:
            if err is None:
                await self.c.ack(r.queue, r.group, [m.receipt], durable=not self.w.async_commit_acks)
                return True
            nacked = await self.c.nack(r.queue, r.group, m.receipt, error=error_text(err))
        except Exception as aerr:  # noqa: BLE001
            log.error("sluice: completing message %d failed; it comes back when its lease expires: %s", m.id, aerr)
        if err is not None:
            report_failure(self.w.on_handler_error, r, m, err, self.max_attempts, nacked)
        return False

    async def heartbeat(self) -> None:
        r = self.route
        while True:
            await asyncio.sleep(self.heartbeat_every.total_seconds())
            receipts = [rc for rc, j in self.inflight.items() if not j.released]
            if not receipts:
                continue
            try:
                await self.c.extend(r.queue, r.group, receipts, self.lease)
            except asyncio.CancelledError:
                raise
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
        if self.fetcher is not None:
            # A receive in flight finishes (and gives back what it got).
            await asyncio.gather(self.fetcher, return_exceptions=True)
        if self.handlers:
            await asyncio.wait(set(self.handlers), timeout=self.w.drain_timeout)
        left = []
        for j in self.inflight.values():
            j.released = True
            left.append(j.msg)
        for t in set(self.handlers):
            t.cancel()
        if self.handlers:
            await asyncio.gather(*self.handlers, return_exceptions=True)
        acks, self.acks = self.acks, []
        await self._ack_alone(acks)
        await self._release(left)
