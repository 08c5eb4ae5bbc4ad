"""ferrokafka.spark helpers against the real broker: scheduling a DataFrame with the scheduler
daemon running, cancelling, reading reports and states, and the streaming lag query."""

from __future__ import annotations

import time
import uuid
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pytest

from ferrokafka import Client, codecs
from ferrokafka import spark as fks
from ferrokafka.scheduling import Scheduler, schedule_message
from ferrokafka.tracking import Reporter
from tests.conftest import TopicFactory, schedule_later, wait_until
from tests.reports import process_report, produce_report

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

LEAD = 8
"""Seconds from now to the first epoch: more than the Spark job takes on a busy 2-core box."""


def header(headers: list[tuple[str, bytes | None]] | None, name: str) -> bytes | None:
    return dict(headers or []).get(name)


def loaded_scheduler(bootstrap: str, topic: str) -> Scheduler:
    scheduler = Scheduler(
        {"bootstrap.servers": bootstrap}, [topic], group_id=f"g-{uuid.uuid4().hex}"
    )
    wait_until(
        lambda: [s["state"] for s in scheduler.status()] == ["loaded", "loaded"],
        30,
        "loaded",
        interval=0.2,
    )
    return scheduler


def test_schedule_dataframe_dispatches_10k_rows_once_not_before_their_epoch(
    spark: SparkSession,
    kafka_bootstrap: str,
    kafka_client: Client,
    topic_factory: TopicFactory,
    schedules_topic: str,
) -> None:
    from pyspark.sql import functions as F

    target = topic_factory(partitions=3)
    rows = 10_000
    # Warm up the Python workers, so that the epochs below are still ahead when the job runs.
    spark.range(1).select(fks.schedule_headers(F.lit("t"), F.lit(int(time.time()) + 60))).collect()
    with loaded_scheduler(kafka_bootstrap, schedules_topic) as scheduler:
        start = int(time.time())
        frame = spark.range(rows).select(
            F.col("id"),
            (F.lit(start + LEAD) + F.col("id") % 4).alias("epoch"),
            F.concat(F.lit("m"), F.col("id")).alias("payload"),
            F.concat(F.lit("schedule-"), F.col("id")).alias("schedule_id"),
            F.concat(F.lit("user-"), F.col("id") % 100).alias("user"),
        )
        fks.schedule_dataframe(
            frame,
            schedules_topic,
            "epoch",
            target_topic=target,
            value_col="payload",
            key_col="schedule_id",
            target_key_col="user",
            bootstrap_servers=kafka_bootstrap,
        )
        wait_until(
            lambda: sum(s["dispatched"] for s in scheduler.status()) >= rows,
            60,
            "10k dispatches",
            interval=0.2,
        )
        dispatched = kafka_client.read_topic(target, timeout=30.0)
        assert sum(s["dispatched"] for s in scheduler.status()) == rows
    counts = Counter(m.value() for m in dispatched)
    assert len(dispatched) == rows
    assert counts == Counter(f"m{n}".encode() for n in range(rows))
    for message in dispatched:
        n = int((message.value() or b"m-1")[1:])
        epoch = start + LEAD + n % 4
        assert message.timestamp()[1] >= epoch * 1000, f"m{n} dispatched before its epoch"
        assert message.key() == f"user-{n % 100}".encode()
        assert header(message.headers(), "schedule_source_key") == f"schedule-{n}".encode()
    # Proxies went to the partition librdkafka's (and Karafka's) partitioner picks for the key.
    proxies = [m for m in kafka_client.read_topic(schedules_topic) if m.value() is not None]
    assert len(proxies) == rows
    import zlib

    assert all(m.partition() == zlib.crc32(m.key() or b"") % 2 for m in proxies)


