"""The tracking reporter without a broker: arguments, process ids, samples and validation."""

from __future__ import annotations

import os
import socket

import pytest

from ferrokafka import CodecError, codecs
from ferrokafka.tracking import PartitionSample, Reporter, SourceSample

CONFIG = {"bootstrap.servers": "127.0.0.1:1"}


class FixedSource:
    def __init__(self, sample: SourceSample) -> None:
        self.sample = sample

    def report_sample(self) -> SourceSample:
        return self.sample


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"interval": 0}, ValueError, "interval"),
        ({"interval": float("inf")}, ValueError, "interval"),
        ({"interval": "5"}, TypeError, "interval"),
        ({"reports_topic": ""}, ValueError, "reports_topic"),
        ({"tags": "web"}, TypeError, "tags"),
    ],
)
def test_bad_arguments_name_the_problem(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
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
    reporter._sources += [
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


def test_a_failing_source_is_logged_and_left_out(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def report_sample(self) -> SourceSample:
            raise RuntimeError("sampler bug")

    reporter = Reporter(CONFIG)
    reporter._sources.append(Broken())
    report = reporter.sample()
    assert report["consumer_groups"] == {}
    assert "sampler bug" in caplog.text


def test_invalid_report_raises_before_any_connection() -> None:
    reporter = Reporter(CONFIG)
    reporter._sources.append(FixedSource(SourceSample(group="")))
    with pytest.raises(CodecError, match="consumer_groups"):
        reporter.report(force=True)
    assert reporter.stats() == {"reports": 0, "errors": 0, "send_failures": 0, "errors_dropped": 0}


def test_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="status must be one of"):
        Reporter(CONFIG).set_status("sleeping")  # type: ignore[arg-type]


def test_unreachable_broker_counts_a_failure_and_keeps_the_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reporter = Reporter(CONFIG, send_timeout=0.5)
    reporter.report_error(ValueError("kept for later"))
    assert reporter.report(force=True) is False
    assert reporter.stats()["send_failures"] == 1
    assert reporter.stats()["errors"] == 0
    assert "cannot send the process report" in caplog.text
    kept = [codecs.decode_error_report(e) for e in reporter._errors]
    assert [(e["error_message"], e["schema_version"]) for e in kept] == [
        ("kept for later", "1.2.0")
    ]
