"""Karafka Web's wire format both ways against the real broker, observed and produced with
confluent-kafka (an independent client): what a ferrokafka consumer with a Reporter writes
passes every rule of Karafka Web's contracts, on partition 0, keyed by process id, with header
``zlib: true``; and ``ferrokafka status`` shows reports Karafka Web writes (schemas 1.7.0, 1.6.0,
1.4.1 and 1.2.1: several consumer and subscription groups, several partitions, with their lag)
and its error reports."""

from __future__ import annotations

import json
import time
import zlib
from typing import Any

import pytest

from ferrokafka import AsyncProducer, Batch, Consumer, codecs
from ferrokafka.tracking import Reporter
from tests.conftest import TopicFactory, wait_until
from tests.tracking_samples import karafka_fixture, status_json

pytestmark = pytest.mark.kafka

WAIT = 30.0


def read_all(bootstrap: str, topic: str, partitions: int, until: Any) -> list[Any]:
    """Every record of ``topic`` read with confluent-kafka from the beginning, polling until
    ``until(records)`` holds."""
    from confluent_kafka import Consumer as ConfluentConsumer
    from confluent_kafka import TopicPartition as ConfluentPartition

    observer = ConfluentConsumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    observer.assign([ConfluentPartition(topic, p, 0) for p in range(partitions)])
    records: list[Any] = []
    try:
        deadline = time.monotonic() + WAIT
        while not until(records):
            assert time.monotonic() < deadline, f"timed out reading {topic}: {len(records)}"
            message = observer.poll(0.2)
            if message is not None and message.error() is None:
                records.append(message)
        return records
    finally:
        observer.close()


def decoded(message: Any) -> dict[str, Any]:
    """A record's document as Karafka Web reads it: zlib, then JSON (no ferrokafka code)."""
    assert message.headers() == [("zlib", b"true")]
    document: dict[str, Any] = json.loads(zlib.decompress(message.value()))
    return document


def test_a_reporting_consumer_writes_what_karafka_web_reads(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=2)
    # Two partitions each: Karafka Web reads reports from partition 0 only.
    reports_topic, errors_topic = topic_factory(partitions=2), topic_factory(partitions=2)
    with AsyncProducer({"bootstrap.servers": kafka_bootstrap}) as producer:
        producer.produce_many(
            [{"value": f"r{i}", "partition": i % 2} for i in range(40)], topic=topic
        )
        producer.flush()
    handled: list[int] = []

    def handle(batch: Batch) -> None:
        handled.extend(m.offset() for m in batch)
        if any(m.value() == b"r7" for m in batch):
            raise ValueError("bad record r7")

    reporter = Reporter(
        {"bootstrap.servers": kafka_bootstrap},
        reports_topic=reports_topic,
        errors_topic=errors_topic,
        interval=0.2,
        tags=["karafka-web-test"],
    )
    group = f"web-{topic}"
    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group, "auto.offset.reset": "earliest"},
        [topic],
        handle,
        commit_interval=0.1,
        reporter=reporter,
    )
    with consumer:
        wait_until(lambda: len(handled) >= 40, WAIT, "every record handled")

        def both_partitions(records: list[Any]) -> bool:
            """A report with both partitions and the measured transfer rates."""
            return any(
                len(_topics(document, group).get(topic, {}).get("partitions", {})) == 2
                and "bytes_received" in document["process"]
                for document in map(decoded, records)
            )

        reports = read_all(kafka_bootstrap, reports_topic, 2, both_partitions)
    reporter.close()
    assert {m.partition() for m in reports} == {0}
    assert {m.key() for m in reports} == {reporter.process_id.encode()}
    for message in reports:
        document = decoded(message)
        assert codecs.consumer_report_violations_of(document) == []
        assert document["schema_version"] == "1.7.0"
    full = next(decoded(m) for m in reports if both_partitions([m]))
    subscription = next(iter(full["consumer_groups"][group]["subscription_groups"].values()))
    assert subscription["state"]["state"] == "up"  # librdkafka's group state
    assert subscription["topics"][topic]["partitions_cnt"] == 2
    assert full["process"]["bytes_received"] >= 0  # measured between two statistics
    errors = read_all(kafka_bootstrap, errors_topic, 2, lambda rs: len(rs) >= 1)
    error = decoded(errors[0])
    assert errors[0].key() == reporter.process_id.encode()
    assert codecs.error_report_violations_of(error) == []
    assert (error["schema_version"], error["error_message"]) == ("1.2.0", "bad record r7")


def _topics(report: dict[str, Any], group: str) -> dict[str, Any]:
    subscriptions = report["consumer_groups"].get(group, {}).get("subscription_groups", {})
    return {name: t for s in subscriptions.values() for name, t in s["topics"].items()}


def test_status_shows_karafka_processes_and_errors(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    from confluent_kafka import Producer as ConfluentProducer

    reports_topic, errors_topic = topic_factory(partitions=1), topic_factory(partitions=1)
    now = time.time()
    records = []
    versions = ["1.2.1", "1.4.1", "1.6.0", "1.7.0"]
    for n, version in enumerate(versions):
        report = karafka_fixture(f"consumer_report_{version}")
        report["dispatched_at"] = now - n
        process_id = f"ruby-{n}:10{n}:abcdef012345"
        report["process"]["name" if version < "1.3" else "id"] = process_id
        records.append((reports_topic, report, process_id))
    error = karafka_fixture("error_report_1.2.0")
    error.update(occurred_at=now - 2)
    records.append((errors_topic, error, error["process"]["id"]))
    producer = ConfluentProducer({"bootstrap.servers": kafka_bootstrap})
    for topic, document, key in records:
        producer.produce(
            topic,
            zlib.compress(json.dumps(document).encode()),
            key=key,
            partition=0,
            headers=[("zlib", b"true")],
        )
    assert producer.flush(10) == 0
    status = status_json(kafka_bootstrap, reports_topic, errors_topic)
    processes = {p["id"]: p for p in status["processes"]}
    assert sorted(processes) == [f"ruby-{n}:10{n}:abcdef012345" for n in range(4)]
    for process in processes.values():
        assert (process["health"], process["lag"]) == ("alive", 12)
        assert [
            (p["group"], p["topic"], p["partition"], p["lag"]) for p in process["partitions"]
        ] == [
            ("audit_app", "audit", 0, 2),
            ("orders_app", "orders", 0, 5),
            ("orders_app", "orders", 2, 0),
            ("orders_app", "payments", 1, 7),
        ]
    assert [processes[f"ruby-{n}:10{n}:abcdef012345"]["schema_version"] for n in range(4)] == (
        versions
    )
    [shown_error] = status["errors"]
    assert (shown_error["error_class"], shown_error["process_id"]) == (
        "ArgumentError",
        "ruby-host:4242:a1b2c3d4e5f6",
    )
    assert shown_error["details"]["topic"] == "orders"
