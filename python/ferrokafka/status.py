"""The read side of tracking: turns the reports, errors and scheduler state topics into a live view.

Reporters (:mod:`ferrokafka.tracking`, or Karafka Web's: consumer report schemas 1.2.x to
1.7.0, error schemas 1.0.0 to 1.2.0, decoded by the Rust core) send one zlib-compressed JSON
process report per process at most every few seconds, keyed by process id, to the reports
topic, and each error once to the errors topic; a report of a newer schema is shown with what
can be read (``ProcessView.newer_schema``); scheduler daemons send state reports to
``<schedules topic>_states``. A :class:`StatusView` folds such records into the latest picture:

* processes: the newest report per process id, *alive* while its ``dispatched_at`` is at most
  ``ttl`` seconds old, *stale* after that, *stopped* once it sent its final report; with memory,
  CPU, threads, counters and per-partition lag / committed / stored / high offsets;
* recent errors, newest first (bounded);
* scheduler states per states-topic partition (state, pending schedules per day, dispatched);
* a lag history per (process, group, topic, partition) for charts (bounded);
* per topic, how many records were read and how many were skipped as corrupt or foreign.

A :class:`StatusReader` feeds a view from Kafka through ferrokafka's own consumer, without a
consumer group: it reads every partition once from the beginning, then tails it, keeping its
position, and adds ``*_states`` topics (and new partitions) as they appear. ``ferrokafka status``
and ``ferrokafka dashboard`` are built on it.

Example:
    >>> from ferrokafka.status import StatusReader, render_text
    >>> with StatusReader({"bootstrap.servers": "127.0.0.1:9092"}) as reader:  # doctest: +SKIP
    ...     reader.wait_caught_up(timeout=30.0)
    ...     print(render_text(reader.snapshot()))
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from ferrokafka._native import (
    Client,
    ConsumerReportView,
    ErrorReportView,
    Message,
    decode_state_report,
    view_consumer_report,
    view_error_report,
)
from ferrokafka._validation import check_config_mapping, checked_seconds, positive_count
from ferrokafka.consumer import ConfigValue, Consumer, TopicPartition
from ferrokafka.exceptions import FerrokafkaError
from ferrokafka.scheduling import STATES_POSTFIX
from ferrokafka.tracking import DEFAULT_ERRORS_TOPIC, DEFAULT_REPORTS_TOPIC, REPORT_TTL

__all__ = [
    "ErrorView",
    "LagSeries",
    "PartitionLag",
    "ProcessView",
    "SchedulerView",
    "StatusReader",
    "StatusSnapshot",
    "StatusTotals",
    "StatusView",
    "render_prometheus",
    "render_text",
]

log = logging.getLogger("ferrokafka.status")

Health: TypeAlias = Literal["alive", "stale", "stopped"]
_SeriesKey: TypeAlias = tuple[str, str, str, int]

_WARNINGS_PER_TOPIC = 10
"""Skipped records logged at WARNING per topic; the rest at DEBUG (the count keeps going)."""


@dataclass(frozen=True)
class PartitionLag:
    """One partition a process consumes, as its latest report saw it.

    Example:
        >>> PartitionLag("billing", "orders", 0, lag=3, lag_stored=2, committed_offset=10,
        ...     stored_offset=11, hi_offset=13, lo_offset=0, fetch_state="active",
        ...     poll_state="active").lag
        3
    """

    group: str
    topic: str
    partition: int
    lag: int
    lag_stored: int
    committed_offset: int
    stored_offset: int
    hi_offset: int
    lo_offset: int
    fetch_state: str
    poll_state: str
    subscription_group: str = ""


@dataclass(frozen=True)
class ProcessView:
    """A reporting process: its latest report and whether it is alive, stale or stopped.

    ``health`` is ``"stopped"`` once the process sent a report with status ``stopped``,
    ``"alive"`` while its last report is at most the reader's ``ttl`` seconds old, else
    ``"stale"``. ``age`` is seconds since ``dispatched_at`` at snapshot time. Memory is in KiB.
    ``lag`` is Karafka Web's summed lag (each partition's stored lag where known, else its
    committed lag); ``totals`` sum the counts of every report read from the process.

    Example:
        >>> snapshot.processes[0].health  # doctest: +SKIP
        'alive'
    """

    id: str
    health: Health
    status: str
    dispatched_at: float
    age: float
    started_at: float
    memory_usage: int
    memory_total_usage: int
    memory_size: int
    cpus: int
    threads: int
    cpu_usage: list[float]
    tags: list[str]
    busy: int
    enqueued: int
    utilization: float
    lag: int
    lag_stored: int
    totals: dict[str, int]
    jobs: int
    partitions: list[PartitionLag]
    schema_version: str = ""
    newer_schema: bool = False
    """The report's schema is newer than this build reads in full: what it shows is partial."""
    execution_mode: str | None = None

    @property
    def alive(self) -> bool:
        """True while the process reports within the TTL and has not stopped.

        Example:
            >>> snapshot.processes[0].alive  # doctest: +SKIP
            True
        """
        return self.health == "alive"


