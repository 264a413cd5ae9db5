"""Worker: consume queues with handlers on threads.

    worker = sluicemq.Worker(client, concurrency=8)

    @worker.handler("emails", lease=30)
    def send_email(msg: sluicemq.Message) -> None:
        ...

    worker.run()   # until SIGTERM or SIGINT

Like the Go library's Consume: it receives in batches, in short
transactions of their own (acks of finished messages ride with the next
receive); renews the leases of running handlers (heartbeat); acks a
message when its handler returns and nacks it with the exception's text
when it raises; hands the messages of one key to one thread in order,
acking each before the next and stopping at the first failure (the engine
releases the rest of the run, which comes back after the failed one); waits
for a NOTIFY on channel 'sluice' from a committed send (LISTEN on a
connection of its own) or for the poll interval when the queue looks empty.
On stop it stops receiving, lets running handlers finish for up to the
drain timeout, then gives their messages back for immediate redelivery
(a thread cannot be killed: a handler still running then finishes, and its
outcome is ignored).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
from .client import Client
from .errors import QueueNotFound, SluiceError
from .types import Message

__all__ = ["Worker"]

Handler = Callable[..., Any]


class Worker(Registry[Handler]):
    """Runs the handlers registered with :meth:`handler` on threads.

    ``concurrency`` is the default number of handlers per route running at
    once; ``poll_interval`` (seconds) how long an idle consumer waits for a
    wake-up before it looks again; ``drain_timeout`` (seconds) how long
    :meth:`stop` lets running handlers finish; ``listen=False`` turns off
    LISTEN wake-ups (behind a transaction-mode pooler such as PgBouncer);
    ``consumer`` names this worker in its receives. ``on_handler_error`` is
    called with a :class:`~sluicemq.HandlerFailure` each time a handler raises
    (on the handler's thread); by default a WARNING is logged on the
    ``sluicemq`` logger. Acks are durable (each batch its own transaction, waiting for the
    disk); ``async_commit_acks=True`` lets them ride on the next receive, which commits
    asynchronously: a server crash may then lose acks, and their messages come again.
    """

    def __init__(
        self,
        client: Client,
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
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.error: BaseException | None = None

    def start(self) -> None:
        """Start consuming on background threads; returns at once."""
        if not self.routes:
            raise ValueError("no handler registered: use @worker.handler(queue)")
        self._stop.clear()
        self._consumers = [_Consumer(self, r) for r in self.routes]
        for c in self._consumers:
            c.start()
        if self.listen:
            t = threading.Thread(target=self._listen, name="sluice-listen", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Stop receiving, drain running handlers (up to drain_timeout), release
        the rest, and return when done. Safe to call from any thread."""
        self._stop.set()
        consumers, self._consumers = self._consumers, []
        for c in consumers:
            c.stop()
        for t in self._threads:
            t.join()
        self._threads = []

    def run(self, *, handle_signals: bool = True) -> None:
        """Consume until SIGTERM or SIGINT (when called from the main thread and
        ``handle_signals``) or :meth:`stop`, then shut down gracefully. Re-raises
        an error that stopped the worker (a queue or group that does not exist)."""
        old: dict[signal.Signals, Any] = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                old[sig] = signal.signal(sig, lambda *_: self._stop.set())
        try:
            self.start()
            while not self._stop.wait(0.2):
                pass
        finally:
            self.stop()
            for sig, h in old.items():
                signal.signal(sig, h)
        if self.error is not None:
            raise self.error

    def _fail(self, err: BaseException) -> None:
        if self.error is None:
            self.error = err
        self._stop.set()

    def _listen(self) -> None:
        """LISTEN on channel 'sluice' and wake the consumers of the notified queue;
        reconnect after a failure (polling covers the gap)."""
        pause = 0.1
        pool = self.client.pool
        while not self._stop.is_set():
            try:
                info, kwargs = _sql.listen_params(pool.conninfo, pool.kwargs)
                with psycopg.connect(info, autocommit=True, **kwargs) as conn:
                    conn.execute(_sql.LISTEN)
                    pause = 0.1
                    for c in self._consumers:  # sends may have committed meanwhile
                        c.kick()
                    while not self._stop.is_set():
                        for n in conn.notifies(timeout=0.5):
                            for c in self._consumers:
                                if c.route.queue == n.payload:
                                    c.kick()
            except Exception as err:  # noqa: BLE001 - any failure: poll, then reconnect
                if self._stop.is_set():
                    return
                log.warning("sluice: LISTEN connection failed; polling until it is back: %s", err)
                self._stop.wait(pause)
                pause = min(2 * pause, 5.0)


class _Job:
    __slots__ = ("msg", "released")

    def __init__(self, msg: Message) -> None:
        self.msg = msg
        self.released = False


class _Consumer:
    """One route's fetch loop, handler threads and heartbeat."""

    def __init__(self, worker: Worker, route: Route[Handler]) -> None:
        self.w, self.route, self.c = worker, route, worker.client
        lease, self.max_attempts = self._queue_settings()
        self.lease = route.lease or lease
        self.heartbeat = route.heartbeat or self.lease / 3
        if self.heartbeat >= self.lease:
            raise ValueError(f"heartbeat {self.heartbeat} must be shorter than the lease {self.lease}")
        self.cond = threading.Condition()
        self.free = route.concurrency
        self.inflight: dict[str, _Job] = {}
        self.acks: list[str] = []
        self.kicked = False
        self.stopping = False
        self.pool = ThreadPoolExecutor(route.concurrency, thread_name_prefix=f"sluice-{route.queue}")
        self.threads: list[threading.Thread] = []
        self.hb_stop = threading.Event()

    def _queue_settings(self) -> tuple[timedelta, int]:
        rows = self.c._all(_sql.QUEUE_SETTINGS, (self.route.queue,), None)
        if not rows:
            raise QueueNotFound(f"queue '{self.route.queue}' does not exist")
        lease: timedelta = rows[0][0]
        max_attempts: int = rows[0][1]
        return lease, max_attempts

    def start(self) -> None:
        for target in (self._fetch, self._heartbeat):
            t = threading.Thread(target=target, name=f"sluice-{self.route.queue}", daemon=True)
            t.start()
            self.threads.append(t)

    def kick(self) -> None:
        with self.cond:
            self.kicked = True
            self.cond.notify_all()

    # -- fetching ---------------------------------------------------------

    def _fetch(self) -> None:
        q, g = self.route.queue, self.route.group
        active = 0.0
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.stopping or self.free > 0)
                if self.stopping:
                    return
                n = min(self.free, self.route.batch_size)
                acks, self.acks = self.acks, []
            if acks and not self.w.async_commit_acks:
                self._ack_alone(acks)  # durable, in its own transaction
                acks = []
            try:
                msgs = self.c.receive(q, g, max_messages=n, lease=self.lease, consumer=self.w.consumer, ack=acks or None)
            except Exception as err:  # noqa: BLE001
                self._ack_alone(acks)
                if isinstance(err, SluiceError):
                    self.w._fail(err)
                    return
                log.error("sluice: receive from %s/%s failed, retrying: %s", q, g, err)
                time.sleep(self.w.poll_interval)
                continue
            with self.cond:
                if self.stopping:
                    stopping = True
                else:
                    stopping = False
                    self.free -= len(msgs)
                    for m in msgs:
                        self.inflight[m.receipt] = _Job(m)
            if stopping:
                self._release(msgs)
                return
            for job in split(msgs):
                self.pool.submit(self._run, [self.inflight[m.receipt] for m in job])
            if msgs:
                active = time.monotonic()
                continue
            wait = self.w.poll_interval
            if time.monotonic() - active < HOT_PERIOD:
                wait = min(wait, HOT_POLL)
            with self.cond:
                self.cond.wait_for(lambda: self.kicked or self.stopping or bool(self.acks), timeout=wait)
                if self.kicked:
                    active = time.monotonic()
                self.kicked = False

    def _ack_alone(self, acks: list[str]) -> None:
        if not acks:
            return
        try:
            self.c.ack(self.route.queue, self.route.group, acks, durable=not self.w.async_commit_acks)
        except Exception as err:  # noqa: BLE001
            log.error("sluice: ack failed; the messages are redelivered when their leases expire: %s", err)

    # -- handling ---------------------------------------------------------

    def _run(self, jobs: list[_Job]) -> None:
        """Handle one job: an unkeyed message, or a key's run in order, stopping
        at the first failure (the engine's nack released the rest)."""
        for i, job in enumerate(jobs):
            if not self._handle(job, ack_now=i < len(jobs) - 1):
                for rest in jobs[i + 1 :]:
                    self._untrack(rest)
                return

    def _untrack(self, job: _Job) -> bool:
        with self.cond:
            self.inflight.pop(job.msg.receipt, None)
            self.free += 1
            self.cond.notify_all()
            return job.released

    def _call(self, msg: Message) -> BaseException | None:
        r = self.route
        try:
            if not r.transaction:
                r.fn(msg)
                return None
            with self.c.transaction() as conn:
                r.fn(msg, conn)
                if self.c.ack(r.queue, r.group, [msg.receipt], conn=conn) != 1:
                    raise LeaseLost(f"message {msg.id}: lease lost before the ack; its work is rolled back")
            return None
        except Exception as err:  # noqa: BLE001 - a failing handler is a nack
            return err

    def _handle(self, job: _Job, ack_now: bool) -> bool:
        r, m = self.route, job.msg
        err = self._call(m)
        if r.transaction and err is None:
            self._untrack(job)
            return True
        if err is None and ack_now:
            released = self._untrack(job)
            if released:
                return False
            try:
                self.c.ack(r.queue, r.group, [m.receipt], durable=not self.w.async_commit_acks)
                return True
            except Exception as aerr:  # noqa: BLE001
                log.error("sluice: ack of message %d failed; it and the rest of its run come back: %s", m.id, aerr)
                return False
        if err is None:
            with self.cond:
                self.inflight.pop(m.receipt, None)
                self.free += 1
                if not job.released:
                    self.acks.append(m.receipt)
                self.cond.notify_all()
            return True
        if self._untrack(job):
            return False
        if isinstance(err, LeaseLost):
            report_failure(self.w.on_handler_error, r, m, err, self.max_attempts, False)
            return False
        nacked = False
        try:
            nacked = self.c.nack(r.queue, r.group, m.receipt, error=error_text(err))
        except Exception as nerr:  # noqa: BLE001
            log.error("sluice: nack of message %d failed; it comes back when its lease expires: %s", m.id, nerr)
        report_failure(self.w.on_handler_error, r, m, err, self.max_attempts, nacked)
        return False

    # -- heartbeat and shutdown ------------------------------------------

    def _heartbeat(self) -> None:
        r = self.route
        while not self.hb_stop.wait(self.heartbeat.total_seconds()):
            with self.cond:
                receipts = [rc for rc, j in self.inflight.items() if not j.released]
            if not receipts:
                continue
            try:
                self.c.extend(r.queue, r.group, receipts, self.lease)
            except Exception as err:  # noqa: BLE001
                log.error("sluice: extending %d leases failed: %s", len(receipts), err)

    def _release(self, msgs: list[Message]) -> None:
        for m in msgs:
            try:
                self.c.nack(self.route.queue, self.route.group, m.receipt, delay=0, error=SHUTDOWN_ERROR)
            except Exception as err:  # noqa: BLE001
                log.error("sluice: giving back message %d failed; it comes back when its lease expires: %s", m.id, err)

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.threads[0].join()  # the fetch loop
        with self.cond:
            drained = self.cond.wait_for(lambda: not self.inflight, timeout=self.w.drain_timeout)
            left: list[Message] = []
            if not drained:
                for j in self.inflight.values():
                    j.released = True
                    left.append(j.msg)
            acks, self.acks = self.acks, []
        self._ack_alone(acks)
        self._release(left)
        self.pool.shutdown(wait=drained)
        self.hb_stop.set()
        self.threads[1].join()
