"""The parts both consumers share (:class:`~ferrokafka.consumer.Consumer` on threads,
:class:`~ferrokafka.consumer.AsyncConsumer` on asyncio): what to consume
(:class:`TopicPartition`, the subscription's native form), their options
(:class:`ConsumerOptions`, checked once by the engine), and ``_Core``, which holds the native
engine, telemetry, notifications and the error policy. Import the public names from
:mod:`ferrokafka.consumer`."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeAlias, TypeVar

from ferrokafka import _instrumentation
from ferrokafka._config import ConfigValue
from ferrokafka._native import (
    CONSUMER_CLOSE_SECONDS,
    Assignment,
    Batch,
    ConsumerAssigned,
    ConsumerCaughtUp,
    ConsumerCommitted,
    ConsumerDraining,
    ConsumerError,
    ConsumerLoadControl,
    ConsumerUnassigned,
    _RawConsumer,
    validate_consumer_options,
)
from ferrokafka._validation import check_config_mapping, require_callable
from ferrokafka.tracking import JobSample, Reporter, SourceSample

if TYPE_CHECKING:
    from ferrokafka._native import _ConsumerEvent


log = logging.getLogger("ferrokafka.consumer")

ErrorPolicy: TypeAlias = Literal["commit", "retry", "dead_letter"]
"""What a handler exception does to its batch: see :class:`ConsumerOptions`."""
Ordering: TypeAlias = Literal["partition", "key"]
"""What stays in order: a partition's records, or each key's: see :class:`ConsumerOptions`."""
InstrumentationCallback: TypeAlias = Callable[[str, dict[str, Any]], object]
"""``callback(event_name, payload)`` for the consumer's telemetry events."""
Partitions: TypeAlias = list[tuple[str, int]]

_INT32_LIMIT = 2**31
_INT64_LIMIT = 2**63
_FETCH_SECONDS = 0.1
_EVENT_SECONDS = 0.1
_WORKER_JOIN_SECONDS = 1.0
# What the final commit and leaving the group take at most, after the drain (the engine's bound).
_EXIT_CLOSE_SECONDS = CONSUMER_CLOSE_SECONDS
# A consumer's group membership and engine end with its stop; a new consumer starts afresh.
_STARTED_AFTER_STOP = "this {} was stopped (or failed to start once connected): create a new one"


@dataclass(frozen=True)
class TopicPartition:
    """One partition to consume, with where to start.

    Give at most one of ``offset`` (an offset, ``"beginning"`` or ``"end"``) and ``timestamp``
    (milliseconds since the epoch: start at the first record at or after it). With neither, the
    group's committed offset is used, else ``auto.offset.reset``.

    Example:
        >>> TopicPartition("orders", 0, offset="beginning")
        TopicPartition(topic='orders', partition=0, offset='beginning', timestamp=None)
    """

    topic: str
    partition: int
    offset: int | Literal["beginning", "end"] | None = None
    timestamp: int | None = None


Subscription: TypeAlias = str | TopicPartition | tuple[str, int] | tuple[str, int, int]
"""A topic name (its partitions assigned by the group, or all of them to a consumer without
``group.id``), a :class:`TopicPartition`, or a
``(topic, partition)`` / ``(topic, partition, offset)`` tuple."""

_NativeSubscription: TypeAlias = str | tuple[str, int, str, int]


def _native_subscription(item: object) -> _NativeSubscription:
    if isinstance(item, str):
        if not item:
            raise ValueError("subscription topic names must not be empty")
        return item
    if isinstance(item, tuple) and len(item) in (2, 3):
        item = TopicPartition(*item)
    if not isinstance(item, TopicPartition):
        raise TypeError(
            "each subscription must be a topic name, a TopicPartition or a (topic, partition"
            f"[, offset]) tuple, got {item!r}"
        )
    if not isinstance(item.topic, str) or not item.topic:
        raise ValueError(f"subscription topic must be a non-empty str, got {item.topic!r}")
    if isinstance(item.partition, bool) or not isinstance(item.partition, int):
        raise TypeError(f"partition must be an int, got {item.partition!r}")
    if not -_INT32_LIMIT <= item.partition < _INT32_LIMIT:
        # A negative int32 is refused when the consumer starts, with the other assignment checks.
        raise ValueError(
            f"partition must be an int from 0 to {_INT32_LIMIT - 1} (Kafka partitions are "
            f"32-bit), got {item.partition!r}"
        )
    if item.offset is not None and item.timestamp is not None:
        raise ValueError(f"give offset or timestamp, not both: {item!r}")
    if item.timestamp is not None:
        return (item.topic, item.partition, "timestamp", _int64("timestamp", item.timestamp))
    if item.offset is None:
        return (item.topic, item.partition, "stored", 0)
    if item.offset in ("beginning", "end"):
        return (item.topic, item.partition, str(item.offset), 0)
    if isinstance(item.offset, bool) or not isinstance(item.offset, int):
        raise TypeError(f"offset must be an int, 'beginning' or 'end', got {item.offset!r}")
    return (item.topic, item.partition, "offset", _int64("offset", item.offset))


