"""Renderings of a status snapshot: the text tables of ``ferrokafka status`` and Prometheus'
text exposition format. The text escapes every control character of what the records said
(:func:`~ferrokafka.status.hostile.printable`): it goes to a terminal."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Sequence

from ferrokafka.status.hostile import printable
from ferrokafka.status.view import PartitionLag, StatusSnapshot

__all__ = ["render_prometheus", "render_text"]


def _when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S"
    )


def _ago(age: float) -> str:
    return f"{age:.0f} s ago" if age >= 0 else f"in {-age:.0f} s (clock ahead)"


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    cells = [  # escaped before measuring, so that the columns line up
        [printable(str(c)) for c in headers],
        *[[printable(str(c)) for c in row] for row in rows],
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


def render_text(snapshot: StatusSnapshot, max_errors: int = 10) -> str:
    """The snapshot as the tables ``ferrokafka status`` prints: processes, their partitions,
    recent errors (at most ``max_errors``, newest first) and scheduler states.

    Example:
        >>> from ferrokafka.status import StatusView
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
                "SCHEMA",
            ],
            [
                [
                    p.id,
                    p.health,
                    p.status,
                    _ago(p.age),
                    f"{p.memory_usage / 1024:.1f}",
                    p.threads,
                    f"{p.cpu_usage[0]:.2f}" if p.cpu_usage else "-",
                    p.busy,
                    p.lag,
                    p.totals.get("messages", 0),
                    p.totals.get("errors", 0),
                    f"{p.schema_version} (newer: partly read)"
                    if p.newer_schema
                    else p.schema_version,
                ]
                for p in snapshot.processes
            ],
        )
    partitions = [(p, lag) for p in snapshot.processes for lag in p.partitions]
    more = snapshot.omitted.get("partitions", 0)
    lines += ["", f"Partitions: {len(partitions)}" + (f" ({more} more not listed)" if more else "")]
    if partitions:
        lines += _table(
            [
                "PROCESS",
                "GROUP",
                "TOPIC",
                "PARTITION",
                "LAG",
                "LAG COMMITTED",
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
                    lag.lag_hybrid,
                    lag.lag,
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
                    _ago(s.age),
                    " ".join(f"{day}={count}" for day, count in s.daily.items()) or "-",
                ]
                for s in snapshot.schedulers
            ],
        )
    skipped = ", ".join(f"{topic}={count}" for topic, count in snapshot.skipped.items())
    lines += ["", f"Skipped records: {skipped or 'none'}"]
    if snapshot.omitted.get("processes"):
        lines.append(f"Processes dropped for newer ones: {snapshot.omitted['processes']}")
    if not snapshot.caught_up:
        lines.append("(still reading: not every partition was read to its end)")
    return "\n".join(printable(line) for line in lines)


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
        >>> from ferrokafka.status import StatusView
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

    def partition_lag_metric(
        name: str, help_text: str, lag_of: Callable[[PartitionLag], int]
    ) -> None:
        # Prometheus takes each series once. One report may list a partition twice under the
        # same labels: in two subscription groups of its consumer group (not a label), or as two
        # topic names longer than a Kafka topic can be, cut to the same text. The series shows
        # the largest of their lags, the one to be alerted on.
        lags: dict[str, int] = {}
        for p in processes:
            for lag in p.partitions:
                labels = _labels(
                    process=p.id, group=lag.group, topic=lag.topic, partition=lag.partition
                )
                lags[labels] = max(lags.get(labels, lag_of(lag)), lag_of(lag))
        metric(
            name,
            "gauge",
            help_text + " The largest, where a report lists a partition twice.",
            [(labels, float(value)) for labels, value in lags.items()],
        )

    partition_lag_metric(
        "ferrokafka_partition_lag",
        "Lag to the committed offset, per consumed partition.",
        lambda lag: lag.lag,
    )
    partition_lag_metric(
        "ferrokafka_partition_lag_hybrid",
        "Lag as Karafka Web shows it and as the process lag sums it, per consumed partition: to "
        "the stored offset where known, else to the committed offset.",
        lambda lag: lag.lag_hybrid,
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
    schedulers = [(_labels(topic=s.topic, partition=s.partition), s) for s in snapshot.schedulers]
    metric(
        "ferrokafka_scheduler_dispatched_total",
        "counter",
        "Schedules dispatched since the scheduler started.",
        [(labels, float(s.dispatched)) for labels, s in schedulers],
    )
    metric(
        "ferrokafka_scheduler_failed_total",
        "counter",
        "Schedules whose target the broker refused for good since the scheduler started.",
        [(labels, float(s.failed)) for labels, s in schedulers],
    )
    metric(
        "ferrokafka_status_skipped_records_total",
        "counter",
        "Tracking records the reader skipped as corrupt or foreign.",
        [(_labels(topic=topic), float(count)) for topic, count in snapshot.skipped.items()],
    )
    return "\n".join(out) + "\n"
