"""The ferrokafka exception hierarchy.

Every error ferrokafka raises on purpose derives from :class:`FerrokafkaError`. Where a builtin
means the same thing, the class derives from it too, so ``except TimeoutError`` and
``except ValueError`` keep working::

    FerrokafkaError
    ├── ConfigError (ValueError)        bad or unknown configuration
    ├── ClosedError                     the object was closed
    ├── CodecError (ValueError)         corrupt, oversized or foreign encoded data
    ├── ScheduleError (ValueError)      an invalid scheduled message
    ├── BufferOverflow                  a producer queue is full
    └── KafkaError                      an error reported by Kafka or librdkafka
        ├── KafkaTimeoutError (TimeoutError)
        ├── KafkaFatalError                 the client can no longer be used
        ├── ProduceError
        │   └── MarkerRefusedError          a queue message handed back: START refused
        └── ConsumeError

Example:
    >>> import ferrokafka
    >>> try:
    ...     ferrokafka.Client({"bootstrap.servers": "127.0.0.1:9092", "no.such.key": 1})
    ... except ferrokafka.ConfigError as err:
    ...     print("no.such.key" in str(err))
    True
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from ferrokafka._native import TIMED_OUT_CODE, TIMED_OUT_NAME

__all__ = [
    "BufferOverflow",
    "ClosedError",
    "CodecError",
    "ConfigError",
    "ConsumeError",
    "FerrokafkaError",
    "KafkaError",
    "KafkaFatalError",
    "KafkaTimeoutError",
    "MarkerRefusedError",
    "ProduceError",
    "ScheduleError",
]


class FerrokafkaError(Exception):
    """Base class of every error ferrokafka raises on purpose."""


class ConfigError(FerrokafkaError, ValueError):
    """A configuration was refused: unknown key, bad value or missing required key."""


class ClosedError(FerrokafkaError):
    """The client, producer or consumer was already closed."""


class CodecError(FerrokafkaError, ValueError):
    """Encoded data was corrupt, too large for its limit, or of an unsupported version."""


class ScheduleError(FerrokafkaError, ValueError):
    """A scheduled message or its envelope is invalid."""


class BufferOverflow(FerrokafkaError):
    """A producer's bounded queue is full and its backpressure policy refused the message.

    Attributes:
        topic: the topic of the refused message.
        limit: the limit that was reached, e.g. ``"max queue size (1000 messages) reached"``.
        accepted: for ``produce_many``, how many records of the batch were queued before it
            (the first ``accepted`` ones, in batch order: they will be delivered like any
            queued record; the rest were not queued, so those are the ones to send again);
            ``None`` for a single ``produce``. The message says it too.
        future: for ``produce_many_future``, the future of the batch report covering the
            ``accepted`` records (``None`` when none was queued, or for other calls); it is
            not pickled.
    """

    def __init__(
        self, message: str, topic: str = "", limit: str = "", accepted: int | None = None
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.limit = limit
        self.accepted = accepted
        self.future: Future[Any] | None = None

    def __reduce__(self) -> tuple[type[BufferOverflow], tuple[str, str, str, int | None]]:
        return (type(self), (str(self), self.topic, self.limit, self.accepted))


class KafkaError(FerrokafkaError):
    """An error reported by Kafka or librdkafka.

    Attributes:
        code: librdkafka's numeric error code (negative for errors raised locally).
        name: the code's name, e.g. ``"TOPIC_ALREADY_EXISTS"`` or ``"_TIMED_OUT"``.
        retriable: whether the same operation may succeed if tried again.
        fatal: whether the client that raised it can no longer be used.
    """

    def __init__(
        self,
        message: str,
        code: int = -1,
        name: str = "_UNKNOWN",
        retriable: bool = False,
        fatal: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.name = name
        self.retriable = retriable
        self.fatal = fatal

    def __reduce__(self) -> tuple[type[KafkaError], tuple[str, int, str, bool, bool]]:
        return (type(self), (str(self), self.code, self.name, self.retriable, self.fatal))


class KafkaFatalError(KafkaError):
    """A fatal error: the client that raised it can no longer be used (``fatal`` is true).

    librdkafka raises one when, for example, a transactional producer is fenced by a newer
    instance with the same ``transactional.id`` or the broker refuses it the id. The component
    then hands back what it still holds (``shutdown()``) and raises this on every later call:
    shut it down and create a new one. Catch it before ``KafkaError`` to tell "try again" from
    "start over".
    """


class KafkaTimeoutError(KafkaError, TimeoutError):
    """A Kafka operation did not finish within its timeout (e.g. no broker answered). Its code
    is librdkafka's local timeout, ``TIMED_OUT_CODE`` (-185, ``"_TIMED_OUT"``), unless given.
    The message names the brokers asked and, when librdkafka said why it could not reach one
    during the wait, that reason (``...; last broker error: host:9092/bootstrap: Connect to
    ipv4#10.0.0.5:9092 failed: Connection refused ...``)."""

    def __init__(
        self,
        message: str,
        code: int = TIMED_OUT_CODE,
        name: str = TIMED_OUT_NAME,
        retriable: bool = True,
        fatal: bool = False,
    ) -> None:
        super().__init__(message, code, name, retriable, fatal)


class ProduceError(KafkaError):
    """A message could not be produced."""


class MarkerRefusedError(ProduceError):
    """A :class:`~ferrokafka.redelivery.QueueConsumer` message handed back instead of handed out:
    its START marker was refused for good (larger than the markers topic's
    ``max.message.bytes`` or than the client's ``message.max.bytes``) and the consumer has no
    ``dead_letter_topic``. Its queue offset is
    committed, so it is neither handed out nor redelivered: it is the caller's now. The code and
    name are the refusal's (``MSG_SIZE_TOO_LARGE``).

    Attributes:
        message: the refused message.
    """

    message: Any = None

    def __reduce__(self) -> tuple[Any, ...]:
        # KafkaError's arguments, and the message handed back as the state to restore.
        return (*super().__reduce__(), {"message": self.message})


class ConsumeError(KafkaError):
    """Records could not be consumed."""
