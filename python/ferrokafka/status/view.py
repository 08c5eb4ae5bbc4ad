"""The status view: folds process reports (decoded by the Rust core into typed views), error
reports and scheduler state reports into the latest picture, with health, totals and lag
history. Pure: no I/O, no Kafka."""

from __future__ import annotations

import bisect
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar

from ferrokafka._native import (
    ConsumerReportView,
    ErrorReportView,
    Message,
    StateReportView,
    view_consumer_report,
    view_error_report,
    view_state_report,
)
from ferrokafka._validation import checked_seconds, positive_count
from ferrokafka.exceptions import FerrokafkaError
from ferrokafka.scheduling import STATES_POSTFIX
from ferrokafka.status.hostile import (
    MAX_DAYS,
    MAX_INFLATED,
    MAX_MESSAGE,
    MAX_TAGS,
    bounded_json,
    bounded_text,
    checked_time,
    printable,
)
from ferrokafka.tracking import DEFAULT_ERRORS_TOPIC, DEFAULT_REPORTS_TOPIC, REPORT_TTL

__all__ = [
    "ErrorView",
    "Health",
    "LagSeries",
    "PartitionLag",
    "ProcessView",
    "SchedulerView",
    "StatusSnapshot",
    "StatusTotals",
    "StatusView",
]

log = logging.getLogger("ferrokafka.status")

Health: TypeAlias = Literal["alive", "stale", "stopped"]
_SeriesKey: TypeAlias = tuple[str, str, int]
"""A process's lag series: (group, topic, partition)."""
_Points: TypeAlias = list[tuple[float, int]]

_WARNINGS_PER_TOPIC = 10
"""Skipped records logged at WARNING per topic; the rest at DEBUG (the count keeps going)."""

MAX_PARTITIONS = 1_000
"""Partitions kept of one process's report."""

MAX_PARTITION_ROWS = 2_000
"""Partitions listed in a snapshot over all its processes (alive ones first)."""

MAX_LAG_SERIES = 50
"""Lag series in a snapshot's history (a chart with more lines is unreadable anyway)."""

MAX_PROCESS_SERIES = MAX_LAG_SERIES
"""Lag series kept per process: those of the first partitions of its newest report. A snapshot
lists series in (process, group, topic, partition) order and at most :data:`MAX_LAG_SERIES`, so
a process's later series would never be shown."""

MAX_HISTORY_SERIES = 1_000
"""Lag series kept over all processes, each of at most ``history_points`` points (about 40 MiB
at the default 360). Past it, the series of processes that are not alive go first (they are not
charted), then those listed last. With up to 20 processes of 50 partitions or more, every
series a snapshot could list is kept."""