def _int64(name: str, value: int) -> int:
    """``value`` if it is a valid Kafka offset or timestamp: both are signed 64-bit on the wire,
    and a start position is never negative."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _INT64_LIMIT:
        raise ValueError(
            f"{name} must be an int from 0 to {_INT64_LIMIT - 1} (Kafka {name}s are 64-bit), "
            f"got {value!r}"
        )
    return value


def _partitions(assignments: list[Assignment]) -> Partitions:
    """The ``(topic, partition)`` pairs that notifications and callbacks get."""
    return [(a.topic, a.partition) for a in assignments]


@dataclass(frozen=True, kw_only=True)
class ConsumerOptions:
    """The settings of :class:`Consumer` and :class:`AsyncConsumer` beyond librdkafka's own,
    checked when created. Pass one as ``options=``, or give its fields as keyword arguments
    (they override ``options``); an unknown name raises ``TypeError`` naming it.

    Attributes:
        max_batch_size: most records per batch; ``None`` = everything queued [None].
        drain: seconds running handlers get to finish on ``stop`` or when partitions are
            revoked; queued records are dropped (and redelivered later) [5].
        commit_interval: seconds between offset commits of finished batches [5].
        on_error: what a handler exception does (every exception is logged and published as
            ``handler.exception``): ``"commit"`` acknowledges the batch [default];
            ``"retry"`` calls the handler again with the same batch after ``retry_backoff``
            seconds, doubling up to ``max_retry_backoff``, while the partition waits (a
            revocation or a stop cuts the wait short and abandons the batch, for the
            partition's next owner), at most ``max_retries`` times, then dead-letters the
            batch if ``dead_letter_topic`` is set and commits it otherwise; ``"dead_letter"``
            writes the batch to ``dead_letter_topic``. Dead-letter writes run in the background,
            batched, each record with its own headers followed by those in
            ``DEAD_LETTER_HEADERS``; the partition moves on at once, and the batch's offsets are
            committed once the broker acknowledged the write.
        max_retries: handler retries of one batch under ``"retry"`` [3].
        retry_backoff, max_retry_backoff: seconds before the first retry, and the cap of the
            doubling [1, 30].
        dead_letter_topic: where failed batches are written [None].
        max_queue_records, max_queue_bytes: when a partition's queue holds this many records or
            bytes, the poller stops taking from the partition's librdkafka queue (published as
            ``paused``), and takes again at half (``resumed``) [1000, 1 MiB].
        on_assigned, on_unassigned: called with ``[(topic, partition), ...]``; ``on_unassigned``
            runs after those partitions' workers drained (or were abandoned).
        on_caught_up: ``(topic, partition, offset)`` once per partition, for a consumer without a
            group, when its handler finished the records up to the high watermark seen at start.
        reporter: a :class:`ferrokafka.tracking.Reporter` that reports the consumer (lag and
            offsets per partition, counts, running batches, handler errors) [None].
        ordering: ``"partition"`` handles a partition's batches one at a time, in offset order
            [default]; ``"key"`` handles up to ``max_concurrency`` batches of one partition at
            once (each on its own worker), never two holding the same key, each key's records
            in offset order. Either way a partition's offsets are committed only up to the first
            record not handled yet (at least once, also across rebalances); with ``"key"``,
            records handled past that point when a partition is revoked are handled again by
            its next owner (Kafka offsets cannot commit gaps).
        max_concurrency: batches of one partition handled at once with ``ordering="key"`` [8];
            set ``max_batch_size`` too, or the first batch takes every queued key.

    Example:
        >>> ConsumerOptions(max_batch_size=500, commit_interval=1.0).max_batch_size
        500
        >>> ConsumerOptions(on_error="dead_letter")
        Traceback (most recent call last):
        ...
        ValueError: on_error='dead_letter' needs dead_letter_topic='<topic>'
    """

    max_batch_size: int | None = None
    drain: float = 5.0
    commit_interval: float = 5.0
    on_error: ErrorPolicy = "commit"
    max_retries: int = 3
    retry_backoff: float = 1.0
    max_retry_backoff: float = 30.0
    dead_letter_topic: str | None = None
    max_queue_records: int = 1000
    max_queue_bytes: int = 1024 * 1024
    on_assigned: Callable[[Partitions], object] | None = None
    on_unassigned: Callable[[Partitions], object] | None = None
    on_caught_up: Callable[[str, int, int], object] | None = None
    reporter: Reporter | None = None
    ordering: Ordering = "partition"
    max_concurrency: int = 8

    def __post_init__(self) -> None:
        # The rules are the engine's, in Rust: the same check the consumer makes when it starts.
        validate_consumer_options(self)
        for name in ("on_assigned", "on_unassigned", "on_caught_up"):
            callback = getattr(self, name)
            if callback is not None:
                require_callable(name, callback)
        if self.reporter is not None and not isinstance(self.reporter, Reporter):
            raise TypeError(
                f"reporter must be a ferrokafka.tracking.Reporter, got {self.reporter!r}"
            )


def _options(options: ConsumerOptions | None, overrides: dict[str, Any]) -> ConsumerOptions:
    """``options`` (or the defaults) with ``overrides`` applied and checked."""
    if options is not None and not isinstance(options, ConsumerOptions):
        raise TypeError(f"options must be a ferrokafka.ConsumerOptions, got {options!r}")
    return dataclasses.replace(options or ConsumerOptions(), **overrides)


_Worker = TypeVar("_Worker")  # a consumer's worker: a thread, or an asyncio task


class _Generations(Generic[_Worker]):
    """Per partition, the workers (threads or tasks) of its current assignment and those of the
    one before that were still running when it began. A handler still running after the drain
    time of a revocation is abandoned, not stopped: when this process gets the partition back,
    the new workers must wait for it, or two handlers of one partition run at once and the
    abandoned one writes its older records after the new one's (found by a hostile probe)."""

    def __init__(self, running: Callable[[_Worker], bool]) -> None:
        self._running = running
        # (topic, partition) -> (the assignment's worker id, earlier workers, its workers)
        self._by_partition: dict[tuple[str, int], tuple[int, list[_Worker], list[_Worker]]] = {}

    def earlier(self, worker: int, topic: str, partition: int) -> list[_Worker]:
        """The workers a new worker of assignment ``worker`` waits for (the same for every
        worker of one assignment: several with ordering by key)."""
        key = (topic, partition)
        current = self._by_partition.get(key)
        if current is None or current[0] != worker:
            running = [w for w in current[2] if self._running(w)] if current else []
            current = (worker, running, [])
            self._by_partition[key] = current
        return current[1]

    def add(self, topic: str, partition: int, started: _Worker) -> None:
        """``started`` is a worker of the partition's current assignment."""
        self._by_partition[(topic, partition)][2].append(started)