@dataclass(frozen=True)
class SchedulerView:
    """The latest state report of one scheduled-messages partition.

    ``topic`` is the schedules topic (the states topic without ``_states``); ``daily`` counts
    pending schedules per UTC day; ``low``/``high`` are the schedules offsets seen (-1: none).

    Example:
        >>> snapshot.schedulers[0].state  # doctest: +SKIP
        'loaded'
    """

    topic: str
    partition: int
    state: str
    dispatched_at: float
    age: float
    started_at: int
    low: int
    high: int
    daily: dict[str, int]
    pending: int
    dispatched: int
    reloads: int
    skipped_records: int
    failed: int = 0
    """Schedules whose target the broker refused for good (ferrokafka reports only)."""


@dataclass(frozen=True)
class ErrorView:
    """One reported error (message already cut to 10,000 characters by the reporter).

    Example:
        >>> snapshot.errors[0].error_class  # doctest: +SKIP
        'ValueError'
    """

    id: str
    type: str
    error_class: str
    error_message: str
    backtrace: str
    details: dict[str, Any]
    occurred_at: float
    process_id: str


@dataclass(frozen=True)
class LagSeries:
    """Lag of one partition as one process reported it over time: ``points`` are
    ``(dispatched_at, lag)`` pairs, oldest first.

    Example:
        >>> series = snapshot.lag_history[0]  # doctest: +SKIP
        >>> series.topic, series.partition, series.points[-1]  # doctest: +SKIP
        ('orders', 0, (1700000000.5, 3))
    """

    process_id: str
    group: str
    topic: str
    partition: int
    points: list[tuple[float, int]]


@dataclass(frozen=True)
class StatusTotals:
    """Sums over the processes in a snapshot; lag and busy count alive processes only.

    Example:
        >>> snapshot.totals.alive, snapshot.totals.lag  # doctest: +SKIP
        (2, 130)
    """

    processes: int
    alive: int
    stale: int
    stopped: int
    partitions: int
    lag: int
    lag_stored: int
    busy: int
    enqueued: int
    threads: int
    memory_usage: int
    messages: int
    errors: int
    retries: int
    dead: int


