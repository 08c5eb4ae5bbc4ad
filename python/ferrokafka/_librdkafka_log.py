"""librdkafka's routine warnings, shown at DEBUG.

librdkafka's own log lines reach Python's ``logging`` under the logger ``librdkafka``. A few of
its warnings describe a state the broker announces as passing and librdkafka waits out by
itself: the first idempotent producer on a new cluster is told "Coordinator load in progress"
while the broker gets its first block of producer ids from the controller, and librdkafka asks
again 500 ms later; the first transactional producer on a new cluster is told "Not
coordinator" or "Coordinator not available" while the broker creates and loads its transaction
log, and librdkafka looks the coordinator up again (``init_transactions`` still fails, with its
cause, if that never ends). Shown as warnings, they read as a fault on every demo against a fresh
broker; at DEBUG they stay available to whoever looks into a slow start. Any other failure to
get a producer id stays a warning.

Example:
    >>> import logging
    >>> logging.getLogger("librdkafka").filters  # doctest: +ELLIPSIS
    [<ferrokafka._librdkafka_log.RoutineAtDebug object at ...>]
"""

from __future__ import annotations

import logging

LOGGER = "librdkafka"

# (librdkafka's facility, the end of the line) of warnings it retries on its own.
_ROUTINE = [
    ("GETPID", ": Coordinator load in progress: retrying"),
    ("GETPID", ": Not coordinator: retrying"),
    ("GETPID", ": Coordinator not available: retrying"),
]


class RoutineAtDebug(logging.Filter):
    """Lowers librdkafka's routine warnings to DEBUG, and drops them unless DEBUG is shown."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        text = record.getMessage()
        if not any(f" {facility} " in text and text.endswith(end) for facility, end in _ROUTINE):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def install() -> None:
    """Add the filter to the ``librdkafka`` logger (once)."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(f, RoutineAtDebug) for f in logger.filters):
        logger.addFilter(RoutineAtDebug())
