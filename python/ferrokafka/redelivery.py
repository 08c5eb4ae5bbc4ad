"""Acknowledged processing with redelivery: the KMQ pattern.

A :class:`QueueConsumer` reads a *queue* topic. Before it hands a message out, it writes a START
marker to a *markers* topic (the message id, its redelivery deadline and the message itself) and
commits the queue offset. :meth:`QueueConsumer.ack` writes an END marker;
:meth:`QueueConsumer.keepalive` pushes the deadline out by ``redelivery_timeout``;
:meth:`QueueConsumer.nack` makes the message due at once. A :class:`RedeliveryTracker` daemon
(``ferrokafka redelivery``) reads the markers and re-produces every message whose deadline
passed to its queue partition, with the ``ferrokafka_redelivery_count`` header incremented; after
``max_redeliveries`` it goes to the dead-letter topic instead. Delivery is at-least-once: a
handler must tolerate seeing a message again.

Markers are the compact, versioned binary format of :func:`ferrokafka.codecs.encode_marker`;
every marker of a message goes to markers partition ``queue partition % markers partitions``,
so give the markers topic as many partitions as the queue topic (or a divisor of it).

Example:
    >>> from ferrokafka.redelivery import QueueConsumer, RedeliveryTracker
    >>> config = {"bootstrap.servers": "127.0.0.1:9092"}
    >>> tracker = RedeliveryTracker(config, "jobs", "jobs-markers", dead_letter_topic="jobs-dlq")
    >>> with tracker, QueueConsumer(config, "jobs", "jobs-markers") as queue:  # doctest: +SKIP
    ...     for message in queue:
    ...         handle(message)
    ...         queue.ack(message)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

from ferrokafka._native import Message, _RawQueueConsumer, _RawRedeliveryTracker
from ferrokafka.exceptions import ClosedError
from ferrokafka.tracking import PartitionSample, Reporter, SourceSample

__all__ = [
    "ORIGINAL_OFFSET_HEADER",
    "ORIGINAL_PARTITION_HEADER",
    "ORIGINAL_TOPIC_HEADER",
    "REDELIVERY_COUNT_HEADER",
    "QueueConsumer",
    "RedeliveryTracker",
    "redelivery_count",
]

REDELIVERY_COUNT_HEADER = "ferrokafka_redelivery_count"
"""Header of a redelivered or dead-lettered message: how often it was redelivered (decimal)."""
ORIGINAL_TOPIC_HEADER = "ferrokafka_original_topic"
"""Dead-letter header: the queue topic the message came from."""
ORIGINAL_PARTITION_HEADER = "ferrokafka_original_partition"
"""Dead-letter header: its queue partition (decimal)."""
ORIGINAL_OFFSET_HEADER = "ferrokafka_original_offset"
"""Dead-letter header: its offset in the queue partition (decimal)."""

_Config = Mapping[str, str | int | float | bool]


def redelivery_count(message: Message) -> int:
    """How many times ``message`` was redelivered: 0 for a first delivery.

    Example:
        >>> redelivery_count(message)  # doctest: +SKIP
        1
    """
    value = dict(message.headers() or []).get(REDELIVERY_COUNT_HEADER)
    try:
        return int(value or b"0")
    except ValueError:
        return 0


class QueueConsumer:
    """Consumes a queue topic with acknowledgements; unacknowledged messages come back.

    Each message is handed out only after its START marker was acknowledged by the markers
    topic and its queue offset committed. Then, within ``redelivery_timeout`` seconds, call
    :meth:`ack` (done), :meth:`keepalive` (still working: the deadline moves to now +
    ``redelivery_timeout``) or :meth:`nack` (failed: redeliver at once; it counts as a
    redelivery, so it is dead-lettered after ``max_redeliveries``). A message that gets none of
    these in time, e.g. because the process died, is redelivered by the
    :class:`RedeliveryTracker`.

    Messages are fetched in batches of at most ``max_batch_size`` and their deadlines start
    when the batch is fetched: keep the batch small enough to handle within the timeout.
    ``ack``/``nack``/``keepalive`` return at once; :meth:`flush` (and :meth:`close`) wait until
    their markers are written. Waits release the GIL and can be interrupted with Ctrl-C.

    Args:
        config: librdkafka configuration (``bootstrap.servers``, ``session.timeout.ms``, ...).
        queue_topic: the topic to consume.
        markers_topic: the markers topic (must exist) read by the tracker.
        redelivery_timeout: seconds a handler has before its message is redelivered [60].
        group_id: consumer group [``ferrokafka-queue-<queue_topic>``].
        max_batch_size: most messages fetched (and marked) at once [500].
        marker_timeout: seconds to wait for a batch's START markers and metadata [30].

    Example:
        >>> queue = QueueConsumer(
        ...     {"bootstrap.servers": "127.0.0.1:9092"}, "jobs", "jobs-markers", 30.0
        ... )  # doctest: +SKIP
        >>> message = queue.poll(timeout=5.0)  # doctest: +SKIP
        >>> queue.ack(message)  # doctest: +SKIP
        >>> queue.close()  # doctest: +SKIP
    """

    def __init__(
        self,
        config: _Config,
        queue_topic: str,
        markers_topic: str,
        redelivery_timeout: float = 60.0,
        *,
        group_id: str | None = None,
        max_batch_size: int = 500,
        marker_timeout: float = 30.0,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self._raw = _RawQueueConsumer(
            dict(config),
            queue_topic,
            markers_topic,
            group_id if group_id is not None else f"ferrokafka-queue-{queue_topic}",
            redelivery_timeout,
            marker_timeout,
        )
        self._max_batch_size = max_batch_size
        self._buffer: deque[Message] = deque()

    def consume(self, num_messages: int = 500, timeout: float | None = None) -> list[Message]:
        """Up to ``num_messages`` messages (buffered ones first), waiting up to ``timeout``
        seconds (None: until one comes) for the first; ``[]`` when none came.

        Example:
            >>> for message in queue.consume(100, timeout=1.0):  # doctest: +SKIP
            ...     queue.ack(message)
        """
        if num_messages < 1:
            raise ValueError(f"num_messages must be >= 1, got {num_messages}")
        if not self._buffer:
            wait = None if timeout is None else max(timeout, 0.001)
            return self._raw.fetch(min(num_messages, self._max_batch_size), wait)
        taken = min(num_messages, len(self._buffer))
        return [self._buffer.popleft() for _ in range(taken)]

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next message, or ``None`` when none came within ``timeout`` seconds.

        Example:
            >>> message = queue.poll(timeout=1.0)  # doctest: +SKIP
        """
        if not self._buffer:
            wait = None if timeout is None else max(timeout, 0.001)
            self._buffer.extend(self._raw.fetch(self._max_batch_size, wait))
        return self._buffer.popleft() if self._buffer else None

    def __iter__(self) -> Iterator[Message]:
        """Yields messages, waiting for new ones in between, until the consumer is closed
        (for example by :meth:`close` from another thread)."""
        while True:
            try:
                message = self.poll(timeout=None)
            except ClosedError:
                return
            if message is not None:
                yield message

    def ack(self, message: Message) -> None:
        """Processing of ``message`` succeeded: it will not be redelivered."""
        self._raw.ack(message.partition(), message.offset())

    def nack(self, message: Message) -> None:
        """Processing of ``message`` failed: the tracker redelivers it at once (with its
        redelivery count incremented, or to the dead-letter topic past ``max_redeliveries``)."""
        self._raw.nack(message.partition(), message.offset())

    def keepalive(self, message: Message) -> None:
        """Still working on ``message``: its deadline moves to now + ``redelivery_timeout``."""
        self._raw.keepalive(message.partition(), message.offset())

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every ack/nack/keepalive marker so far is written (TimeoutError after
        ``timeout`` seconds)."""
        self._raw.flush(timeout)

    def stats(self) -> dict[str, Any]:
        """Counters: received, acked, nacked, keepalives, failed_markers."""
        return self._raw.stats()

    def close(self, timeout: float = 30.0) -> None:
        """Write the pending markers, then leave the group. Buffered messages not yet handed
        out are redelivered after their deadline."""
        self._buffer.clear()
        self._raw.close(timeout)

    def __enter__(self) -> QueueConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class RedeliveryTracker:
    """The daemon that redelivers messages whose deadline passed (also ``ferrokafka redelivery``).

    Trackers with the same ``group_id`` split the markers partitions. Each partition is replayed
    from its committed offset to its end before anything is redelivered, so a restart causes no
    burst of spurious redeliveries; offsets are committed only up to the oldest open START
    marker, so a restart forgets nothing. A due message is re-produced to its queue partition
    with :data:`REDELIVERY_COUNT_HEADER` incremented; one that was already redelivered
    ``max_redeliveries`` times goes to ``dead_letter_topic`` with its headers plus the count and
    the ``ferrokafka_original_*`` headers. Without a dead-letter topic such a message is logged
    at error level with its key and counted as ``dropped`` in :meth:`status`. Failed writes are
    retried with exponential backoff (up to ``max_backoff`` seconds); undecodable markers are
    logged, counted (``undecodable``) and skipped. Deadlines come from the markers, so the
    tracker needs no redelivery timeout of its own.

    Its clock, per markers partition, is the newest marker timestamp plus the time since that
    marker was read (never set back by a marker read late), or the wall clock when no marker came
    for ``use_now_if_no_marker_seen``.

    Args:
        config: librdkafka configuration.
        queue_topic: where redelivered messages go.
        markers_topic: the markers topic to track.
        max_redeliveries: redeliveries before dead-lettering [3].
        dead_letter_topic: where messages go after that [None: log, count, drop].
        group_id: consumer group [``ferrokafka-redelivery-<markers_topic>``].
        use_now_if_no_marker_seen: seconds without markers before using the wall clock [60].
        num_offsets_per_commit: markers read between commits of a partition [1000].
        commit_interval: seconds between commits when fewer markers came [5].
        max_backoff: longest pause between retries of a failed write [30].
        reporter: a :class:`ferrokafka.tracking.Reporter` that reports this daemon: per markers
            partition, as ``lag``, the messages handed out and not yet acknowledged [None].

    Example:
        >>> tracker = RedeliveryTracker(
        ...     {"bootstrap.servers": "127.0.0.1:9092"}, "jobs", "jobs-markers",
        ...     dead_letter_topic="jobs-dlq",
        ... )  # doctest: +SKIP
        >>> tracker.start()  # doctest: +SKIP
        >>> tracker.status()[0]["caught_up"]  # doctest: +SKIP
        True
        >>> tracker.stop()  # doctest: +SKIP
        True
    """

    def __init__(
        self,
        config: _Config,
        queue_topic: str,
        markers_topic: str,
        max_redeliveries: int = 3,
        dead_letter_topic: str | None = None,
        *,
        group_id: str | None = None,
        use_now_if_no_marker_seen: float = 60.0,
        num_offsets_per_commit: int = 1000,
        commit_interval: float = 5.0,
        max_backoff: float = 30.0,
        reporter: Reporter | None = None,
    ) -> None:
        if max_redeliveries < 0:
            raise ValueError(f"max_redeliveries must be >= 0, got {max_redeliveries}")
        self._markers_topic = markers_topic
        self._group_id = (
            group_id if group_id is not None else f"ferrokafka-redelivery-{markers_topic}"
        )
        self._args = (
            dict(config),
            queue_topic,
            markers_topic,
            self._group_id,
            max_redeliveries,
            dead_letter_topic,
            use_now_if_no_marker_seen,
            num_offsets_per_commit,
            commit_interval,
            max_backoff,
        )
        self._raw: _RawRedeliveryTracker | None = None
        self._reporter = reporter
        self._poll_interval = int(config.get("max.poll.interval.ms", 300_000))

    def start(self) -> RedeliveryTracker:
        """Start the daemon thread (once); returns self. Bad settings raise here."""
        if self._raw is None:
            self._raw = _RawRedeliveryTracker(*self._args)
            if self._reporter is not None:
                self._reporter.track(self)
        return self

    def run(self) -> None:
        """Start if needed, then block until :meth:`request_stop` or :meth:`stop` is called
        from elsewhere (an interrupt stops the daemon cleanly before it propagates)."""
        raw = self.start()._started()
        try:
            raw.wait()
        except BaseException:
            self.stop()
            raise

    def _started(self) -> _RawRedeliveryTracker:
        if self._raw is None:
            raise RuntimeError("the tracker was not started")
        return self._raw

    def request_stop(self) -> None:
        """Ask the daemon to stop and return at once (safe from a signal handler)."""
        if self._raw is not None:
            self._raw.request_stop()

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop: commit the markers offsets and leave the group. True once stopped."""
        if self._raw is None:
            return True
        if self._reporter is not None:
            self._reporter.stopping(self)
        self._raw.request_stop()
        stopped = self._raw.wait(timeout)
        if self._reporter is not None:
            self._reporter.untrack(self)
        return stopped

    def status(self) -> list[dict[str, Any]]:
        """Per assigned markers partition: partition, caught_up, open, applied, redelivered,
        dead_lettered, dropped, undecodable, committed. Empty before :meth:`start`."""
        return [] if self._raw is None else self._raw.status()

    def report_sample(self) -> SourceSample:
        """This daemon's part of a process report: unacknowledged messages as ``lag``."""
        rows = self.status()
        return SourceSample(
            group=self._group_id,
            partitions=[
                PartitionSample(
                    self._markers_topic,
                    row["partition"],
                    lag=row["open"],
                    lag_stored=row["open"],
                    committed_offset=row["committed"],
                    fetch_state="caught_up" if row["caught_up"] else "replaying",
                )
                for row in rows
            ],
            messages=sum(row["applied"] for row in rows),
            errors=sum(row["undecodable"] for row in rows),
            retries=sum(row["redelivered"] for row in rows),
            dead=sum(row["dead_lettered"] + row["dropped"] for row in rows),
            workers=max(1, len(rows)),
            poll_interval=self._poll_interval,
        )

    def __enter__(self) -> RedeliveryTracker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
