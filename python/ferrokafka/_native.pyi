"""Type stubs and user documentation of the ``ferrokafka._native`` extension module."""

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Literal, Protocol, Required, TypeAlias, TypedDict, Unpack, final, overload

__version__: str
librdkafka_version: str
"""The version of librdkafka linked into this build."""
DEFAULT_MAX_INFLATED: int
"""The ``max_inflated`` / ``max_output`` every decoder defaults to (67,108,864 bytes, 64 MiB): a
report or state document is a few KiB, so the limit only stops a zip bomb."""
CONSUMER_CLOSE_SECONDS: float
"""What a stopping consumer's final commit and leaving its group take at most, together, after
the drain (5.0). A broker that accepts connections and never answers (a hung process) gets no
longer: the stop returns, and librdkafka finishes leaving the group in the background."""
WATERDROP_MAX_PAYLOAD_SIZE: int
"""WaterDrop's default ``max_payload_size`` (1,000,012 bytes): the largest scheduled payload
accepted unless a ``max_payload_size`` says otherwise."""
REDELIVERY_COUNT_HEADER: str
"""``ferrokafka_redelivery_count``: how many times a queue message was redelivered (decimal)."""
ORIGINAL_TOPIC_HEADER: str
"""``ferrokafka_original_topic``: a dead letter's topic before it was dead-lettered."""
ORIGINAL_PARTITION_HEADER: str
"""``ferrokafka_original_partition``: a dead letter's partition (decimal)."""
ORIGINAL_OFFSET_HEADER: str
"""``ferrokafka_original_offset``: a dead letter's offset (decimal)."""
DEAD_LETTER_HEADERS: tuple[str, str, str, str, str]
"""The headers a Consumer's dead letter carries after the record's own, in order:
``ferrokafka_error_class``, ``ferrokafka_error_message`` and the three ``ferrokafka_original_*``."""
TIMED_OUT_CODE: int
"""librdkafka's code for a local timeout (-185, ``RD_KAFKA_RESP_ERR__TIMED_OUT``): the ``code``
of every :class:`ferrokafka.KafkaTimeoutError`."""
TIMED_OUT_NAME: str
"""The name of :data:`TIMED_OUT_CODE`: ``"_TIMED_OUT"``."""

_OAuthCallback: TypeAlias = Callable[[str | None], tuple[Any, ...]]
"""confluent-kafka's ``oauth_cb``: given ``sasl.oauthbearer.config``, returns ``(token,
expiry_epoch_seconds)`` or ``(token, expiry, principal, extensions)``."""
_ConfigValue: TypeAlias = str | int | float | bool | _OAuthCallback
_HeaderValue: TypeAlias = bytes | str | None
_Headers: TypeAlias = Mapping[str, _HeaderValue] | Sequence[tuple[str, _HeaderValue]]

@final
class Message:
    """A Kafka record, shaped like confluent-kafka's ``Message``.

    Example:
        >>> msg = client.produce("orders", b"paid", key=b"order-1")
        >>> (msg.topic(), msg.key(), msg.value(), msg.offset())
        ('orders', b'order-1', b'paid', 0)
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
class Batch:
    """The records of one partition handed to a consumer handler, in offset order, kept in Rust
    memory: a sequence of :class:`Message` (each created when accessed), with columnar
    accessors that make no ``Message`` at all.

    Example:
        >>> def handle(batch: Batch) -> None:
        ...     total = sum(len(v or b"") for v in batch.values())
        ...     table = batch.to_arrow()  # pyarrow.RecordBatch
    """

    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: int, /) -> Message: ...
    @overload
    def __getitem__(self, index: slice, /) -> list[Message]: ...
    def __iter__(self) -> BatchIterator: ...
    def __bool__(self) -> bool: ...
    def values(self) -> list[bytes | None]:
        """The values, in order (``None`` for a tombstone)."""
    def keys(self) -> list[bytes | None]:
        """The keys, in order."""
    def offsets(self) -> list[int]:
        """The offsets, in order."""
    def timestamps(self) -> list[int]:
        """The timestamps in milliseconds since the epoch (0 when a record has none)."""
    def to_arrow(self) -> Any:
        """A ``pyarrow.RecordBatch`` with columns ``key``, ``value`` (binary), ``topic``,
        ``partition`` (int32), ``offset`` (int64), ``timestamp`` (timestamp[ms], null when a
        record has none) and ``headers`` (list<struct<key: string, value: binary>>), built in
        Rust without a Python object per record (with the GIL released when the batch holds
        more than 1 MiB of keys and values). Needs pyarrow."""

@final
class BatchIterator(Iterator[Message]):
    """Iterates a :class:`Batch`."""

    def __iter__(self) -> BatchIterator: ...
    def __next__(self) -> Message: ...

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
        >>> client.create_topics([NewTopic("orders", 3)])
        ['orders']
        >>> md = client.list_topics(timeout=5.0)
        >>> len(md.topics["orders"].partitions)
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

def check_topic_name(name: str, what: str = "topic") -> None:
    """Raise ``ValueError`` naming ``name`` (as ``what``) unless Kafka accepts it as a topic
    name: 1 to 249 ASCII letters, digits, ``_``, ``-`` and ``.``, but not ``.`` or ``..``.
    Every topic given to ferrokafka (a record's topic, a subscription that is not a ``^``
    pattern, a daemon's topics, a topic to create or delete) is checked by this rule where it
    comes in.

    Example:
        >>> check_topic_name("orders.v2-eu_1")
        >>> check_topic_name("a b")
        Traceback (most recent call last):
        ...
        ValueError: topic "a b" is not a legal topic name (letters, digits, '_', '-', '.')
    """

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
        config: Mapping[str, str | int | float | bool] | None = None,
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
    ``partition_key_hashing`` says how :meth:`produce` hashes a ``partition_key``:
    ``"waterdrop"`` (default) as WaterDrop does, over as many leading UTF-8 bytes as the key has
    characters, so Ruby and Python producers agree on non-ASCII keys; ``"bytes"`` over every
    byte. Anything else raises ``ValueError``.

    Example:
        >>> client = Client({"bootstrap.servers": "127.0.0.1:9092"})
        >>> client.create_topics([NewTopic("orders", 3)], exist_ok=True)
        ['orders']
        >>> client.produce("orders", b"paid", key="order-1").offset()
        0
        >>> [m.value() for m in client.read_topic("orders")]
        [b'paid']
    """

    def __new__(
        cls,
        config: Mapping[str, _ConfigValue],
        *,
        partition_key_hashing: Literal["waterdrop", "bytes"] = "waterdrop",
    ) -> Client: ...
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
        """Create topics and return the names created (none for an empty list).

        A failure raises :class:`ferrokafka.KafkaError` with the topic and the code name (for
        example ``TOPIC_ALREADY_EXISTS``); with ``exist_ok=True`` existing topics are skipped. A
        name Kafka would refuse (see :func:`check_topic_name`) raises ``ValueError`` before
        anything is sent.
        """
    def delete_topics(self, topics: Sequence[str], timeout: float = 30.0) -> None:
        """Delete topics (nothing for an empty list); an unknown topic raises
        :class:`ferrokafka.KafkaError`, a name Kafka would refuse ``ValueError``."""
    def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: _Headers | None = None,
        timestamp: int | None = None,
        timeout: float = 10.0,
        partition_key: bytes | str | None = None,
    ) -> Message:
        """Produce one record and wait for the broker's acknowledgement.

        ``str`` keys, values and header values are encoded as UTF-8; ``timestamp`` is in
        milliseconds since the epoch. Without ``partition``, ``partition_key`` chooses the
        partition as :class:`AsyncProducer` and WaterDrop do without being the record key: CRC32
        of as many leading UTF-8 bytes as the key has characters (WaterDrop's rule), or of every
        byte with ``Client(..., partition_key_hashing="bytes")``, modulo the partition count. An
        empty ``partition_key``, a topic Kafka would refuse (see :func:`check_topic_name`) and
        a header name with a NUL byte raise ``ValueError``. Returns the delivered record with
        its partition and offset.
        """
    def read_topic(
        self, topic: str, max_messages: int = 100_000, timeout: float = 10.0
    ) -> list[Message]:
        """Read every partition from its start to its current end, by (partition, offset): at
        most ``max_messages``, the first ones in that order whichever partitions answer first
        (logged at INFO when the topic holds more)."""

