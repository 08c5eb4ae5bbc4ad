"""A wrapper's keyword-only options handed on, unchanged, to the object it wraps: each option is
written once, in the signature users see (its type, default and docs), not again as
``name=name`` in the call. An option added to the signature is handed on without another edit;
one the wrapped object does not take fails the first construction with a ``TypeError``.

Example:
    >>> from ferrokafka._forwarding import keyword_options
    >>> def wrapper(config, *, size=10, label="x", timeout=1.0):
    ...     return keyword_options(wrapper, locals(), but=("timeout",))
    >>> wrapper({}, size=3)
    {'size': 3, 'label': 'x'}
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any


@functools.cache
def _keyword_only(function: Callable[..., object]) -> tuple[str, ...]:
    parameters = inspect.signature(function).parameters.values()
    return tuple(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)


def keyword_options(
    function: Callable[..., object], arguments: Mapping[str, Any], *, but: Collection[str] = ()
) -> dict[str, Any]:
    """The keyword-only parameters of ``function`` with their values in ``arguments`` (its
    ``locals()``), those named in ``but`` (the wrapper's own) left out."""
    return {name: arguments[name] for name in _keyword_only(function) if name not in but}
