"""The librdkafka configuration dict every ferrokafka component takes, as one type."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

OAuthCallback: TypeAlias = Callable[[str | None], tuple[Any, ...]]
"""confluent-kafka's ``oauth_cb``: given ``sasl.oauthbearer.config``, returns ``(token,
expiry_epoch_seconds)`` or ``(token, expiry, principal, extensions)``."""

ConfigValue: TypeAlias = str | int | float | bool | OAuthCallback
"""A configuration value: librdkafka's properties as confluent-kafka takes them (numbers and
booleans are turned into librdkafka's strings), or the ``oauth_cb`` callable."""

Config: TypeAlias = Mapping[str, ConfigValue]
"""A librdkafka configuration dict."""


def max_poll_interval_ms(config: Config) -> int:
    """``max.poll.interval.ms`` as librdkafka reads it (default 300,000): a process report's
    poll interval. librdkafka itself refuses a value that is not a number."""
    value = config.get("max.poll.interval.ms", 300_000)
    if callable(value):
        raise TypeError("max.poll.interval.ms must be a number of milliseconds, not a callable")
    return int(value)
