"""Process and error reports for dashboards: the tracking reporter (Karafka Web's pattern).

A :class:`Reporter` samples the process (id ``"host:pid:random"``, memory, CPU, threads,
status, versions) and the components tracked by it (per-partition librdkafka statistics,
processed / errored / retried counts, running jobs) and hands the samples to the Rust core,
which builds Karafka Web's consumer report (schema 1.7.0), checks it against Karafka Web's
contracts and compresses it. The report goes, as Karafka Web's own reporter sends it, to
partition 0 of the reports topic (``karafka_consumers_reports``), keyed by process id with header
``zlib: true``: the first at once, then at most every ``interval`` seconds, and at once whenever
the status changes. Each error reported with :meth:`Reporter.report_error` goes to the errors
topic (``karafka_errors``, error schema 1.2.0) at once, from a background thread. At
:meth:`Reporter.close`, at interpreter exit and when a reporter nobody closed is collected, the
final report and the pending errors are sent within ``exit_timeout``; what could not be sent is
logged at WARNING with its count and topic. A Karafka Web UI pointed at
the same cluster lists the process; the README's table (under "Tracking reporter") maps each
field to where ferrokafka fills it from. An invalid report raises
:class:`ferrokafka.CodecError` naming the broken rule, and nothing reaches the topic.

:class:`ferrokafka.Consumer`, :class:`ferrokafka.AsyncConsumer`,
:class:`ferrokafka.scheduling.Scheduler` and :class:`ferrokafka.redelivery.RedeliveryTracker`
take ``reporter=`` and report themselves: status ``running`` while they run, ``stopping`` and a
final ``stopped`` report when the last tracked component stops, each with librdkafka's
statistics of its group consumer (group state, partition offsets). For the two daemons a
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
    >>> with consumer:
    ...     reporter.report(force=True)  # also sent at start, then every interval
    True
    >>> reporter.status  # the final report, sent when the consumer stopped
    'stopped'
"""

from __future__ import annotations

import functools
import logging
import math
import os
import socket
import sys
import threading
import time
import traceback
import uuid
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, get_args

from ferrokafka import _exit
from ferrokafka._config import ConfigValue
from ferrokafka._native import (
    Client,
    JobSample,
    PartitionSample,
    ProcessFacts,
    ReportBuilder,
    SourceSample,
    decode_process_report,
)
from ferrokafka._validation import check_config_mapping, checked_seconds
from ferrokafka.exceptions import CodecError, KafkaTimeoutError

__all__ = [
    "DEFAULT_ERRORS_TOPIC",
    "DEFAULT_REPORTS_TOPIC",
    "REPORT_TTL",
    "JobSample",
    "PartitionSample",
    "ProcessFacts",
    "ProcessStatus",
    "Reporter",
    "SourceSample",
    "TrackedSource",
]

log = logging.getLogger("ferrokafka.tracking")

DEFAULT_REPORTS_TOPIC = "karafka_consumers_reports"
"""Where reporters send process reports unless told otherwise (Karafka Web's topic)."""

DEFAULT_ERRORS_TOPIC = "karafka_errors"
"""Where reporters send error reports unless told otherwise (Karafka Web's topic)."""

REPORT_TTL = 30.0
"""Seconds after its last report that a process counts as stale (Karafka Web uses 30 s)."""

MAX_PENDING_ERRORS = 1000
"""Errors kept for sending while the errors topic cannot be reached; older ones are dropped
(logged and counted in ``Reporter.stats()["errors_dropped"]``)."""

ProcessStatus: TypeAlias = Literal[
    "initializing", "initialized", "running", "quieting", "quiet", "stopping", "stopped"
]


class TrackedSource(Protocol):
    """A component a :class:`Reporter` samples: consumers and ferrokafka's daemons, whose
    engines build their :class:`SourceSample` in Rust from their own figures (a consumer adds
    only its handlers' jobs, errors and time). ``SourceSample``, ``PartitionSample``,
    ``JobSample`` and ``ProcessFacts`` are the Rust report builder's own sample types; a
    component written in Python builds its sample with their constructors."""

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


