"""What the status view takes from a tracking record, whoever wrote it.

Anyone who can write to the tracking topics can write anything, and ``ferrokafka status`` and
the dashboard show it to whoever looks. So a time must be Unix seconds a clock could show (a
time in milliseconds is year 58871: the record is skipped, never fatal), every string and list
is cut to a bound when it is read (a 62 KB report whose tags inflate to 60 MB must not make a
73 MB page fetched every 2 s), a record inflates to :data:`MAX_INFLATED` bytes at most, and
text printed to a terminal has its control characters escaped (a process id must not clear the
screen of whoever runs ``ferrokafka status``).
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any

__all__ = [
    "LATEST_TIME",
    "MAX_CLOCK_AHEAD",
    "MAX_INFLATED",
    "bounded_json",
    "bounded_text",
    "checked_time",
    "printable",
]

MAX_INFLATED = 8 << 20
"""Bytes a tracking record may inflate to; a larger one is skipped as corrupt. A report of a
process with a thousand partitions inflates to well under 1 MiB."""

LATEST_TIME = 253_402_300_799.0
"""9999-12-31 23:59:59 UTC: the last Unix second that Python's datetime (and JavaScript's
Date) can show."""

MAX_CLOCK_AHEAD = 300.0
"""Seconds a record may be dated ahead of the reader's clock; a later one is skipped. Hosts
kept by NTP differ by milliseconds, and five minutes is the skew Kerberos tolerates by default:
a record dated further ahead comes from a broken clock or a hostile writer, and would otherwise
rank as the newest report (or error) for as long as it is ahead, up to year 9999, hiding the
genuine ones."""

MAX_TEXT = 256
"""Characters kept of an id, name, state or tag (Kafka topic names have at most 249)."""

MAX_MESSAGE = 10_000
"""Characters kept of an error message or backtrace (where the reporters cut them)."""

MAX_TAGS = 8
"""Tags kept per process."""

MAX_DETAIL_NODES = 64
"""Values (strings, numbers, list items, dict entries) kept of an error's details."""

MAX_DAYS = 400
"""Days kept of a scheduler's pending schedules per day."""

ELLIPSIS = "…"


def checked_time(name: str, value: float, now: float | None = None) -> float:
    """``value`` if it is Unix seconds from 1970 to 9999 and, given the reader's clock ``now``,
    at most :data:`MAX_CLOCK_AHEAD` seconds after it; else ``ValueError`` naming it (a time in
    milliseconds is out of that range).

    Example:
        >>> checked_time("dispatched_at", 1_700_000_000_000.0)
        Traceback (most recent call last):
        ...
        ValueError: dispatched_at 1700000000000.0 is not a Unix time in seconds (1970 to 9999)
        >>> checked_time("dispatched_at", 1_700_003_600.0, now=1_700_000_000.0)
        Traceback (most recent call last):
        ...
        ValueError: dispatched_at 1700003600.0 is 3600 s ahead of this reader's clock (more ...
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} {value!r} is not a number")
    if not (math.isfinite(value) and 0 <= value <= LATEST_TIME):
        raise ValueError(f"{name} {value!r} is not a Unix time in seconds (1970 to 9999)")
    if now is not None and value - now > MAX_CLOCK_AHEAD:
        raise ValueError(
            f"{name} {value!r} is {value - now:.0f} s ahead of this reader's clock "
            f"(more than {MAX_CLOCK_AHEAD:.0f} s of clock skew)"
        )
    return float(value)


def bounded_text(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with an ellipsis.

    Example:
        >>> bounded_text("abcdef", 4)
        'abc…'
    """
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def bounded_json(value: Any, budget: int = MAX_DETAIL_NODES) -> Any:
    """A JSON value (``dict``/``list``/scalars) with at most ``budget`` values in all (each dict
    and list counts as one), strings and keys cut to :data:`MAX_TEXT`; what is left out is not
    replaced.

    Example:
        >>> bounded_json({"topic": "orders", "offsets": list(range(100))}, budget=5)
        {'topic': 'orders', 'offsets': [0, 1]}
    """
    left = [budget]

    def bounded(item: Any) -> Any:
        left[0] -= 1
        if isinstance(item, str):
            return bounded_text(item)
        if isinstance(item, dict):
            kept: dict[str, Any] = {}
            for key, nested in item.items():
                if left[0] <= 0:
                    break
                kept[bounded_text(str(key))] = bounded(nested)
            return kept
        if isinstance(item, list | tuple):
            items: list[Any] = []
            for nested in item:
                if left[0] <= 0:
                    break
                items.append(bounded(nested))
            return items
        return item

    return bounded(value)


# Escaped: control characters (C0, DEL, C1), format characters (the bidirectional ones, which
# reorder what a terminal shows, and the invisible ones: zero-width spaces and joiners, the BOM,
# soft hyphens, tags, with which "billing-1" and "billing-1\u200b" look alike) and the Unicode
# line and paragraph separators.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


class _Escapes(dict[int, str]):
    """``str.translate``'s table: the escape of each character of those categories, found on
    first sight and kept (a few hundred at most); every other character is left as it is."""

    def __missing__(self, code: int) -> str:
        if unicodedata.category(chr(code)) not in _ESCAPED_CATEGORIES:
            raise LookupError(code)  # translate keeps the character
        self[code] = escaped = (
            f"\\x{code:02x}"
            if code < 0x100
            else f"\\u{code:04x}"
            if code < 0x10000
            else f"\\U{code:08x}"
        )
        return escaped


_ESCAPES = _Escapes({ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"})


def printable(text: str) -> str:
    """``text`` with every control, format and separator character escaped (``\\x1b``,
    ``\\r``, ``\\u202e``, ``\\u200b``...), safe to print to a terminal and telling apart
    names that would look alike.

    Example:
        >>> print(printable("\\x1b[2Jid\\r\\n"))
        \\x1b[2Jid\\r\\n
    """
    return text.translate(_ESCAPES)
