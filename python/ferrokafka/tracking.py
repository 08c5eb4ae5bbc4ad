"""Process and error reports for dashboards: the tracking reporter (Karafka Web's pattern).

A :class:`Reporter` samples the process (id ``"host:pid:random"``, memory, CPU, threads,
status, versions) and the components tracked by it (per-partition lag and offsets, processed /
errored / retried counts, running jobs) and sends one zlib-compressed JSON report, keyed by
process id with header ``zlib: true``, to the reports topic: the first at once, then at most
every ``interval`` seconds, and at once whenever the status changes. Each error reported with
:meth:`Reporter.report_error` goes to the errors topic with the next report. The schema is
Karafka Web's consumer report (version ``1.0.0``, documented in ``ferrokafka/_native.pyi`` under
``encode_process_report``); the Rust codec validates every report before it is sent, so an
invalid report raises :class:`ferrokafka.CodecError` and nothing reaches the topic.

:class:`ferrokafka.Consumer`, :class:`ferrokafka.AsyncConsumer`,
:class:`ferrokafka.scheduling.Scheduler` and :class:`ferrokafka.redelivery.RedeliveryTracker`
take ``reporter=`` and report themselves: status ``running`` while they run, ``stopping`` and a
final ``stopped`` report when the last tracked component stops. For the two daemons a
partition's ``lag`` is their pending work: schedules waiting (scheduler) or messages not yet
acknowledged (redelivery).

Example:
    >>> import ferrokafka
    >>> from ferrokafka.tracking import Reporter
    >>> reporter = Reporter({"bootstrap.servers": "127.0.0.1:9092"}, interval=5.0)
    >>> consumer = ferrokafka.Consumer(
    ...     {"bootstrap.servers": "127.0.0.1:9092", "group.id": "billing"},
    ...     ["orders"],
    ...     print,
    ...     reporter=reporter,
    ... )
    >>> with consumer:  # doctest: +SKIP
    ...     input("reporting; press Enter to stop")
"""

from __future__ import annotations

import logging
import math
import os
import platform
import secrets
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, get_args

from ferrokafka._native import (
    Client,
    __version__,
    encode_error_report,
    encode_process_report,
    librdkafka_version,
)
from ferrokafka._validation import check_config_mapping, checked_seconds

__all__ = [
    "DEFAULT_ERRORS_TOPIC",
    "DEFAULT_REPORTS_TOPIC",
    "MAX_ERROR_MESSAGE_CHARS",
    "REPORT_SCHEMA_VERSION",
    "REPORT_TTL",
    "PartitionSample",
    "ProcessStatus",
    "Reporter",
    "SourceSample",
    "TrackedSource",
]

log = logging.getLogger("ferrokafka.tracking")

DEFAULT_REPORTS_TOPIC = "ferrokafka_consumers_reports"
"""Where reporters send process reports unless told otherwise."""

DEFAULT_ERRORS_TOPIC = "ferrokafka_errors"
"""Where reporters send error reports unless told otherwise."""

REPORT_TTL = 30.0
"""Seconds after its last report that a process counts as stale (Karafka Web uses 30 s)."""

REPORT_SCHEMA_VERSION = "1.0.0"
"""The process and error report schema version this build writes."""

MAX_ERROR_MESSAGE_CHARS = 10_000
"""Error messages are cut to this many characters before they are sent."""

MAX_PENDING_ERRORS = 1000
"""Errors kept for sending while the errors topic cannot be reached; older ones are dropped
(logged and counted in ``Reporter.stats()["errors_dropped"]``)."""

ProcessStatus: TypeAlias = Literal[
    "initializing", "initialized", "running", "quieting", "quiet", "stopping", "stopped"
]
ConfigValue: TypeAlias = str | int | float | bool

_UNKNOWN_OFFSET = -1


@dataclass
class PartitionSample:
    """One partition as a tracked component sees it; offsets are ``-1`` when unknown."""

    topic: str
    partition: int
    lag: int = _UNKNOWN_OFFSET
    lag_stored: int = _UNKNOWN_OFFSET
    committed_offset: int = _UNKNOWN_OFFSET
    stored_offset: int = _UNKNOWN_OFFSET
    hi_offset: int = _UNKNOWN_OFFSET
    lo_offset: int = _UNKNOWN_OFFSET
    fetch_state: str = "unknown"
    poll_state: str = "active"


@dataclass
class SourceSample:
    """What one tracked component contributes to a report.

    ``busy`` counts handlers running now, ``enqueued`` records waiting for a handler,
    ``busy_seconds`` the handler time spent since the component started (for utilization).
    """

    group: str
    partitions: list[PartitionSample] = field(default_factory=list)
    batches: int = 0
    messages: int = 0
    errors: int = 0
    retries: int = 0
    dead: int = 0
    busy: int = 0
    enqueued: int = 0
    workers: int = 1
    busy_seconds: float = 0.0
    jobs: list[dict[str, Any]] = field(default_factory=list)


