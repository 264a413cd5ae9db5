"""What the sync worker needs from threads, in the shape of _acompat.py's asyncio.

Hand-written, not generated: worker.py (generated from aio_worker.py by
tools/async_to_sync.py) uses these names where aio_worker.py uses their twins
in _acompat.py. A change here needs the same change there.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeAlias

__all__ = ["Condition", "Event", "Handlers", "Task", "add_signal_handlers", "halt", "join", "resolve", "sleep", "spawn"]

Task: TypeAlias = threading.Thread

sleep = time.sleep


class Event(threading.Event):
    """threading.Event, with AEvent's name for a wait that can time out."""

    def wait_timeout(self, timeout: float) -> bool:
        """Wait until the event is set or ``timeout`` seconds pass; whether it is set."""
        return self.wait(timeout)


class Condition(threading.Condition):
    """threading.Condition, with ACondition's name for a wait for a predicate."""

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Wait (holding the lock) until ``predicate()`` is true or ``timeout``
        seconds pass (None: no limit); returns the predicate's last value."""
        return self.wait_for(predicate, timeout)


def spawn(fn: Callable[..., None], *args: Any, name: str) -> Task:
    """Run ``fn(*args)`` on a daemon thread of its own."""
    t = threading.Thread(target=fn, args=args, name=name, daemon=True)
    t.start()
    return t


def join(thread: Task | None) -> None:
    """Wait for a thread's end."""
    if thread is not None:
        thread.join()


def halt(thread: Task | None) -> None:
    """Wait for a thread's end: it cannot be cancelled, so the caller has told
    it to stop (an event it watches)."""
    if thread is not None:
        thread.join()


def resolve(value: Any) -> Any:
    """A pool's conninfo or kwargs: the value, or what a callable returns."""
    return value() if callable(value) else value


class Handlers:
    """The running handlers of one consumer: a pool of ``size`` threads."""

    def __init__(self, size: int, name: str) -> None:
        self.pool = ThreadPoolExecutor(size, thread_name_prefix=name)

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        self.pool.submit(fn, *args)

    def shutdown(self, wait: bool) -> None:
        """Wait for the handlers to finish (``wait``), or not: a thread cannot be
        killed, so one still running finishes later (and its outcome is ignored)."""
        self.pool.shutdown(wait=wait)


def add_signal_handlers(callback: Callable[[], None], enabled: bool) -> Callable[[], None]:
    """Call ``callback`` on SIGTERM and SIGINT (when ``enabled`` and called from
    the main thread); returns what restores the previous handlers."""
    old: dict[signal.Signals, Any] = {}
    if enabled and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, lambda *_: callback())

    def restore() -> None:
        for sig, h in old.items():
            signal.signal(sig, h)

    return restore
