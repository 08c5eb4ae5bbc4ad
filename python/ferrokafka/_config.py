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
