"""Process and error reports for dashboards: the tracking reporter (Karafka Web's pattern).

A :class:`Reporter` samples the process (id ``"host:pid:random"``, memory, CPU, threads,
status) and the consumers attached to it (per-partition lag and offsets, processed / errored /
retried counts, running jobs) and sends a zlib-compressed JSON report keyed by process id to
the reports topic at most every ``interval`` seconds, at once on start and on status changes.
Errors go to the errors topic. The schema is Karafka Web's consumer report, version 1.0.0,
validated by the Rust codec before anything is sent (see ``ferrokafka.codecs``).
"""

from __future__ import annotations

DEFAULT_REPORTS_TOPIC = "ferrokafka_consumers_reports"
"""Where reporters send process reports unless told otherwise."""

DEFAULT_ERRORS_TOPIC = "ferrokafka_errors"
"""Where reporters send error reports unless told otherwise."""

REPORT_TTL = 30.0
"""Seconds after its last report that a process counts as stale (Karafka Web uses 30 s)."""
