"""``DeliveryFuture``: the ``concurrent.futures.Future`` that ``AsyncProducer.produce_future``
returns, made cheaply.

Why: a plain ``Future`` builds a ``threading.Condition`` with six bound methods and a deque per
instance, a dozen objects the cyclic garbage collector walks again and again while a million
futures wait for their messages; that walking was most of ``produce_future``'s cost. This
subclass starts running and makes nothing more until it is used: its small slotted condition
and its waiter and callback lists come into being when someone first waits on it, asks about
it or adds a callback, so a future that is only settled and then read stays one object for the
garbage collector. Until then it holds nothing that could close a reference cycle (its state,
and its delivered ``Message``, which is not tracked either), so the collector does not track it
at all, as CPython does for tuples of numbers: a million waiting futures are not walked again
at every collection. It is tracked again the moment it makes its condition or lists, or holds
an exception or a tracked result. (Attributes a caller sets on a future of its own are not
watched: a cycle made only through those is not collected.) Otherwise it is the standard
class: ``result``, ``exception``, ``add_done_callback``, ``cancel``,
``concurrent.futures.wait`` / ``as_completed`` and ``asyncio.wrap_future`` all work on it
(tests/unit/test_delivery_future.py holds them to that).
``set_results`` is how the producer's binding settles them: a drained chunk at a time, in one
call into Python.
"""

from __future__ import annotations

import _thread
import contextlib
import gc
import logging
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, RUNNING
from typing import Any, TypeVar

from ferrokafka._native import gc_track, gc_untrack

T = TypeVar("T")

log = logging.getLogger("ferrokafka.producer")


def set_results(futures: list[Future[T]], results: list[T]) -> None:
    """Sets each future's result, in order: how the producer's binding settles the futures of a
    drained chunk of delivered records, in one call into Python instead of one each. A future
    that refuses its result is logged and does not stop the others."""
    for future, result in zip(futures, results, strict=True):
        try:
            future.set_result(result)
        except Exception:
            log.exception("could not settle the future of %r", result)


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


class _MadeOnFirstUse:
    """The condition or one of the lists of a ``DeliveryFuture``, made when first read: the read
    marks the future looked at, then stores the new object on the instance, where it shadows
    this descriptor from then on. (A class-level ``__getattr__`` would do the same, but would
    slow down every other attribute read of every future: CPython only specializes attribute
    reads of classes with the standard lookup.)"""

    __slots__ = ("_make", "_name")

    def __init__(self, make: Callable[[], object]) -> None:
        self._make = make
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, future: DeliveryFuture[Any] | None, owner: type | None = None) -> Any:
        if future is None:
            return self
        gc_track(future)  # it is about to hold containers
        future._looked_at = True
        # The dict's setdefault is atomic: two threads asking at once get the same object.
        return future.__dict__.setdefault(self._name, self._make())


class DeliveryFuture(Future[T]):
    """A running ``concurrent.futures.Future`` whose condition and lists are made on first use
    (see the module docs)."""

    # Read from the class until set on the instance: most futures never fail nor are looked at.
    _exception = None
    # Set (before anything is made) by the first use of the condition or of the waiter and
    # callback lists: from then on settling goes through them as the base class does.
    _looked_at = False
    _condition = _MadeOnFirstUse(_Condition)
    _waiters = _MadeOnFirstUse(list)
    _done_callbacks = _MadeOnFirstUse(list)

    def __init__(self) -> None:
        # Not the base class's __init__: it builds the heavy condition. The two attributes that
        # settling writes are set here and not left to settling: CPython keeps an instance's
        # attributes in the object itself only under the names set while the class's first few
        # instances were made; a name first set after a thousand futures exist (as settling
        # would) gives every future a dict of its own, for the collector to walk.
        self._state = RUNNING
        self._result = None
        gc_untrack(self)  # holds nothing a cycle could go through yet (see the module docs)

    # Settling sets the state first and then looks whether anyone looked: a thread that starts
    # to wait or add a callback afterwards marks the future first and then reads the state, so
    # it sees the result; one that marked it before is notified under the condition, as by the
    # base class. A delivery future is settled once, by the producer (no InvalidStateError).
    def set_result(self, result: T) -> None:
        if gc.is_tracked(result):  # not a delivered Message: it could close a cycle
            gc_track(self)
        self._result = result
        self._state = FINISHED
        if self._looked_at:
            self._notify(failed=False)

    def set_exception(self, exception: BaseException | None) -> None:
        gc_track(self)  # an exception's traceback can lead back here
        self._exception = exception
        self._state = FINISHED
        if self._looked_at:
            self._notify(failed=True)

    # FINISHED is final, so a settled future answers without its condition (nothing to make).
    def done(self) -> bool:
        return self._state == FINISHED or super().done()

    def result(self, timeout: float | None = None) -> T:
        if self._state == FINISHED:
            if self._exception is not None:
                raise self._exception
            return self._result  # type: ignore[return-value]
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state == FINISHED:
            return self._exception
        return super().exception(timeout)

    def _notify(self, *, failed: bool) -> None:
        with self._condition:
            for waiter in self._waiters:
                if failed:
                    waiter.add_exception(self)
                else:
                    waiter.add_result(self)
            self._condition.notify_all()
        self._invoke_callbacks()  # type: ignore[attr-defined]  # the base class's