class _AsyncProducerOptions(TypedDict):
    """The options of :class:`ferrokafka.AsyncProducer` the engine takes, converted and checked
    once by it (see that class for what each means)."""

    max_queue_size: int
    max_queue_bytes: int
    overflow: Literal["raise", "block", "drop_oldest"]
    block_timeout: float
    delivery_threshold: int
    delivery_interval: float
    max_retries: int
    retry_backoff: float
    partition_key_hashing: Literal["waterdrop", "bytes"]

@final
class _RawAsyncProducer:
    """The native half of :class:`ferrokafka.AsyncProducer`; use that class instead."""

    def __new__(
        cls, config: Mapping[str, _ConfigValue], **options: Unpack[_AsyncProducerOptions]
    ) -> _RawAsyncProducer: ...
    def produce(
        self,
        value: bytes | str | None,
        topic: str,
        key: bytes | str | None = None,
        partition: int | None = None,
        partition_key: bytes | str | None = None,
        headers: _Headers | None = None,
        timestamp: int | None = None,
        on_delivery: Callable[[Exception | None, Message], object] | None = None,
    ) -> None:
        """:meth:`ferrokafka.AsyncProducer.produce` itself, which binds it while no
        instrumentation subscriber needs the queue size."""
    def queue(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        partition_key: bytes | str | None = None,
        headers: _Headers | None = None,
        timestamp: int | None = None,
        on_delivery: Callable[[Exception | None, Message], object] | None = None,
        future: Future[Message] | None = None,
    ) -> int:
        """Queue one record; ``on_delivery`` or the running ``future`` gets its delivery result
        (settled by ``poll_events``). Returns the queue size right after it went in."""
    def produce_many(
        self,
        records: Any,
        topic: str | None = None,
        on_delivery: Callable[[DeliveryReport], object] | None = None,
    ) -> tuple[int, int]:
        """Queue a batch; returns how many records were queued and the queue size after.
        ``on_delivery(report)`` gets one :class:`DeliveryReport` once every queued record is
        settled. On overflow, ``BufferOverflow.accepted`` (also in its message) is how many of the
        batch's first records were queued before it."""
    def deliver_messages(self) -> None: ...
    def flush(self, timeout: float) -> None: ...
    def poll_events(
        self, timeout: float, max_events: int = 10_000
    ) -> list[
        ProducerFailed | ProducerDropped | ProducerDelivering | ProducerRetrying | ProducerShutDown
    ]:
        """Wait up to ``timeout`` seconds for events; settle the delivery results among them
        (callbacks and futures) and return the others."""
    def wake_listener(self) -> None:
        """End the wait of a ``poll_events`` running on another thread now."""
    def shutdown(self, timeout: float) -> list[tuple[int, Message]]:
        """Stop; returns ``(ticket, message)`` for every record never handed to Kafka."""
    def settle(self, ticket: int, message: Message) -> None:
        """Hand a record returned by ``shutdown`` to its waiter, with ``message.error()``."""
    def stats(self) -> ProducerStats: ...

@final
class DeliveryReport:
    """The delivery results of one ``produce_many(..., on_delivery=...)`` call, in the order of
    its records: one object per call, the positions kept in Rust until asked for."""

    @property
    def count(self) -> int:
        """Records the call queued (those it accepted)."""
    @property
    def delivered(self) -> int:
        """Records the broker acknowledged."""
    @property
    def failed(self) -> int:
        """Records that finally failed; they are also handed back (``take_failed``,
        ``shutdown``)."""
    def partitions(self) -> list[int]:
        """Each record's partition, in call order; -1 for a failed record."""
    def offsets(self) -> list[int]:
        """Each record's offset, in call order; -1 for a failed record."""
    def errors(self) -> list[tuple[int, Exception]]:
        """``(index, error)`` of each failed record, by index."""
    def __len__(self) -> int: ...

@final
class ProducerStats:
    """An AsyncProducer's counters and queue sizes. Every accepted record is delivered, failed,
    dropped, or counted in ``queue_size + retry_queue_size + in_flight``."""

    @property
    def enqueued(self) -> int:
        """Records accepted by ``produce`` / ``produce_many``."""
    @property
    def delivered(self) -> int:
        """Records the broker acknowledged (after their transaction committed, if any)."""
    @property
    def failed(self) -> int:
        """Records handed back after their final failure."""
    @property
    def retried(self) -> int:
        """Re-sends after a failure."""
    @property
    def dropped(self) -> int:
        """Records dropped by ``drop_oldest``."""
    @property
    def overflowed(self) -> int:
        """Records refused because the queue was full."""
    @property
    def deliveries(self) -> int:
        """Delivery rounds run."""
    @property
    def queue_size(self) -> int:
        """Records buffered now."""
    @property
    def queue_bytes(self) -> int:
        """Bytes buffered now."""
    @property
    def in_flight(self) -> int:
        """Records handed to librdkafka and not yet settled."""
    @property
    def retry_queue_size(self) -> int:
        """Records waiting to be sent again: after a failed send, or given back by librdkafka's
        full queue."""
    def as_dict(self) -> dict[str, int]:
        """The fields as a dict."""

@final
class ProducerFailed:
    """A record that finally failed (retries exhausted, refused for good, or purged at
    shutdown); ``message.error()`` says why. Its waiter already got the error."""

    @property
    def message(self) -> Message: ...
    @property
    def attempts(self) -> int: ...

@final
class ProducerDropped:
    """Records the ``drop_oldest`` policy dropped, oldest first; their waiters already got a
    ``BufferOverflow``."""

    @property
    def messages(self) -> list[Message]: ...

@final
class ProducerDelivering:
    """A delivery round handed ``message_count`` records to librdkafka."""

    @property
    def message_count(self) -> int: ...
    @property
    def queue_size(self) -> int: ...

@final
class ProducerRetrying:
    """librdkafka reported a failed send that will be retried."""

    @property
    def topic(self) -> str: ...
    @property
    def error(self) -> Exception: ...
    @property
    def attempt(self) -> int: ...

@final
class ProducerShutDown:
    """The producer's last event: its shutdown finished."""

_Id: TypeAlias = int | str