@dataclass(frozen=True)
class PartitionLag:
    """One partition a process consumes, as its latest report saw it: librdkafka's lags to the
    committed (``lag``) and to the stored offset (``lag_stored``, -1 while unknown), and
    ``lag_hybrid``, the one Karafka Web shows and the process's lag sums (``lag_stored`` unless
    unknown, else ``lag``).

    Example:
        >>> PartitionLag("billing", "orders", 0, lag=3, lag_stored=2, lag_hybrid=2,
        ...     committed_offset=10, stored_offset=11, hi_offset=13, lo_offset=0,
        ...     fetch_state="active", poll_state="active").lag_hybrid
        2
    """

    group: str
    topic: str
    partition: int
    lag: int
    lag_stored: int
    lag_hybrid: int
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
    ``"stale"`` (also when the report is dated more than ``ttl`` seconds after the snapshot: a
    clock that far ahead proves nothing). ``age`` is seconds since ``dispatched_at`` at snapshot
    time, negative only in that case. A stopped process's partitions show the state
    ``"stopped"``. Strings and lists are cut as :mod:`ferrokafka.status.hostile` says. Memory is
    in KiB.
    ``lag`` is Karafka Web's summed lag (each partition's stored lag where known, else its
    committed lag); ``totals`` sum the counts of every report read from the process.

    Example:
        >>> snapshot.processes[0].health
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
            >>> snapshot.processes[0].alive
            True
        """
        return self.health == "alive"


@dataclass(frozen=True)
class SchedulerView:
    """The latest state report of one scheduled-messages partition.

    ``topic`` is the schedules topic (the states topic without ``_states``); ``daily`` counts
    pending schedules per UTC day; ``low``/``high`` are the schedules offsets seen (-1: none).

    Example:
        >>> snapshot.schedulers[0].state
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
    """One reported error (message and backtrace cut to 10,000 characters, details to 64
    values).

    Example:
        >>> snapshot.errors[0].error_class
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
    """Lag of one partition as one alive process reported it over the view's
    ``history_window``: ``points`` are ``(dispatched_at, lag)`` pairs, oldest first.

    Example:
        >>> series = snapshot.lag_history[0]
        >>> series.topic, series.partition, series.points[-1]
        ('orders', 0, (..., 100))
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
        >>> snapshot.totals.alive, snapshot.totals.lag
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
    ``omitted`` counts what the bounds left out: ``processes`` dropped for newer ones,
    ``partitions`` and ``lag_series`` not listed (see :class:`StatusView`).

    Example:
        >>> snapshot = reader.snapshot()
        >>> [p.id for p in snapshot.processes if p.alive]
        ['host-1:4242:ab12cd', 'host-2:4243:cd34ef']
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
    omitted: dict[str, int] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as JSON-ready dicts and lists (``alive`` added to each process).

        Example:
            >>> import json
            >>> document = reader.snapshot().to_dict()
            >>> document["processes"][0]["id"], document["processes"][0]["alive"]
            ('host-1:4242:ab12cd', True)
            >>> json.dumps(document["totals"])
            '{"processes": 2, "alive": 2, "stale": 0, "stopped": 0, "partitions": 2, ...}'
        """
        document = dataclasses.asdict(self)
        for process in document["processes"]:
            process["alive"] = process["health"] == "alive"
        return document


@dataclass
class _ProcessEntry:
    process: ProcessView
    """Bounded when read; health, age and totals are filled in by each snapshot."""
    totals: dict[str, int]
    history: dict[_SeriesKey, _Points] = dataclasses.field(default_factory=dict)
    """Lag points of the partitions of the newest report (at most MAX_PROCESS_SERIES)."""
    series: int = 0
    """Distinct partitions of the newest report: the series it has, kept or not."""


class StatusView:
    """Folds tracking records into the latest state; thread-safe, no I/O.

    Records are routed by topic: ``reports_topic`` holds process reports, ``errors_topic``
    error reports, and any topic ending in ``_states`` scheduler state reports. A record that
    is a tombstone, corrupt, of the wrong schema, dated outside 1970 to 9999 (a time in
    milliseconds) or more than :data:`~ferrokafka.status.hostile.MAX_CLOCK_AHEAD` seconds (5
    minutes) ahead of ``clock``, or from another topic is skipped: counted per topic, logged,
    never raised. The newest report per process (by ``dispatched_at``) wins, whatever order the
    records come in; skipping what is dated too far ahead keeps a broken or hostile clock from
    winning that rule (and the room for processes and errors) until year 9999. What is kept of
    a record is bounded (:mod:`ferrokafka.status.hostile`), and so is a snapshot: at most
    ``max_processes`` processes, 2,000 partitions and 50 lag series.

    Args:
        reports_topic, errors_topic: the topic names the reporters use.
        ttl: seconds after its last report that a process counts as stale [30].
        max_errors: the newest errors kept [100].
        history_points: lag points kept per (process, group, topic, partition) [360]. A process
            has a series per partition of its newest report; the first
            :data:`MAX_PROCESS_SERIES` (50) of them are kept, and at most
            :data:`MAX_HISTORY_SERIES` (1,000) over all processes.
        history_window: seconds of lag history a snapshot shows, of alive processes only [900].
        forget_after: seconds after which a process that stopped reporting (and its lag history)
            is left out of snapshots; ``None`` keeps every process [3600].
        max_processes: processes kept; past that, the one with the oldest report is dropped
            [500].
        clock: the reader's clock, in Unix seconds, that records are checked against when
            they are added [``time.time``].

    Example:
        >>> from ferrokafka.status import StatusView
        >>> view = StatusView()
        >>> view.add_record("karafka_consumers_reports", 0, 0, b"not zlib")
        False
        >>> view.snapshot().skipped
        {'karafka_consumers_reports': 1}
    """

    def __init__(
        self,
        *,
        reports_topic: str = DEFAULT_REPORTS_TOPIC,
        errors_topic: str = DEFAULT_ERRORS_TOPIC,
        ttl: float = REPORT_TTL,
        max_errors: int = 100,
        history_points: int = 360,
        history_window: float = 900.0,
        forget_after: float | None = 3600.0,
        max_processes: int = 500,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not reports_topic or not errors_topic:
            raise ValueError("reports_topic and errors_topic must be non-empty topic names")
        self.reports_topic = reports_topic
        self.errors_topic = errors_topic
        self.ttl = checked_seconds("ttl", ttl, positive=True)
        self.max_errors = positive_count("max_errors", max_errors)
        self.history_points = positive_count("history_points", history_points)
        self.history_window = checked_seconds("history_window", history_window, positive=True)
        self.forget_after = (
            None
            if forget_after is None
            else checked_seconds("forget_after", forget_after, positive=True)
        )
        self.max_processes = positive_count("max_processes", max_processes)
        self._clock = clock
        self._lock = threading.Lock()
        self._processes: dict[str, _ProcessEntry] = {}
        self._dropped_processes = 0
        self._errors: list[tuple[float, str, ErrorView]] = []
        self._error_ids: set[str] = set()
        self._states: dict[tuple[str, int], SchedulerView] = {}
        self._positions: dict[tuple[str, int], int] = {}
        self._read: dict[str, int] = {}
        self._skipped: dict[str, int] = {}
        self._states_topics: set[str] = set()
        self._caught_up = False

    # -- input -----------------------------------------------------------------------------

    def add_messages(self, messages: Iterable[Message]) -> int:
        """Fold a batch of Kafka messages in; returns how many were used (not skipped).

        Example:
            >>> records = client.read_topic(view.reports_topic)
            >>> view.add_messages(records)
            2
        """
        used = 0
        for message in messages:
            used += self.add_record(
                message.topic(), message.partition(), message.offset(), message.value()
            )
        return used

    def add_record(self, topic: str, partition: int, offset: int, value: bytes | None) -> bool:
        """Fold one record in; False when it was skipped.

        Offsets only grow on a partition: a record below the offsets read before means the
        partition was deleted and created again (or truncated). That is logged as a warning,
        and the partition is read on from the record.

        Example:
            >>> from ferrokafka import codecs
            >>> blob = codecs.encode_error_report(error)
            >>> view.add_record(view.errors_topic, 0, 7, blob)
            True
        """
        with self._lock:
            position = self._positions.get((topic, partition))
            if position is not None and offset < position:
                log.warning(
                    "%s[%d] starts over at offset %d, below the %d read: the partition was "
                    "deleted and created again (or truncated); reading its records from there",
                    printable(topic),
                    partition,
                    offset,
                    position,
                )
            self._positions[(topic, partition)] = offset + 1
            self._read[topic] = self._read.get(topic, 0) + 1
            if value is None:
                return self._skip(topic, partition, offset, "tombstone (no value)")
            now = self._clock()
            try:
                if topic == self.reports_topic:
                    self._add_process_report(view_consumer_report(value, MAX_INFLATED), now)
                elif topic == self.errors_topic:
                    self._add_error_report(view_error_report(value, MAX_INFLATED), now)
                elif topic.endswith(STATES_POSTFIX):
                    self._states_topics.add(topic)
                    report = view_state_report(value, MAX_INFLATED)
                    self._add_state_report(topic, partition, report, now)
                else:
                    return self._skip(topic, partition, offset, "not a tracking topic")
            except (FerrokafkaError, ValueError, TypeError, KeyError) as error:
                return self._skip(topic, partition, offset, str(error))
            return True

    def positions(self) -> dict[tuple[str, int], int]:
        """The next offset to read per ``(topic, partition)`` seen so far.

        Example:
            >>> view.add_messages(client.read_topic(view.reports_topic))
            2
            >>> view.positions()[(view.reports_topic, 0)]
            2
        """
        with self._lock:
            return dict(self._positions)

    def set_caught_up(self, caught_up: bool) -> None:
        """Record whether the feeding reader has read every partition to its end.

        Example:
            >>> view = StatusView()
            >>> view.set_caught_up(True)
        """
        with self._lock:
            self._caught_up = caught_up

    def _skip(self, topic: str, partition: int, offset: int, reason: str) -> bool:
        skipped = self._skipped.get(topic, 0) + 1
        self._skipped[topic] = skipped
        level = logging.WARNING if skipped <= _WARNINGS_PER_TOPIC else logging.DEBUG
        log.log(
            level,
            "skipped %s[%d]@%d: %s",
            printable(topic),
            partition,
            offset,
            printable(bounded_text(reason, MAX_MESSAGE)),
        )
        return False

    def _add_process_report(self, report: ConsumerReportView, now: float) -> None:
        process = _process_of(report, now)
        current = self._processes.get(process.id)
        if current is None and not self._make_room(process.dispatched_at):
            return
        # Each report counts since the process's previous one (Karafka Web's rule): sum them.
        totals = {} if current is None else current.totals
        for name, count in report.totals.items():
            totals[name] = totals.get(name, 0) + count
        lags = {
            (p.group, p.topic, p.partition): reported.lag_hybrid
            for p, reported in zip(process.partitions, report.partitions, strict=False)
        }
        if current is None or process.dispatched_at >= current.process.dispatched_at:
            # The newest report decides the series: those of partitions it no longer lists go.
            kept = current.history if current is not None else {}
            history = {key: kept.get(key, []) for key in sorted(lags)[:MAX_PROCESS_SERIES]}
            current = _ProcessEntry(process, totals, history, series=len(lags))
            self._processes[process.id] = current
            if sum(len(entry.history) for entry in self._processes.values()) > MAX_HISTORY_SERIES:
                self._trim_history(now)
        for key, series in current.history.items():
            if key not in lags:
                continue  # an older report, read late, of a partition the newest one dropped
            point = (process.dispatched_at, lags[key])
            at = bisect.bisect_right(series, point)
            if at > 0 and series[at - 1][0] == process.dispatched_at:
                series[at - 1] = point  # the same report twice: keep one point
            else:
                series.insert(at, point)
            del series[: max(0, len(series) - self.history_points)]

    def _trim_history(self, now: float) -> None:
        """Drops series past :data:`MAX_HISTORY_SERIES`: first those of processes not alive at
        ``now``, then those listed last."""
        ranked = sorted(
            (self._health(entry.process, now) != "alive", process_id, key)
            for process_id, entry in self._processes.items()
            for key in entry.history
        )
        for _, process_id, key in ranked[MAX_HISTORY_SERIES:]:
            del self._processes[process_id].history[key]

    def _make_room(self, dispatched_at: float) -> bool:
        """Room for one more process: drop the one with the oldest report if it is older than
        ``dispatched_at``; False when the new process is the oldest (then it is dropped)."""
        if len(self._processes) < self.max_processes:
            return True
        self._dropped_processes += 1
        oldest = min(self._processes, key=lambda pid: self._processes[pid].process.dispatched_at)
        if self._processes[oldest].process.dispatched_at >= dispatched_at:
            return False
        self._drop_processes({oldest})
        return True

    def _add_error_report(self, report: ErrorReportView, now: float) -> None:
        occurred_at = checked_time("occurred_at", report.occurred_at, now)
        process_id = bounded_text(report.process_id)
        # Error schemas before 1.2.0 carry no id: the process and time stand in for it.
        error_id = bounded_text(report.id or f"{process_id}@{occurred_at!r}")
        if error_id in self._error_ids:
            return
        error = ErrorView(
            id=error_id,
            type=bounded_text(report.kind),
            error_class=bounded_text(report.error_class),
            error_message=bounded_text(report.error_message, MAX_MESSAGE),
            backtrace=bounded_text(report.backtrace, MAX_MESSAGE),
            details=bounded_json(dict(report.details)),
            occurred_at=occurred_at,
            process_id=process_id,
        )
        bisect.insort(self._errors, (occurred_at, error_id, error), key=lambda e: (e[0], e[1]))
        self._error_ids.add(error_id)
        while len(self._errors) > self.max_errors:
            self._error_ids.discard(self._errors.pop(0)[1])

    def _add_state_report(
        self, topic: str, partition: int, report: StateReportView, now: float
    ) -> None:
        scheduler = _scheduler_of(topic, partition, report, now)
        current = self._states.get((topic, partition))
        if current is None or scheduler.dispatched_at >= current.dispatched_at:
            self._states[(topic, partition)] = scheduler

    # -- output ----------------------------------------------------------------------------

    def snapshot(self, now: float | None = None) -> StatusSnapshot:
        """The current view, with health and ages computed at ``now`` (default: the clock).

        The lock that :meth:`add_record` takes is held only to copy what the snapshot shows;
        the views are built after.

        Example:
            >>> StatusView().snapshot(now=0.0).totals.processes
            0
        """
        now = time.time() if now is None else now
        with self._lock:
            self._forget(now)
            reported = [(entry.process, dict(entry.totals)) for entry in self._processes.values()]
            history, unlisted_series = self._charted(now)
            errors = [error for _, _, error in reversed(self._errors)]  # newest first
            schedulers = [scheduler for _, scheduler in sorted(self._states.items())]
            states_topics = sorted(self._states_topics)
            read = dict(sorted(self._read.items()))
            skipped = dict(sorted(self._skipped.items()))
            dropped_processes, caught_up = self._dropped_processes, self._caught_up
        processes = sorted(
            (self._process_view(process, totals, now) for process, totals in reported),
            key=lambda p: (p.health != "alive", p.health, p.id),
        )
        totals = _totals(processes)
        processes, omitted_partitions = _listed_partitions(processes)
        omitted = {
            "processes": dropped_processes,
            "partitions": omitted_partitions,
            "lag_series": unlisted_series,
        }
        return StatusSnapshot(
            generated_at=now,
            ttl=self.ttl,
            caught_up=caught_up,
            reports_topic=self.reports_topic,
            errors_topic=self.errors_topic,
            states_topics=states_topics,
            processes=processes,
            totals=totals,
            errors=errors,
            schedulers=[
                dataclasses.replace(scheduler, age=max(0.0, now - scheduler.dispatched_at))
                for scheduler in schedulers
            ],
            lag_history=history,
            read=read,
            skipped=skipped,
            omitted={name: count for name, count in omitted.items() if count},
        )

    def _charted(self, now: float) -> tuple[list[LagSeries], int]:
        """The first :data:`MAX_LAG_SERIES` series of the alive processes with points in the
        history window (copied), and how many series of those processes are not listed."""
        horizon = now - self.history_window
        alive = sorted(
            process_id
            for process_id, entry in self._processes.items()
            if self._health(entry.process, now) == "alive"
        )
        listed: list[LagSeries] = []
        series = 0
        for process_id in alive:
            entry = self._processes[process_id]
            series += entry.series
            for (group, topic, partition), points in sorted(entry.history.items()):
                if len(listed) == MAX_LAG_SERIES:
                    break
                if shown := [point for point in points if point[0] >= horizon]:
                    listed.append(LagSeries(process_id, group, topic, partition, shown))
        return listed, max(0, series - len(listed))

    def _forget(self, now: float) -> None:
        if self.forget_after is None:
            return
        horizon = now - self.forget_after
        self._drop_processes(
            {pid for pid, entry in self._processes.items() if entry.process.dispatched_at < horizon}
        )

    def _drop_processes(self, gone: set[str]) -> None:
        for process_id in gone:
            del self._processes[process_id]

    def _health(self, process: ProcessView, now: float) -> Health:
        if process.status == "stopped":
            return "stopped"
        if -self.ttl <= now - process.dispatched_at <= self.ttl:
            return "alive"
        return "stale"  # silent too long, or dated further ahead than a clock skew

    def _process_view(
        self, process: ProcessView, totals: dict[str, int], now: float
    ) -> ProcessView:
        age = now - process.dispatched_at
        health = self._health(process, now)
        partitions = process.partitions
        if health == "stopped":
            partitions = [
                dataclasses.replace(p, fetch_state="stopped", poll_state="stopped")
                for p in partitions
            ]
        return dataclasses.replace(
            process,
            health=health,
            age=age if age < -self.ttl else max(0.0, age),
            totals=totals,
            partitions=partitions,
        )


_View = TypeVar("_View")


def _copied(view: type[_View], source: object, **given: Any) -> _View:
    """A ``view`` dataclass with ``given`` fields and the rest read from the Rust-decoded
    ``source`` by the same names (the field names live in the Rust schema and the dataclass,
    nowhere else)."""
    names = {field.name for field in dataclasses.fields(view)} - given.keys()  # type: ignore[arg-type]
    return view(**given, **{name: getattr(source, name) for name in names})


def _process_of(report: ConsumerReportView, now: float) -> ProcessView:
    """The bounded view of a report, as of when it was sent (health and age are set by each
    snapshot); ``ValueError`` when it is dated too far ahead of ``now``."""
    partitions = [
        _copied(
            PartitionLag,
            p,
            group=bounded_text(p.consumer_group),
            subscription_group=bounded_text(p.subscription_group),
            topic=bounded_text(p.topic),
            fetch_state=bounded_text(p.fetch_state),
            poll_state=bounded_text(p.poll_state),
        )
        for p in report.partitions[:MAX_PARTITIONS]
    ]
    execution_mode = report.execution_mode
    return _copied(
        ProcessView,
        report,
        id=bounded_text(report.id),
        health="alive",
        status=bounded_text(report.status),
        dispatched_at=checked_time("dispatched_at", report.dispatched_at, now),
        age=0.0,
        started_at=checked_time("process.started_at", report.started_at),
        tags=[bounded_text(tag) for tag in report.tags[:MAX_TAGS]],
        lag_stored=sum(max(0, p.lag_stored) for p in report.partitions),
        totals={},
        partitions=partitions,
        schema_version=bounded_text(report.schema_version),
        execution_mode=None if execution_mode is None else bounded_text(execution_mode),
    )


def _listed_partitions(processes: list[ProcessView]) -> tuple[list[ProcessView], int]:
    """``processes`` with at most :data:`MAX_PARTITION_ROWS` partitions in all, in order, and
    how many were left out."""
    listed, left, omitted = [], MAX_PARTITION_ROWS, 0
    for process in processes:
        kept = process.partitions[: max(0, left)]
        left -= len(kept)
        omitted += len(process.partitions) - len(kept)
        listed.append(
            process
            if len(kept) == len(process.partitions)
            else dataclasses.replace(process, partitions=kept)
        )
    return listed, omitted


def _scheduler_of(topic: str, partition: int, report: StateReportView, now: float) -> SchedulerView:
    """The bounded view of a state report (its age is set by each snapshot); ``ValueError``
    when it is dated too far ahead of ``now``."""
    daily = {bounded_text(day, 32): count for day, count in sorted(report.daily.items())[:MAX_DAYS]}
    return _copied(
        SchedulerView,
        report,
        topic=bounded_text(topic.removesuffix(STATES_POSTFIX)),
        partition=partition,
        state=bounded_text(report.state),
        dispatched_at=checked_time("dispatched_at", report.dispatched_at, now),
        age=0.0,
        started_at=int(checked_time("started_at", report.started_at)),
        daily=daily,
        pending=sum(report.daily.values()),
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
