"""The tracking reporter without a broker: arguments, process ids, samples and validation."""

from __future__ import annotations

import gc
import logging
import os
import socket
import subprocess
import sys
import time
import weakref

import pytest

from ferrokafka import CodecError, codecs
from ferrokafka.tracking import PartitionSample, Reporter, SourceSample
from tests.conftest import wait_until

CONFIG = {"bootstrap.servers": "127.0.0.1:1"}


class FixedSource:
    def __init__(self, sample: SourceSample) -> None:
        self.sample = sample

    def report_sample(self) -> SourceSample:
        return self.sample


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"interval": 0}, ValueError),
        ({"interval": float("inf")}, ValueError),
        ({"interval": "5"}, TypeError),
        ({"reports_topic": ""}, ValueError),
        ({"tags": "web"}, TypeError),
    ],
)
def test_bad_arguments_name_the_problem(kwargs: dict[str, object], error: type[Exception]) -> None:
    (argument,) = kwargs  # the one bad argument, which the error must name
    with pytest.raises(error, match=argument):
        Reporter(CONFIG, **kwargs)  # type: ignore[arg-type]


def test_process_id_is_host_pid_random_and_unique_per_reporter() -> None:
    first, second = Reporter(CONFIG), Reporter(CONFIG)
    host, pid, random = first.process_id.split(":")
    assert host == socket.gethostname()
    assert pid == str(os.getpid())
    assert len(random) == 6
    assert first.process_id != second.process_id


def test_sample_merges_sources_into_a_valid_report() -> None:
    reporter = Reporter(CONFIG, tags=["web"])
    sources = [
        FixedSource(
            SourceSample(
                group="billing",
                partitions=[
                    PartitionSample(
                        "orders",
                        0,
                        lag_stored=3,
                        statistics={"lag": 5, "committed_offset": 10, "partitions_cnt": 2},
                    ),
                    PartitionSample("orders", 1, paused=True),
                ],
                batches=2,
                messages=20,
                errors=1,
                busy=1,
                enqueued=4,
            )
        ),
        FixedSource(
            SourceSample(group="billing", partitions=[PartitionSample("refunds", 0, lag=7)])
        ),
    ]
    reporter._sources += map(weakref.ref, sources)  # held weakly, as track() holds them
    report = reporter.sample()
    assert codecs.consumer_report_violations_of(report) == []
    decoded = codecs.decode_process_report(codecs.encode_process_report(report))
    subscriptions = decoded["consumer_groups"]["billing"]["subscription_groups"]
    assert sorted(subscriptions) == ["billing_0", "billing_1"]
    orders = subscriptions["billing_0"]["topics"]["orders"]
    first, second = orders["partitions"]["0"], orders["partitions"]["1"]
    assert (first["lag"], first["lag_stored"], first["committed_offset"]) == (5, 3, 10)
    # Nothing known of the second: librdkafka's unknowns, as the source reported it paused.
    assert (second["lag"], second["committed_offset"], second["fetch_state"]) == (-1, -1001, "none")
    assert second["poll_state"] == "paused"
    assert orders["partitions_cnt"] == 2
    assert subscriptions["billing_1"]["topics"]["refunds"]["partitions"]["0"]["lag"] == 7
    assert decoded["stats"]["total"]["messages"] == 20
    assert decoded["stats"]["total"]["jobs"] == 2  # one per batch
    assert decoded["stats"]["busy"] == 1
    assert decoded["stats"]["enqueued"] == 4
    assert decoded["process"]["status"] == "initialized"
    assert decoded["process"]["tags"] == ["web"]
    assert decoded["versions"]["karafka"].startswith("ferrokafka ")
    assert decoded["process"]["execution_mode"] == "embedded"


def test_a_sample_refuses_a_figure_it_does_not_know() -> None:
    with pytest.raises(CodecError, match="hi_ofset"):
        PartitionSample("orders", 0, statistics={"lag": 5, "hi_ofset": 9})
    group_state = {
        "state": "up",
        "join_state": "steady",
        "stateage": 1000,
        "rebalance_age": 900,
        "rebalance_cnt": 1,
        "rebalance_reason": "initial assignment",
    }
    SourceSample(group="billing", group_state=group_state)
    with pytest.raises(CodecError, match="colour"):
        SourceSample(group="billing", group_state={**group_state, "colour": "red"})


def test_a_failing_source_is_logged_and_left_out(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def report_sample(self) -> SourceSample:
            raise RuntimeError("sampler bug")

    reporter = Reporter(CONFIG)
    broken = Broken()
    reporter._sources.append(weakref.ref(broken))
    report = reporter.sample()
    assert report["consumer_groups"] == {}
    assert "sampler bug" in caplog.text


def test_invalid_report_raises_before_any_connection() -> None:
    reporter = Reporter(CONFIG)
    nameless = FixedSource(SourceSample(group=""))
    reporter._sources.append(weakref.ref(nameless))
    with pytest.raises(CodecError, match="consumer_groups"):
        reporter.report(force=True)
    assert reporter.stats() == {"reports": 0, "errors": 0, "send_failures": 0, "errors_dropped": 0}
    reporter._sources.clear()
    reporter.close(timeout=0)


def test_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="status must be one of"):
        Reporter(CONFIG).set_status("sleeping")  # type: ignore[arg-type]