@dataclass(frozen=True)
class StatusSnapshot:
    """Everything the reader knows at ``generated_at`` (Unix seconds). Plain data:
    :meth:`to_dict` gives the JSON document of ``ferrokafka status --json`` and the dashboard.

    ``read`` and ``skipped`` count records per topic: read in total, and skipped because they
    were tombstones, corrupt (zlib, JSON) or foreign (not a valid report of that topic's kind).
    ``caught_up`` is true once every partition was read to the end it had when it was added.

    Example:
        >>> snapshot = reader.snapshot()  # doctest: +SKIP
        >>> [p.id for p in snapshot.processes if p.alive]  # doctest: +SKIP
        ['host-1:4242:ab12cd']
    """

    generated_at: float
    ttl: float
    caught_up: bool
    reports_topic: str
    errors_topic: str
    states_topics: list[str]
    processes: list[ProcessView]
    totals: StatusTotals
    errors: list[ErrorView]
    schedulers: list[SchedulerView]
    lag_history: list[LagSeries]
    read: dict[str, int]
    skipped: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as JSON-ready dicts and lists (``alive`` added to each process).

        Example:
            >>> import json
            >>> print(json.dumps(reader.snapshot().to_dict(), indent=2))  # doctest: +SKIP
        """
        document = dataclasses.asdict(self)
        for process in document["processes"]:
            process["alive"] = process["health"] == "alive"
        return document


@dataclass
class _ProcessEntry:
    report: ConsumerReportView
    dispatched_at: float
    totals: dict[str, int]


@dataclass
class _StateEntry:
    report: dict[str, Any]
    dispatched_at: float


class StatusView:
    """Folds tracking records into the latest state; thread-safe, no I/O.

    Records are routed by topic: ``reports_topic`` holds process reports, ``errors_topic``
    error reports, and any topic ending in ``_states`` scheduler state reports. A record that
    is a tombstone, corrupt, of the wrong schema, or from another topic is skipped: counted
    per topic, logged, never raised. The newest report per process (by ``dispatched_at``) wins,
    whatever order the records come in.

    Args:
        reports_topic, errors_topic: the topic names the reporters use.
        ttl: seconds after its last report that a process counts as stale [30].
        max_errors: the newest errors kept [100].
        history_points: lag points kept per (process, group, topic, partition) [360].
        forget_after: seconds after which a process that stopped reporting (and its lag history)
            is left out of snapshots; ``None`` keeps every process [3600].

    Example:
        >>> from ferrokafka.status import StatusView
        >>> view = StatusView()
        >>> view.add_record("ferrokafka_consumers_reports", 0, 0, b"not zlib")
        False
        >>> view.snapshot().skipped
        {'ferrokafka_consumers_reports': 1}
    """

    def __init__(
        self,
        *,
        reports_topic: str = DEFAULT_REPORTS_TOPIC,
        errors_topic: str = DEFAULT_ERRORS_TOPIC,
        ttl: float = REPORT_TTL,
        max_errors: int = 100,
        history_points: int = 360,
        forget_after: float | None = 3600.0,
    ) -> None:
        if not reports_topic or not errors_topic:
            raise ValueError("reports_topic and errors_topic must be non-empty topic names")
        self.reports_topic = reports_topic
        self.errors_topic = errors_topic
        self.ttl = checked_seconds("ttl", ttl, positive=True)
        self.max_errors = positive_count("max_errors", max_errors)
        self.history_points = positive_count("history_points", history_points)
        self.forget_after = (
            None
            if forget_after is None
            else checked_seconds("forget_after", forget_after, positive=True)
        )
        self._lock = threading.Lock()
        self._processes: dict[str, _ProcessEntry] = {}
        self._errors: list[tuple[float, str, ErrorView]] = []
        self._error_ids: set[str] = set()
        self._states: dict[tuple[str, int], _StateEntry] = {}
        self._history: dict[_SeriesKey, list[tuple[float, int]]] = {}
        self._positions: dict[tuple[str, int], int] = {}
        self._read: dict[str, int] = {}
        self._skipped: dict[str, int] = {}
        self._states_topics: set[str] = set()
        self._caught_up = False

    # -- input -----------------------------------------------------------------------------

    def add_messages(self, messages: Iterable[Message]) -> int:
        """Fold a batch of Kafka messages in; returns how many were used (not skipped).

        Example:
            >>> records = client.read_topic("ferrokafka_consumers_reports")  # doctest: +SKIP
            >>> view.add_messages(records)  # doctest: +SKIP
            12
        """
        used = 0
        for message in messages:
            used += self.add_record(
                message.topic(), message.partition(), message.offset(), message.value()
            )
        return used

    def add_record(self, topic: str, partition: int, offset: int, value: bytes | None) -> bool:
        """Fold one record in; False when it was skipped (or already seen at that offset).

        Example:
            >>> from ferrokafka import codecs
            >>> blob = codecs.encode_error_report(error)  # doctest: +SKIP
            >>> view.add_record("ferrokafka_errors", 0, 7, blob)  # doctest: +SKIP
            True
        """
        with self._lock:
            position = self._positions.get((topic, partition))
            if position is not None and offset < position:
                return False  # read again after a restart of the tail: already folded in
            self._positions[(topic, partition)] = offset + 1
            self._read[topic] = self._read.get(topic, 0) + 1
            if value is None:
                return self._skip(topic, partition, offset, "tombstone (no value)")
            try:
                if topic == self.reports_topic:
                    self._add_process_report(view_consumer_report(value))
                elif topic == self.errors_topic:
                    self._add_error_report(view_error_report(value))
                elif topic.endswith(STATES_POSTFIX):
                    self._states_topics.add(topic)
                    self._add_state_report(topic, partition, decode_state_report(value))
                else:
                    return self._skip(topic, partition, offset, "not a tracking topic")
            except (FerrokafkaError, ValueError, TypeError, KeyError) as error:
                return self._skip(topic, partition, offset, str(error))
            return True

    def positions(self) -> dict[tuple[str, int], int]:
        """The next offset to read per ``(topic, partition)`` seen so far.

        Example:
            >>> view.positions()  # doctest: +SKIP
            {('ferrokafka_consumers_reports', 0): 12}
        """
        with self._lock:
            return dict(self._positions)

    def set_caught_up(self, caught_up: bool) -> None:
        """Record whether the feeding reader has read every partition to its end.

        Example:
            >>> view.set_caught_up(True)
        """
        with self._lock:
            self._caught_up = caught_up

    def _skip(self, topic: str, partition: int, offset: int, reason: str) -> bool:
        skipped = self._skipped.get(topic, 0) + 1
        self._skipped[topic] = skipped
        level = logging.WARNING if skipped <= _WARNINGS_PER_TOPIC else logging.DEBUG
        log.log(level, "skipped %s[%d]@%d: %s", topic, partition, offset, reason)
        return False

    def _add_process_report(self, report: ConsumerReportView) -> None:
        process_id = report.id
        dispatched_at = report.dispatched_at
        current = self._processes.get(process_id)
        # Each report counts since the process's previous one (Karafka Web's rule): sum them.
        totals = {} if current is None else current.totals
        for name, count in report.totals.items():
            totals[name] = totals.get(name, 0) + count
        if current is None or dispatched_at >= current.dispatched_at:
            self._processes[process_id] = _ProcessEntry(report, dispatched_at, totals)
        for p in report.partitions:
            key = (process_id, p.consumer_group, p.topic, p.partition)
            series = self._history.setdefault(key, [])
            point = (dispatched_at, p.lag_hybrid)
            at = bisect.bisect_right(series, point)
            if at > 0 and series[at - 1][0] == dispatched_at:
                series[at - 1] = point  # the same report twice: keep one point
            else:
                series.insert(at, point)
            del series[: max(0, len(series) - self.history_points)]

    def _add_error_report(self, report: ErrorReportView) -> None:
        # Error schemas before 1.2.0 carry no id: the process and time stand in for it.
        error_id = report.id or f"{report.process_id}@{report.occurred_at!r}"
        if error_id in self._error_ids:
            return
        entry = (report.occurred_at, error_id, _error_view(error_id, report))
        bisect.insort(self._errors, entry, key=lambda e: (e[0], e[1]))
        self._error_ids.add(error_id)
        while len(self._errors) > self.max_errors:
            self._error_ids.discard(self._errors.pop(0)[1])

    def _add_state_report(self, topic: str, partition: int, report: dict[str, Any]) -> None:
        dispatched_at = float(report["dispatched_at"])
        current = self._states.get((topic, partition))
        if current is None or dispatched_at >= current.dispatched_at:
            self._states[(topic, partition)] = _StateEntry(report, dispatched_at)

    # -- output ----------------------------------------------------------------------------

    def snapshot(self, now: float | None = None) -> StatusSnapshot:
        """The current view, with health and ages computed at ``now`` (default: the clock).

        Example:
            >>> StatusView().snapshot(now=0.0).totals.processes
            0
        """
        now = time.time() if now is None else now
        with self._lock:
            self._forget(now)
            processes = sorted(
                (self._process_view(entry, now) for entry in self._processes.values()),
                key=lambda p: (p.health != "alive", p.health, p.id),
            )
            errors = [error for _, _, error in reversed(self._errors)]  # newest first
            schedulers = [
                _scheduler_view(topic, partition, entry.report, now)
                for (topic, partition), entry in sorted(self._states.items())
            ]
            history = [
                LagSeries(process_id, group, topic, partition, list(points))
                for (process_id, group, topic, partition), points in sorted(self._history.items())
            ]
            return StatusSnapshot(
                generated_at=now,
                ttl=self.ttl,
                caught_up=self._caught_up,
                reports_topic=self.reports_topic,
                errors_topic=self.errors_topic,
                states_topics=sorted(self._states_topics),
                processes=processes,
                totals=_totals(processes),
                errors=errors,
                schedulers=schedulers,
                lag_history=history,
                read=dict(sorted(self._read.items())),
                skipped=dict(sorted(self._skipped.items())),
            )

    def _forget(self, now: float) -> None:
        if self.forget_after is None:
            return
        horizon = now - self.forget_after
        gone = [pid for pid, entry in self._processes.items() if entry.dispatched_at < horizon]
        for process_id in gone:
            del self._processes[process_id]
        if gone:
            forgotten = set(gone)
            for key in [key for key in self._history if key[0] in forgotten]:
                del self._history[key]

    def _process_view(self, entry: _ProcessEntry, now: float) -> ProcessView:
        report = entry.report
        age = max(0.0, now - report.dispatched_at)
        health: Health
        if report.status == "stopped":
            health = "stopped"
        elif age <= self.ttl:
            health = "alive"
        else:
            health = "stale"
        partitions = [
            PartitionLag(
                group=p.consumer_group,
                topic=p.topic,
                partition=p.partition,
                lag=p.lag,
                lag_stored=p.lag_stored,
                committed_offset=p.committed_offset,
                stored_offset=p.stored_offset,
                hi_offset=p.hi_offset,
                lo_offset=p.lo_offset,
                fetch_state=p.fetch_state,
                poll_state=p.poll_state,
                subscription_group=p.subscription_group,
            )
            for p in report.partitions
        ]
        return ProcessView(
            id=report.id,
            health=health,
            status=report.status,
            dispatched_at=report.dispatched_at,
            age=age,
            started_at=report.started_at,
            memory_usage=report.memory_usage,
            memory_total_usage=report.memory_total_usage,
            memory_size=report.memory_size,
            cpus=report.cpus,
            threads=report.threads,
            cpu_usage=list(report.cpu_usage),
            tags=list(report.tags),
            busy=report.busy,
            enqueued=report.enqueued,
            utilization=report.utilization,
            lag=report.lag,
            lag_stored=sum(max(0, p.lag_stored) for p in partitions),
            totals=dict(entry.totals),
            jobs=report.jobs,
            partitions=partitions,
            schema_version=report.schema_version,
            newer_schema=report.newer_schema,
            execution_mode=report.execution_mode,
        )


def _error_view(error_id: str, report: ErrorReportView) -> ErrorView:
    return ErrorView(
        id=error_id,
        type=report.kind,
        error_class=report.error_class,
        error_message=report.error_message,
        backtrace=report.backtrace,
        details=dict(report.details),
        occurred_at=report.occurred_at,
        process_id=report.process_id,
    )


def _scheduler_view(
    topic: str, partition: int, report: Mapping[str, Any], now: float
) -> SchedulerView:
    daily = {day: int(count) for day, count in sorted(report["daily"].items())}
    return SchedulerView(
        topic=topic.removesuffix(STATES_POSTFIX),
        partition=partition,
        state=str(report["state"]),
        dispatched_at=float(report["dispatched_at"]),
        age=max(0.0, now - float(report["dispatched_at"])),
        started_at=int(report["started_at"]),
        low=int(report["offsets"]["low"]),
        high=int(report["offsets"]["high"]),
        daily=daily,
        pending=sum(daily.values()),
        dispatched=int(report.get("dispatched", 0)),
        reloads=int(report["reloads"]),
        skipped_records=int(report.get("skipped_records", 0)),
        failed=int(report.get("failed", 0)),
    )


def _totals(processes: Sequence[ProcessView]) -> StatusTotals:
    alive = [p for p in processes if p.alive]

    def total(name: str) -> int:
        return sum(p.totals.get(name, 0) for p in processes)

    return StatusTotals(
        processes=len(processes),
        alive=len(alive),
        stale=sum(p.health == "stale" for p in processes),
        stopped=sum(p.health == "stopped" for p in processes),
        partitions=sum(len(p.partitions) for p in alive),
        lag=sum(p.lag for p in alive),
        lag_stored=sum(p.lag_stored for p in alive),
        busy=sum(p.busy for p in alive),
        enqueued=sum(p.enqueued for p in alive),
        threads=sum(p.threads for p in alive),
        memory_usage=sum(p.memory_usage for p in alive),
        messages=total("messages"),
        errors=total("errors"),
        retries=total("retries"),
        dead=total("dead"),
    )


class StatusReader:
    """Tails the tracking topics into a :class:`StatusView` on background threads.

    It reads without a consumer group (it commits nothing and joins no group): each partition
    from the beginning once, then only new records, keeping its position. Every
    ``discover_interval`` seconds it looks for new partitions and, unless ``states_topics`` is
    given, for new topics ending in ``_states``, and adds them without re-reading the others. A
    topic that does not exist yet is simply empty until it appears.

    Args:
        config: librdkafka settings (``bootstrap.servers``, security, ...); no ``group.id``.
        reports_topic, errors_topic: where the reporters write.
        states_topics: scheduler state topics to read; ``None`` [default] reads every topic
            whose name ends in ``_states``.
        discover_interval: seconds between looks for new topics and partitions [5].
        ttl, max_errors, history_points, forget_after: see :class:`StatusView`.

    Example:
        >>> from ferrokafka.status import StatusReader
        >>> reader = StatusReader({"bootstrap.servers": "127.0.0.1:9092"}, ttl=60.0)
        >>> reader.start()  # doctest: +SKIP
        >>> reader.wait_caught_up(timeout=30.0)  # doctest: +SKIP
        True
        >>> reader.snapshot().totals.alive  # doctest: +SKIP
        2
        >>> reader.stop()  # doctest: +SKIP
    """

    def __init__(
        self,
        config: Mapping[str, ConfigValue],
        *,
        reports_topic: str = DEFAULT_REPORTS_TOPIC,
        errors_topic: str = DEFAULT_ERRORS_TOPIC,
        states_topics: Sequence[str] | None = None,
        ttl: float = REPORT_TTL,
        max_errors: int = 100,
        history_points: int = 360,
        forget_after: float | None = 3600.0,
        discover_interval: float = 5.0,
    ) -> None:
        check_config_mapping(config)
        if "group.id" in config:
            raise ValueError(
                "the status reader reads without a consumer group and commits nothing: "
                "leave 'group.id' out of its config"
            )
        if isinstance(states_topics, str):
            raise TypeError("states_topics must be a list of topic names, not a single str")
        self.view = StatusView(
            reports_topic=reports_topic,
            errors_topic=errors_topic,
            ttl=ttl,
            max_errors=max_errors,
            history_points=history_points,
            forget_after=forget_after,
        )
        self._config = dict(config)
        self._states_topics = None if states_topics is None else list(states_topics)
        self._discover_interval = checked_seconds(
            "discover_interval", discover_interval, positive=True
        )
        self._client: Client | None = None
        self._consumer: Consumer | None = None
        self._assigned: set[tuple[str, int]] = set()
        self._behind: set[tuple[str, int]] = set()
        self._caught_up = threading.Condition()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lifecycle = threading.Lock()
        self._refreshing = threading.Lock()

    def start(self) -> StatusReader:
        """Look up the topics, start reading them, and keep looking for new ones; returns at
        once (``self``, for chaining). Starting twice is a no-op.

        Example:
            >>> config = {"bootstrap.servers": "127.0.0.1:9092"}
            >>> reader = StatusReader(config).start()  # doctest: +SKIP
        """
        with self._lifecycle:
            if self._thread is not None:
                return self
            self._stopping.clear()
            self._client = Client(self._config)
            self.refresh()
            self._thread = threading.Thread(
                target=self._discover_forever, name="ferrokafka-status-discovery", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reading; the view keeps what was read. Calling it again is a no-op.

        Example:
            >>> reader.stop()  # doctest: +SKIP
        """
        self._stopping.set()
        with self._lifecycle:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        with self._refreshing:
            self._replace_consumer(None)
            self._assigned = set()

    def __enter__(self) -> StatusReader:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def snapshot(self, now: float | None = None) -> StatusSnapshot:
        """The view now (see :meth:`StatusView.snapshot`).

        Example:
            >>> reader.snapshot().to_dict()["totals"]["alive"]  # doctest: +SKIP
            1
        """
        return self.view.snapshot(now)

    def wait_caught_up(self, timeout: float) -> bool:
        """Wait until every partition read so far was read to the end it had when it was
        added; False if that took longer than ``timeout`` seconds.

        Example:
            >>> reader.wait_caught_up(timeout=30.0)  # doctest: +SKIP
            True
        """
        deadline = time.monotonic() + timeout
        with self._caught_up:
            while self._behind:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._caught_up.wait(min(left, 0.5))
        return True

    def refresh(self) -> bool:
        """Look for new topics and partitions now and start reading them; True when the set
        of partitions read changed. :meth:`start` calls it, then every ``discover_interval``.

        Example:
            >>> reader.refresh()  # doctest: +SKIP
            False
        """
        client = self._client
        if client is None:
            raise RuntimeError("the status reader is not started; call start() first")
        with self._refreshing:  # the discovery thread and a caller may refresh at once
            return self._reassign(self._wanted_partitions(client))

    def _reassign(self, wanted: set[tuple[str, int]]) -> bool:
        if wanted == self._assigned:
            return False
        log.info(
            "reading %d partitions of %s",
            len(wanted),
            ", ".join(sorted({topic for topic, _ in wanted})) or "no topics",
        )
        # Stop the old tail first: its handlers and caught-up callbacks are over when stop()
        # returns, so the positions are final and no late callback touches the new set.
        self._replace_consumer(None)
        self._assigned = set()  # if starting the new tail fails, the next refresh retries
        positions = self.view.positions()
        with self._caught_up:
            self._behind = set(wanted)
            self.view.set_caught_up(not wanted)
            self._caught_up.notify_all()
        if wanted:
            subscriptions = [
                TopicPartition(
                    topic, partition, offset=positions.get((topic, partition), "beginning")
                )
                for topic, partition in sorted(wanted)
            ]
            self._replace_consumer(
                Consumer(
                    self._config,
                    subscriptions,
                    self.view.add_messages,
                    max_batch_size=500,
                    drain=1.0,
                    on_caught_up=self._partition_caught_up,
                )
            )
        self._assigned = wanted
        return True

    def _wanted_partitions(self, client: Client) -> set[tuple[str, int]]:
        metadata = client.list_topics(timeout=self._discover_interval + 10.0)
        names = {self.view.reports_topic, self.view.errors_topic}
        if self._states_topics is None:
            names.update(n for n in metadata.topics if n.endswith(STATES_POSTFIX))
        else:
            names.update(self._states_topics)
        return {
            (name, partition.id)
            for name in names
            if (topic := metadata.topics.get(name)) is not None
            for partition in topic.partitions
        }

    def _replace_consumer(self, consumer: Consumer | None) -> None:
        old, self._consumer = self._consumer, consumer
        if old is not None:
            old.stop()
        if consumer is not None:
            consumer.start()

    def _partition_caught_up(self, topic: str, partition: int, offset: int) -> None:
        with self._caught_up:
            self._behind.discard((topic, partition))
            if not self._behind:
                self.view.set_caught_up(True)
                log.debug(
                    "caught up with every tracking partition (last: %s[%d])", topic, partition
                )
            self._caught_up.notify_all()

    def _discover_forever(self) -> None:
        while not self._stopping.wait(self._discover_interval):
            try:
                self.refresh()
            except FerrokafkaError as error:
                log.warning("looking for new tracking topics failed (will retry): %s", error)