class TrackedSource(Protocol):
    """A component a :class:`Reporter` samples: consumers and ferrokafka's daemons."""

    def report_sample(self) -> SourceSample:
        """The component's current state; called on the reporter's thread, without locks of
        the reporter held."""
        ...


def _read_proc_kib(path: str, keys: Iterable[str]) -> dict[str, int]:
    """``key: value kB`` lines of a /proc file; empty where /proc does not exist."""
    wanted = set(keys)
    found: dict[str, int] = {}
    try:
        with open(path, encoding="ascii") as lines:
            for line in lines:
                name, _, value = line.partition(":")
                if name in wanted:
                    found[name] = int(value.split()[0])
    except (OSError, ValueError, IndexError):
        return found
    return found


def _process_info(
    process_id: str, status: ProcessStatus, started_at: float, tags: list[str]
) -> dict[str, Any]:
    own = _read_proc_kib("/proc/self/status", ("VmRSS", "Threads"))
    machine = _read_proc_kib("/proc/meminfo", ("MemTotal", "MemAvailable"))
    total = machine.get("MemTotal", 0)
    try:
        load = list(os.getloadavg())
    except OSError:
        load = [0.0, 0.0, 0.0]
    return {
        "id": process_id,
        "status": status,
        "started_at": started_at,
        "memory_usage": own.get("VmRSS", 0),
        "memory_total_usage": max(0, total - machine.get("MemAvailable", total)),
        "memory_size": total,
        "cpus": os.cpu_count() or 1,
        # OS threads, so the Rust engine threads count too.
        "threads": own.get("Threads", threading.active_count()),
        "cpu_usage": [round(x, 2) for x in load],
        "tags": tags,
    }


_VERSIONS = {
    "python": platform.python_version(),
    "ferrokafka": __version__,
    "librdkafka": librdkafka_version,
}


def _new_process_id() -> str:
    return f"{socket.gethostname() or 'localhost'}:{os.getpid()}:{secrets.token_hex(3)}"