def _memory_size(machine_total: int) -> int:
    """Host memory in KiB, or the cgroup v2 memory limit when the process runs under one (as
    Karafka Web's container metrics do)."""
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as limit_file:
            limit = limit_file.read().strip()
    except OSError:
        return machine_total
    return machine_total if limit == "max" else int(limit) // 1024


def _process_facts(
    process_id: str, status: ProcessStatus, started_at: float, tags: list[str]
) -> ProcessFacts:
    own = _read_proc_kib("/proc/self/status", ("VmRSS", "Threads"))
    machine = _read_proc_kib("/proc/meminfo", ("MemTotal", "MemAvailable"))
    total = machine.get("MemTotal", 0)
    try:
        one, five, fifteen = (round(x, 2) for x in os.getloadavg())
        load: tuple[float, float, float] | None = (one, five, fifteen)
    except OSError:
        load = None
    return ProcessFacts(
        id=process_id,
        status=status,
        started_at=started_at,
        rss_kib=own.get("VmRSS", 0),
        host_used_kib=max(0, total - machine.get("MemAvailable", total)),
        memory_limit_kib=_memory_size(total),
        cpus=os.cpu_count() or 1,
        # OS threads, so the Rust engine threads count too.
        threads=own.get("Threads", threading.active_count()),
        load_average=load,
        tags=tags,
    )


def _new_process_id() -> str:
    # os.urandom is what secrets.token_hex reads; the secrets module itself loads hmac and
    # OpenSSL's hashlib, a quarter of `import ferrokafka` for six hex digits.
    return f"{socket.gethostname() or 'localhost'}:{os.getpid()}:{os.urandom(3).hex()}"


_LONGEST_WAIT = 3600.0
"""Longest the reporting thread sleeps at once; it then looks again at what is due."""


@dataclass
class _Unsent:
    """What one round of sending left unsent: reports (by status), error reports, and why."""

    statuses: list[ProcessStatus] = field(default_factory=list)
    errors: int = 0
    cause: str = ""

    def __bool__(self) -> bool:
        return bool(self.statuses or self.errors)


