"""What ferrokafka does when the interpreter exits: finish what is still open, within a bound.

A script that produces and ends must not lose what the background threads still hold, and must
not hang either. Every component that holds messages or a group membership registers here when
it starts and unregisters when it is closed by its owner; one ``atexit`` hook then finishes
whatever is still open, each within its own ``exit_timeout``, and each logs at WARNING what it
could not deliver.

A process that ``multiprocessing`` started (a ``Process`` or ``Pool`` worker) ends with
``os._exit()`` once its target returned and multiprocessing ran its own finalizers: with the
``fork`` start method (Linux's default before Python 3.14) ``atexit`` hooks never run there. So in
such a process the hook is also registered as one of those finalizers, when the first component
registers; it finishes nothing twice.

The hook runs after the interpreter joined its non-daemon threads and before it finalizes, so
the components' own threads (dispatchers, engine threads) still run. It starts no thread (from
Python 3.12 a new thread cannot start at shutdown): it asks every component to begin at once
(:meth:`ClosesAtExit.begin_exit`, which never waits), then waits for each in turn against one
shared deadline, so the waits overlap and the whole exit takes about the longest bound, not
their sum. Reporters go in a second round, once the others finished, so the final reports the
others hand them while stopping are sent too. Last, it waits for the engines being closed on
threads of their own (a client whose last reference went on one of its own threads, in a log
handler or an ``oauth_cb``), so that what they report on closing is said before the process ends.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from ferrokafka._native import on_engine_thread, wait_for_background_closes

log = logging.getLogger("ferrokafka")


class ClosesAtExit(Protocol):
    """A component the exit hook finishes if its owner did not."""

    @property
    def exit_timeout(self) -> float:
        """Most seconds the exit may wait for this component."""

    def begin_exit(self) -> None:
        """Start finishing (deliver what is buffered, ask threads to stop); never waits."""

    def finish_exit(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for the end, then log at WARNING what was lost."""


