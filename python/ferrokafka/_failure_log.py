"""Logging the failures of a user's callback without flooding the log.

A callback that raises on every call (an ``on_delivery`` callback, an instrumentation subscriber,
a consumer notification callback) used to log a traceback per call: 200,000 deliveries wrote
200,000 tracebacks and slowed producing tenfold. Its first failure is logged with its traceback;
after that, one failure of the same kind is logged at most every :data:`QUIET_SECONDS`, saying
how many failed in between (counted, not logged). The component goes on either way.
"""

from __future__ import annotations

import logging
import math
import threading
import time

QUIET_SECONDS = 10.0
"""Shortest time between two logged failures of one kind (one logger, one description)."""

_KINDS_KEPT = 1000  # descriptions name topics and callbacks: bounded, but not by us

_clock = time.monotonic  # the tests' to set
_lock = threading.Lock()
# (logger name, description) -> (when one was last logged, failures counted since)
_last: dict[tuple[str, str], tuple[float, int]] = {}


def log_failure(logger: logging.Logger, what: str, error: BaseException | None = None) -> None:
    """Logs ``what`` at ERROR with the traceback of ``error`` (the exception being handled when
    None), unless one of the same kind was logged less than :data:`QUIET_SECONDS` ago: then it
    is only counted, and the next one logged says how many were."""
    key, now = (logger.name, what), _clock()
    with _lock:
        last, since = _last.get(key, (-math.inf, 0))
        if now - last < QUIET_SECONDS:
            _last[key] = (last, since + 1)
            return
        if len(_last) >= _KINDS_KEPT:
            _last.clear()
        _last[key] = (now, 0)
    if since:
        what = (
            f"{what} ({since} more failure(s) in the last {now - last:.0f} s were counted, "
            "not logged)"
        )
    logger.error("%s", what, exc_info=error if error is not None else True)