def test_cancel_dataframe_cancels_what_schedule_dataframe_scheduled(
    spark: SparkSession,
    kafka_bootstrap: str,
    kafka_client: Client,
    topic: str,
    schedules_topic: str,
) -> None:
    from pyspark.sql import functions as F

    epoch = int(time.time()) + LEAD
    frame = spark.range(40).select(
        F.concat(F.lit("s-"), F.col("id")).alias("key"),
        F.col("id").cast("string").alias("value"),
        F.lit(epoch).alias("epoch"),
    )
    fks.schedule_dataframe(
        frame,
        schedules_topic,
        "epoch",
        target_topic=topic,
        key_col="key",
        bootstrap_servers=kafka_bootstrap,
    )
    fks.cancel_dataframe(
        frame.where(F.col("value").cast("int") % 2 == 0),
        schedules_topic,
        "key",
        bootstrap_servers=kafka_bootstrap,
    )
    # A cancel from a librdkafka producer lands where Spark put the schedule, too.
    cancel = codecs.cancel_proxy("s-1", {"topic": schedules_topic})
    kafka_client.produce(
        schedules_topic,
        None,
        key=cancel.key,
        headers=cancel.headers,
        partition=__import__("zlib").crc32(b"s-1") % 2,
    )
    schedule_message(
        kafka_client,
        {"topic": topic, "payload": b"sentinel"},
        epoch + 1,
        {"topic": schedules_topic, "key": "sentinel"},
    )
    with loaded_scheduler(kafka_bootstrap, schedules_topic):
        wait_until(
            lambda: b"sentinel" in {m.value() for m in kafka_client.read_topic(topic)},
            40,
            "the sentinel",
            interval=0.2,
        )
        values = sorted(m.value() or b"" for m in kafka_client.read_topic(topic))
    odd = sorted(str(n).encode() for n in range(3, 40, 2))
    assert values == sorted([*odd, b"sentinel"])


def test_read_reports_gives_process_ids_and_lags(
    spark: SparkSession, kafka_bootstrap: str, kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=2)
    produce_report(kafka_client, topic, process_report("host-a:1:x", {("g", "orders", 0): 5}, 10.0))
    produce_report(
        kafka_client,
        topic,
        process_report("host-b:2:y", {("g", "orders", 1): 7, ("g", "orders", 2): 1}, 11.0),
    )
    kafka_client.produce(topic, b"not a report", key="junk")
    frame = fks.read_reports(spark, kafka_bootstrap, topic)
    rows = {r.key: r for r in frame.collect()}
    assert set(rows) == {"host-a:1:x", "host-b:2:y", "junk"}
    a, b = rows["host-a:1:x"], rows["host-b:2:y"]
    assert (a.process_id, a.lag, a.status, a.error) == ("host-a:1:x", 5, "running", None)
    assert (b.process_id, b.lag) == ("host-b:2:y", 8)
    # Each partition's two lags as reported: to the committed offset, and to the stored one
    # (the process's lag above sums the latter, as Karafka Web does).
    assert [(p.partition, p.lag, p.lag_stored) for p in b.partitions] == [(1, 9, 7), (2, 3, 1)]
    assert rows["junk"].process_id is None
    assert "zlib" in rows["junk"].error
    lags = fks.lag_table(frame).collect()
    assert sorted((r.process_id, r.partition, r.lag, r.lag_stored) for r in lags) == [
        ("host-a:1:x", 0, 7, 5),
        ("host-b:2:y", 1, 9, 7),
        ("host-b:2:y", 2, 3, 1),
    ]


def test_stream_lag_follows_new_reports(
    spark: SparkSession, kafka_bootstrap: str, kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=1)
    name = f"lag_{uuid.uuid4().hex[:8]}"
    process = "host-s:3:z"
    produce_report(kafka_client, topic, process_report(process, {("g", "t", 0): 50}, 100.0))
    query = fks.stream_lag(spark, kafka_bootstrap, topic, query_name=name)
    try:
        query.processAllAvailable()

        def lag() -> dict[int, int]:
            # Karafka Web's lag, to the stored offsets (process_report's figures).
            return {r.partition: r.lag_stored for r in spark.table(name).collect()}

        assert lag() == {0: 50}
        # The consumer caught up on partition 0 and got partition 1.
        produce_report(
            kafka_client,
            topic,
            process_report(process, {("g", "t", 0): 3, ("g", "t", 1): 9}, 101.0),
        )
        query.processAllAvailable()
        assert lag() == {0: 3, 1: 9}
        # A late, older report does not move the figures back.
        produce_report(kafka_client, topic, process_report(process, {("g", "t", 0): 40}, 99.0))
        produce_report(kafka_client, topic, process_report(process, {("g", "t", 0): 0}, 102.0))
        query.processAllAvailable()
        assert lag() == {0: 0, 1: 9}
    finally:
        query.stop()


@dataclass(frozen=True)
class ReportingDaemon:
    """A scheduler daemon whose reporter sends a report every 0.2 s to ``reports``; its lag
    (the schedules pending) per schedules partition is ``lags``."""

    reports: str
    lags: dict[tuple[str, int], int]
    reporter: Reporter


