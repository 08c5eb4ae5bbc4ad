"""Handing an instrumentation event to a component's subscribers (``subscribe`` callbacks)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from ferrokafka._failure_log import log_failure


def publish(
    subscribers: Iterable[Callable[[str, dict[str, Any]], object]],
    name: str,
    payload: dict[str, Any],
    log: logging.Logger,
) -> None:
    """Calls every subscriber with the event; one that raises is logged on ``log`` (at most
    every few seconds, see ``_failure_log``) and the others still get the event (a subscriber's
    bug must not stop the publishing thread)."""
    for subscriber in subscribers:
        try:
            subscriber(name, payload)
        except Exception:
            log_failure(log, f"instrumentation subscriber failed on {name}")