@final
class DeadlineQueue:
    """A priority queue of items keyed by id and ordered by deadline, in Rust.

    Ids are ``int`` (64-bit signed) or ``str``; pushing an id that is queued replaces its
    deadline and item, as a ``dict`` assignment would. Deadlines are floats in any unit you pick
    (``time.time()`` or ``time.monotonic()`` seconds are typical); an entry is due when its
    deadline is ``<= now``. Entries with equal deadlines leave in push order unless a
    ``tiebreak`` is given (smaller first). Every keyed operation is O(log n), and updates and
    removals by id free the entry at once (no lazy deletion). Thread-safe; the batch methods
    ``push_many``, ``discard_many`` and ``pop_due(max=...)`` cross into Rust once per batch.

    Example:
        >>> q = DeadlineQueue()
        >>> q.push("order-1", 10.0, "ship")
        >>> q.push_many([("order-2", 5.0, "bill"), ("order-3", 20.0, "mail")])
        >>> q.update("order-3", 1.0)
        True
        >>> q.pop_due(now=7.0)
        [('order-3', 'mail'), ('order-2', 'bill')]
        >>> (len(q), "order-1" in q, q.next_deadline())
        (1, True, 10.0)
    """

    def __new__(cls) -> DeadlineQueue: ...
    def push(
        self, id: _Id, deadline: float, item: object = None, tiebreak: int | None = None
    ) -> None:
        """Queue ``item`` under ``id`` at ``deadline``, replacing an entry with the same id.

        Raises ``TypeError`` for an id that is not ``int``/``str`` and ``ValueError`` for a NaN
        deadline. ``tiebreak`` (0 .. 2**64 - 1) orders equal deadlines; without it they leave in
        push order.
        """
    def push_many(self, entries: Iterable[tuple[_Id, float] | tuple[_Id, float, object]]) -> None:
        """Queue ``(id, deadline[, item])`` tuples in one call (ties leave in push order).

        Example:
            >>> q = DeadlineQueue()
            >>> q.push_many((i, float(i), None) for i in range(3))
            >>> len(q)
            3
        """
    def update(self, id: _Id, deadline: float) -> bool:
        """Move the entry ``id`` to ``deadline`` (keeping its item); ``False`` if not queued."""
    def remove(self, id: _Id) -> Any:
        """Remove the entry ``id`` and return its item; ``KeyError`` if it is not queued."""
    def discard(self, id: _Id) -> Any:
        """Remove the entry ``id`` if queued and return its item, else ``None``."""
    def discard_many(self, ids: Iterable[_Id]) -> int:
        """Remove every queued id of ``ids`` in one call; returns how many were removed.

        Example:
            >>> q = DeadlineQueue()
            >>> q.push_many([(1, 1.0), (2, 2.0)])
            >>> q.discard_many([1, 2, 3])
            2
        """
    def peek(self) -> tuple[_Id, float, Any] | None:
        """The next entry as ``(id, deadline, item)`` without removing it, or ``None``."""
    def pop_due(self, now: float, max: int | None = None) -> list[tuple[_Id, Any]]:
        """Remove and return up to ``max`` (default: all) ``(id, item)`` pairs whose deadline is
        ``<= now``, earliest first.

        Example:
            >>> q = DeadlineQueue()
            >>> q.push_many([("a", 1.0, 1), ("b", 2.0, 2), ("c", 9.0, 3)])
            >>> q.pop_due(5.0, max=1)
            [('a', 1)]
        """
    def next_deadline(self) -> float | None:
        """The earliest deadline (when to look for due entries next), or ``None`` when empty."""
    def clear(self) -> None:
        """Remove every entry."""
    def __len__(self) -> int: ...
    def __contains__(self, id: object, /) -> bool: ...

def gc_untrack(object: object) -> None:
    """Take ``object`` off the cyclic garbage collector's lists (nothing if it is off them), as
    CPython does for tuples of numbers: it is no longer walked at every collection. The caller
    must :func:`gc_track` it before it can be part of a reference cycle, which would otherwise
    never be collected. ``ValueError`` for objects of types the collector does not know."""

def gc_track(object: object) -> None:
    """Put ``object`` back on the garbage collector's lists (nothing if it is on them)."""

def on_engine_thread() -> bool:
    """Whether this thread is one a client's engine or librdkafka owns, running Python for it (a
    log line on its way to ``logging``, an ``oauth_cb``): a close started here must not wait for
    the client's threads, which may include this one."""

def wait_for_background_closes(timeout: float) -> int:
    """Wait up to ``timeout`` seconds (positive) for the clients being closed on threads of their
    own, and return how many still are (0: none).

    A client whose last reference goes on one of its own threads (in a ``logging`` handler fed
    by its engine, or in its ``oauth_cb``) cannot be closed there and is closed on a thread of
    its own; the interpreter's exit waits here so that the close ends, and says what it lost.
    """

def redact_secrets(text: str) -> str:
    """``text`` as ferrokafka shows every log line and exception: without URL credentials
    (``https://[redacted]@host/...``), without the values of secret parameters and secret
    configuration keys (``client_secret=[redacted]``, ``sasl.password=[redacted]``: names
    containing pass, pwd, secret, token, key, assertion, credential or signature, or ``sig``),
    and without any secret configuration value given to a client of this process."""

def reread_log_levels() -> None:
    """Make the engines read their loggers' levels from ``logging`` again (they cache them, so
    that a record nobody shows costs no GIL). ``ferrokafka`` calls it whenever ``logging``
    clears its own level cache: a level set at any time applies to running clients."""

def deflate(data: bytes, level: int = 6) -> bytes:
    """Compress ``data`` into a zlib stream (RFC 1950) at ``level`` 0..9, readable by ``zlib``.

    The GIL is released for inputs over 64 KiB. Example:
        >>> import zlib
        >>> zlib.decompress(deflate(b"hello" * 100)) == b"hello" * 100
        True
    """

def inflate(data: bytes, max_output: int = ...) -> bytes:
    """Decompress the zlib stream ``data``, refusing more than ``max_output`` bytes of output.

    Corrupt, truncated or trailing-garbage input and output over the limit raise
    :class:`ferrokafka.CodecError` (the message names the limit); a zip bomb costs at most the
    limit in memory. The GIL is released for inputs over 16 KiB. Example:
        >>> import zlib
        >>> inflate(zlib.compress(b"hello"))
        b'hello'
    """

def encode_state_report(report: Mapping[str, Any], level: int = 6) -> bytes:
    """Validate a scheduler state report and encode it as zlib-compressed JSON.

    The fields are Karafka's: ``schema_version`` ("1.0.0"), ``dispatched_at``, ``state``,
    ``offsets`` {``low``, ``high``}, ``daily`` {"YYYY-MM-DD": count}, ``started_at``,
    ``reloads``, plus ferrokafka's ``skipped_records``, ``dispatched`` and ``failed`` (the
    encoder writes 0 for any of these three not given). Anything else is written exactly as
    given: an invalid report (a field missing, of the wrong type or unknown) raises
    :class:`ferrokafka.CodecError` naming the field; values that are not JSON raise
    ``TypeError``/``ValueError`` with their path. Example:
        >>> blob = encode_state_report({"schema_version": "1.0.0", "dispatched_at": 1.5,
        ...     "state": "loaded", "offsets": {"low": 0, "high": 9}, "daily": {},
        ...     "started_at": 1, "reloads": 0})
        >>> decode_state_report(blob)["state"]
        'loaded'
    """

def decode_state_report(data: bytes, max_inflated: int = ...) -> dict[str, Any]:
    """Inflate (at most ``max_inflated`` bytes), parse and validate a state report.

    Returns the report as a dict with every field (ferrokafka's counters default to 0 for a
    Ruby-written report); corrupt data or an invalid or newer report raises
    :class:`ferrokafka.CodecError`. Example: see :func:`encode_state_report`.
    """

def encode_process_report(report: Mapping[str, Any], level: int = 6) -> bytes:
    """Validate a Karafka Web consumer report (schema 1.7.0, every rule of Karafka Web's
    contracts) and encode it as zlib-compressed JSON, exactly as given: a broken rule raises
    :class:`ferrokafka.CodecError` naming the field (its dotted JSON path, e.g.
    ``process.memory_usage``) and the rule, and so does anything the schema would not write as
    given (an unknown field, ``null`` for an optional one); nothing is filled in or converted.
    The schema is the Rust core's (``ferrokafka_core::codec::report``); the Reporter builds
    reports with :class:`ReportBuilder`.

    Example:
        >>> blob = encode_process_report(report)
        >>> decode_process_report(blob)["process"]["id"]
        'host-1:4242:ab12cd'
    """

def decode_process_report(data: bytes, max_inflated: int = ...) -> dict[str, Any]:
    """Inflate (at most ``max_inflated`` bytes) and parse a consumer report of any schema read
    (1.2.x to 1.7.0 and newer ones); returns it in the current schema's shape.

    Example: see :func:`encode_process_report`.
    """

def encode_error_report(report: Mapping[str, Any], level: int = 6) -> bytes:
    """Validate an error report and encode it as zlib-compressed JSON.

    Error schema 1.2.0 (with ``id``), every rule of Karafka Web's error contract; the error
    message must be at most 10,000 characters. Written exactly as given, but for
    ``process.tags``, which the contract makes optional and the encoder writes as ``[]`` when
    not given; an invalid report raises :class:`ferrokafka.CodecError` naming the field.
    Example:
        >>> blob = encode_error_report(error)
        >>> decode_error_report(blob)["error_class"]
        'ValueError'
    """