@pytest.fixture
def reporting_daemon(
    kafka_bootstrap: str, kafka_client: Client, topic_factory: TopicFactory, schedules_topic: str
) -> Iterator[ReportingDaemon]:
    reports, errors = topic_factory(partitions=1), topic_factory(partitions=1)
    for n in range(3):
        schedule_message(
            kafka_client,
            {"topic": "anywhere", "payload": b"x"},
            int(time.time()) + 3600,
            {"topic": schedules_topic, "key": f"later-{n}", "partition": n % 2},
        )
    config = {"bootstrap.servers": kafka_bootstrap}
    reporter = Reporter(config, reports_topic=reports, errors_topic=errors, interval=0.2)
    scheduler = Scheduler(
        config, [schedules_topic], group_id=f"g-{uuid.uuid4().hex}", reporter=reporter
    )
    try:
        wait_until(lambda: [s["pending"] for s in scheduler.status()] == [2, 1], 30, "3 pending")
        assert reporter.report(force=True)  # a report with these figures is on the topic
        yield ReportingDaemon(reports, {(schedules_topic, 0): 2, (schedules_topic, 1): 1}, reporter)
    finally:
        scheduler.stop()
        reporter.close()


def test_stream_lag_as_the_readme_calls_it_returns_while_a_daemon_keeps_reporting(
    spark: SparkSession, kafka_bootstrap: str, reporting_daemon: ReportingDaemon
) -> None:
    sent = reporting_daemon.reporter.stats()["reports"]
    query = fks.stream_lag(spark, kafka_bootstrap, reporting_daemon.reports, available_now=True)
    query.processAllAvailable()
    lags = {(r.topic, r.partition): r.lag for r in spark.table("ferrokafka_lag").collect()}
    assert lags == reporting_daemon.lags
    assert not query.isActive
    assert reporting_daemon.reporter.stats()["reports"] > sent  # it kept reporting meanwhile
    # One state-store partition for the small lag table, whatever the session's setting.
    progress = query.lastProgress
    assert progress is not None
    assert progress["stateOperators"][0]["numShufflePartitions"] == 1
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"


