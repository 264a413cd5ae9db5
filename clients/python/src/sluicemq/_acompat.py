"""What the async worker needs from asyncio, in the shape of _compat.py's threads.

Hand-written, not generated: tools/async_to_sync.py renames each name here to
its twin in _compat.py (AEvent -> Event, aspawn -> spawn, ...), so that
aio_worker.py is written once and worker.py generated from it. A change here
needs the same change there.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeAlias

__all__ = [
    "ACondition",
    "AEvent",
    "AHandlers",
    "ATask",
    "add_signal_handlers",
    "ahalt",
    "ajoin",
    "aresolve",
    "asleep",
    "aspawn",
]

ATask: TypeAlias = "asyncio.Task[None]"

asleep = asyncio.sleep


class AEvent(asyncio.Event):
    """An event whose wait can time out (as threading.Event's)."""

    async def wait_timeout(self, timeout: float) -> bool:
        """Wait until the event is set or ``timeout`` seconds pass; whether it is set."""
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            await asyncio.wait_for(self.wait(), timeout)
        return self.is_set()


class ACondition(asyncio.Condition):
    """A condition whose wait for a predicate can time out (as threading.Condition's)."""

    async def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Wait (holding the lock) until ``predicate()`` is true or ``timeout``
        seconds pass (None: no limit); returns the predicate's last value."""
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            await asyncio.wait_for(self.wait_for(predicate), timeout)
        return predicate()


def aspawn(fn: Callable[..., Coroutine[Any, Any, None]], *args: Any, name: str) -> ATask:
    """Run ``fn(*args)`` as a task of the running loop."""
    return asyncio.create_task(fn(*args), name=name)


async def ajoin(task: ATask | None) -> None:
    """Wait for a task's end (its exceptions are dropped)."""
    if task is not None:
        await asyncio.gather(task, return_exceptions=True)


async def ahalt(task: ATask | None) -> None:
    """Cancel a task and wait for its end (its exceptions are dropped)."""
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def aresolve(value: Any) -> Any:
    """A pool's conninfo or kwargs: the value, or what a (sync or async) callable returns."""
    if callable(value):
        value = value()
        if inspect.isawaitable(value):
            value = await value
    return value


class AHandlers:
    """The running handlers of one consumer: a task each."""

    def __init__(self, size: int, name: str) -> None:
        self.tasks: set[ATask] = set()
        self.name = name

    def submit(self, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        t = asyncio.create_task(fn(*args), name=self.name)
        self.tasks.add(t)  # a reference until it is done
        t.add_done_callback(self.tasks.discard)

    async def shutdown(self, wait: bool) -> None:
        """Wait for the handlers to finish (``wait``), or cancel them and wait for that."""
        if not wait:
            for t in self.tasks:
                t.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)


def add_signal_handlers(callback: Callable[[], None], enabled: bool) -> Callable[[], None]:
    """Call ``callback`` on SIGTERM and SIGINT (when ``enabled`` and the loop
    can); returns what restores the previous handling."""
    loop = asyncio.get_running_loop()
    sigs: list[signal.Signals] = []
    if enabled:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, callback)
                sigs.append(sig)

    def restore() -> None:
        for sig in sigs:
            loop.remove_signal_handler(sig)

    return restore