def waiting_for_abandoned(topic: str, partition: int) -> None:
    """Says why a partition's new worker does not start at once."""
    log.warning(
        "%s[%d]: a handler abandoned at its revocation still runs; the partition is handled "
        "again once it returns, so its records stay in order",
        topic,
        partition,
    )


class _Core:
    """What the thread and asyncio consumers share: checked options, the native engine,
    telemetry, notifications and the error policy. It never blocks on its own."""

    def __init__(
        self,
        config: Mapping[str, ConfigValue],
        subscriptions: Iterable[Subscription],
        options: ConsumerOptions,
    ) -> None:
        check_config_mapping(config)
        if isinstance(subscriptions, str | bytes):
            raise TypeError("subscriptions must be a list, e.g. ['orders'], not a single str")
        self.subscriptions = [_native_subscription(s) for s in subscriptions]
        if not self.subscriptions:
            raise ValueError("subscriptions must name at least one topic or partition")
        self.config = dict(config)
        self.options = options
        self.subscribers: list[InstrumentationCallback] = []
        self.raw: _RawConsumer | None = None
        self.reporter = options.reporter
        self._handler_errors = 0
        self._busy_seconds = 0.0
        self._running_jobs: dict[tuple[str, int, int], JobSample] = {}
        self._jobs_started = 0
        # Reports name the handler where Karafka names the consumer class.
        self.handler_name = "handler"

    def open(self) -> _RawConsumer:
        """Creates the engine: subscribes, or assigns (asking the broker for offsets)."""
        config = self.config
        if self.reporter is not None:
            config = self.reporter.statistics_config(config)
        raw = _RawConsumer(config, subscriptions=self.subscriptions, options=self.options)
        self.raw = raw
        if self.subscribers:
            raw.report_load_changes()
        if self.reporter is not None:
            self.reporter.track(self)
        return raw

    def stopping(self) -> None:
        """The consumer began stopping: tell the reporter."""
        if self.reporter is not None:
            self.reporter.stopping(self)

    def stopped(self) -> None:
        """The consumer stopped: the reporter sends its last report of it."""
        if self.reporter is not None:
            self.reporter.untrack(self)

    def report_sample(self) -> SourceSample:
        """This consumer's part of a process report (see :mod:`ferrokafka.tracking`): the
        engine builds it from its own figures; this adds the handlers' (the batches running
        now, jobs started, handler errors, seconds in handlers)."""
        return self.require_raw().report_sample(
            list(self._running_jobs.values()),
            self._jobs_started,
            self._handler_errors,
            self._busy_seconds,
        )

    # -- telemetry -------------------------------------------------------------------------

    def subscribe(self, callback: InstrumentationCallback) -> None:
        """Adds a telemetry subscriber; the engine reports pauses and resumes from then on
        (``open`` asks it when subscribers came first)."""
        require_callable("callback", callback)
        self.subscribers.append(callback)
        if self.raw is not None:
            self.raw.report_load_changes()

    def publish(self, name: str, payload: dict[str, Any]) -> None:
        _instrumentation.publish(self.subscribers, name, payload, log)

    def batch_payload(self, topic: str, partition: int, batch: Batch) -> dict[str, Any]:
        return {
            "topic": topic,
            "partition": partition,
            "first_offset": batch[0].offset(),
            "last_offset": batch[-1].offset(),
            "record_count": len(batch),
        }

    def handler_started(self, topic: str, partition: int, batch: Batch) -> float:
        if self.subscribers:
            payload = self.batch_payload(topic, partition, batch)
            self.publish("handler.start", {**payload, "system_time": time.time()})
        if self.reporter is not None:
            kind, stamp = batch[-1].timestamp()
            self._jobs_started += 1
            self._running_jobs[(topic, partition, batch[0].offset())] = JobSample(
                handler=self.handler_name,
                topic=topic,
                partition=partition,
                first_offset=batch[0].offset(),
                last_offset=batch[-1].offset(),
                messages=len(batch),
                started_at=time.time(),
                last_timestamp_ms=stamp if kind else None,
            )
        return time.monotonic()

    def _job_finished(self, topic: str, partition: int, batch: Batch, started: float) -> None:
        if self.reporter is not None:
            self._running_jobs.pop((topic, partition, batch[0].offset()), None)
            self._busy_seconds += time.monotonic() - started

    def handler_stopped(self, topic: str, partition: int, batch: Batch, started: float) -> None:
        self._job_finished(topic, partition, batch, started)
        if self.subscribers:
            payload = self.batch_payload(topic, partition, batch)
            self.publish("handler.stop", {**payload, "duration": time.monotonic() - started})

    def handler_failed(
        self,
        topic: str,
        partition: int,
        batch: Batch,
        started: float,
        error: BaseException,
        attempt: int,
        retry_in: float | None,
    ) -> None:
        """Logs a handler exception, publishes ``handler.exception`` and reports the error."""
        self._job_finished(topic, partition, batch, started)
        self._handler_errors += 1
        log.error(
            "handler failed on %s[%d] offsets %d-%d (attempt %d, on_error=%s): %r",
            topic,
            partition,
            batch[0].offset(),
            batch[-1].offset(),
            attempt + 1,
            self.options.on_error,
            error,
            exc_info=error,
        )
        if self.reporter is not None:
            details = self.batch_payload(topic, partition, batch)
            details.update(attempt=attempt + 1, policy=self.options.on_error)
            self.reporter.report_error(error, details=details)
        if self.subscribers:
            payload = self.batch_payload(topic, partition, batch)
            self.publish(
                "handler.exception",
                {
                    **payload,
                    "duration": time.monotonic() - started,
                    "error": error,
                    "attempt": attempt + 1,
                    "policy": self.options.on_error,
                    "retry_in": retry_in,
                },
            )

    def handler_ended(
        self,
        raw: _RawConsumer,
        worker: int,
        batch: Batch,
        started: float,
        error: BaseException | None,
        attempt: int,
    ) -> float | None:
        """Settles a run of the handler on ``batch``, the same for :class:`Consumer` and
        :class:`AsyncConsumer`: handled (``error`` is ``None``), it is acked; a handler exception
        goes to the engine's error policy and is reported. Returns the seconds to wait before
        handling the batch again, or ``None`` once it is settled (handled, committed,
        dead-lettered in the background, or abandoned)."""
        topic, partition = batch[0].topic(), batch[0].partition()
        if error is None:
            self.handler_stopped(topic, partition, batch, started)
            raw.ack(worker, batch, "handled")
            return None
        retry_in = raw.fail(worker, batch, type(error).__qualname__, str(error))
        self.handler_failed(topic, partition, batch, started, error, attempt, retry_in)
        return retry_in

    def handler_exited(
        self, raw: _RawConsumer, worker: int, batch: Batch, exiting: BaseException
    ) -> None:
        """The handler raised ``SystemExit`` or ``KeyboardInterrupt`` (or another exception
        that is not an ``Exception``) on ``batch``: said at ERROR, the batch abandoned (not
        committed: handed again later), before the consumer stops."""
        first, last = batch[0], batch[len(batch) - 1]
        log.error(
            "consumer handler %s raised %s on %s [%d] offsets %d-%d: the consumer stops; the "
            "batch is not committed and is handled again by the next owner of the partition",
            self.handler_name,
            type(exiting).__qualname__,
            first.topic(),
            first.partition(),
            first.offset(),
            last.offset(),
        )
        raw.ack(worker, batch, "abandoned")

    # -- notifications ---------------------------------------------------------------------

    def notifications(
        self, events: list[_ConsumerEvent], start_worker: Callable[[int, str, int], None]
    ) -> list[tuple[Callable[..., object], tuple[Any, ...]]]:
        """Publishes engine events, starts workers for assigned partitions, and returns the
        user callbacks to run with their arguments."""
        calls: list[tuple[Callable[..., object], tuple[Any, ...]]] = []
        for event in events:
            if isinstance(event, ConsumerAssigned):
                partitions = _partitions(event.partitions)
                # With ordering by key, each partition has max_concurrency workers.
                workers = self.options.max_concurrency if self.options.ordering == "key" else 1
                for assignment in event.partitions:
                    for _ in range(workers):
                        start_worker(assignment.worker, assignment.topic, assignment.partition)
                self.publish("assigned", {"partitions": partitions})
                if self.options.on_assigned is not None:
                    calls.append((self.options.on_assigned, (partitions,)))
            elif isinstance(event, ConsumerDraining):
                partitions = _partitions(event.partitions)
                self.publish("draining", {"partitions": partitions, "dropped": event.dropped})
            elif isinstance(event, ConsumerUnassigned):
                partitions = _partitions(event.partitions)
                self.publish("unassigned", {"partitions": partitions, "lost": event.lost})
                if self.options.on_unassigned is not None:
                    calls.append((self.options.on_unassigned, (partitions,)))
            elif isinstance(event, ConsumerCaughtUp):
                topic, partition, offset = event.topic, event.partition, event.offset
                self.publish(
                    "caught_up", {"topic": topic, "partition": partition, "offset": offset}
                )
                if self.options.on_caught_up is not None:
                    calls.append((self.options.on_caught_up, (topic, partition, offset)))
            elif isinstance(event, ConsumerLoadControl):
                self.publish(
                    "paused" if event.paused else "resumed",
                    {
                        "topic": event.topic,
                        "partition": event.partition,
                        "queued": event.queued,
                        "queued_bytes": event.queued_bytes,
                    },
                )
            # The engine logged these failures when they happened (logger ferrokafka_kafka).
            elif isinstance(event, ConsumerCommitted):
                self.publish("commit", {"offsets": event.offsets, "error": event.error})
            elif isinstance(event, ConsumerError):
                self.publish("error", {"error": event.error})
        return calls

    def require_raw(self) -> _RawConsumer:
        if self.raw is None:
            raise RuntimeError("the consumer is not started; call start() first")
        return self.raw

    def stats(self) -> dict[str, Any]:
        if self.raw is None:
            return {"partitions": []}
        return self.raw.stats().as_dict()


@contextlib.contextmanager
def _sigint_sets(stopping: threading.Event) -> Iterator[None]:
    """Inside the block Ctrl-C sets ``stopping`` instead of raising ``KeyboardInterrupt``
    anywhere in the main thread (half way through a stop, say); a handler the application
    installed, or a call from another thread, is left alone."""
    own = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    if own:
        signal.signal(signal.SIGINT, lambda _signum, _frame: stopping.set())
    try:
        yield
    finally:
        if own:
            signal.signal(signal.SIGINT, signal.default_int_handler)
