"""The engines' log records follow Python's logging levels as they change.

The Rust engines' records reach ``logging`` through pyo3-log, which caches each logger's level
so that an engine thread asks Python (and takes the GIL) once per logger, not once per record.
Left alone, that cache would keep the levels of the first records for the life of the process:
``logging.getLogger("ferrokafka_kafka").setLevel(logging.DEBUG)`` on a running consumer, or a
``basicConfig`` after a client logged, would change nothing. ``logging`` drops its own level
cache (``Manager._clear_cache``) on every such change (``setLevel``, ``basicConfig``,
``dictConfig``, ``logging.disable``); this hook drops the engines' cache with it.

Example:
    >>> import logging
    >>> from ferrokafka import _log_levels
    >>> _log_levels.installed(logging.Logger.manager)
    True
"""

from __future__ import annotations

import logging
from typing import Any

from ferrokafka._native import reread_log_levels


class _FollowedCacheClear:
    """``Manager._clear_cache`` of the manager it wraps, then the engines' level cache."""

    def __init__(self, clear_cache: Any) -> None:
        self.clear_cache = clear_cache

    def __call__(self) -> None:
        self.clear_cache()
        reread_log_levels()


def installed(manager: logging.Manager) -> bool:
    """Whether ``manager``'s level-cache clearing also clears the engines' cache."""
    return isinstance(vars(manager).get("_clear_cache"), _FollowedCacheClear)


def install() -> None:
    """Hooks the root logging manager (once; a no-op where ``logging`` has no such cache)."""
    manager = logging.Logger.manager
    clear_cache = getattr(manager, "_clear_cache", None)
    if clear_cache is None or installed(manager):
        return
    manager._clear_cache = _FollowedCacheClear(clear_cache)  # type: ignore[attr-defined]