# -- rendering ---------------------------------------------------------------------------------


def _when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S"
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


def render_text(snapshot: StatusSnapshot, max_errors: int = 10) -> str:
    """The snapshot as the tables ``ferrokafka status`` prints: processes, their partitions,
    recent errors (at most ``max_errors``, newest first) and scheduler states.

    Example:
        >>> print(render_text(StatusView().snapshot(now=0.0)).splitlines()[0])
        Processes: 0 alive, 0 stale, 0 stopped (TTL 30 s); total lag 0
    """
    t = snapshot.totals
    lines = [
        f"Processes: {t.alive} alive, {t.stale} stale, {t.stopped} stopped "
        f"(TTL {snapshot.ttl:g} s); total lag {t.lag}",
    ]
    if snapshot.processes:
        lines += _table(
            [
                "PROCESS",
                "HEALTH",
                "STATUS",
                "LAST REPORT",
                "MEM MiB",
                "THREADS",
                "LOAD",
                "BUSY",
                "LAG",
                "MESSAGES",
                "ERRORS",
            ],
            [
                [
                    p.id,
                    p.health,
                    p.status,
                    f"{p.age:.0f} s ago",
                    f"{p.memory_usage / 1024:.1f}",
                    p.threads,
                    f"{p.cpu_usage[0]:.2f}" if p.cpu_usage else "-",
                    p.busy,
                    p.lag,
                    p.totals.get("messages", 0),
                    p.totals.get("errors", 0),
                ]
                for p in snapshot.processes
            ],
        )
    partitions = [(p, lag) for p in snapshot.processes for lag in p.partitions]
    lines += ["", f"Partitions: {len(partitions)}"]
    if partitions:
        lines += _table(
            [
                "PROCESS",
                "GROUP",
                "TOPIC",
                "PARTITION",
                "LAG",
                "LAG STORED",
                "COMMITTED",
                "STORED",
                "HIGH",
                "STATE",
            ],
            [
                [
                    p.id,
                    lag.group,
                    lag.topic,
                    lag.partition,
                    lag.lag,
                    lag.lag_stored,
                    lag.committed_offset,
                    lag.stored_offset,
                    lag.hi_offset,
                    lag.poll_state,
                ]
                for p, lag in partitions
            ],
        )
    errors = snapshot.errors[:max_errors]
    lines += ["", f"Recent errors: {len(snapshot.errors)} (newest first)"]
    if errors:
        lines += _table(
            ["WHEN (UTC)", "PROCESS", "TYPE", "CLASS", "MESSAGE"],
            [
                [
                    _when(e.occurred_at),
                    e.process_id,
                    e.type,
                    e.error_class,
                    _one_line(e.error_message, 80),
                ]
                for e in errors
            ],
        )
    lines += ["", f"Schedulers: {len(snapshot.schedulers)} partitions"]
    if snapshot.schedulers:
        lines += _table(
            [
                "SCHEDULES TOPIC",
                "PARTITION",
                "STATE",
                "PENDING",
                "DISPATCHED",
                "FAILED",
                "OFFSETS",
                "LAST REPORT",
                "DAILY",
            ],
            [
                [
                    s.topic,
                    s.partition,
                    s.state,
                    s.pending,
                    s.dispatched,
                    s.failed,
                    f"{s.low}..{s.high}",
                    f"{s.age:.0f} s ago",
                    " ".join(f"{day}={count}" for day, count in s.daily.items()) or "-",
                ]
                for s in snapshot.schedulers
            ],
        )
    skipped = ", ".join(f"{topic}={count}" for topic, count in snapshot.skipped.items())
    lines += ["", f"Skipped records: {skipped or 'none'}"]
    if not snapshot.caught_up:
        lines.append("(still reading: not every partition was read to its end)")
    return "\n".join(lines)


