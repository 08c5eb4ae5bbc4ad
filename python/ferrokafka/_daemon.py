"""How a daemon (:class:`~ferrokafka.scheduling.Scheduler`,
:class:`~ferrokafka.redelivery.RedeliveryTracker`) stops, in one order for both: its reporter
learns first (the process's last report says ``stopping``), then the engine is asked to stop and
waited for, then the reporter and the exit hook let the daemon go."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

from ferrokafka import _exit
from ferrokafka.exceptions import KafkaError
from ferrokafka.tracking import Reporter, TrackedSource

if TYPE_CHECKING:
    from ferrokafka._native import _Daemon as _Engine


class Daemon(TrackedSource, _exit.ClosesAtExit, Protocol):
    """A daemon: sampled by a reporter, finished by the exit hook when its owner did not."""


def refuse_after_end(daemon: object, ended: bool) -> None:
    """A daemon runs once: started or run again after :func:`stop` (or after its ``run()``
    returned) it would do nothing and return at once, and a ``while True: daemon.run()`` loop
    would spin; raised as :class:`~ferrokafka.Consumer` does."""
    if ended:
        raise RuntimeError(
            f"this {type(daemon).__name__} was stopped (stop() was called or run() returned): "
            "create a new one"
        )


def stop(daemon: Daemon, engine: _Engine, reporter: Reporter | None, timeout: float) -> bool:
    """Stops ``daemon``'s ``engine`` within ``timeout`` seconds, its reporter's final report
    included; True once it stopped."""
    deadline = time.monotonic() + timeout
    if reporter is not None:
        reporter.stopping(daemon)
    engine.request_stop()
    try:
        stopped = engine.wait(timeout)
    except KafkaError:
        stopped = True  # it ended on its own; run() raises why, and the log says it
    if reporter is not None:
        # Its own exit_timeout, within what the stop left of its timeout.
        left = max(deadline - time.monotonic(), 0.0)
        reporter.untrack(daemon, timeout=min(reporter.exit_timeout, left))
    _exit.unregister(daemon)
    return stopped