def decode_error_report(data: bytes, max_inflated: int = ...) -> dict[str, Any]:
    """Inflate (at most ``max_inflated`` bytes), parse and validate an error report.

    Example: see :func:`encode_error_report`.
    """

@final
class Marker:
    """A redelivery marker of the KMQ markers topic: START, KEEPALIVE or END.

    ``deadline`` is the redelivery deadline in milliseconds since the epoch. A START marker
    carries the message (key, value, headers) so redelivery needs no seek. Markers compare
    equal by value. Example:
        >>> m = Marker.start(3, 42, 1_700_000_060_000, key=b"k", value=b"v", headers=[("h", b"1")])
        >>> decode_marker(encode_marker(m)) == m
        True
        >>> (m.kind, m.partition, m.offset, Marker.end(3, 42).deadline)
        ('start', 3, 42, None)
    """

    @staticmethod
    def start(
        partition: int,
        offset: int,
        deadline: int,
        key: bytes | str | None = None,
        value: bytes | str | None = None,
        headers: _Headers | None = None,
    ) -> Marker:
        """Processing of the message at ``partition``/``offset`` started."""
    @staticmethod
    def keepalive(partition: int, offset: int, deadline: int) -> Marker:
        """Processing continues; the redelivery deadline moves to ``deadline``."""
    @staticmethod
    def end(partition: int, offset: int) -> Marker:
        """Processing finished (acked, nacked or redelivered)."""
    @property
    def kind(self) -> Literal["start", "keepalive", "end"]: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def deadline(self) -> int | None:
        """Milliseconds since the epoch; ``None`` for an END marker."""
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> list[tuple[str, bytes | None]]: ...
    def __eq__(self, other: object, /) -> bool: ...

def encode_marker(marker: Marker) -> bytes:
    """Encode ``marker`` in the compact binary marker format, version 1.

    Example:
        >>> encode_marker(Marker.end(0, 5))
        b'\\x01\\x03\\x00\\x05'
    """

def decode_marker(data: bytes) -> Marker:
    """Decode a marker; truncated or corrupt data and unknown versions raise
    :class:`ferrokafka.CodecError`.

    Example:
        >>> decode_marker(b"\\x01\\x03\\x00\\x05")
        Marker.end(partition=0, offset=5)
    """

class _ScheduledMessage(TypedDict, total=False):
    topic: Required[str]
    payload: bytes | str | None
    key: str | None
    partition: int | None
    partition_key: str | None
    headers: _Headers | None

class _Envelope(TypedDict, total=False):
    topic: Required[str]
    key: str | None
    partition: int | None
    partition_key: str | None

@final
class ProxyMessage:
    """A record for the schedules topic, built by :func:`schedule_proxy` or :func:`cancel_proxy`.

    Produce it as it is, with any producer. Example:
        >>> p = cancel_proxy("orders-1", {"topic": "schedules"})
        >>> (p.topic, p.key, p.value, p.headers)  # doctest: +NORMALIZE_WHITESPACE
        ('schedules', 'orders-1', None,
         [('schedule_schema_version', b'1.0.0'), ('schedule_source_type', b'cancel')])
    """

    @property
    def topic(self) -> str:
        """The schedules topic."""
    @property
    def key(self) -> str:
        """The proxy key: it identifies the schedule for replacement and cancellation."""
    @property
    def partition(self) -> int | None: ...
    @property
    def partition_key(self) -> str | None: ...
    @property
    def value(self) -> bytes | None:
        """The payload to dispatch later; ``None`` for a cancel."""
    @property
    def headers(self) -> list[tuple[str, bytes]]:
        """The message's own headers followed by the ``schedule_*`` headers."""

@final
class ProxyRecord:
    """The meaning of a schedules-topic record, read from its ``schedule_*`` headers.

    ``kind`` is ``"schedule"`` (with ``epoch`` and the ``target_*`` fields), ``"cancel"`` or
    ``"tombstone"`` (with ``source_offset`` when present). Example:
        >>> parse_proxy_headers([("schedule_schema_version", b"1.0.0"),
        ...                      ("schedule_source_type", b"cancel")]).kind
        'cancel'
    """

    @property
    def kind(self) -> Literal["schedule", "cancel", "tombstone"]: ...
    @property
    def epoch(self) -> int | None:
        """When to dispatch, Unix seconds."""
    @property
    def target_topic(self) -> str | None: ...
    @property
    def target_partition(self) -> int | None: ...
    @property
    def target_key(self) -> str | None: ...
    @property
    def target_partition_key(self) -> str | None: ...
    @property
    def source_offset(self) -> int | None: ...
    def __eq__(self, other: object, /) -> bool: ...

def schedule_proxy(
    message: _ScheduledMessage,
    epoch: int | float,
    envelope: _Envelope,
    *,
    max_payload_size: int = ...,
) -> ProxyMessage:
    """Build the proxy that makes a scheduler (Ruby Karafka's or ferrokafka's) dispatch
    ``message`` at ``epoch`` (Unix seconds), like Karafka's ``ScheduledMessages.schedule``.

    ``message`` has Karafka's fields ``topic``, ``payload``, ``key``, ``partition``,
    ``partition_key``, ``headers``; ``envelope`` has ``topic`` (the schedules topic), ``key``,
    ``partition``, ``partition_key``. The proxy key is the envelope's, else
    ``"<topic>-<uuid4>"`` with, as Karafka's proxy sets it, the proxy ``partition_key`` taken from
    the target's ``partition``, else its ``partition_key``, else its ``key``. ``epoch`` is an int
    or an integral float. WaterDrop's message rules apply: topic names of letters, digits,
    ``_``, ``-`` and ``.``, partitions >= -1, non-empty keys and partition keys when given.
    Headers are exactly Karafka's: ``schedule_schema_version`` "1.0.0",
    ``schedule_target_epoch``, ``schedule_source_type`` "schedule", ``schedule_target_topic``
    and those of ``schedule_target_partition``, ``schedule_target_key`` and
    ``schedule_target_partition_key`` that were given. Raises :class:`ferrokafka.ScheduleError`
    for an epoch more than 10 s in the past or 100 years ahead (milliseconds are refused), an
    empty topic or key, a target topic that is the envelope's (its dispatched copy would be
    read back as a due schedule, forever), a payload (the value alone) over
    ``max_payload_size`` bytes (WaterDrop's default, 1,000,012, unless given: a Karafka fleet's
    WaterDrop refuses more), or an unknown field. Example:
        >>> import time
        >>> p = schedule_proxy({"topic": "orders", "payload": b"paid", "key": "order-1"},
        ...                    int(time.time()) + 60, {"topic": "schedules", "key": "o1"})
        >>> (p.topic, p.key, dict(p.headers)["schedule_target_key"])
        ('schedules', 'o1', b'order-1')
    """

def cancel_proxy(key: str, envelope: _Envelope) -> ProxyMessage:
    """Build the proxy that cancels the schedule with proxy key ``key`` (Karafka's ``cancel``).

    Example: see :class:`ProxyMessage`.
    """

def parse_proxy_headers(headers: _Headers) -> ProxyRecord:
    """Read the ``schedule_*`` headers of a schedules-topic record (a repeated name counts
    once, with its last value; a ``None`` value counts as absent).

    A missing or malformed header, or a schema newer than "1.0.0", raises
    :class:`ferrokafka.CodecError` naming it. Example: see :class:`ProxyRecord`.
    """

# ---- batch codecs over Arrow buffers (used by ferrokafka.arrow and ferrokafka.spark) --------

_ArrowParts = tuple[Any, Any, Any, int, int, bool]
"""``(validity, offsets or values, data, offset, length, large)``: the buffers of one pyarrow
array (any buffer-protocol objects; ``None`` for an absent buffer), its slice offset and length,
and whether its offsets are 64-bit."""

_Column = tuple[Any, Any]
"""A result column as the Arrow C data interface's ``(schema, array)`` PyCapsules, which
``ferrokafka.arrow`` imports with ``pyarrow.Array._import_from_c_capsule`` (no copy)."""

