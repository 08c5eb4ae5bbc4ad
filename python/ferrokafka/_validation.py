"""Argument checks shared by ferrokafka's Python classes, with messages that name the argument.

Example:
    >>> from ferrokafka._validation import checked_seconds, positive_count
    >>> checked_seconds("interval", 5, positive=True)
    5.0
    >>> positive_count("max_errors", 0)
    Traceback (most recent call last):
    ...
    ValueError: max_errors must be a positive int, got 0
"""

from __future__ import annotations

import math
from collections.abc import Mapping

# The longest wait a native call takes (blocking.rs MAX_SECONDS, about 31 years): a longer
# one is refused there, so a wait Python allows to be longer (an exit_timeout) is cut to this.
NATIVE_MAX_SECONDS = 1e9


def checked_seconds(name: str, value: float, *, positive: bool) -> float:
    """``value`` as float seconds: finite and ``> 0`` (``positive``) or ``>= 0``; a bool or a
    non-number raises ``TypeError``, anything out of range ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number of seconds {bound}, got {value!r}")
    return float(value)


def positive_count(name: str, value: int) -> int:
    """``value`` if it is an int (not a bool) ``> 0``, else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def check_config_mapping(config: object) -> None:
    """``TypeError`` unless ``config`` is a mapping of librdkafka settings. The message names
    the type only: the value may hold a password."""
    if not isinstance(config, Mapping):
        raise TypeError(
            f"config must be a dict of librdkafka settings, got {type(config).__name__}"
        )


def require_callable(name: str, value: object) -> None:
    """Refuses a callback that cannot be called, now, rather than with a log line on a
    background thread each time it would run."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}")
