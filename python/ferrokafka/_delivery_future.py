"""``DeliveryFuture``: the ``concurrent.futures.Future`` that ``AsyncProducer.produce_future``
returns, made cheaply.

Why: a plain ``Future`` builds a ``threading.Condition`` with six bound methods and a deque per
instance, a dozen objects the cyclic garbage collector walks again and again while a million
futures wait for their messages; that walking was most of ``produce_future``'s cost. This
subclass gives each future a small slotted condition (its waiters list made only when someone
waits) and starts it running, and is otherwise the standard class: ``result``, ``exception``,
``add_done_callback``, ``cancel``, ``concurrent.futures.wait`` / ``as_completed`` and
``asyncio.wrap_future`` all work on it (tests/unit/test_delivery_future.py holds them to that).
"""

from __future__ import annotations

import _thread
import contextlib
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures._base import RUNNING
from typing import Any, TypeVar

T = TypeVar("T")


class _Condition:
    """What ``Future`` and ``concurrent.futures.wait`` use of ``threading.Condition``: an RLock
    with ``wait`` and ``notify_all``, after CPython's own implementation."""

    __slots__ = ("_lock", "_waiters")

    def __init__(self) -> None:
        self._lock = _thread.RLock()
        self._waiters: list[Any] | None = None

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, *exc_info: Any) -> None:
        self._lock.__exit__(*exc_info)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        waiter = _thread.allocate_lock()
        waiter.acquire()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        saved = self._lock._release_save()  # type: ignore[attr-defined]
        woken = False
        try:
            if timeout is None:
                woken = waiter.acquire()
            elif timeout > 0:
                woken = waiter.acquire(True, timeout)
            else:
                woken = waiter.acquire(False)
            return woken
        finally:
            self._lock._acquire_restore(saved)  # type: ignore[attr-defined]
            if not woken and self._waiters is not None:
                with contextlib.suppress(ValueError):  # notified while timing out
                    self._waiters.remove(waiter)

    def notify_all(self) -> None:
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            waiter.release()


class DeliveryFuture(Future[T]):
    """A running ``concurrent.futures.Future`` with a light condition (see the module docs)."""

    def __init__(self) -> None:
        # The base class's state, set directly (its __init__ would build the heavy condition).
        self._condition = _Condition()  # type: ignore[assignment]
        self._state = RUNNING
        self._result = None
        self._exception = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Callable[[Future[T]], object]] = []