def inflate_batch(
    column: _ArrowParts, max_output: int = ..., large: bool = False
) -> tuple[_Column, _Column]:
    """Inflate every row of a binary Arrow array in one call, the GIL released.

    Returns the output column (binary; 64-bit offsets if ``large``) and a string column with
    each failed row's error (the output row is then null). Use :func:`ferrokafka.arrow.inflate`,
    which passes the buffers and imports the arrays. Example:
        >>> import zlib, pyarrow as pa
        >>> from ferrokafka import arrow
        >>> arrow.inflate(pa.array([zlib.compress(b"a"), b"junk"])).to_pylist()
        [b'a', None]
    """

def deflate_batch(
    column: _ArrowParts, level: int = 6, large: bool = False
) -> tuple[_Column, _Column]:
    """Deflate every row of a binary or string Arrow array in one call, the GIL released; a
    level outside 0..=9 raises ``ValueError``. See :func:`ferrokafka.arrow.deflate`. Example:
        >>> import pyarrow as pa
        >>> from ferrokafka import arrow
        >>> len(arrow.deflate(pa.array([b"a" * 1000]))[0].as_py()) < 20
        True
    """

def partition_key_batch(
    column: _ArrowParts, partition_count: int, partition_key_hashing: str = "waterdrop"
) -> tuple[_Column, _Column]:
    """The partition (int64) each row's partition key chooses among ``partition_count``, as
    :meth:`Client.produce` chooses it (null for a null or empty key). See
    :func:`ferrokafka.arrow.partition_key_partitions`. Example:
        >>> import pyarrow as pa
        >>> from ferrokafka import arrow
        >>> arrow.partition_key_partitions(pa.array(["zamówienie-3"]), 5).to_pylist()
        [0]
    """

def decode_state_batch(column: _ArrowParts, max_inflated: int = ...) -> _Column:
    """Decode every row as a zlib JSON scheduler state report into one struct column (with an
    ``error`` field for rows that fail). See :func:`ferrokafka.arrow.decode_state`. Example:
        >>> import pyarrow as pa
        >>> from ferrokafka import arrow
        >>> arrow.decode_state(pa.array([b"junk"]))[0]["state"].as_py() is None
        True
    """

def decode_report_batch(column: _ArrowParts, max_inflated: int = ...) -> _Column:
    """Decode every row as a zlib JSON process report into one struct column (with an
    ``error`` field). See :func:`ferrokafka.arrow.decode_report`. Example:
        >>> import pyarrow as pa
        >>> from ferrokafka import arrow
        >>> arrow.decode_report(pa.array([None])).to_pylist()
        [None]
    """

def decode_marker_batch(column: _ArrowParts) -> _Column:
    """Decode every row as a redelivery marker into one struct column (with an ``error``
    field). See :func:`ferrokafka.arrow.decode_marker`. Example:
        >>> import pyarrow as pa
        >>> from ferrokafka import arrow, codecs
        >>> blob = codecs.encode_marker(codecs.Marker.end(0, 5))
        >>> arrow.decode_marker(pa.array([blob]))[0]["kind"].as_py()
        'end'
    """

def schedule_headers_batch(
    target_topic: _ArrowParts,
    epoch: _ArrowParts,
    key: _ArrowParts | None = None,
    partition: _ArrowParts | None = None,
    partition_key: _ArrowParts | None = None,
    payload_size: _ArrowParts | None = None,
    max_payload_size: int = ...,
) -> tuple[_Column, _Column]:
    """Build the Karafka proxy headers of every row (``list<struct<key, value>>``) and the
    per-row errors, validating epochs against the current time and payload sizes against
    ``max_payload_size``. ``epoch``, ``partition`` and ``payload_size`` are int64 arrays. See
    :func:`ferrokafka.arrow.schedule_headers`. Example:
        >>> import time, pyarrow as pa
        >>> from ferrokafka import arrow
        >>> rows = arrow.schedule_headers(pa.array(["t"]), pa.array([int(time.time()) + 60]))
        >>> rows[0][2]["value"].as_py()
        b'schedule'
    """

class _Daemon(Protocol):
    """How Python stops a native daemon (:class:`_RawScheduler`, :class:`_RawRedeliveryTracker`);
    stub-only: the two pyclasses share this contract, not a Python base."""

    def request_stop(self) -> None:
        """Ask the daemon to stop; returns at once."""
    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the daemon to end (forever when ``timeout`` is None); True once it has.
        Raises the ``KafkaError`` that ended it if it ended on its own (its connection was
        refused before it ever worked)."""

class _SchedulerOptions(TypedDict):
    """The options of :class:`ferrokafka.scheduling.Scheduler` the engine takes, converted and
    checked once by it."""

    schedules_topics: Sequence[str]
    group_id: str
    flush_batch_size: int
    state_interval: float
    states_postfix: str
    horizon: float
    dead_letter_topic: str | None
    partition_key_hashing: Literal["waterdrop", "bytes"]

@final
class _RawScheduler(_Daemon):
    """The native scheduler daemon; use :class:`ferrokafka.scheduling.Scheduler`."""

    def __new__(
        cls, config: Mapping[str, _ConfigValue], **options: Unpack[_SchedulerOptions]
    ) -> _RawScheduler: ...
    def status(self) -> list[SchedulerPartitionStatus]:
        """Per-partition figures."""
    def report_sample(self) -> SourceSample:
        """This daemon's part of a process report, as of its last loop: librdkafka's
        statistics of its group consumer, with pending schedules as each partition's lag."""

