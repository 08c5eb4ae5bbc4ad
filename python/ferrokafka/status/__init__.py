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
* a lag history per (process, group, topic, partition) for charts: the last 15 minutes of the
  alive processes;
* per topic, how many records were read and how many were skipped as corrupt or foreign.

Whoever can write to the tracking topics can write anything, so the view trusts no record
(:mod:`ferrokafka.status.hostile`): a time outside 1970 to 9999 (a time in milliseconds) or
more than 5 minutes ahead of the reader's clock skips its record, a record inflates to 8 MiB
at most, every string and list is cut to a bound, a snapshot lists a bounded number of
processes, partitions and lag series, and the text of ``ferrokafka status`` escapes control
characters.

A :class:`StatusReader` feeds a view from Kafka through ferrokafka's own consumer, without a
consumer group: it reads every partition once from the beginning, then tails it, keeping its
position, and adds ``*_states`` topics (and new partitions) as they appear. ``ferrokafka status``
and ``ferrokafka dashboard`` are built on it.

Example:
    >>> from ferrokafka.status import StatusReader, render_text
    >>> with StatusReader({"bootstrap.servers": "127.0.0.1:9092"}, **topics) as reader:
    ...     reader.wait_caught_up(timeout=30.0)
    ...     print(render_text(reader.snapshot()).splitlines()[0])
    True
    Processes: 2 alive, 0 stale, 0 stopped (TTL 30 s); total lag 130
"""

from __future__ import annotations

from ferrokafka.status.reader import StatusReader
from ferrokafka.status.render import render_prometheus, render_text
from ferrokafka.status.view import (
    ErrorView,
    LagSeries,
    PartitionLag,
    ProcessView,
    SchedulerView,
    StatusSnapshot,
    StatusTotals,
    StatusView,
)

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