class Reporter(_exit.NotCopyable):
    """Sends process reports and error reports of this process for ``ferrokafka status`` and
    the dashboard (see the module docs for the schema and the topics).

    Args:
        config: librdkafka configuration of the producer that sends the reports (at least
            ``bootstrap.servers``; a consumer's config can be passed as is, its consumer-only
            keys are dropped).
        reports_topic: where process reports go [``karafka_consumers_reports``].
        errors_topic: where error reports go [``karafka_errors``].
        interval: least seconds between two unforced reports [5].
        tags: free-form labels shown with the process.
        send_timeout: seconds to wait for the broker to acknowledge one report [10].
        exit_timeout: most seconds :meth:`close` (and the interpreter's exit, or the collection
            of a reporter nobody closed) waits to send the final report and the pending errors
            [5].

    Thread-safe: components call it from their own threads. A background thread sends: a
    report at once on every status change, one every ``interval`` while components are
    tracked, and each error as soon as it is reported; it ends (closing its producer client)
    when nothing is left to send. Sampling runs outside the lock that serialises sending, so a
    slow sample never blocks a component reporting an error. A report that cannot be sent is
    logged and counted (``send_failures`` in :meth:`stats`); the next one carries the newer
    state. Errors not yet sent are kept (at most ``MAX_PENDING_ERRORS``) and tried again an
    ``interval`` later. What :meth:`close` or the exit could not send within ``exit_timeout``
    is logged at WARNING with its count and topic, and dropped.

    Example:
        >>> from ferrokafka.tracking import Reporter
        >>> reporter = Reporter({"bootstrap.servers": "127.0.0.1:9092"}, interval=5.0)
        >>> reporter.process_id.count(":")
        2
        >>> reporter.report()
        True
        >>> reporter.close()
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
        exit_timeout: float = 5.0,
    ) -> None:
        check_config_mapping(config)
        for name, topic in (("reports_topic", reports_topic), ("errors_topic", errors_topic)):
            if not isinstance(topic, str) or not topic:
                raise ValueError(f"{name} must be a non-empty topic name, got {topic!r}")
        if isinstance(tags, str):
            raise TypeError("tags must be a list of str, not a single str")
        self.reports_topic = reports_topic
        self.errors_topic = errors_topic
        self.interval = checked_seconds("interval", interval, positive=True)
        self.send_timeout = checked_seconds("send_timeout", send_timeout, positive=True)
        self.exit_timeout = checked_seconds("exit_timeout", exit_timeout, positive=False)
        self._config = {k: v for k, v in config.items() if k not in _CONSUMER_ONLY_KEYS}
        # librdkafka gives a report up when the reporter does, so one counted as not sent is
        # not delivered later behind a newer one.
        self._config.setdefault("message.timeout.ms", max(1000, int(self.send_timeout * 1000)))
        self.tags = [str(tag) for tag in tags]
        self._pid = os.getpid()
        self._process_id = _new_process_id()
        self._started_at = time.time()
        self._status: ProcessStatus = "initialized"
        # Held weakly: a component its owner dropped without stopping is collected (and closed)
        # as it would be untracked, not kept alive (its threads, sockets and group membership)
        # by the reporter for the life of the process; it leaves the reports then.
        self._sources: list[weakref.ref[TrackedSource]] = []
        # Status changes not reported yet, oldest first: each gets a report of its own.
        self._owed: list[ProcessStatus] = []
        # The samples an owed status's report carries instead of those of the moment it is sent.
        self._sampled_for: dict[ProcessStatus, tuple[ProcessFacts, list[SourceSample]]] = {}
        self._errors: list[bytes] = []
        # What the reporting thread is sending now: statuses and how many errors.
        self._owed_sending: list[ProcessStatus] = []
        self._errors_sending = 0
        # Bumped when close() gives up on what is being sent: a send failing after that was
        # already counted as lost and is not tried again.
        self._give_up_count = 0
        self._closed = False
        self._builder = ReportBuilder()
        self._counters = {"reports": 0, "errors": 0, "send_failures": 0, "errors_dropped": 0}
        # Never report twice within `interval`, except when forced; the first report goes at once.
        self._reported_at = -math.inf
        # After a failed send, owed reports and errors wait until then.
        self._retry_at = -math.inf
        self._client: Client | None = None
        self._state = threading.Lock()
        self._send = threading.Lock()
        self._wake = threading.Condition(self._state)
        self._thread: threading.Thread | None = None
        _exit.register(self, after_the_rest=True)  # it sends the others' final reports

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
        """Change the process status; when it changed, the reporting thread reports it at once."""
        if status not in _STATUSES:
            raise ValueError(f"status must be one of {sorted(_STATUSES)}, got {status!r}")
        with self._state:
            self._refresh_after_fork()
            if status != self._status:
                self._status = status
                self._owe_report()

    def _refresh_after_fork(self) -> None:
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._process_id = _new_process_id()
            self._client = None
            self._thread = None
            _exit.register(self, after_the_rest=True)  # the child's exit sends its reports

    # -- tracked components ----------------------------------------------------------------

    def statistics_config(self, config: Mapping[str, ConfigValue]) -> dict[str, ConfigValue]:
        """A tracked component's ``config`` with librdkafka's statistics (its group's state and
        its partitions' offsets in the reports) as often as this reporter reports, at most
        every 5 s and at least 0.1 s apart; unchanged when it sets ``statistics.interval.ms``."""
        if "statistics.interval.ms" in config:
            return dict(config)
        interval_ms = int(min(self.interval, 5.0) * 1000)
        return {**config, "statistics.interval.ms": max(100, interval_ms)}

    def track(self, source: TrackedSource) -> None:
        """Include ``source`` in reports and report ``running`` at once (on the reporting
        thread). Components taking ``reporter=`` call it on start. The reporter holds ``source``
        weakly: it does not keep a component its owner dropped alive, and one collected leaves
        the reports."""
        with self._state:
            self._refresh_after_fork()
            if source not in self._tracked():
                self._sources.append(weakref.ref(source))
            self._closed = False
            self._status = "running"
            self._owe_report()

    def _tracked(self) -> list[TrackedSource]:
        """The tracked components still alive (``_state`` held); the collected ones are
        forgotten."""
        alive = [source for ref in self._sources if (source := ref()) is not None]
        if len(alive) < len(self._sources):
            self._sources = [ref for ref in self._sources if ref() is not None]
        return alive

    def stopping(self, source: TrackedSource) -> None:
        """A tracked component began stopping: when it is the last one, the process is
        stopping, which is reported at once."""
        with self._state:
            last = self._tracked() == [source]
        if not last:
            return
        # Sampled here, while the component still holds what it reports (a consumer its
        # partitions and commits): the reporting thread may get to send this report only after
        # the component let them go.
        sampled = self._samples()
        with self._state:
            self._sampled_for["stopping"] = sampled
        self.set_status("stopping")

    def untrack(self, source: TrackedSource, timeout: float | None = None) -> None:
        """Stop including ``source``; after the last one, :meth:`close` the reporter within
        ``timeout`` seconds [``exit_timeout``]."""
        with self._state:
            tracked = self._tracked()
            last = tracked == [source]
            if not last and source in tracked:
                self._sources.remove(weakref.ref(source))
        if last:
            self.close(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Send the final ``stopped`` report (with the last state of the tracked components) and
        the pending errors, waiting at most ``timeout`` seconds [``exit_timeout``]; log at
        WARNING what could not be sent; stop the reporting thread and close the producer
        client. Components tracked still are dropped from later reports; errors reported later
        are still sent. Closing again sends no second final report."""
        bound = self.exit_timeout if timeout is None else timeout
        self._finish("closing", checked_seconds("timeout", bound, positive=False))

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the end of a reporter nobody closed -----------------------------------------------

    def begin_exit(self) -> None:
        """Part of the interpreter-exit protocol (``ferrokafka._exit``): the final report is
        sent by :meth:`finish_exit` itself, so there is nothing to start."""

    def finish_exit(self, timeout: float) -> None:
        """Part of the interpreter-exit protocol: within ``timeout``, send the final report
        (when the reporter reported and was not closed) and the pending errors."""
        self._finish("at interpreter exit", timeout)

    def __del__(self) -> None:
        # Missing: __init__ failed. A running reporting thread keeps its reporter alive, so
        # a collected reporter sends from here or not at all.
        if hasattr(self, "_send") and not sys.is_finalizing():
            finish = functools.partial(self._finish, "collected without close()", self.exit_timeout)
            _exit.finish_collected(finish, "ferrokafka-reporter-close")

    def _finish(self, when: str, timeout: float) -> None:
        """Within ``timeout`` seconds, sends the final report (unless sent already; only when
        something was ever reported or tracked) and the pending errors; stops the reporting
        thread, closes the client and logs at WARNING what could not be sent, which is dropped."""
        deadline = time.monotonic() + timeout
        with self._state:
            self._refresh_after_fork()
            if not self._closed and (self._owed or self._reported_at > -math.inf):
                self._status = "stopped"
                self._owed.append("stopped")
            self._closed = True
            self._thread = None  # the reporting thread ends after what it is sending now
            self._wake.notify_all()
            if not (self._owed or self._owed_sending or self._errors or self._errors_sending):
                return
        process, sources = self._samples()  # the tracked components' last state
        with self._state:
            self._sources.clear()
        if self._send.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            try:
                try:
                    unsent = self._send_pending(process, sources, deadline=deadline, keep=False)
                except CodecError as invalid:  # a component's sample broke a contract
                    log.error(
                        "Reporter %s: the final report is invalid, not sent: %s", when, invalid
                    )
                    unsent = self._send_pending(process, sources, deadline=deadline, keep=False)
            finally:
                client, self._client = self._client, None
                self._send.release()
            del client  # librdkafka purges what it still holds and ends its threads
        else:
            with self._state:  # the reporting thread still waits for the broker
                unsent = _Unsent(
                    self._owed_sending + self._owed,
                    len(self._errors) + self._errors_sending,
                    "an earlier send still waits for the broker",
                )
                # Counted as lost here, not again by a later close or the exit.
                self._owed, self._errors = [], []
                self._owed_sending, self._errors_sending = [], 0
                self._give_up_count += 1
        if not unsent:
            return
        with self._state:
            self._counters["errors_dropped"] += unsent.errors
        lost = []
        if unsent.statuses:
            lost.append(f"the final report ({unsent.statuses[-1]}) to {self.reports_topic}")
        if unsent.errors:
            lost.append(f"{unsent.errors} error report(s) to {self.errors_topic}")
        log.warning(
            "Reporter %s: not sent within exit_timeout=%g s, and dropped: %s (%s)",
            when,
            timeout,
            ", ".join(lost),
            unsent.cause,
        )

    # -- errors ----------------------------------------------------------------------------

    def report_error(
        self,
        error: BaseException,
        *,
        kind: str = "consumer.consume.error",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Queue an error report (uuid, class, message cut to 10,000 characters, backtrace,
        details, time); the reporting thread sends it at once (in the background, also after
        :meth:`close`). Raises :class:`~ferrokafka.CodecError` when ``details`` is not JSON.

        Example:
            >>> reporter = Reporter({"bootstrap.servers": "127.0.0.1:9092"})
            >>> reporter.report_error(ValueError("bad order"), details={"offset": 7})
        """
        report = ReportBuilder.error_report(
            {
                "id": str(uuid.uuid4()),
                "kind": kind,
                "error_class": type(error).__qualname__,
                "error_message": str(error),
                "backtrace": "".join(traceback.format_exception(error)),
                "details": dict(details or {}),
                "occurred_at": time.time(),
                "process_id": self.process_id,
                "tags": self.tags,
            }
        )
        with self._state:
            self._errors.append(report)
            overflow = len(self._errors) - MAX_PENDING_ERRORS
            if overflow > 0:
                del self._errors[:overflow]
                self._counters["errors_dropped"] += overflow
                log.error(
                    "dropped %d unsent error reports (limit %d)", overflow, MAX_PENDING_ERRORS
                )
            self._wake_sender()

    # -- reporting -------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counts: ``reports`` and ``errors`` sent, ``send_failures``, ``errors_dropped``."""
        with self._state:
            return dict(self._counters)

    def _samples(self) -> tuple[ProcessFacts, list[SourceSample]]:
        with self._state:
            self._refresh_after_fork()
            sources = self._tracked()
            process_id, status = self._process_id, self._status
        samples: list[SourceSample] = []
        for source in sources:
            try:
                sample = source.report_sample()
                if not isinstance(sample, SourceSample):
                    raise TypeError(
                        "report_sample() must return a ferrokafka.tracking.SourceSample, got "
                        f"{type(sample).__name__}"
                    )
                samples.append(sample)
            except Exception:
                log.exception("sampling %r for the process report failed", source)
        facts = _process_facts(process_id, status, self._started_at, self.tags)
        return facts, samples

    def sample(self) -> dict[str, Any]:
        """The consumer report as it would be sent now, counting since each source started
        (decoded; not sent). Raises :class:`~ferrokafka.CodecError` when it is invalid."""
        process, sources = self._samples()
        blob = ReportBuilder().consumer_report(process, sources, time.time())
        return decode_process_report(blob)

    def report(self, force: bool = False) -> bool:
        """Send a report now if ``interval`` passed since the last one (or ``force``), with the
        errors queued since. True when it and the errors were sent. Raises
        :class:`~ferrokafka.CodecError` when the report is invalid (nothing is sent)."""
        if not force and not self._due():
            return False
        process, sources = self._samples()
        with self._send:
            if not force and not self._due():
                return False
            with self._state:
                if not self._owed:
                    self._owed.append(self._status)
            return not self._send_pending(process, sources, deadline=math.inf, keep=True)

    def _due(self) -> bool:
        return time.monotonic() - self._reported_at >= self.interval

    def _owe_report(self) -> None:
        """A report of the current status is owed (called with ``_state`` held)."""
        if self._owed[-1:] != [self._status]:
            self._owed.append(self._status)
        self._wake_sender()

    def _send_pending(
        self,
        process: ProcessFacts,
        sources: list[SourceSample],
        *,
        deadline: float,
        keep: bool,
    ) -> _Unsent:
        """Sends a report for each owed status, then the queued errors, each waiting for the
        broker at most ``send_timeout`` and never past ``deadline``; stops at the first failure.
        Errors not sent go back in front of newer ones when ``keep`` (or when nothing was tried:
        an invalid report raises :class:`~ferrokafka.CodecError` before anything is sent).
        Called with ``_send`` held; returns what was not sent."""
        with self._state:
            statuses, self._owed = self._owed, []
            errors, self._errors = self._errors, []
            self._owed_sending, self._errors_sending = statuses, len(errors)
            give_up_count = self._give_up_count
            sampled = [self._sampled_for.pop(status, (process, sources)) for status in statuses]
        sent_reports = sent_errors = 0
        failure: Exception | None = None
        try:
            if statuses:
                self._reported_at = time.monotonic()
            reports = [
                self._builder.consumer_report(facts.with_status(status), samples, time.time())
                for status, (facts, samples) in zip(statuses, sampled, strict=True)
            ]
            try:
                for blob in reports:  # partition 0: the only one Karafka Web's processing reads
                    self._produce(self.reports_topic, blob, process.id, 0, deadline)
                    sent_reports += 1
                for blob in errors:
                    self._produce(self.errors_topic, blob, process.id, None, deadline)
                    sent_errors += 1
            except Exception as error:
                failure = error
                # The text, not the exception: a handler that keeps records (pytest's, a
                # MemoryHandler) would keep its traceback, and through it this reporter, alive.
                reason = str(error)
                if sent_reports < len(reports):
                    log.warning(
                        "cannot send the process report to %s: %s", self.reports_topic, reason
                    )
                else:
                    log.warning(
                        "cannot send %d error report(s) to %s: %s",
                        len(errors) - sent_errors,
                        self.errors_topic,
                        reason,
                    )
        finally:
            with self._state:
                self._owed_sending, self._errors_sending = [], 0
                self._counters["reports"] += sent_reports
                self._counters["errors"] += sent_errors
                if failure is not None:
                    self._counters["send_failures"] += 1
                    self._retry_at = time.monotonic() + self.interval
                if (keep or failure is None) and give_up_count == self._give_up_count:
                    self._errors[:0] = errors[sent_errors:]
        unsent = _Unsent(statuses[sent_reports:], len(errors) - sent_errors, str(failure or ""))
        # The failure's traceback holds this frame, which holds the failure: without this the
        # cycle would keep the reporter alive until the next garbage collection.
        del failure
        return unsent

    def _produce(
        self, topic: str, blob: bytes, key: str, partition: int | None, deadline: float
    ) -> None:
        timeout = min(self.send_timeout, deadline - time.monotonic())
        if timeout <= 0:
            raise KafkaTimeoutError(f"no time left to send to {topic}")
        if self._client is None:
            self._client = Client(self._config)
        self._client.produce(
            topic,
            blob,
            key=key,
            partition=partition,
            headers=[("zlib", b"true")],
            timeout=timeout,
        )

    # -- the reporting thread --------------------------------------------------------------

    def _wake_sender(self) -> None:
        """Start the reporting thread if it is not running and wake it (``_state`` held)."""
        self._wake.notify_all()
        if self._thread is not None and self._thread.is_alive():
            return
        thread = threading.Thread(
            target=self._send_in_background, name="ferrokafka-reporter", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # at interpreter shutdown (Python 3.12+): the exit hook sends
            return
        self._thread = thread

    def _next_send_in(self) -> float | None:
        """Seconds until the reporting thread has something to send; ``None``: nothing will be
        due unless something is reported or tracked (``_state`` held)."""
        moments = []
        if self._owed or self._errors:
            moments.append(self._retry_at)
        if self._tracked():
            moments.append(self._reported_at + self.interval)
        return min(moments) - time.monotonic() if moments else None

    def _send_in_background(self) -> None:
        me = threading.current_thread()
        while True:
            with self._state:
                wait = self._next_send_in()
                while self._thread is me and wait is not None and wait > 0:
                    # In parts: a lock's timeout overflows long before `interval` may (1e308).
                    self._wake.wait(min(wait, _LONGEST_WAIT))
                    wait = self._next_send_in()
                if self._thread is not me:
                    break
                if wait is None:
                    self._thread = None
                    break
            process, sources = self._samples()
            try:
                with self._send:
                    with self._state:
                        if self._tracked() and not self._owed and self._due():
                            self._owed.append(self._status)
                    self._send_pending(process, sources, deadline=math.inf, keep=True)
            except Exception:
                log.exception("process report failed")
        self._close_client_unless_sending()

    def _close_client_unless_sending(self) -> None:
        """The reporting thread ended: close the producer client unless another thread sends."""
        with self._send, self._state:
            if self._thread is not None:
                return
            client, self._client = self._client, None
        del client


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
