"""Type stubs and user documentation of the ``ferrokafka._native`` extension module."""

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, final

__version__: str

_ConfigValue: TypeAlias = str | int | float | bool
_HeaderValue: TypeAlias = bytes | str | None
_Headers: TypeAlias = Mapping[str, _HeaderValue] | Sequence[tuple[str, _HeaderValue]]

@final
class Message:
    """A Kafka record, shaped like confluent-kafka's ``Message``.

    Example:
        >>> msg = client.produce("orders", b"paid", key=b"order-1")  # doctest: +SKIP
        >>> (msg.topic(), msg.key(), msg.value())  # doctest: +SKIP
        ('orders', b'order-1', b'paid')
    """

    def topic(self) -> str:
        """The topic name."""
    def partition(self) -> int:
        """The partition number."""
    def offset(self) -> int:
        """The offset in the partition."""
    def key(self) -> bytes | None:
        """The record key, or ``None``."""
    def value(self) -> bytes | None:
        """The record value, or ``None`` for a tombstone."""
    def headers(self) -> list[tuple[str, bytes | None]] | None:
        """The headers in wire order, or ``None`` when there are none."""
    def timestamp(self) -> tuple[int, int]:
        """``(kind, milliseconds)``; kind is 0 not available, 1 create time, 2 log-append time."""
    def error(self) -> Exception | None:
        """``None`` for a record read or delivered; for a record handed back undelivered, the
        :class:`ferrokafka.FerrokafkaError` that explains why."""
    def __len__(self) -> int:
        """Length of the value in bytes."""

@final
class BrokerMetadata:
    """One broker of the cluster."""

    @property
    def id(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...

@final
class PartitionMetadata:
    """One partition: its leader, replicas and in-sync replicas (broker ids)."""

    @property
    def id(self) -> int: ...
    @property
    def leader(self) -> int: ...
    @property
    def replicas(self) -> list[int]: ...
    @property
    def isr(self) -> list[int]: ...

@final
class TopicMetadata:
    """One topic and its partitions, ordered by partition id."""

    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> list[PartitionMetadata]: ...

@final
class ClusterMetadata:
    """What one metadata request returned.

    Example:
        >>> md = client.list_topics(timeout=5.0)  # doctest: +SKIP
        >>> len(md.topics["orders"].partitions)  # doctest: +SKIP
        3
    """

    @property
    def orig_broker_id(self) -> int:
        """Id of the broker that answered."""
    @property
    def brokers(self) -> list[BrokerMetadata]: ...
    @property
    def topics(self) -> dict[str, TopicMetadata]:
        """Topics by name."""

@final
class NewTopic:
    """A topic for :meth:`Client.create_topics`; -1 means the broker's default.

    Example:
        >>> NewTopic("orders", num_partitions=3, config={"cleanup.policy": "compact"})
        NewTopic(name="orders", num_partitions=3, replication_factor=-1)
    """

    def __new__(
        cls,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        config: Mapping[str, str] | None = None,
    ) -> NewTopic: ...
    @property
    def name(self) -> str: ...
    @property
    def num_partitions(self) -> int: ...
    @property
    def replication_factor(self) -> int: ...
    @property
    def config(self) -> dict[str, str]: ...

@final
class Client:
    """A Kafka client (librdkafka, in Rust) for administration and simple synchronous I/O.

    ``config`` is a librdkafka configuration dict, the same one confluent-kafka takes. Unknown
    keys raise :class:`ferrokafka.ConfigError` naming the key. Every method releases the GIL while
    it waits and can be interrupted with Ctrl-C. A client cannot be used in a forked child.

    Example:
        >>> client = Client({"bootstrap.servers": "127.0.0.1:9092"})  # doctest: +SKIP
        >>> client.create_topics([NewTopic("orders", 3)], exist_ok=True)  # doctest: +SKIP
        ['orders']
        >>> client.produce("orders", b"paid", key="order-1").offset()  # doctest: +SKIP
        0
        >>> [m.value() for m in client.read_topic("orders")]  # doctest: +SKIP
        [b'paid']
    """

    def __new__(cls, config: Mapping[str, _ConfigValue]) -> Client: ...
    def list_topics(self, topic: str | None = None, timeout: float = 10.0) -> ClusterMetadata:
        """Fetch cluster metadata, for one topic or all.

        Raises :class:`ferrokafka.KafkaTimeoutError` (also a ``TimeoutError``) when no broker
        answers within ``timeout`` seconds.
        """
    def create_topics(
        self,
        topics: Sequence[NewTopic | str],
        timeout: float = 30.0,
        exist_ok: bool = False,
    ) -> list[str]:
        """Create topics and return the names created.

        A failure raises :class:`ferrokafka.KafkaError` with the topic and the code name (for
        example ``TOPIC_ALREADY_EXISTS``); with ``exist_ok=True`` existing topics are skipped.
        """
    def delete_topics(self, topics: Sequence[str], timeout: float = 30.0) -> None:
        """Delete topics; an unknown topic raises :class:`ferrokafka.KafkaError`."""
    def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: _Headers | None = None,
        timestamp: int | None = None,
        timeout: float = 10.0,
    ) -> Message:
        """Produce one record and wait for the broker's acknowledgement.

        ``str`` keys, values and header values are encoded as UTF-8; ``timestamp`` is in
        milliseconds since the epoch. Returns the delivered record with its partition and offset.
        """
    def read_topic(
        self, topic: str, max_messages: int = 100_000, timeout: float = 10.0
    ) -> list[Message]:
        """Read every partition from its start to its current end, by (partition, offset)."""

@final
class _RawAsyncProducer:
    """The native half of :class:`ferrokafka.AsyncProducer`; use that class instead."""

    def __new__(
        cls,
        config: Mapping[str, _ConfigValue],
        max_queue_size: int,
        max_queue_bytes: int,
        overflow: str,
        block_timeout: float,
        delivery_threshold: int,
        delivery_interval: float,
        max_retries: int,
        retry_backoff: float,
    ) -> _RawAsyncProducer: ...
    def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        partition_key: bytes | str | None = None,
        headers: _Headers | None = None,
        timestamp: int | None = None,
        track: bool = False,
    ) -> int:
        """Queue one record; returns its ticket (0 when not tracked)."""
    def queue_size(self) -> int:
        """Records buffered now."""
    def produce_many(self, records: Any, topic: str | None = None) -> int:
        """Queue a batch; returns how many records were queued."""
    def deliver_messages(self) -> None: ...
    def flush(self, timeout: float) -> None: ...
    def poll_events(self, timeout: float, max_events: int = 10_000) -> list[tuple[Any, ...]]:
        """Wait up to ``timeout`` seconds for delivery and instrumentation events."""
    def shutdown(self, timeout: float) -> list[tuple[int, Message]]:
        """Stop; returns ``(ticket, message)`` for every record never handed to Kafka."""
    def stats(self) -> dict[str, int]: ...
