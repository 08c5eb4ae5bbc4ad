"""Reference cycles through the native objects that hold Python objects are collected: each
visits what it holds for the garbage collector (``__traverse__``), so a cycle back to it through
a caller's object does not leak. Without a broker."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

from ferrokafka import AsyncProducer, DeliveryReport
from ferrokafka._native import encode_error_report, view_error_report
from tests.tracking_samples import error_report

UNREACHABLE = {"bootstrap.servers": "127.0.0.1:1"}


class Holder:
    """A caller's object in the cycle; its weak reference tells whether the cycle was freed."""

    held: Any = None


def assert_collected(build_cycle: Callable[[Holder], None]) -> None:
    holder = Holder()
    build_cycle(holder)
    alive = weakref.ref(holder)
    del holder
    gc.collect()
    assert alive() is None, "the cycle through the native object was not collected"


def test_a_cycle_through_an_error_reports_details_is_collected() -> None:
    error = {
        **error_report(
            "0f6c1d2e-4b3a-4c5d-8e9f-001122334455",
            occurred_at=1_700_000_000.0,
            process_id="host-1:4242:ab12cd",
        ),
        "details": {},
    }

    def cycle(holder: Holder) -> None:
        view = view_error_report(encode_error_report(error))
        view.details["holder"] = holder
        holder.held = view

    assert_collected(cycle)


def test_a_cycle_through_a_delivery_reports_errors_is_collected() -> None:
    reports: list[DeliveryReport] = []
    with AsyncProducer(
        {**UNREACHABLE, "message.timeout.ms": 200}, max_retries=0, exit_timeout=0.5
    ) as producer:
        producer.produce_many([b"a", b"b"], topic="nowhere", on_delivery=reports.append)
        producer.flush(timeout=10.0)
        producer.take_failed()
    assert [report.failed for report in reports] == [2]

    def cycle(holder: Holder) -> None:
        report = reports.pop()
        report.errors()[0][1].holder = holder  # type: ignore[attr-defined]
        holder.held = report

    assert_collected(cycle)