@final
class SchedulerPartitionStatus:
    """One schedules partition of a scheduler."""

    @property
    def topic(self) -> str:
        """Schedules topic."""
    @property
    def partition(self) -> int: ...
    @property
    def state(self) -> str:
        """fresh, loading, loaded, stopped; or blocked (a record with a newer schema stopped
        the partition until the daemon is upgraded)."""
    @property
    def pending(self) -> int:
        """Schedules pending in memory and beyond the horizon."""
    @property
    def dispatched(self) -> int:
        """Schedules dispatched by this daemon since it started (over every assignment of
        the partition)."""
    @property
    def skipped(self) -> int:
        """Records skipped as undecodable."""
    @property
    def failed(self) -> int:
        """Schedules whose target was refused for good."""
    @property
    def applied(self) -> int:
        """Records applied."""
    @property
    def broker(self) -> BrokerOffsets | None:
        """The partition's offsets from librdkafka's latest statistics; None before the first."""
    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (``broker`` as its own dict, or None)."""

_ConsumerEvent: TypeAlias = (
    ConsumerAssigned
    | ConsumerDraining
    | ConsumerUnassigned
    | ConsumerCaughtUp
    | ConsumerLoadControl
    | ConsumerCommitted
    | ConsumerError
)
"""What ``_RawConsumer.poll_events`` returns, one class per kind."""

class _ConsumerOptions(Protocol):
    """What the engine reads of a :class:`ferrokafka.ConsumerOptions` (see it for what each
    field means); its callbacks and reporter stay in Python."""

    @property
    def max_batch_size(self) -> int | None: ...
    @property
    def drain(self) -> float: ...
    @property
    def commit_interval(self) -> float: ...
    @property
    def on_error(self) -> Literal["commit", "retry", "dead_letter"]: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def retry_backoff(self) -> float: ...
    @property
    def max_retry_backoff(self) -> float: ...
    @property
    def dead_letter_topic(self) -> str | None: ...
    @property
    def max_queue_records(self) -> int: ...
    @property
    def max_queue_bytes(self) -> int: ...
    @property
    def ordering(self) -> Literal["partition", "key"]: ...
    @property
    def max_concurrency(self) -> int: ...

def validate_consumer_options(options: _ConsumerOptions) -> None:
    """Check ``options`` as the consumer engine does when it starts (each field converted, then
    the engine's rules): ``TypeError`` or ``ValueError`` naming the field. ``ConsumerOptions``
    calls it when created.

    Example:
        >>> from ferrokafka import ConsumerOptions
        >>> ConsumerOptions(ordering="offset")
        Traceback (most recent call last):
        ...
        ValueError: ordering must be 'partition' or 'key', got 'offset'
    """

@final
class _RawConsumer:
    """The native concurrent consumer engine; use :class:`ferrokafka.Consumer` or
    :class:`ferrokafka.AsyncConsumer` instead."""

    def __new__(
        cls,
        config: Mapping[str, _ConfigValue],
        *,
        subscriptions: Sequence[str | tuple[str, int, str, int]],
        options: _ConsumerOptions,
    ) -> _RawConsumer:
        """Subscribe (topic names) or assign (``(topic, partition, kind, value)``, kind one of
        stored, beginning, end, offset, timestamp) and start the poller thread."""
    def fetch(self, worker: int, timeout: float) -> Batch | None:
        """The next batch of the worker's partition (``[]`` when none came within ``timeout``),
        or ``None`` once the partition is no longer the worker's."""
    def wait_for_records(self, worker: int) -> None:
        """Register the worker, whose ``fetch`` found nothing, for :meth:`fetch_ready`, and
        signal :meth:`ready_fd`."""
    def ready_fd(self) -> int:
        """The file descriptor an event loop watches (``add_reader``): readable when a
        registered worker may find a batch or an event was queued (``poll_events(0.0)`` takes
        it). Made on the first call; closed by
        :meth:`release_ready_fd` or when the consumer is dropped."""
    def release_ready_fd(self) -> None:
        """Close :meth:`ready_fd`, which the loop no longer watches (its reader removed)."""
    def fetch_ready(self) -> list[tuple[int, Batch | None]]:
        """Without waiting: ``(worker, batch or None)`` for each registered worker whose
        partition has a batch or is gone, which leave the register; ``[]`` when none has.
        Reads :meth:`ready_fd`."""
    def ack(self, worker: int, batch: Batch, outcome_name: str) -> bool:
        """Settle the worker's batch: handled (committable) or abandoned (redelivered). False
        when the batch no longer counts."""
    def fail(self, worker: int, batch: Batch, error_class: str, error_message: str) -> float | None:
        """Apply the error policy to the worker's batch, whose handler raised: seconds to wait
        before handling it again, or None when it is settled (committed, dead-lettered in the
        background, or abandoned)."""
    def backoff(self, worker: int, seconds: float) -> bool:
        """Sleep the worker's retry backoff; True when cut short because its partition is no
        longer the worker's (revoked, or the consumer is stopping): abandon the batch then."""
    def report_load_changes(self) -> None:
        """From now on, :meth:`poll_events` also returns a :class:`ConsumerLoadControl` for each
        pause and resume of a partition's queue (until then they are only counted: about one of
        each a batch while a handler keeps up, each waking the thread that takes events)."""
    def poll_events(self, timeout: float, max_events: int = 10_000) -> list[_ConsumerEvent]:
        """Wait up to ``timeout`` seconds for assignment, load-control and commit events; with
        a timeout of 0 the GIL is kept."""
    def stop(self, drain: float) -> None:
        """Drop queued records, give running batches ``drain`` seconds, commit, close."""
    def stats(self) -> ConsumerStats:
        """A snapshot of the counters, the assigned partitions and the group."""
    def report_sample(
        self, jobs: list[JobSample], jobs_started: int, errors: int, busy_seconds: float
    ) -> SourceSample:
        """This consumer's part of a process report, built from the engine's own figures
        (librdkafka's statistics per partition with the lags the consumer knows better, its
        counters, its group), with the handlers' own: the batches running now, jobs started,
        handler errors and seconds in handlers."""

@final
class Assignment:
    """One partition handed to a worker: fetch and acknowledge its batches with ``worker``."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def worker(self) -> int: ...

@final
class ConsumerAssigned:
    """Partitions were assigned; start their workers."""

    @property
    def partitions(self) -> list[Assignment]: ...

@final
class ConsumerDraining:
    """Partitions stopped handing out batches (revoked, or the consumer is stopping):
    ``dropped`` queued records were dropped, and running batches get the drain time."""

    @property
    def partitions(self) -> list[Assignment]: ...
    @property
    def dropped(self) -> int: ...

@final
class ConsumerUnassigned:
    """Partitions were taken away after their workers drained; ``lost`` when their offsets were
    not committed."""

    @property
    def partitions(self) -> list[Assignment]: ...
    @property
    def lost(self) -> bool: ...

@final
class ConsumerCaughtUp:
    """A consumer without a group handled its partition up to the high watermark seen at
    start."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...

@final
class ConsumerLoadControl:
    """Load control stopped polling a full partition (``paused``), or polls it again."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def paused(self) -> bool: ...
    @property
    def queued(self) -> int: ...
    @property
    def queued_bytes(self) -> int: ...

@final
class ConsumerCommitted:
    """The broker answered a commit of ``offsets`` (``(topic, partition, next_offset)``);
    ``error`` when it failed."""

    @property
    def offsets(self) -> list[tuple[str, int, int]]: ...
    @property
    def error(self) -> Exception | None: ...

@final
class ConsumerError:
    """librdkafka reported an error while consuming; the consumer keeps running."""

    @property
    def error(self) -> Exception: ...

@final
class ConsumerCounters:
    """Counters of one partition since its assignment, or of the consumer over its life."""

    @property
    def received(self) -> int:
        """Records routed from librdkafka into the partition queues."""
    @property
    def handled(self) -> int:
        """Records in batches the handler finished."""
    @property
    def failed(self) -> int:
        """Records in batches the handler raised on and that were acknowledged anyway."""
    @property
    def dead_lettered(self) -> int:
        """Records handed to the dead-letter topic."""
    @property
    def retries(self) -> int:
        """Handler retries (the ``retry`` error policy)."""
    @property
    def batches(self) -> int:
        """Batches handed to workers."""
    @property
    def pauses(self) -> int:
        """Times load control stopped polling a full partition."""
    @property
    def resumes(self) -> int:
        """Times load control polled it again."""
    @property
    def dropped(self) -> int:
        """Queued records dropped on revoke or stop (redelivered later)."""
    @property
    def abandoned(self) -> int:
        """Batches abandoned because their handler outlasted the drain time."""
    def as_dict(self) -> dict[str, int]:
        """The fields as a dict."""

@final
class BrokerOffsets:
    """One partition's offsets from librdkafka's latest statistics, negative when unknown, and
    Karafka Web's tracked figures (``_d``: change since the previous statistics, ``_fd``:
    milliseconds unchanged)."""

    @property
    def lo_offset(self) -> int: ...
    @property
    def hi_offset(self) -> int: ...
    @property
    def ls_offset(self) -> int: ...
    @property
    def committed_offset(self) -> int: ...
    @property
    def stored_offset(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def fetch_state(self) -> str: ...
    @property
    def eof_offset(self) -> int: ...
    @property
    def partitions_cnt(self) -> int: ...
    @property
    def lag(self) -> int: ...
    @property
    def lag_d(self) -> int: ...
    @property
    def lag_stored(self) -> int: ...
    @property
    def lag_stored_d(self) -> int: ...
    @property
    def committed_offset_fd(self) -> int: ...
    @property
    def stored_offset_fd(self) -> int: ...
    @property
    def hi_offset_fd(self) -> int: ...
    @property
    def ls_offset_d(self) -> int: ...
    @property
    def ls_offset_fd(self) -> int: ...
    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (a tracking report's partition statistics)."""