def _one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _sample_value(value: float) -> str:
    """A sample value without precision loss: integers in full, other floats by repr."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _labels(**labels: object) -> str:
    def escape(value: object) -> str:
        return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"


def render_prometheus(snapshot: StatusSnapshot) -> str:
    """The snapshot in Prometheus' text exposition format (version 0.0.4).

    Example:
        >>> print(render_prometheus(StatusView().snapshot(now=0.0)).splitlines()[0])
        # HELP ferrokafka_processes Reporting processes by health.
    """
    out: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: Iterable[tuple[str, float]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(f"{name}{labels} {_sample_value(value)}" for labels, value in samples)

    processes = snapshot.processes
    metric(
        "ferrokafka_processes",
        "gauge",
        "Reporting processes by health.",
        [
            (_labels(health=health), float(getattr(snapshot.totals, health)))
            for health in ("alive", "stale", "stopped")
        ],
    )
    metric(
        "ferrokafka_process_up",
        "gauge",
        "1 while the process reports within the TTL and has not stopped.",
        [(_labels(process=p.id, status=p.status), float(p.alive)) for p in processes],
    )
    metric(
        "ferrokafka_process_last_report_age_seconds",
        "gauge",
        "Seconds since the process's last report.",
        [(_labels(process=p.id), p.age) for p in processes],
    )
    metric(
        "ferrokafka_process_memory_bytes",
        "gauge",
        "Resident memory of the process.",
        [(_labels(process=p.id), p.memory_usage * 1024.0) for p in processes],
    )
    metric(
        "ferrokafka_process_threads",
        "gauge",
        "Threads of the process.",
        [(_labels(process=p.id), float(p.threads)) for p in processes],
    )
    metric(
        "ferrokafka_process_messages_total",
        "counter",
        "Messages processed since the process started.",
        [(_labels(process=p.id), float(p.totals.get("messages", 0))) for p in processes],
    )
    metric(
        "ferrokafka_process_errors_total",
        "counter",
        "Handler errors since the process started.",
        [(_labels(process=p.id), float(p.totals.get("errors", 0))) for p in processes],
    )
    metric(
        "ferrokafka_partition_lag",
        "gauge",
        "Lag to the committed offset, per consumed partition.",
        [
            (
                _labels(process=p.id, group=lag.group, topic=lag.topic, partition=lag.partition),
                float(lag.lag),
            )
            for p in processes
            for lag in p.partitions
        ],
    )
    metric(
        "ferrokafka_scheduler_pending",
        "gauge",
        "Pending schedules per schedules partition.",
        [
            (_labels(topic=s.topic, partition=s.partition, state=s.state), float(s.pending))
            for s in snapshot.schedulers
        ],
    )
    metric(
        "ferrokafka_scheduler_dispatched_total",
        "counter",
        "Schedules dispatched since the scheduler started.",
        [
            (_labels(topic=s.topic, partition=s.partition), float(s.dispatched))
            for s in snapshot.schedulers
        ],
    )
    metric(
        "ferrokafka_scheduler_failed_total",
        "counter",
        "Schedules whose target the broker refused for good since the scheduler started.",
        [
            (_labels(topic=s.topic, partition=s.partition), float(s.failed))
            for s in snapshot.schedulers
        ],
    )
    metric(
        "ferrokafka_status_skipped_records_total",
        "counter",
        "Tracking records the reader skipped as corrupt or foreign.",
        [(_labels(topic=topic), float(count)) for topic, count in snapshot.skipped.items()],
    )
    return "\n".join(out) + "\n"