class NotCopyable:
    """A component that owns Kafka clients and finishes them when it is collected: a copy
    (``copy.copy``, ``copy.deepcopy``, pickling) would share those clients and, collected,
    shut them down under the original. Refused, as a file object's copy is."""

    def __copy__(self) -> NoReturn:
        raise _not_copyable(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> NoReturn:
        raise _not_copyable(self)

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise _not_copyable(self)


def _not_copyable(component: object) -> TypeError:
    name = type(component).__name__
    return TypeError(
        f"cannot copy or pickle a {name}: it owns Kafka clients; create another {name} "
        "with the same settings instead"
    )


class _Daemon(Protocol):
    exit_timeout: float

    def request_stop(self) -> None: ...

    def stop(self, timeout: float = ...) -> bool: ...


class StopsAtExit:
    """The exit protocol of a daemon (scheduler, redelivery tracker) that its owner did not
    stop: it stops as ``stop()`` does (final reports, offsets committed, group left)."""

    exit_timeout: float = 10.0
    """Most seconds the interpreter's exit waits for this daemon when it was not stopped."""

    def begin_exit(self: _Daemon) -> None:
        """Asks the daemon to stop; returns at once."""
        self.request_stop()

    def finish_exit(self: _Daemon, timeout: float) -> None:
        """Waits at most ``timeout`` seconds for the stop; says so when it did not end."""
        if not self.stop(max(timeout, 0.001)):
            log.warning(
                "%s at interpreter exit: did not stop within exit_timeout=%g s; its uncommitted "
                "work is done again by the next owner of its partitions",
                type(self).__name__,
                self.exit_timeout,
            )


BACKGROUND_CLOSE_TIMEOUT = 10.0
"""Most seconds the exit waits for engines being closed on threads of their own."""

_open: weakref.WeakSet[ClosesAtExit] = weakref.WeakSet()
# Finished once the others are: reporters, which send what the others report while stopping.
_open_last: weakref.WeakSet[ClosesAtExit] = weakref.WeakSet()


def register(component: ClosesAtExit, *, after_the_rest: bool = False) -> None:
    """``component`` is open: the exit hook finishes it unless :func:`unregister` comes first;
    ``after_the_rest`` once every other component finished (a reporter of the others)."""
    (_open_last if after_the_rest else _open).add(component)
    if _finalizer_registered_in != os.getpid():
        _finish_at_the_end_of_a_multiprocessing_child()


_finalizer_registered_in: int | None = None
"""The process in which the hook is one of multiprocessing's finalizers too."""


def _finish_at_the_end_of_a_multiprocessing_child() -> None:
    global _finalizer_registered_in
    multiprocessing = sys.modules.get("multiprocessing")  # not imported: not such a process
    if multiprocessing is None or multiprocessing.parent_process() is None:
        return
    import multiprocessing.util

    # Priority 0: among the first finalizers, before the process joins its own children.
    multiprocessing.util.Finalize(None, finish_everything_open, exitpriority=0)
    _finalizer_registered_in = os.getpid()


def unregister(component: ClosesAtExit) -> None:
    """``component`` was closed by its owner (or collected): the exit hook leaves it alone."""
    _open.discard(component)
    _open_last.discard(component)


def finish_collected(finish: Callable[[], None], name: str) -> None:
    """Runs ``finish``, a collected component's close, which waits for its engine's threads:
    here, or on a new thread called ``name`` when Python collected the component on one of those
    threads (a log line or an ``oauth_cb`` running Python there), where it would wait for
    itself. The interpreter's exit joins that thread, as every thread not a daemon."""
    if on_engine_thread():
        try:
            # Not a daemon, which a thread started here would be by inheritance (the engine's
            # thread is a daemon to Python): the interpreter's exit must wait for it.
            threading.Thread(target=finish, name=name, daemon=False).start()
            return
        except RuntimeError:  # the interpreter is exiting: no new thread, finish within its bound
            pass
    finish()


def finish_everything_open() -> None:
    """The ``atexit`` hook: finish every registered component, each within its exit_timeout;
    those registered ``after_the_rest`` once the others are finished."""
    for registered in (_open, _open_last):
        components = list(registered)
        registered.clear()
        _finish_together(components)
    try:
        still_closing = wait_for_background_closes(BACKGROUND_CLOSE_TIMEOUT)
    except BaseException:  # Ctrl-C during the exit wait
        log.exception("at exit: stopped waiting for the clients being closed in the background")
        return
    if still_closing:
        log.warning(
            "at exit: %d collected client(s) still closing after %g s; what they held is lost",
            still_closing,
            BACKGROUND_CLOSE_TIMEOUT,
        )


_interrupted = False
"""Ctrl-C came while the exit hook ran: from then on no component waits (each hands back or
names at once what it still held)."""


def interrupted() -> bool:
    """Whether Ctrl-C ended the exit's waiting (a component says so in what it logs as lost)."""
    return _interrupted


def _finish_together(components: list[ClosesAtExit]) -> None:
    global _interrupted
    started = time.monotonic()
    for component in components:
        try:
            component.begin_exit()
        except KeyboardInterrupt:
            # Before any wait began: none of them waits, and the others still begin.
            _interrupted = True
        except Exception:
            log.exception("at exit: cannot begin closing %r", component)
    for component in components:
        try:
            remaining = started + component.exit_timeout - time.monotonic()
            component.finish_exit(0.0 if _interrupted else max(remaining, 0.0))
        except KeyboardInterrupt:  # Ctrl-C during the exit wait: the others do not wait either
            _interrupted = True
            log.warning("at exit: Ctrl-C: stopped waiting for %r", component)
        except BaseException:
            log.exception("at exit: cannot finish closing %r", component)


def _forget_the_parents() -> None:
    """In a forked child: what the parent registered is the parent's to finish (its engines
    refuse to be used here); a component the child uses again registers anew."""
    _open.clear()
    _open_last.clear()


atexit.register(finish_everything_open)
os.register_at_fork(after_in_child=_forget_the_parents)