@final
class GroupStatistics:
    """The consumer group's state from librdkafka's ``cgrp`` statistics."""

    @property
    def state(self) -> str: ...
    @property
    def join_state(self) -> str: ...
    @property
    def stateage(self) -> int: ...
    @property
    def rebalance_age(self) -> int: ...
    @property
    def rebalance_cnt(self) -> int: ...
    @property
    def rebalance_reason(self) -> str: ...
    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (a tracking report's group state)."""

@final
class PartitionStats:
    """A snapshot of one assigned partition."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def worker(self) -> int:
        """Its worker id."""
    @property
    def queued(self) -> int:
        """Records queued now."""
    @property
    def queued_bytes(self) -> int:
        """Bytes queued now."""
    @property
    def paused(self) -> bool:
        """Whether load control holds the partition (its queue is full: not polled)."""
    @property
    def in_flight(self) -> int:
        """Records in the batch being handled now."""
    @property
    def position(self) -> int | None:
        """Next offset to commit: one past the last record of the last finished batch."""
    @property
    def committed(self) -> int | None:
        """The last offset the broker confirmed committed."""
    @property
    def counters(self) -> ConsumerCounters:
        """Counters since the partition was assigned."""
    @property
    def broker(self) -> BrokerOffsets | None:
        """librdkafka's latest statistics of the partition; None until the first arrived."""
    @property
    def first_received(self) -> int | None:
        """Offset of the first record received since the assignment."""
    def as_dict(self) -> dict[str, Any]:
        """The partition's figures and counters in one flat dict; ``broker`` a dict or None."""

@final
class ConsumerStats:
    """A snapshot of the whole concurrent consumer."""

    @property
    def counters(self) -> ConsumerCounters:
        """Counters over the consumer's life, including partitions no longer assigned."""
    @property
    def commits(self) -> int:
        """Commit requests answered successfully."""
    @property
    def commit_errors(self) -> int:
        """Commit requests that failed."""
    @property
    def partitions(self) -> list[PartitionStats]:
        """Assigned partitions, ordered by topic and partition."""
    @property
    def group(self) -> GroupStatistics | None:
        """The group's state from the latest statistics; None without a group or statistics."""
    @property
    def poll_age(self) -> float | None:
        """Seconds since the poller last returned from librdkafka's poll; None before the
        first."""
    @property
    def bytes_received(self) -> int | None:
        """Bytes per second received from the brokers between the latest two statistics."""
    @property
    def bytes_sent(self) -> int | None:
        """Bytes per second sent to the brokers between the latest two statistics."""
    def as_dict(self) -> dict[str, Any]:
        """The dict ``Consumer.stats()`` returns: the counters, commits, commit_errors,
        poll_age, bytes_received, bytes_sent, ``group`` (a dict or None) and ``partitions``
        (one flat dict each, see :meth:`PartitionStats.as_dict`)."""

class _QueueConsumerOptions(TypedDict):
    """The options of :class:`ferrokafka.redelivery.QueueConsumer` (markers backend) the engine
    takes, converted and checked once by it."""

    queue_topic: str
    markers_topic: str
    group_id: str
    redelivery_timeout: float
    marker_timeout: float
    max_batch_size: int
    auto_keepalive: bool
    dead_letter_topic: str | None

@final
class _RawQueueConsumer:
    """The native queue consumer; use :class:`ferrokafka.redelivery.QueueConsumer`."""

    def __new__(
        cls, config: Mapping[str, _ConfigValue], **options: Unpack[_QueueConsumerOptions]
    ) -> _RawQueueConsumer: ...
    def fetch(self, max_messages: int, timeout: float | None = None) -> list[Message]:
        """Up to ``max_messages`` messages whose START markers are written and offsets
        committed; ``[]`` when none came within ``timeout`` seconds (None: wait for one).
        Raises ``MarkerRefusedError`` carrying a message whose START was refused for good."""
    def ack(self, message: Any) -> None:
        """Write the END marker of this message (``Message`` or anything with ``partition()``
        and ``offset()``; ValueError when it is not in flight): held back at most a
        millisecond to be written with other acks' (``flush`` and ``close`` write it at once)."""
    def ack_many(self, messages: Sequence[Any]) -> None:
        """Write the END markers of these messages (``Message`` or anything with
        ``partition()`` and ``offset()``; ValueError for one not in flight)."""
    def nack(self, message: Any, now: bool) -> None:
        """Stop keeping the message alive; ``now``: make it due for redelivery at once."""
    def keepalive(self, message: Any) -> None:
        """Move the message's deadline to now + the redelivery timeout."""
    def flush(self, timeout: float) -> None:
        """Wait until every END/KEEPALIVE marker so far is written."""
    def stop_handing_out(self) -> None:
        """A close begins: a fetch under way ends within 0.1 s raising ``ClosedError``, and no
        fetch hands out anything from now on; acks are still taken."""
    def close(self, timeout: float, not_handed_out: list[Message] = ...) -> None:
        """Put back on the queue the messages marked and never handed out (those held ready
        and ``not_handed_out``, fetched and kept by the caller), wait for the markers (logging
        what is not written), all within ``timeout``; then close the consumer; idempotent."""
    def stats(self) -> QueueConsumerStats:
        """The counters so far."""

@final
class QueueConsumerStats:
    """Counters of a queue consumer."""

    @property
    def received(self) -> int:
        """Messages marked (START written, offsets committed): handed out or prefetched."""
    @property
    def acked(self) -> int:
        """END markers sent by ``ack``."""
    @property
    def nacked(self) -> int:
        """Messages given up by ``nack``."""
    @property
    def keepalives(self) -> int:
        """KEEPALIVE markers sent, by ``keepalive`` and automatically."""
    @property
    def failed_markers(self) -> int:
        """END or KEEPALIVE markers librdkafka could not deliver."""
    @property
    def refused(self) -> int:
        """Messages whose START the markers topic refused for good: dead-lettered or handed
        back."""
    def as_dict(self) -> dict[str, int]:
        """The fields as a dict."""

class _RedeliveryTrackerOptions(TypedDict):
    """The options of :class:`ferrokafka.redelivery.RedeliveryTracker` the engine takes,
    converted and checked once by it when the daemon starts."""

    queue_topic: str
    markers_topic: str
    group_id: str
    max_redeliveries: int
    dead_letter_topic: str | None
    use_now_if_no_marker_seen: float
    num_offsets_per_commit: int
    commit_interval: float
    max_backoff: float
    produce_timeout: float

def redelivery_count_in(headers: _Headers | None) -> int:
    """How many times a queue message with these headers was redelivered: its last
    :data:`REDELIVERY_COUNT_HEADER`, 0 when missing or unreadable (as the tracker reads it).

    Example:
        >>> redelivery_count_in([("ferrokafka_redelivery_count", b"2")])
        2
        >>> redelivery_count_in(None)
        0
    """

def queue_dead_letter_headers(
    headers: _Headers | None, *, queue_topic: str, partition: int, offset: int, count: int
) -> list[tuple[str, bytes | None]]:
    """The headers of a queue message's dead letter, as the tracker writes them: the message's
    own without a redelivery count, then the count and the three ``ferrokafka_original_*``.

    Example:
        >>> queue_dead_letter_headers(
        ...     [("trace", b"t1"), ("ferrokafka_redelivery_count", b"2")],
        ...     queue_topic="jobs", partition=1, offset=7, count=3,
        ... )
        [('trace', b't1'), ('ferrokafka_redelivery_count', b'3'),
         ('ferrokafka_original_topic', b'jobs'), ('ferrokafka_original_partition', b'1'),
         ('ferrokafka_original_offset', b'7')]
    """

@final
class _RawRedeliveryTracker(_Daemon):
    """The native redelivery tracker; use :class:`ferrokafka.redelivery.RedeliveryTracker`."""

    def __new__(
        cls, config: Mapping[str, _ConfigValue], **options: Unpack[_RedeliveryTrackerOptions]
    ) -> _RawRedeliveryTracker: ...
    def status(self) -> list[RedeliveryPartitionStatus]:
        """Per markers partition figures."""
    def report_sample(self) -> SourceSample:
        """This daemon's part of a process report, as of its last loop: librdkafka's
        statistics of its markers consumer, with unacknowledged messages as each partition's
        lag."""

@final
class RedeliveryPartitionStatus:
    """One markers partition of a redelivery tracker."""

    @property
    def partition(self) -> int:
        """Markers partition."""
    @property
    def caught_up(self) -> bool:
        """Whether the partition was read to its end (redelivery runs only then)."""
    @property
    def open(self) -> int:
        """Messages tracked: open, or being redelivered."""
    @property
    def applied(self) -> int:
        """Markers read."""
    @property
    def redelivered(self) -> int:
        """Messages re-produced to the queue topic."""
    @property
    def dead_lettered(self) -> int:
        """Messages produced to the dead-letter topic."""
    @property
    def dropped(self) -> int:
        """Messages past ``max_redeliveries`` dropped for want of a dead-letter topic."""
    @property
    def undecodable(self) -> int:
        """Markers that could not be decoded (logged and skipped)."""
    @property
    def committed(self) -> int | None:
        """Last committed markers offset."""
    @property
    def broker(self) -> BrokerOffsets | None:
        """The partition's offsets from librdkafka's latest statistics; None before the first."""
    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (``broker`` as its own dict, or None)."""

@final
class PartitionSample:
    """One partition as a tracked component sees it: librdkafka's ``statistics`` of it where
    the component has them, and what the component knows better (a daemon's pending work as
    ``lag``, its own ``fetch_state``; ``None``: take the statistics'). What nobody knows stays
    librdkafka's "unknown" in the report. ``statistics`` takes the fields of
    :class:`BrokerOffsets` (any of them; a field it does not have raises
    :class:`ferrokafka.CodecError` naming it)."""

    def __new__(
        cls,
        topic: str,
        partition: int,
        lag: int | None = None,
        lag_stored: int | None = None,
        committed_offset: int | None = None,
        fetch_state: str | None = None,
        paused: bool = False,
        statistics: Mapping[str, Any] | None = None,
    ) -> PartitionSample: ...

@final
class JobSample:
    """A batch a component's handler is running now (Unix seconds; the last record's
    timestamp in Unix ms when it has one)."""

    def __new__(
        cls,
        handler: str,
        topic: str,
        partition: int,
        first_offset: int,
        last_offset: int,
        messages: int,
        started_at: float,
        last_timestamp_ms: int | None = None,
    ) -> JobSample: ...

@final
class SourceSample:
    """What one tracked component contributes to a report: one subscription group of consumer
    group ``group``.

    Counts are cumulative since the component started (the report carries the change since
    the previous report, as Karafka Web expects). ``busy`` counts handlers running now,
    ``enqueued`` records waiting for a handler, ``busy_seconds`` the handler time spent (for
    utilization). ``group_state`` is librdkafka's ``cgrp`` statistics, the fields of
    :class:`GroupStatistics` (``None``: no group; a field it does not have raises
    :class:`ferrokafka.CodecError` naming it)."""

    def __new__(
        cls,
        group: str,
        partitions: list[PartitionSample] = ...,
        jobs_total: int | None = None,
        batches: int = 0,
        messages: int = 0,
        errors: int = 0,
        retries: int = 0,
        dead: int = 0,
        busy: int = 0,
        enqueued: int = 0,
        workers: int = 1,
        listeners: int = 1,
        busy_seconds: float = 0.0,
        jobs: list[JobSample] = ...,
        subscription_group: str | None = None,
        instance_id: str | None = None,
        group_state: Mapping[str, Any] | None = None,
        bytes_received: int | None = None,
        bytes_sent: int | None = None,
        poll_age: float = 0.0,
        poll_interval: int = 300000,
    ) -> SourceSample: ...

@final
class ProcessFacts:
    """The process's own facts for a report (memory in KiB; ``load_average`` ``None`` where
    the platform has none; ``runtime``, ``ferrokafka`` and ``librdkafka`` default to the
    running interpreter, e.g. ``CPython 3.12.1``, and the versions of this build). The report
    builder maps them to Karafka Web's fields (see the README's table)."""

    def __new__(
        cls,
        id: str,
        status: str,
        started_at: float,
        rss_kib: int,
        host_used_kib: int,
        memory_limit_kib: int,
        cpus: int,
        threads: int,
        load_average: tuple[float, float, float] | None,
        tags: list[str],
        runtime: str | None = None,
        ferrokafka: str | None = None,
        librdkafka: str | None = None,
    ) -> ProcessFacts: ...
    @property
    def id(self) -> str:
        """``"host:pid:random"``."""
    def with_status(self, status: str) -> ProcessFacts:
        """The same facts with process status ``status``."""

@final
class ReportBuilder:
    """Builds the Reporter's Karafka Web reports from its samples; keeps the counts of the
    last report, since a report carries the counts since the previous one."""

    def __init__(self) -> None: ...
    def consumer_report(
        self, process: ProcessFacts, sources: list[SourceSample], now: float, level: int = 6
    ) -> bytes:
        """The consumer report at ``now``, checked against Karafka Web's contracts and
        zlib-compressed; a broken rule raises :class:`ferrokafka.CodecError`."""
    @staticmethod
    def error_report(sample: Mapping[str, Any], level: int = 6) -> bytes:
        """The error report (schema 1.2.0) of ``sample``, checked and zlib-compressed."""

@final
class ReportPartition:
    """One assigned partition of a consumer report (librdkafka's figures; ``lag_hybrid`` is
    ``lag_stored`` unless unknown, else ``lag``)."""

    consumer_group: str
    subscription_group: str
    topic: str
    partition: int
    lag: int
    lag_stored: int
    lag_hybrid: int
    committed_offset: int
    stored_offset: int
    hi_offset: int
    lo_offset: int
    ls_offset: int
    fetch_state: str
    poll_state: str

@final
class ConsumerReportView:
    """A consumer report of any schema read, as ``ferrokafka status`` shows it; ``totals``
    count since the process's previous report; ``newer_schema`` flags a report of a schema
    newer than this build reads in full."""

    schema_version: str
    newer_schema: bool
    dispatched_at: float
    id: str
    status: str
    execution_mode: str | None
    started_at: float
    memory_usage: int
    memory_total_usage: int
    memory_size: int
    cpus: int
    threads: int
    workers: int
    listeners_active: int
    listeners_standby: int
    cpu_usage: list[float]
    tags: list[str]
    versions: dict[str, str]
    busy: int
    enqueued: int
    waiting: int
    utilization: float
    lag: int
    lag_committed: int
    totals: dict[str, int]
    jobs: int
    partitions: list[ReportPartition]

@final
class ErrorReportView:
    """An error report of any schema read (``id`` is ``None`` before schema 1.2.0)."""

    schema_version: str
    id: str | None
    kind: str
    error_class: str
    error_message: str
    backtrace: str
    details: dict[str, Any]
    occurred_at: float
    process_id: str
    tags: list[str]

def view_consumer_report(data: bytes, max_inflated: int = ...) -> ConsumerReportView:
    """Decode a zlib JSON consumer report (schemas 1.2.x to 1.7.0, newer ones flagged)."""

def view_error_report(data: bytes, max_inflated: int = ...) -> ErrorReportView:
    """Decode a zlib JSON error report (schemas 1.0.0 to 1.2.0)."""

@final
class StateReportView:
    """A scheduler state report, as ``ferrokafka status`` shows it: ``daily`` counts pending
    schedules per UTC day, ``low``/``high`` are the schedules offsets seen (-1: none), and
    ferrokafka's own counters are 0 where an older tracker wrote none."""

    schema_version: str
    dispatched_at: float
    state: str
    low: int
    high: int
    daily: dict[str, int]
    started_at: int
    reloads: int
    skipped_records: int
    dispatched: int
    failed: int

def view_state_report(data: bytes, max_inflated: int = ...) -> StateReportView:
    """Decode a zlib JSON scheduler state report (schema 1.0.0) into its view."""

def consumer_report_violations_of(report: Any) -> list[tuple[str, str]]:
    """``(field, rule)`` for every rule of Karafka Web's consumer report contracts (Report,
    ConsumerGroup, SubscriptionGroup, Topic, Partition, Job) that ``report`` (decoded JSON)
    breaks; empty when it is valid."""

def error_report_violations_of(report: Any) -> list[tuple[str, str]]:
    """``(field, rule)`` for every rule of Karafka Web's error report contract ``report``
    breaks; empty when it is valid."""