class Reporter:
    """Sends process reports and error reports of this process for ``ferrokafka status`` and
    the dashboard (see the module docs for the schema and the topics).

    Args:
        config: librdkafka configuration of the producer that sends the reports (at least
            ``bootstrap.servers``; a consumer's config can be passed as is, its consumer-only
            keys are dropped).
        reports_topic: where process reports go [``ferrokafka_consumers_reports``].
        errors_topic: where error reports go [``ferrokafka_errors``].
        interval: least seconds between two unforced reports [5].
        tags: free-form labels shown with the process.
        send_timeout: seconds to wait for the broker to acknowledge one report [10].

    Thread-safe: components call it from their own threads. Sampling runs outside the lock
    that serialises sending, so a slow sample never blocks a component reporting an error.
    A report that cannot be sent is logged and counted (``send_failures`` in :meth:`stats`);
    the next one carries the newer state. Errors not yet sent are kept (at most
    ``MAX_PENDING_ERRORS``) and sent with the next report.

    Example:
        >>> from ferrokafka.tracking import Reporter
        >>> reporter = Reporter({"bootstrap.servers": "127.0.0.1:9092"}, interval=5.0)
        >>> reporter.process_id.count(":")
        2
        >>> reporter.report()  # doctest: +SKIP
        True
        >>> reporter.close()  # doctest: +SKIP
    """

    def __init__(
        self,
        config: Mapping[str, ConfigValue],
        *,
        reports_topic: str = DEFAULT_REPORTS_TOPIC,
        errors_topic: str = DEFAULT_ERRORS_TOPIC,
        interval: float = 5.0,
        tags: Iterable[str] = (),
        send_timeout: float = 10.0,
    ) -> None:
        check_config_mapping(config)
        for name, topic in (("reports_topic", reports_topic), ("errors_topic", errors_topic)):
            if not isinstance(topic, str) or not topic:
                raise ValueError(f"{name} must be a non-empty topic name, got {topic!r}")
        if isinstance(tags, str):
            raise TypeError("tags must be a list of str, not a single str")
        self._config = {k: v for k, v in config.items() if k not in _CONSUMER_ONLY_KEYS}
        self.reports_topic = reports_topic
        self.errors_topic = errors_topic
        self.interval = checked_seconds("interval", interval, positive=True)
        self.send_timeout = checked_seconds("send_timeout", send_timeout, positive=True)
        self.tags = [str(tag) for tag in tags]
        self._pid = os.getpid()
        self._process_id = _new_process_id()
        self._started_at = time.time()
        self._status: ProcessStatus = "initialized"
        self._sources: list[TrackedSource] = []
        self._errors: list[dict[str, Any]] = []
        self._counters = {"reports": 0, "errors": 0, "send_failures": 0, "errors_dropped": 0}
        # Never report twice within `interval`, except when forced; the first report goes at once.
        self._reported_at = -math.inf
        self._client: Client | None = None
        self._state = threading.Lock()
        self._send = threading.Lock()
        self._wake = threading.Condition(self._state)
        self._thread: threading.Thread | None = None

    # -- identity and status ---------------------------------------------------------------

    @property
    def process_id(self) -> str:
        """``"host:pid:random"``; a forked child gets a new one."""
        with self._state:
            self._refresh_after_fork()
            return self._process_id

    @property
    def status(self) -> ProcessStatus:
        """The status the next report carries."""
        return self._status

    def set_status(self, status: ProcessStatus) -> None:
        """Change the process status and report it at once (when it changed)."""
        if status not in _STATUSES:
            raise ValueError(f"status must be one of {sorted(_STATUSES)}, got {status!r}")
        with self._state:
            changed = status != self._status
            self._status = status
        if changed:
            self.report(force=True)

    def _refresh_after_fork(self) -> None:
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._process_id = _new_process_id()
            self._client = None
            self._thread = None

    # -- tracked components ----------------------------------------------------------------

    def track(self, source: TrackedSource) -> None:
        """Include ``source`` in reports, start the background reporting thread if needed and
        report ``running`` at once. Components taking ``reporter=`` call it on start."""
        with self._state:
            self._refresh_after_fork()
            if source not in self._sources:
                self._sources.append(source)
            self._status = "running"
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._report_periodically, name="ferrokafka-reporter", daemon=True
                )
                self._thread.start()
        self.report(force=True)

    def stopping(self, source: TrackedSource) -> None:
        """A tracked component began stopping: when it is the last one, the process is
        stopping, which is reported at once."""
        with self._state:
            last = self._sources == [source]
        if last:
            self.set_status("stopping")

    def untrack(self, source: TrackedSource) -> None:
        """Stop including ``source``; after the last one, send the final ``stopped`` report
        (with its last state and pending errors) and end the reporting thread."""
        with self._state:
            last = self._sources == [source]
            if not last and source in self._sources:
                self._sources.remove(source)
        if last:
            self.close()

    def close(self) -> None:
        """Send a final ``stopped`` report and stop the reporting thread. Components tracked
        still are dropped from later reports."""
        with self._state:
            self._status = "stopped"
        self.report(force=True)
        with self._state:
            self._sources.clear()
        self._end_thread()

    def _end_thread(self) -> None:
        with self._state:
            thread, self._thread = self._thread, None
            self._wake.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- errors ----------------------------------------------------------------------------

    def report_error(
        self,
        error: BaseException,
        *,
        kind: str = "consumer.consume.error",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Queue an error report (uuid, class, message cut to 10,000 characters, backtrace,
        details, time); it is sent with the next report, within ``interval``.

        Example:
            >>> reporter = Reporter({"bootstrap.servers": "127.0.0.1:9092"})
            >>> reporter.report_error(ValueError("bad order"), details={"offset": 7})
        """
        message = str(error)[:MAX_ERROR_MESSAGE_CHARS]
        backtrace = "".join(traceback.format_exception(error))
        report = {
            "schema_version": REPORT_SCHEMA_VERSION,
            "id": str(uuid.uuid4()),
            "type": kind,
            "error_class": type(error).__qualname__,
            "error_message": message,
            "backtrace": backtrace,
            "details": dict(details or {}),
            "occurred_at": time.time(),
            "process": {"id": self.process_id, "tags": self.tags},
        }
        with self._state:
            self._errors.append(report)
            overflow = len(self._errors) - MAX_PENDING_ERRORS
            if overflow > 0:
                del self._errors[:overflow]
                self._counters["errors_dropped"] += overflow
                log.error(
                    "dropped %d unsent error reports (limit %d)", overflow, MAX_PENDING_ERRORS
                )

    # -- reporting -------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counts: ``reports`` and ``errors`` sent, ``send_failures``, ``errors_dropped``."""
        with self._state:
            return dict(self._counters)

    def sample(self) -> dict[str, Any]:
        """The process report as it would be sent now (not validated, not sent)."""
        with self._state:
            self._refresh_after_fork()
            sources = list(self._sources)
            process_id, status = self._process_id, self._status
        samples: list[SourceSample] = []
        for source in sources:
            try:
                samples.append(source.report_sample())
            except Exception:
                log.exception("sampling %r for the process report failed", source)
        return _process_report(
            _process_info(process_id, status, self._started_at, self.tags),
            samples,
            time.time() - self._started_at,
        )

    def report(self, force: bool = False) -> bool:
        """Send a report now if ``interval`` passed since the last one (or ``force``), with the
        errors queued since. True when a report was sent. Raises
        :class:`~ferrokafka.CodecError` when the report is invalid (nothing is sent)."""
        if not force and not self._due():
            return False
        report = self.sample()
        with self._send:
            if not force and not self._due():
                return False
            self._reported_at = time.monotonic()
            blob = encode_process_report(report)
            with self._state:
                errors, self._errors = self._errors, []
            error_blobs = [encode_error_report(error) for error in errors]
            return self._deliver(report["process"]["id"], blob, errors, error_blobs)

    def _due(self) -> bool:
        return time.monotonic() - self._reported_at >= self.interval

    def _deliver(
        self,
        process_id: str,
        blob: bytes,
        errors: list[dict[str, Any]],
        error_blobs: list[bytes],
    ) -> bool:
        headers = [("zlib", b"true")]
        sent_errors = 0
        try:
            if self._client is None:
                self._client = Client(self._config)
            self._client.produce(
                self.reports_topic, blob, key=process_id, headers=headers, timeout=self.send_timeout
            )
            for error_blob in error_blobs:
                self._client.produce(
                    self.errors_topic,
                    error_blob,
                    key=process_id,
                    headers=headers,
                    timeout=self.send_timeout,
                )
                sent_errors += 1
        except Exception as failure:
            log.warning("cannot send the process report to %s: %s", self.reports_topic, failure)
            with self._state:
                self._counters["send_failures"] += 1
                # Unsent errors go back in front of newer ones, for the next report.
                self._errors[:0] = errors[sent_errors:]
                self._counters["errors"] += sent_errors
            return False
        with self._state:
            self._counters["reports"] += 1
            self._counters["errors"] += sent_errors
        return True

    def _report_periodically(self) -> None:
        me = threading.current_thread()
        while True:
            with self._state:
                if self._thread is not me:
                    return
                wait = self.interval - (time.monotonic() - self._reported_at)
                if wait > 0:
                    self._wake.wait(wait)
                if self._thread is not me:
                    return
            try:
                self.report()
            except Exception:
                log.exception("process report failed")
                with self._state:
                    self._wake.wait(self.interval)


_STATUSES = frozenset(get_args(ProcessStatus))

# A consumer's settings that a producer refuses; a consumer's config can be passed as is.
_CONSUMER_ONLY_KEYS = frozenset(
    (
        "group.id",
        "group.instance.id",
        "auto.offset.reset",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "auto.commit.interval.ms",
        "isolation.level",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "partition.assignment.strategy",
        "group.protocol",
        "fetch.min.bytes",
        "fetch.max.bytes",
        "fetch.wait.max.ms",
        "max.partition.fetch.bytes",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "enable.partition.eof",
        "check.crcs",
        "transactional.id",
        "statistics.interval.ms",
    )
)


def _process_report(
    process: dict[str, Any], samples: list[SourceSample], lifetime: float
) -> dict[str, Any]:
    groups: dict[str, dict[str, Any]] = {}
    totals = {"batches": 0, "messages": 0, "errors": 0, "retries": 0, "dead": 0}
    busy = enqueued = workers = 0
    busy_seconds = 0.0
    lag = lag_stored = 0
    jobs: list[dict[str, Any]] = []
    for sample in samples:
        totals["batches"] += sample.batches
        totals["messages"] += sample.messages
        totals["errors"] += sample.errors
        totals["retries"] += sample.retries
        totals["dead"] += sample.dead
        busy += sample.busy
        enqueued += sample.enqueued
        workers += max(1, sample.workers)
        busy_seconds += sample.busy_seconds
        jobs.extend(sample.jobs)
        group = groups.setdefault(sample.group, {"id": sample.group, "topics": {}})
        for p in sample.partitions:
            topic = group["topics"].setdefault(p.topic, {"name": p.topic, "partitions": {}})
            topic["partitions"][p.partition] = {
                "id": p.partition,
                "lag": p.lag,
                "lag_stored": p.lag_stored,
                "committed_offset": p.committed_offset,
                "stored_offset": p.stored_offset,
                "hi_offset": p.hi_offset,
                "lo_offset": p.lo_offset,
                "fetch_state": p.fetch_state,
                "poll_state": p.poll_state,
            }
            lag += max(0, p.lag)
            lag_stored += max(0, p.lag_stored)
    # Share of the worker time since start spent in handlers, as Karafka reports it (percent).
    utilization = 0.0
    if workers and lifetime > 0:
        utilization = min(100.0, 100.0 * busy_seconds / (lifetime * workers))
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "type": "consumer",
        "dispatched_at": time.time(),
        "process": process,
        "stats": {
            "busy": busy,
            "enqueued": enqueued,
            "utilization": round(utilization, 2),
            "total": totals,
            "lag": lag,
            "lag_stored": lag_stored,
        },
        "consumer_groups": groups,
        "jobs": jobs,
        "versions": dict(_VERSIONS),
    }