def test_unreachable_broker_counts_a_failure_and_keeps_the_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reporter = Reporter(CONFIG, send_timeout=0.5, interval=60.0)
    reporter.report_error(ValueError("kept for later"))
    # the reporting thread tries at once, then keeps the error for its next try
    wait_until(lambda: reporter.stats()["send_failures"] == 1, 10.0, "the error's send failed")
    assert "cannot send 1 error report(s) to karafka_errors" in caplog.text
    assert reporter.report(force=True) is False
    assert "cannot send the process report to karafka_consumers_reports" in caplog.text
    assert reporter.stats()["send_failures"] == 2
    assert reporter.stats()["errors"] == 0
    with reporter._state:
        kept = [codecs.decode_error_report(e) for e in reporter._errors]
    assert [(e["error_message"], e["schema_version"]) for e in kept] == [
        ("kept for later", "1.2.0")
    ]
    reporter.close(timeout=0)


def test_a_failed_send_is_logged_as_text_and_the_reporter_is_freed_with_its_owner(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # caplog keeps every record, as a MemoryHandler would: a record holding the exception would
    # hold its traceback, the reporter's frames, and so the reporter.
    reporter = Reporter(CONFIG, send_timeout=0.2, interval=60.0)
    assert reporter.report(force=True) is False
    [record] = [r for r in caplog.records if r.getMessage().startswith("cannot send the process")]
    assert isinstance(record.args, tuple)
    assert not [arg for arg in record.args if isinstance(arg, BaseException)]
    reporter.close(timeout=0)
    alive = weakref.ref(reporter)
    gc.disable()
    try:
        del reporter
        assert alive() is None, "the reporter outlived its owner (held by a reference cycle)"
    finally:
        gc.enable()


def test_close_keeps_its_bound_and_says_what_it_could_not_send(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reporter = Reporter(CONFIG, errors_topic="audit-errors", exit_timeout=1.0)
    source = FixedSource(SourceSample(group="billing"))  # tracked weakly: kept here
    reporter.track(source)
    reporter.report_error(ValueError("one"))
    reporter.report_error(ValueError("two"))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="ferrokafka.tracking"):
        reporter.close()
    assert time.monotonic() - started < 1.0 + 1.0  # a send to the broker takes up to 10 s
    [warning] = [r.getMessage() for r in caplog.records if "not sent" in r.getMessage()]
    assert "the final report (stopped) to karafka_consumers_reports" in warning, warning
    assert "2 error report(s) to audit-errors" in warning, warning
    assert reporter.stats()["errors_dropped"] == 2
    caplog.clear()
    reporter.close()  # what the first close gave up on is not counted twice
    assert "not sent" not in caplog.text
    assert reporter.stats()["errors_dropped"] == 2


# Prints how many librdkafka threads run before a report, after it, and after close().
_CLOSE_AND_COUNT_THREADS = """
import glob
from ferrokafka.tracking import Reporter

def librdkafka_threads():
    count = 0
    for comm in glob.glob("/proc/self/task/*/comm"):
        try:
            with open(comm) as name:
                count += name.read().startswith("rdk:")
        except FileNotFoundError:  # a thread that ended since the listing (a call's worker)
            pass
    return count

reporter = Reporter({"bootstrap.servers": "127.0.0.1:1"}, send_timeout=0.2, exit_timeout=0.2)
before = librdkafka_threads()
assert reporter.report(force=True) is False
print(before, librdkafka_threads(), end=" ")
reporter.close()
print(librdkafka_threads())
"""


def test_close_closes_the_producer_client() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _CLOSE_AND_COUNT_THREADS], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    before, reporting, closed = map(int, run.stdout.split())
    assert reporting > before
    # librdkafka's threads end with the client: none of them keeps retrying the broker
    assert closed == before


# Reports an error and ends without close(), the broker unreachable.
_REPORT_AND_END_UNREACHABLE = """
import sys, time
from ferrokafka.tracking import Reporter

reporter = Reporter(
    {"bootstrap.servers": "127.0.0.1:1"}, errors_topic="audit-errors", exit_timeout=1.5
)
for n in range(3):
    reporter.report_error(ValueError(f"lost {n}"))
print(time.time(), flush=True)
"""


def test_an_exit_with_the_broker_unreachable_keeps_its_bound_and_says_what_was_not_sent() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _REPORT_AND_END_UNREACHABLE],
        capture_output=True,
        text=True,
        timeout=60,
    )
    exit_took = time.time() - float(run.stdout.split()[-1])
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert exit_took < 1.5 + 1.5, f"exit took {exit_took:.1f} s"
    [warning] = [line for line in run.stderr.splitlines() if "not sent" in line]
    assert "at interpreter exit" in warning, warning
    assert "3 error report(s) to audit-errors" in warning, warning


def test_a_huge_interval_keeps_the_reporting_thread_alive() -> None:
    # Waiting 1e308 s at once overflows the lock's timeout: the thread must wait in parts.
    reporter = Reporter(CONFIG, interval=1e308, send_timeout=0.2)
    source = FixedSource(SourceSample(group="billing"))  # tracked weakly: kept here
    reporter.track(source)
    wait_until(lambda: reporter.stats()["send_failures"] >= 1, 10.0, "the first report tried")
    thread = reporter._thread
    assert thread is not None
    # CPython's Condition keeps one lock per waiting thread: the reporting thread sleeps there
    # until the next report is due (before, it died of OverflowError on the way).
    wait_until(
        lambda: bool(reporter._wake._waiters) or not thread.is_alive(),  # type: ignore[attr-defined]
        10.0,
        "the reporting thread waiting for the next report",
    )
    assert thread.is_alive()
    reporter.close(timeout=0)
