"""Valid tracking documents for the status reader's tests, and a helper that sends them like a
reporter does (zlib JSON from the Rust codecs, header ``zlib`` = "true", key = process id)."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ferrokafka import Client, codecs
from tests import reports

ZLIB_HEADER = [("zlib", b"true")]

FIXTURES = Path(__file__).parent / "fixtures" / "karafka_web"


def karafka_fixture(name: str) -> dict[str, Any]:
    """A Karafka Web document of tests/fixtures/karafka_web (written from Karafka Web's
    contracts and sampler; the Rust core's tests read the same files)."""
    document: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return document


def process_report(
    process_id: str,
    *,
    dispatched_at: float,
    lags: Mapping[int, int] | None = None,
    status: str = "running",
    group: str = "billing",
    topic: str = "orders",
    messages: int = 50,
) -> dict[str, Any]:
    """A Karafka Web consumer report (schema 1.7.0); ``lags`` maps partition -> lag (default
    {0: 3})."""
    lags = {0: 3} if lags is None else lags
    report = reports.process_report(
        process_id,
        {(group, topic, partition): lag for partition, lag in lags.items()},
        dispatched_at,
        status=status,
        tags=["test"],
    )
    report["process"].update(
        started_at=dispatched_at - 60,
        memory_usage=120_000,
        memory_total_usage=8_000_000,
        memory_size=16_000_000,
        threads=9,
        cpu_usage=[0.5, 0.4, 0.3],
    )
    report["stats"]["total"]["messages"] = messages
    return report


def error_report(
    error_id: str, *, occurred_at: float, process_id: str, message: str = "boom"
) -> dict[str, Any]:
    """An error report as a reporter sends it to the errors topic."""
    return {
        "schema_version": "1.2.0",
        "id": error_id,
        "type": "consumer.consume.error",
        "error_class": "ValueError",
        "error_message": message,
        "backtrace": "Traceback (most recent call last): ...",
        "details": {"topic": "orders", "partition": 0},
        "occurred_at": float(occurred_at),
        "process": {"id": process_id, "tags": []},
    }


def state_report(
    *, dispatched_at: float, state: str = "loaded", daily: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """A scheduler state report as the scheduler daemon sends it to ``<topic>_states``."""
    return {
        "schema_version": "1.0.0",
        "dispatched_at": dispatched_at,
        "state": state,
        "offsets": {"low": 0, "high": 41},
        "daily": dict(daily if daily is not None else {"2030-01-01": 3, "2030-01-02": 4}),
        "started_at": int(dispatched_at) - 60,
        "reloads": 0,
        "skipped_records": 0,
        "dispatched": 7,
    }


def packed(document: Mapping[str, Any]) -> bytes:
    """``document`` as zlib JSON, unchecked: what a hostile or buggy reporter may write."""
    return zlib.compress(json.dumps(document).encode())


def produce_unchecked(bootstrap: str, topic: str, documents: Iterable[Mapping[str, Any]]) -> None:
    """Writes ``documents``, each ``packed``, to partition 0 of ``topic`` with confluent-kafka (an
    independent client, which checks nothing of them), waiting for every delivery."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 2_000_000})
    failures: list[str] = []
    for document in documents:
        producer.produce(
            topic,
            packed(document),
            partition=0,
            headers={"zlib": b"true"},
            on_delivery=lambda err, _msg: failures.append(str(err)) if err else None,
        )
    assert producer.flush(30.0) == 0, "not every record was delivered in 30 s"
    assert not failures, failures


Encoder = Callable[[Mapping[str, Any]], bytes]


def send(
    client: Client, topic: str, document: Mapping[str, Any], encode: Encoder, key: str
) -> None:
    """Send one document the way the reporter does."""
    client.produce(topic, encode(document), key=key, headers=ZLIB_HEADER)


def send_process_report(client: Client, topic: str, report: Mapping[str, Any]) -> None:
    """Send a process report keyed by its process id."""
    send(client, topic, report, codecs.encode_process_report, report["process"]["id"])


def send_error_report(client: Client, topic: str, report: Mapping[str, Any]) -> None:
    """Send an error report keyed by its process id."""
    send(client, topic, report, codecs.encode_error_report, report["process"]["id"])


def send_state_report(
    client: Client, topic: str, report: Mapping[str, Any], partition: int
) -> None:
    """Send a state report to a states topic partition, keyed ``<state>_state``."""
    client.produce(
        topic,
        codecs.encode_state_report(report),
        key=f"{report['state']}_state",
        partition=partition,
        headers=ZLIB_HEADER,
    )


def status_json(bootstrap: str, reports_topic: str, errors_topic: str) -> dict[str, Any]:
    """What ``ferrokafka status --json`` shows of a reports and an errors topic."""
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "ferrokafka",
            "status",
            "--json",
            "--bootstrap-servers",
            bootstrap,
            "--reports-topic",
            reports_topic,
            "--errors-topic",
            errors_topic,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=30.0,
    )
    document: dict[str, Any] = json.loads(shown.stdout)
    return document
