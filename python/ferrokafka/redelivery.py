"""Acknowledged processing with redelivery: the KMQ pattern.

A :class:`QueueConsumer` reads a *queue* topic. Before it hands a message out, it writes a START
marker to a *markers* topic (the message id, its redelivery deadline and the message itself) and
commits the queue offset. While the handler works, the consumer's keepalive thread pushes the
deadline out every half ``redelivery_timeout`` (kafka-mq-go's keep-alive timer).
:meth:`QueueConsumer.ack` writes an END marker; :meth:`QueueConsumer.nack` gives the message up,
to be redelivered at once or once its deadline passes. A :class:`RedeliveryTracker` daemon
(``ferrokafka redelivery``) reads the markers and re-produces every message whose deadline
passed to its queue partition, with the ``ferrokafka_redelivery_count`` header incremented; after
``max_redeliveries`` it goes to the dead-letter topic instead. Delivery is at-least-once: a
handler must tolerate seeing a message again.

On a broker with KIP-932 share groups, ``QueueConsumer(..., backend="share")`` (or ``"auto"``)
gives the same API with the broker tracking every message instead of markers and a tracker
(:mod:`ferrokafka.share_queue`).

Markers are the compact, versioned binary format of :func:`ferrokafka.codecs.encode_marker`;
every marker of a message goes to markers partition ``queue partition % markers partitions``,
so give the markers topic as many partitions as the queue topic (or a divisor of it).

Example:
    >>> from ferrokafka import Client, NewTopic
    >>> from ferrokafka.redelivery import QueueConsumer, RedeliveryTracker, redelivery_count
    >>> config = {"bootstrap.servers": "127.0.0.1:9092"}
    >>> client = Client(config)
    >>> client.create_topics([NewTopic("jobs", 3), NewTopic("jobs-markers", 3)])
    ['jobs', 'jobs-markers']
    >>> client.produce("jobs", b"resize image 7").offset()
    0
    >>> tracker = RedeliveryTracker(config, "jobs", "jobs-markers", dead_letter_topic="jobs-dlq")
    >>> with tracker, QueueConsumer(config, "jobs", "jobs-markers") as queue:
    ...     message = queue.poll(timeout=30.0)
    ...     queue.nack(message)  # handling failed: the tracker hands it out again
    ...     again = queue.poll(timeout=30.0)
    ...     queue.ack(again)  # handled: never handed out again
    >>> again.value(), redelivery_count(again)
    (b'resize image 7', 1)
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

from ferrokafka import _daemon, _exit
from ferrokafka._config import Config
from ferrokafka._extras import missing_extra
from ferrokafka._native import (
    ORIGINAL_OFFSET_HEADER,
    ORIGINAL_PARTITION_HEADER,
    ORIGINAL_TOPIC_HEADER,
    REDELIVERY_COUNT_HEADER,
    Message,
    RedeliveryPartitionStatus,
    _RawQueueConsumer,
    _RawRedeliveryTracker,
    check_topic_name,
    redact_secrets,
    redelivery_count_in,
)
from ferrokafka.exceptions import ClosedError, ConfigError
from ferrokafka.tracking import Reporter, SourceSample

if TYPE_CHECKING:
    from ferrokafka._native import _RedeliveryTrackerOptions
    from ferrokafka.share_queue import ShareMessage, ShareQueue

__all__ = [
    "ORIGINAL_OFFSET_HEADER",
    "ORIGINAL_PARTITION_HEADER",
    "ORIGINAL_TOPIC_HEADER",
    "REDELIVERY_COUNT_HEADER",
    "QueueConsumer",
    "QueueMessage",
    "RedeliveryTracker",
    "redelivery_count",
]

# The header names are the engines' (ferrokafka-kafka's headers.rs), for both backends:
# REDELIVERY_COUNT_HEADER on a redelivered or dead-lettered message (how often it was
# redelivered), and a dead letter's ORIGINAL_TOPIC_HEADER, ORIGINAL_PARTITION_HEADER and
# ORIGINAL_OFFSET_HEADER (where it was in the queue topic).

QueueMessage: TypeAlias = "Message | ShareMessage"
"""A message handed out by :class:`QueueConsumer`: ferrokafka's (markers backend) or
confluent-kafka's (share backend); both have ``topic()``, ``partition()``, ``offset()``,
``key()``, ``value()``, ``headers()`` and ``timestamp()``."""

log = logging.getLogger("ferrokafka.redelivery")

# A QueueConsumer its owner did not close is closed at interpreter exit: its markers written
# within close's default wait, then about two seconds to stop its threads and leave the group.
_EXIT_MARKERS_SECONDS = 5.0
_EXIT_LEAVE_SECONDS = 2.0


def redelivery_count(message: QueueMessage) -> int:
    """How many times ``message`` was redelivered: 0 for a first delivery.

    Example:
        >>> redelivery_count(client.produce("jobs", b"resize image 7"))
        0
        >>> redelivered = {REDELIVERY_COUNT_HEADER: "1"}
        >>> redelivery_count(client.produce("jobs", b"resize image 7", headers=redelivered))
        1
    """
    return redelivery_count_in(message.headers())


# How long a close waits for fetches under way on other threads: a fetch notices a close
# within one wait slice (0.1 s; a share poll slice, 0.2 s).
_FETCHES_END_WITHIN = 2.0

_with_buffers: weakref.WeakSet[QueueConsumer] = weakref.WeakSet()
"""Every QueueConsumer, whose buffered messages a forked child must not hand out again."""


def _forget_the_parents_buffers() -> None:
    """In a forked child: the messages a QueueConsumer buffered are the parent's to hand out
    (and to ack). Without them, the child's next poll asks the engine, which refuses to be used
    after fork; handed out here too, they were processed twice."""
    for queue in _with_buffers:
        queue._buffer.clear()


os.register_at_fork(after_in_child=_forget_the_parents_buffers)


class QueueConsumer:
    """Consumes a queue topic with acknowledgements; unacknowledged messages come back.

    Each message is handed out only after its START marker was acknowledged by the markers
    topic and its queue offset committed. From then until :meth:`ack` or :meth:`nack` the
    message is *in flight*: with ``auto_keepalive`` (the default) a Rust thread of the consumer
    writes a KEEPALIVE for it every ``redelivery_timeout / 2``, so a slow handler keeps its
    message as long as its process lives (kafka-mq-go's semantics; a handler stuck forever keeps
    it forever). Finish every message with one of:

    - :meth:`ack`: done; it is never redelivered.
    - :meth:`nack` (``redeliver="now"``): failed; the tracker redelivers it at once.
    - :meth:`nack` (``redeliver="after_timeout"``, kafka-mq-go's Interrupt): only its keepalive
      stops; it is redelivered when its current deadline passes, at most ``redelivery_timeout``
      from now.

    A redelivery either way counts (the ``ferrokafka_redelivery_count`` header); past the
    tracker's ``max_redeliveries`` it goes to the dead-letter topic. Without ``auto_keepalive``,
    call :meth:`keepalive` yourself within each ``redelivery_timeout``. A message that gets
    nothing in time, e.g. because the process died, is redelivered by the
    :class:`RedeliveryTracker`.

    Messages are fetched in batches of at most ``max_batch_size``. After the first fetch, two
    Rust threads prepare the next batches (START markers, then the offset commit) while this one
    is handled, so up to 24 batches are in flight ahead of the handler; their deadlines start
    then (and are kept alive). Messages prepared but not handed out when the consumer closes
    (or is collected unclosed) are put back on the queue by :meth:`close`, their redelivery
    count unchanged. ``ack``/``ack_many``/``nack``/``keepalive`` return at once, even with the
    broker down long enough to fill librdkafka's queue (a marker it has no room for within
    0.1 s is refused, counted in ``failed_markers``, and its message comes back after its
    deadline); :meth:`flush` (and :meth:`close`) wait until their markers are written. A
    consumer its owner did not close is closed at interpreter exit (within ``exit_timeout``,
    7 s), or when it is collected (by the thread that collects it, within close's default
    5 s): its markers written, its group left. Waits release the GIL and can be interrupted
    with Ctrl-C. Creating the consumer waits for no broker: the markers topic is looked up in
    the background, and a fetch raises its error (a missing markers topic, or
    ``KafkaTimeoutError`` after ``marker_timeout`` without an answer) while it cannot be read.

    A message whose START marker the markers topic refuses for good (larger than its
    ``max.message.bytes``) would block the messages behind it: it is copied to
    ``dead_letter_topic`` (same headers as the tracker's dead letters) or, without one, handed
    back by the fetch that reaches it as :class:`~ferrokafka.exceptions.MarkerRefusedError`
    (its ``message`` attribute); either way its offset is committed, it is logged at error level
    and counted (``refused``), and the messages behind it go on.

    Backends: ``backend="markers"`` (the default; any broker; needs a
    :class:`RedeliveryTracker`; consumer group ``ferrokafka-queue-<queue_topic>``) is described
    above. ``backend="share"`` uses a KIP-932 share group (Kafka 4.2+, share group
    ``ferrokafka-share-queue-<queue_topic>``) through ``confluent_kafka.ShareConsumer``: the
    broker tracks every message, no markers topic and no tracker are needed; ``ack`` accepts,
    ``nack`` releases, and past ``max_redeliveries`` the message is copied to
    ``dead_letter_topic`` and rejected. Its lock cannot be extended (``keepalive`` and
    ``nack(redeliver="after_timeout")`` raise ``NotImplementedError``), and every message handed
    out must be acked or nacked before more are consumed. ``backend="auto"`` takes share groups
    when the broker accepts the group's share settings, markers otherwise; :attr:`backend` tells
    which. A ``group_id`` that names a classic consumer group (e.g. one the markers backend used)
    cannot be a share group: ``"share"`` raises ``ConfigError`` saying so, ``"auto"`` takes
    markers. See :mod:`ferrokafka.share_queue`.

    Args:
        config: librdkafka configuration (``bootstrap.servers``, ``session.timeout.ms``, ...).
        queue_topic: the topic to consume.
        markers_topic: the markers topic (must exist) read by the tracker (markers backend).
        redelivery_timeout: seconds a handler has before its message is redelivered [60].
        group_id: consumer group [markers: ``ferrokafka-queue-<queue_topic>``; share:
            ``ferrokafka-share-queue-<queue_topic>``].
        max_batch_size: most messages fetched (and marked) at once [500].
        marker_timeout: seconds to wait for a batch's START markers and metadata (share
            backend: for the group's settings) [30].
        auto_keepalive: keep in-flight messages alive every ``redelivery_timeout / 2`` [True]
            (markers backend).
        backend: ``"markers"``, ``"share"`` or ``"auto"`` [``"markers"``].
        max_redeliveries: share backend: redeliveries before dead-lettering [3] (the markers
            backend takes it on the :class:`RedeliveryTracker`).
        dead_letter_topic: share backend: where messages go after that [None: log and drop];
            markers backend: where a message goes whose START marker the markers topic refuses
            for good [None: handed back as ``MarkerRefusedError``].

    Example:
        >>> queue = QueueConsumer(
        ...     {"bootstrap.servers": "127.0.0.1:9092"}, "jobs", "jobs-markers", 30.0
        ... )
        >>> message = queue.poll(timeout=30.0)
        >>> message.value()
        b'job-...'
        >>> queue.ack(message)
        >>> queue.close()
    """

    def __init__(
        self,
        config: Config,
        queue_topic: str,
        markers_topic: str,
        redelivery_timeout: float = 60.0,
        *,
        group_id: str | None = None,
        max_batch_size: int = 500,
        marker_timeout: float = 30.0,
        auto_keepalive: bool = True,
        backend: Literal["markers", "share", "auto"] = "markers",
        max_redeliveries: int = 3,
        dead_letter_topic: str | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be positive, got {max_batch_size}")
        if backend not in ("markers", "share", "auto"):
            raise ValueError(f"backend must be 'markers', 'share' or 'auto', got {backend!r}")
        if max_redeliveries < 0:
            raise ValueError(f"max_redeliveries must be >= 0, got {max_redeliveries}")
        # The engines' one rule, here for the share backend too, whose confluent-kafka client
        # would otherwise wait out its group set-up on a name the brokers refuse.
        check_topic_name(queue_topic, "queue_topic")
        if dead_letter_topic is not None:
            check_topic_name(dead_letter_topic, "dead_letter_topic")
        self._share: ShareQueue | None = None
        self._raw: _RawQueueConsumer | None = None
        if backend != "markers":
            self._share = _share_queue(
                config,
                queue_topic,
                group_id if group_id is not None else f"ferrokafka-share-queue-{queue_topic}",
                redelivery_timeout,
                marker_timeout,
                max_redeliveries,
                dead_letter_topic,
                required=backend == "share",
            )
        if self._share is None:
            self._raw = _RawQueueConsumer(
                dict(config),
                queue_topic=queue_topic,
                markers_topic=markers_topic,
                group_id=group_id if group_id is not None else f"ferrokafka-queue-{queue_topic}",
                redelivery_timeout=redelivery_timeout,
                marker_timeout=marker_timeout,
                max_batch_size=max_batch_size,
                auto_keepalive=auto_keepalive,
                dead_letter_topic=dead_letter_topic,
            )
        # The README's loop acks one message at a time: on the markers backend `ack` has no
        # Python work to do, so the binding's own method (same argument, same errors) stands in
        # for it, as `AsyncProducer.produce` does. Not over a subclass's own `ack`.
        if self._raw is not None and type(self).ack is QueueConsumer.ack:
            self.ack = self._raw.ack  # type: ignore[method-assign]
        self._max_batch_size = max_batch_size
        self._buffer: deque[QueueMessage] = deque()
        # A close waits for the fetches under way (another thread's loop), so that what they
        # bring is put back, not handed out after the close began; see `_fetch`.
        self._gate = threading.Condition()
        self._fetching = 0
        self._closing = False
        _with_buffers.add(self)
        _exit.register(self)
        # Dropped without a close, it is closed as close() would be, on the thread that
        # collects it; at interpreter exit the exit hook closes what is still open instead.
        self._close_when_dropped = weakref.finalize(
            self, _close_dropped, self._raw, self._share, self._buffer, os.getpid()
        )
        self._close_when_dropped.atexit = False

    def consume(self, num_messages: int = 500, timeout: float | None = None) -> list[QueueMessage]:
        """Up to ``num_messages`` messages (buffered ones first), waiting up to ``timeout``
        seconds (None: until one comes) for the first; ``[]`` when none came.

        Example:
            >>> for message in queue.consume(100, timeout=30.0):
            ...     queue.ack(message)
            >>> queue.flush()
            >>> queue.stats()["acked"] > 0
            True
        """
        if num_messages < 1:
            raise ValueError(f"num_messages must be positive, got {num_messages}")
        if not self._buffer:
            return self._fetch(min(num_messages, self._max_batch_size), timeout)
        taken = min(num_messages, len(self._buffer))
        return [self._buffer.popleft() for _ in range(taken)]

    @property
    def backend(self) -> Literal["markers", "share"]:
        """The backend in use (``"auto"`` resolved)."""
        return "share" if self._share is not None else "markers"

    def _markers(self) -> _RawQueueConsumer:
        if self._raw is None:
            raise NotImplementedError("not available on the share backend")
        return self._raw

    def _fetch(
        self, count: int, timeout: float | None, into: deque[QueueMessage] | None = None
    ) -> list[QueueMessage]:
        """Up to ``count`` messages from the backend, added to ``into`` when given. What a
        fetch brings once a close began goes to the buffer for the close to put back, and
        ``ClosedError`` is raised: nothing is handed out after the close began."""
        with self._gate:
            if self._closing:
                raise ClosedError("QueueConsumer is closed")
            self._fetching += 1
        fetched: list[QueueMessage] = []
        try:
            fetched = self._from_backend(count, timeout)
        finally:
            with self._gate:
                self._fetching -= 1
                closing = self._closing
                if closing:
                    self._buffer.extend(fetched)
                elif into is not None:
                    into.extend(fetched)
                self._gate.notify_all()
        if closing:
            raise ClosedError("QueueConsumer is closed")
        return fetched

    def _from_backend(self, count: int, timeout: float | None) -> list[QueueMessage]:
        if self._share is not None:
            # The list as it is: acked as a whole, the share backend knows it.
            return cast("list[QueueMessage]", self._share.consume(count, timeout))
        wait = None if timeout is None else max(timeout, 0.001)
        return list(self._markers().fetch(count, wait))

    def poll(self, timeout: float | None = None) -> QueueMessage | None:
        """The next message, or ``None`` when none came within ``timeout`` seconds.

        Example:
            >>> message = queue.poll(timeout=30.0)
            >>> message.topic(), message.value()
            ('jobs', b'job-...')
        """
        if not self._buffer:
            self._fetch(self._max_batch_size, timeout, into=self._buffer)
        return self._buffer.popleft() if self._buffer else None

    def __iter__(self) -> Iterator[QueueMessage]:
        """Yields messages, waiting for new ones in between, until the consumer is closed
        (for example by :meth:`close` from another thread)."""
        buffer = self._buffer
        while True:
            # Drain the buffer first, one deque operation per message; `close` empties it.
            while buffer:
                yield buffer.popleft()
            try:
                self._fetch(self._max_batch_size, None, into=buffer)
            except ClosedError:
                return

    def ack(self, message: QueueMessage) -> None:
        """Processing of ``message`` succeeded: it will not be redelivered. ``message`` must be
        one this consumer handed out and not yet acked or nacked (``ValueError`` otherwise;
        ``TypeError`` for anything but a message). Its END marker is written within a
        millisecond together with other acks' (one call to librdkafka for many);
        :meth:`flush` and :meth:`close` write it at once."""
        if self._share is not None:
            self._share.ack_many((message,))
        else:
            self._markers().ack(message)

    def ack_many(self, messages: list[QueueMessage]) -> None:
        """:meth:`ack` for a whole batch in one native call.

        Example:
            >>> batch = queue.consume(100, timeout=30.0)
            >>> queue.ack_many(batch)
            >>> queue.flush()
            >>> queue.stats()["acked"] == len(batch) > 0
            True
        """
        if self._share is not None:
            self._share.ack_many(messages)
        else:
            # The native call reads the positions of fetched messages without Python calls.
            self._markers().ack_many(messages)

    def nack(
        self, message: QueueMessage, *, redeliver: Literal["now", "after_timeout"] = "now"
    ) -> None:
        """Processing of ``message`` failed; it is redelivered with its redelivery count
        incremented (or dead-lettered past ``max_redeliveries``): ``"now"`` at once,
        ``"after_timeout"`` once its current deadline passes (its keepalive stops; at most
        ``redelivery_timeout`` from now).

        Example:
            >>> queue.nack(message, redeliver="after_timeout")
            >>> queue.flush()
            >>> queue.stats()["nacked"]
            1
        """
        if redeliver not in ("now", "after_timeout"):
            raise ValueError(f"redeliver must be 'now' or 'after_timeout', got {redeliver!r}")
        now = redeliver == "now"
        if self._share is not None:
            self._share.nack(message, now)
        else:
            self._markers().nack(message, now)

    def keepalive(self, message: QueueMessage) -> None:
        """Still working on ``message``: its deadline moves to now + ``redelivery_timeout``
        (done automatically with ``auto_keepalive``)."""
        if self._share is not None:
            self._share.keepalive()
        self._markers().keepalive(message)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every ack/nack/keepalive marker so far is written (TimeoutError after
        ``timeout`` seconds); on the share backend, commit the acknowledgements."""
        if self._share is not None:
            self._share.flush(timeout)
        else:
            self._markers().flush(timeout)

    def stats(self) -> dict[str, Any]:
        """Counters: received, acked, nacked, keepalives, failed_markers (on the share backend:
        partitions whose acknowledgements the broker refused; and dead_lettered); on the markers
        backend also refused (START markers refused for good: dead-lettered or handed back)."""
        return self._share.stats() if self._share is not None else self._markers().stats().as_dict()

    def close(self, timeout: float = 5.0) -> None:
        """Put back on the queue what was prepared and never handed out (the rest of a batch a
        loop left, the markers backend's prefetched batches): copies with the same key, value
        and headers, so the redelivery count stays, after which the originals are ended. Then
        write the pending markers or acknowledgements and leave the group; all within
        ``timeout`` seconds (on the markers backend, whatever the broker does, plus about two
        seconds). What could not be written by then is logged with its count: those messages
        come back after their deadline (markers) or when the broker releases them (share),
        counted as a redelivery."""
        _exit.unregister(self)
        self._close_when_dropped.detach()
        with self._gate:
            self._closing = True
        # Fetches under way (another thread's loop) end within a slice; what they bring joins
        # the buffer, which is taken once they did.
        _stop_handing_out(self._raw, self._share)
        with self._gate:
            self._gate.wait_for(lambda: self._fetching == 0, _FETCHES_END_WITHIN)
            kept = list(self._buffer)
            self._buffer.clear()
        _close_backend(self._raw, self._share, timeout, kept)

    def __enter__(self) -> QueueConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the end of a consumer nobody closed -----------------------------------------------

    @property
    def exit_timeout(self) -> float:
        """What a close at interpreter exit takes at most: the markers' wait, then leaving."""
        return _EXIT_MARKERS_SECONDS + _EXIT_LEAVE_SECONDS

    def begin_exit(self) -> None:
        """Part of the interpreter-exit protocol (``ferrokafka._exit``): nothing to start
        without waiting (the marker thread writes held END markers within a millisecond)."""

    def finish_exit(self, timeout: float) -> None:
        """Part of the interpreter-exit protocol: close as :meth:`close` does (markers written,
        acknowledgements committed, the group left), so a script that ends is not redelivered
        what it acked and the next member of its group gets its partitions at once."""
        self.close(max(min(timeout - _EXIT_LEAVE_SECONDS, _EXIT_MARKERS_SECONDS), 0.001))


def _close_dropped(
    raw: _RawQueueConsumer | None,
    share: ShareQueue | None,
    buffer: deque[QueueMessage],
    creator: int,
) -> None:
    """Closes a QueueConsumer collected without a close, as :meth:`QueueConsumer.close` does
    with its default timeout: what it prepared and never handed out (its buffer, the markers
    backend's prefetched batches) is put back instead of coming back after its deadline,
    counted as a redelivery. Nothing runs in a forked child, whose copy is the parent's."""
    if os.getpid() != creator:
        return
    kept = list(buffer)
    buffer.clear()

    def close() -> None:
        try:
            _stop_handing_out(raw, share)
            _close_backend(raw, share, _EXIT_MARKERS_SECONDS, kept)
        except Exception:
            log.warning("QueueConsumer collected without close(): its close failed", exc_info=True)

    _exit.finish_collected(close, "ferrokafka-queue-close")


def _stop_handing_out(raw: _RawQueueConsumer | None, share: ShareQueue | None) -> None:
    """Tells the consumer's backend that nothing more is handed out: a close began."""
    if share is not None:
        share.stop_handing_out()
    elif raw is not None:
        raw.stop_handing_out()


def _close_backend(
    raw: _RawQueueConsumer | None,
    share: ShareQueue | None,
    timeout: float,
    kept: list[QueueMessage],
) -> None:
    """Closes the consumer's backend within ``timeout``, putting back ``kept``: what it
    fetched and never handed out."""
    if share is not None:
        share.close(timeout, cast("list[ShareMessage]", kept))
    elif raw is not None:
        # This backend's buffer holds only the native messages its fetch made.
        raw.close(timeout, cast("list[Message]", kept))


def _share_queue(
    config: Config,
    queue_topic: str,
    share_group: str,
    redelivery_timeout: float,
    marker_timeout: float,
    max_redeliveries: int,
    dead_letter_topic: str | None,
    *,
    required: bool,
) -> ShareQueue | None:
    """The share-group backend, or None (``backend="auto"``) when the broker or this install
    has no share groups; ``required`` (``backend="share"``) raises instead."""
    try:
        # confluent-kafka, the share backend's client, comes with the 'share' extra only.
        from confluent_kafka import KafkaException

        from ferrokafka.share_queue import ShareQueue, configure_share_group
    except ModuleNotFoundError as e:
        if required:
            raise missing_extra("QueueConsumer(backend='share')", "share", e) from e
        log.info("share groups not available (%s): using markers", e)
        return None
    try:
        configure_share_group(
            config, share_group, redelivery_timeout, max_redeliveries, marker_timeout
        )
    except (KafkaException, ConfigError) as e:
        if required:
            if isinstance(e, ConfigError):
                raise
            cause = redact_secrets(str(e))
            raise ConfigError(f"share group {share_group!r} cannot be set up: {cause}") from e
        log.info(
            "share group %r not available (%s): using markers",
            share_group,
            redact_secrets(str(e)),
        )
        return None
    return ShareQueue(config, queue_topic, share_group, max_redeliveries, dead_letter_topic)


class RedeliveryTracker(_exit.StopsAtExit):
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
        produce_timeout: seconds one write of redeliveries (or dead letters) and their END
            markers may take before it counts as failed and is retried [30].
        reporter: a :class:`ferrokafka.tracking.Reporter` that reports this daemon: its
            consumer group's state and per markers partition librdkafka's offsets, with the
            messages handed out and not yet acknowledged as ``lag`` [None].

    Example:
        >>> import time
        >>> tracker = RedeliveryTracker(
        ...     {"bootstrap.servers": "127.0.0.1:9092"}, "jobs", "jobs-markers",
        ...     dead_letter_topic="jobs-dlq",
        ... ).start()
        >>> while len([row for row in tracker.status() if row["caught_up"]]) < 3:
        ...     time.sleep(0.1)  # the group assigns the markers partitions; each is replayed
        >>> [(row["partition"], row["open"]) for row in tracker.status()]
        [(0, 0), (1, 0), (2, 0)]
        >>> tracker.stop()
        True
    """

    def __init__(
        self,
        config: Config,
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
        produce_timeout: float = 30.0,
        reporter: Reporter | None = None,
    ) -> None:
        if max_redeliveries < 0:
            raise ValueError(f"max_redeliveries must be >= 0, got {max_redeliveries}")
        self._config = dict(config)
        # Converted and checked when the daemon starts (bad settings raise in start()).
        self._options: _RedeliveryTrackerOptions = {
            "queue_topic": queue_topic,
            "markers_topic": markers_topic,
            "group_id": (
                group_id if group_id is not None else f"ferrokafka-redelivery-{markers_topic}"
            ),
            "max_redeliveries": max_redeliveries,
            "dead_letter_topic": dead_letter_topic,
            "use_now_if_no_marker_seen": use_now_if_no_marker_seen,
            "num_offsets_per_commit": num_offsets_per_commit,
            "commit_interval": commit_interval,
            "max_backoff": max_backoff,
            "produce_timeout": produce_timeout,
        }
        self._raw: _RawRedeliveryTracker | None = None
        self._reporter = reporter
        self._ended = False

    def start(self) -> RedeliveryTracker:
        """Start the daemon thread (once); returns self. Bad settings raise here, and so does a
        start after :meth:`stop` (``RuntimeError``: create a new tracker)."""
        _daemon.refuse_after_end(self, self._ended)
        if self._raw is None:
            config = self._config
            if self._reporter is not None:
                config = self._reporter.statistics_config(config)
            self._raw = _RawRedeliveryTracker(config, **self._options)
            if self._reporter is not None:
                self._reporter.track(self)
            _exit.register(self)
        return self

    def run(self) -> None:
        """Start if needed, then block until :meth:`request_stop` or :meth:`stop` is called
        from elsewhere (an interrupt stops the daemon cleanly before it propagates).

        Raises:
            KafkaError: the daemon ended on its own: its connection was refused before it ever
                worked (a wrong password, an untrusted CA, a token that cannot be had), with
                librdkafka's description of the cause, as soon as librdkafka reports it.
        """
        raw = self.start()._started()
        try:
            raw.wait()
        except BaseException:
            self.stop()
            raise
        finally:
            self._ended = True

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
        self._ended = True
        return _daemon.stop(self, self._raw, self._reporter, timeout)

    def status(self) -> list[dict[str, Any]]:
        """Per assigned markers partition: partition, caught_up, open, applied, redelivered,
        dead_lettered, dropped, undecodable, committed, broker (librdkafka's latest statistics
        of the partition, a dict of :class:`ferrokafka._native.BrokerOffsets` fields, or None
        before the first). Empty before :meth:`start`."""
        return [row.as_dict() for row in self._status()]

    def _status(self) -> list[RedeliveryPartitionStatus]:
        return [] if self._raw is None else self._raw.status()

    def report_sample(self) -> SourceSample:
        """This daemon's part of a process report, built by the engine: librdkafka's
        statistics of its markers consumer, with unacknowledged messages as ``lag``. Only a
        started tracker is tracked by its reporter."""
        return self._started().report_sample()

    def __enter__(self) -> RedeliveryTracker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