def test_stream_lag_processing_time_spaces_its_micro_batches(
    spark: SparkSession, kafka_bootstrap: str, reporting_daemon: ReportingDaemon
) -> None:
    name = f"lag_{uuid.uuid4().hex[:8]}"
    query = fks.stream_lag(
        spark,
        kafka_bootstrap,
        reporting_daemon.reports,
        query_name=name,
        processing_time="10 seconds",
    )
    try:
        # New reports every 0.2 s: every trigger has data, so the interval alone spaces them.
        # Spark starts a batch on the next multiple of 10 s since the epoch, or at once when the
        # one before ran past it (under load the first one can): either way no two batches
        # start in the same 10 s slot, which a trigger that ignored the interval, running the
        # batches back to back, would break at once.
        wait_until(lambda: len(query.recentProgress) >= 3, 60, "three micro-batches")
        starts = [datetime.fromisoformat(p["timestamp"]) for p in query.recentProgress[:3]]
        slots = [int(start.timestamp() // 10) for start in starts]
        assert slots == sorted(set(slots)), f"batches started at {starts}"
        lags = {(r.topic, r.partition): r.lag for r in spark.table(name).collect()}
        assert lags == reporting_daemon.lags
    finally:
        query.stop()


def test_stream_lag_takes_one_trigger(spark: SparkSession) -> None:
    with pytest.raises(ValueError, match="at most one of available_now=True and processing_time"):
        fks.stream_lag(spark, "127.0.0.1:1", "reports", available_now=True, processing_time="1 s")
    with pytest.raises(ValueError, match="shuffle_partitions must be at least 1, got 0"):
        fks.stream_lag(spark, "127.0.0.1:1", "reports", shuffle_partitions=0)


def test_read_states_after_a_scheduler_ran(
    spark: SparkSession, kafka_bootstrap: str, kafka_client: Client, schedules_topic: str
) -> None:
    future = schedule_later(kafka_client, schedules_topic, 3)
    scheduler = loaded_scheduler(kafka_bootstrap, schedules_topic)
    assert scheduler.stop()
    states = fks.read_states(spark, kafka_bootstrap, f"{schedules_topic}_states").collect()
    assert states
    assert all(s.error is None for s in states)
    final = {s.kafka_partition: s for s in states if s.key == "stopped_state"}
    assert set(final) == {0, 1}
    assert (final[1].state, final[1].offsets.low, final[1].offsets.high) == ("stopped", 0, 2)
    day = time.strftime("%Y-%m-%d", time.gmtime(future))
    assert [(d.day, d["count"]) for d in final[1].daily] == [(day, 3)]
    assert any(s.state == "loaded" for s in states)


def waterdrop_partition(partition_key: str, partitions: int) -> int:
    """Where WaterDrop puts a partition key: CRC32 of as many leading UTF-8 bytes as it has
    characters (karafka-rdkafka passes its length in characters)."""
    return zlib.crc32(partition_key.encode()[: len(partition_key)]) % partitions


def test_default_proxy_keys_are_partitioned_as_karafka_does(
    spark: SparkSession, kafka_client: Client, kafka_bootstrap: str, schedules_topic: str
) -> None:
    # Without key_col, a proxy's partition comes from its target (partition, else partition
    # key, else key), as Karafka's proxy sets partition_key: the same rule as schedule(), and
    # hashed as WaterDrop hashes a partition_key (non-ASCII keys included). A cancel given the
    # schedule's partition key lands with it.
    from pyspark.sql import functions as F

    epoch = int(time.time()) + 3600
    frame = spark.range(30).select(
        F.lit(epoch).alias("epoch"),
        F.col("id").cast("string").alias("value"),
        F.concat(F.lit("użytkownik-"), F.col("id")).alias("user"),
        F.when(F.col("id") % 3 == 0, F.concat(F.lit("zamówienie-"), F.col("id"))).alias("pk"),
    )
    fks.schedule_dataframe(
        frame,
        schedules_topic,
        "epoch",
        target_topic="reminders",
        target_key_col="user",
        target_partition_key_col="pk",
        bootstrap_servers=kafka_bootstrap,
    )
    proxies = [m for m in kafka_client.read_topic(schedules_topic) if m.value() is not None]
    assert len(proxies) == 30
    partition_keys: dict[str, str] = {}
    for message in proxies:
        n = int(message.value() or b"-1")
        partition_key = f"zamówienie-{n}" if n % 3 == 0 else f"użytkownik-{n}"
        partition_keys[(message.key() or b"").decode()] = partition_key
        assert message.partition() == waterdrop_partition(partition_key, 2), partition_key
    every_byte = [zlib.crc32(k.encode()) % 2 for k in partition_keys.values()]
    waterdrop = [waterdrop_partition(k, 2) for k in partition_keys.values()]
    assert every_byte != waterdrop, "no key tells the rules apart"

    cancels = spark.createDataFrame(list(partition_keys.items()), ["key", "pk"])
    fks.cancel_dataframe(
        cancels, schedules_topic, "key", partition_key_col="pk", bootstrap_servers=kafka_bootstrap
    )
    landed: dict[bytes | None, set[int | None]] = {}
    for message in kafka_client.read_topic(schedules_topic):
        landed.setdefault(message.key(), set()).add(message.partition())
    assert len(landed) == 30
    assert all(len(partitions) == 1 for partitions in landed.values()), "a cancel went astray"


def test_a_payload_over_max_payload_size_fails_the_job_naming_the_limit(
    spark: SparkSession, kafka_client: Client, kafka_bootstrap: str, schedules_topic: str
) -> None:
    from pyspark.sql import functions as F

    frame = (
        spark.range(2)
        .coalesce(1)
        .select(
            F.lit(int(time.time()) + 3600).alias("epoch"),
            F.col("id").cast("string").alias("key"),
            F.expr("repeat('x', 1000012 + id)").alias("value"),
        )
    )

    def schedule(**options: Any) -> None:
        fks.schedule_dataframe(
            frame,
            schedules_topic,
            "epoch",
            target_topic="reminders",
            key_col="key",
            bootstrap_servers=kafka_bootstrap,
            **options,
        )

    with pytest.raises(Exception, match=r"ScheduleError: row 1: .*exceeds the limit of 1000012"):
        schedule()
    assert kafka_client.read_topic(schedules_topic) == []
    schedule(max_payload_size=1_000_013)
    assert sorted(m.key() or b"" for m in kafka_client.read_topic(schedules_topic)) == [b"0", b"1"]
