"""The tracking reporter against the real broker: reports within the interval, lag while a
handler stalls and after it resumes, the final "stopped" report, errors on the errors topic,
and the daemons reporting themselves."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ferrokafka import (
    AsyncConsumer,
    AsyncProducer,
    Batch,
    Client,
    CodecError,
    Consumer,
    Message,
    TopicPartition,
    codecs,
)
from ferrokafka.redelivery import RedeliveryTracker
from ferrokafka.scheduling import Scheduler, create_topics, schedule
from ferrokafka.tracking import PartitionSample, Reporter, SourceSample
from tests.conftest import TopicFactory, wait_until
from tests.kafka.test_karafka_web import decoded, read_all
from tests.tracking_samples import status_json

pytestmark = pytest.mark.kafka

WAIT = 30.0
INTERVAL = 0.2
MAX_ERROR_MESSAGE_CHARS = 10_000  # Karafka Web's limit


class TopicTail:
    """Decodes every record of a topic as it arrives (a group-less ferrokafka Consumer) and lets
    a test wait for a condition on what arrived."""

    def __init__(self, bootstrap: str, topic: str, decode: Callable[[bytes], Any]) -> None:
        self.records: list[tuple[Message, Any]] = []
        self.changed = threading.Condition()
        self._decode = decode
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap},
            [TopicPartition(topic, 0, offset="beginning")],
            self._append,
            commit_interval=0.1,
        )

    def _append(self, batch: Batch) -> None:
        decoded = [(m, self._decode(m.value() or b"")) for m in batch]
        with self.changed:
            self.records.extend(decoded)
            self.changed.notify_all()

    def wait_for(self, predicate: Callable[[list[Any]], bool], what: str) -> list[Any]:
        with self.changed:
            ok = self.changed.wait_for(lambda: predicate([d for _, d in self.records]), WAIT)
            assert ok, f"timed out waiting for {what}; last: {self.records[-1:]!r}"
            return [d for _, d in self.records]

    def __enter__(self) -> TopicTail:
        self._consumer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._consumer.stop()


@pytest.fixture
def report_topics(topic_factory: TopicFactory) -> tuple[str, str]:
    return topic_factory(partitions=1), topic_factory(partitions=1)


@pytest.fixture
def reporter(kafka_bootstrap: str, report_topics: tuple[str, str]) -> Iterator[Reporter]:
    reports, errors = report_topics
    reporter = Reporter(
        {"bootstrap.servers": kafka_bootstrap},
        reports_topic=reports,
        errors_topic=errors,
        interval=INTERVAL,
        tags=["test"],
    )
    yield reporter
    reporter.close()


def topics_of(report: dict[str, Any], group: str) -> dict[str, Any]:
    """The topics of every subscription group of ``group`` in a consumer report."""
    subscriptions = report["consumer_groups"].get(group, {}).get("subscription_groups", {})
    return {name: t for s in subscriptions.values() for name, t in s["topics"].items()}


def partition_lag(report: dict[str, Any], group: str, topic: str) -> int | None:
    partitions = topics_of(report, group).get(topic, {}).get("partitions", {})
    return partitions["0"]["lag"] if "0" in partitions else None


def test_consumer_reports_lag_while_stalled_then_zero_and_a_final_stopped_report(
    kafka_bootstrap: str,
    topic: str,
    report_topics: tuple[str, str],
    reporter: Reporter,
) -> None:
    group = f"tracking-{topic}"
    with AsyncProducer({"bootstrap.servers": kafka_bootstrap}, max_queue_size=2000) as producer:
        producer.produce_many([{"value": f"r{i}"} for i in range(1000)], topic=topic)
        producer.flush()
    release = threading.Event()

    def stall(batch: Batch) -> None:
        assert release.wait(WAIT), "the test never released the handler"

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
        },
        [topic],
        stall,
        max_batch_size=100,
        commit_interval=0.1,
        reporter=reporter,
    )
    with TopicTail(kafka_bootstrap, report_topics[0], codecs.decode_process_report) as tail:
        consumer.start()
        try:
            reports = tail.wait_for(
                lambda rs: any(partition_lag(r, group, topic) == 1000 for r in rs),
                "a report with lag 1000 while the handler stalls",
            )
            stalled = next(r for r in reports if partition_lag(r, group, topic) == 1000)
            assert stalled["process"]["id"] == reporter.process_id
            assert stalled["process"]["status"] == "running"
            assert stalled["process"]["tags"] == ["test"]
            assert stalled["process"]["threads"] > 1
            assert stalled["process"]["memory_usage"] > 0
            assert stalled["versions"]["librdkafka"]
            assert codecs.consumer_report_violations_of(stalled) == []
            partition = topics_of(stalled, group)[topic]["partitions"]["0"]
            assert partition["hi_offset"] == 1000
            shown = status_json(kafka_bootstrap, *report_topics)
            [process] = [p for p in shown["processes"] if p["id"] == reporter.process_id]
            assert process["health"] == "alive"
            assert [(p["topic"], p["lag"]) for p in process["partitions"]] == [(topic, 1000)]
            jobs = [j for r in reports for j in r["jobs"] if j["topic"] == topic]
            assert jobs
            assert jobs[0]["first_offset"] == 0
            assert jobs[0]["partition"] == 0
            release.set()
            reports = tail.wait_for(
                lambda rs: bool(rs) and partition_lag(rs[-1], group, topic) == 0,
                "lag 0 after the handler",
            )
            done = reports[-1]
            # Each report counts since the previous one (Karafka Web sums them).
            assert sum(r["stats"]["total"]["messages"] for r in reports) == 1000
            assert topics_of(done, group)[topic]["partitions"]["0"]["committed_offset"] == 1000
        finally:
            release.set()
            consumer.stop()
        reports = tail.wait_for(
            lambda rs: bool(rs) and rs[-1]["process"]["status"] == "stopped",
            "the final stopped report",
        )
        statuses = [r["process"]["status"] for r in reports]
        assert "stopping" in statuses[statuses.index("running") :]
        assert {r["process"]["id"] for r in reports} == {reporter.process_id}
        # Unforced reports keep to the interval: no flood while the consumer ran.
        times = [r["dispatched_at"] for r in reports]
        assert len(times) < 2 + (times[-1] - times[0]) / INTERVAL * 2 + 4


def test_report_records_carry_the_process_key_and_zlib_header(
    kafka_bootstrap: str, report_topics: tuple[str, str], reporter: Reporter
) -> None:
    assert reporter.report(force=True)
    with TopicTail(kafka_bootstrap, report_topics[0], codecs.decode_process_report) as tail:
        tail.wait_for(lambda rs: len(rs) >= 1, "the report")
        message = tail.records[0][0]
    assert message.key() == reporter.process_id.encode()
    assert message.partition() == 0
    assert (message.headers() or []) == [("zlib", b"true")]
    assert reporter.stats()["reports"] == 1


def test_handler_error_reaches_the_errors_topic_cut_to_the_limit(
    kafka_bootstrap: str,
    topic: str,
    report_topics: tuple[str, str],
    reporter: Reporter,
) -> None:
    with AsyncProducer({"bootstrap.servers": kafka_bootstrap}) as producer:
        producer.produce("boom", topic=topic)
        producer.flush()
    long_message = "é" * (MAX_ERROR_MESSAGE_CHARS + 500)

    def fail(batch: Batch) -> None:
        raise ValueError(long_message)

    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap},
        [TopicPartition(topic, 0, offset="beginning")],
        fail,
        commit_interval=0.1,
        reporter=reporter,
    )
    tail = TopicTail(kafka_bootstrap, report_topics[1], codecs.decode_error_report)
    with tail as errors, consumer:
        found = errors.wait_for(lambda es: len(es) >= 1, "the error report")
    error = found[0]
    assert error["error_class"] == "ValueError"
    assert error["error_message"] == long_message[:MAX_ERROR_MESSAGE_CHARS]
    assert len(error["error_message"]) == MAX_ERROR_MESSAGE_CHARS
    assert "in fail" in error["backtrace"]
    assert error["details"]["topic"] == topic
    assert error["details"]["first_offset"] == 0
    assert error["process"]["id"] == reporter.process_id
    assert error["type"] == "consumer.consume.error"


def test_an_invalid_report_raises_and_sends_nothing(
    kafka_bootstrap: str, report_topics: tuple[str, str], reporter: Reporter
) -> None:
    class NamelessGroup:
        def report_sample(self) -> SourceSample:
            return SourceSample(group="", partitions=[PartitionSample("orders", 0)])

    bad = Reporter(
        {"bootstrap.servers": kafka_bootstrap},
        reports_topic=report_topics[0],
        interval=INTERVAL,
    )
    nameless = NamelessGroup()
    bad._sources.append(weakref.ref(nameless))
    with pytest.raises(CodecError, match="consumer_groups"):
        bad.report(force=True)
    assert bad.stats()["reports"] == 0
    assert reporter.report(force=True)
    with TopicTail(kafka_bootstrap, report_topics[0], codecs.decode_process_report) as tail:
        reports = tail.wait_for(lambda rs: len(rs) >= 1, "the valid report")
    assert [r["process"]["id"] for r in reports] == [reporter.process_id]


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high watermark, asked by confluent-kafka as an outside observer."""
    from confluent_kafka import Consumer as ConfluentConsumer
    from confluent_kafka import TopicPartition as ConfluentPartition

    consumer = ConfluentConsumer(
        {"bootstrap.servers": bootstrap, "group.id": f"watermarks-{uuid.uuid4().hex}"}
    )
    try:
        return {
            p: consumer.get_watermark_offsets(ConfluentPartition(topic, p), timeout=10.0)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def subscription_of(report: dict[str, Any], group: str) -> dict[str, Any] | None:
    """The one subscription group of consumer group ``group`` in a report, if it is there."""
    subscriptions = report["consumer_groups"].get(group, {}).get("subscription_groups", {})
    return next(iter(subscriptions.values()), None)


def test_daemons_report_librdkafkas_group_state_and_partition_offsets(
    kafka_bootstrap: str,
    kafka_client: Client,
    topic_factory: TopicFactory,
    report_topics: tuple[str, str],
    reporter: Reporter,
) -> None:
    """The scheduler and the redelivery tracker report their group consumer's statistics as a
    consumer does: the joined group's state and each partition's offsets on the broker (Karafka
    Web's pace is the high watermarks'), with their pending work as lag."""
    schedules = f"tracking-schedules-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_client, schedules, num_partitions=2)
    queue, markers = topic_factory(partitions=1), topic_factory(partitions=1)
    far = int(time.time()) + 3600
    pending = {0: 3, 1: 5}  # schedules per partition, all an hour ahead
    for partition, count in pending.items():
        for n in range(count):
            proxy = schedule(
                {"topic": queue, "payload": b"later"},
                far,
                {"topic": schedules, "key": f"s-{partition}-{n}"},
            )
            kafka_client.produce(
                schedules, proxy.value, proxy.key, partition=partition, headers=proxy.headers
            )
    opened = 4  # messages handed out and never acknowledged: START markers an hour ahead
    for offset in range(opened):
        start = codecs.Marker.start(0, offset, far * 1000)
        kafka_client.produce(markers, codecs.encode_marker(start), partition=0)
    scheduled_ends = high_watermarks(kafka_bootstrap, schedules, 2)
    markers_end = high_watermarks(kafka_bootstrap, markers, 1)[0]
    assert scheduled_ends == pending
    assert markers_end == opened
    # The engines read their report's poll interval from their own settings.
    config: dict[str, str | int] = {
        "bootstrap.servers": kafka_bootstrap,
        "max.poll.interval.ms": 45_000,
    }
    scheduler_group = f"s-{schedules}"
    redelivery_group = f"r-{markers}"

    def shows_the_statistics(report: dict[str, Any]) -> bool:
        scheduler = subscription_of(report, scheduler_group)
        tracker = subscription_of(report, redelivery_group)
        if scheduler is None or tracker is None:
            return False
        joined = [(s["state"]["state"], s["state"]["join_state"]) for s in (scheduler, tracker)]
        scheduled = scheduler["topics"].get(schedules, {}).get("partitions", {})
        tracked = tracker["topics"].get(markers, {}).get("partitions", {})
        return (
            joined == [("up", "steady")] * 2
            and {
                int(p): (
                    f["hi_offset"],
                    f["ls_offset"],
                    f["stored_offset"],
                    f["committed_offset"],
                    f["fetch_state"],
                )
                for p, f in scheduled.items()
            }
            == {p: (end, end, end, end, "active") for p, end in scheduled_ends.items()}
            and {int(p): f["lag"] for p, f in scheduled.items()} == pending
            and {
                int(p): (f["hi_offset"], f["ls_offset"], f["fetch_state"], f["lag"])
                for p, f in tracked.items()
            }
            == {0: (markers_end, markers_end, "active", opened)}
        )

    with TopicTail(kafka_bootstrap, report_topics[0], codecs.decode_process_report) as tail:
        scheduler = Scheduler(config, [schedules], group_id=scheduler_group, reporter=reporter)
        tracker = RedeliveryTracker(
            config, queue, markers, group_id=redelivery_group, reporter=reporter
        )
        tracker.start()
        shown = tail.wait_for(
            lambda rs: bool(rs) and shows_the_statistics(rs[-1]),
            "both daemons' group state and partition offsets in one report",
        )
        # Each daemon is a subscription group of its own consumer group, as Karafka Web shows.
        assert codecs.consumer_report_violations_of(shown[-1]) == []
        daemons = [subscription_of(shown[-1], g) for g in (scheduler_group, redelivery_group)]
        assert [d["state"]["poll_interval"] for d in daemons if d] == [45_000, 45_000]
        assert tracker.stop()
        assert reporter.status == "running"  # the scheduler still runs
        assert scheduler.stop()
        reports = tail.wait_for(
            lambda rs: bool(rs) and rs[-1]["process"]["status"] == "stopped",
            "the final stopped report",
        )
    final = reports[-1]
    assert list(final["consumer_groups"]) == [scheduler_group]
    kafka_client.delete_topics([schedules, f"{schedules}_states"], timeout=30.0)


def test_scheduler_command_with_report_flag_reports_until_sigterm(
    kafka_bootstrap: str, kafka_client: Client, report_topics: tuple[str, str]
) -> None:
    schedules = f"tracking-cli-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_client, schedules, num_partitions=1)
    command = [
        sys.executable,
        "-m",
        "ferrokafka",
        "scheduler",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--schedules-topic",
        schedules,
        "--group-id",
        f"g-{schedules}",
        "--report",
        "--reports-topic",
        report_topics[0],
        "--report-interval",
        str(INTERVAL),
    ]
    daemon = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with TopicTail(kafka_bootstrap, report_topics[0], codecs.decode_process_report) as tail:
            first = tail.wait_for(lambda rs: len(rs) >= 1, "a report of the daemon")[0]
            assert first["process"]["id"].split(":")[1] == str(daemon.pid)
            assert first["process"]["tags"] == ["scheduler"]
            daemon.send_signal(signal.SIGTERM)
            _, stderr = daemon.communicate(timeout=WAIT)
            assert daemon.returncode == 0, stderr
            reports = tail.wait_for(
                lambda rs: bool(rs) and rs[-1]["process"]["status"] == "stopped",
                "the final stopped report",
            )
        assert {r["process"]["id"] for r in reports} == {first["process"]["id"]}
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.communicate(timeout=10)
        kafka_client.delete_topics([schedules, f"{schedules}_states"], timeout=30.0)


def test_async_consumer_reports_running_then_stopped(
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
    report_topics: tuple[str, str],
    reporter: Reporter,
) -> None:
    topic = topic_factory(partitions=2)

    async def handle(batch: Batch) -> None:
        await asyncio.sleep(0)

    async def run_briefly(tail: TopicTail) -> None:
        consumer = AsyncConsumer(
            {"bootstrap.servers": kafka_bootstrap, "group.id": f"async-{topic}"},
            [topic],
            handle,
            reporter=reporter,
        )
        async with consumer:
            await asyncio.to_thread(
                tail.wait_for,
                lambda rs: any(topics_of(r, f"async-{topic}") for r in rs),
                "a report with the assigned topic",
            )

    with TopicTail(kafka_bootstrap, report_topics[0], codecs.decode_process_report) as tail:
        asyncio.run(run_briefly(tail))
        reports = tail.wait_for(
            lambda rs: bool(rs) and rs[-1]["process"]["status"] == "stopped",
            "the final stopped report",
        )
    running = [r for r in reports if r["process"]["status"] == "running"]
    partitions = topics_of(running[-1], f"async-{topic}")[topic]["partitions"]
    assert sorted(partitions) == ["0", "1"]


def test_an_error_reported_after_the_consumer_stopped_is_sent_within_the_interval(
    kafka_bootstrap: str, topic: str, report_topics: tuple[str, str]
) -> None:
    """The README's block: ``report_error`` after ``with consumer:`` (the reporter closed by
    the consumer's stop); nothing calls report() or close() afterwards."""
    interval = 5.0
    reporter = Reporter(
        {"bootstrap.servers": kafka_bootstrap},
        reports_topic=report_topics[0],
        errors_topic=report_topics[1],
        interval=interval,
    )
    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap},
        [TopicPartition(topic, 0, offset="beginning")],
        lambda batch: None,
        reporter=reporter,
    )
    with consumer:
        pass
    reported = time.monotonic()
    reporter.report_error(ValueError("bad"), details={"order": 7})
    [error] = read_all(kafka_bootstrap, report_topics[1], 1, lambda records: len(records) >= 1)
    assert time.monotonic() - reported < interval
    document = decoded(error)
    assert (document["error_message"], document["details"]) == ("bad", {"order": 7})
    assert error.key() == reporter.process_id.encode()


# Reports once, reports an error and ends without close(); prints the wall-clock time at which
# the script's own code ended.
_REPORT_AND_END = """
import sys, time
from ferrokafka.tracking import Reporter

bootstrap, reports, errors = sys.argv[1:]
reporter = Reporter(
    {"bootstrap.servers": bootstrap}, reports_topic=reports, errors_topic=errors, interval=60.0
)
reporter.report(force=True)
for n in range(3):
    reporter.report_error(ValueError(f"late {n}"))
print(time.time(), flush=True)
"""


def run_script(script: str, *args: str) -> tuple[float, str]:
    """Runs ``script`` in a child interpreter; returns how long the interpreter took to exit
    after the script's own code ended (its last printed line), and its stderr."""
    run = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60
    )
    ended = time.time()
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    return ended - float(run.stdout.split()[-1]), run.stderr


def test_a_script_that_ends_sends_its_final_report_and_its_errors(
    kafka_bootstrap: str, report_topics: tuple[str, str]
) -> None:
    reports, errors = report_topics
    exit_took, stderr = run_script(_REPORT_AND_END, kafka_bootstrap, reports, errors)
    assert exit_took < 5.0 + 1.0  # the default exit_timeout, f"exit took {exit_took:.1f} s"
    assert "not sent" not in stderr, stderr
    sent = read_all(kafka_bootstrap, errors, 1, lambda records: len(records) >= 3)
    assert sorted(decoded(m)["error_message"] for m in sent) == ["late 0", "late 1", "late 2"]
    statuses = read_all(
        kafka_bootstrap,
        reports,
        1,
        lambda records: any(decoded(m)["process"]["status"] == "stopped" for m in records),
    )
    assert [decoded(m)["process"]["status"] for m in statuses] == ["initialized", "stopped"]


def test_a_reporter_dropped_without_close_sends_its_final_report(
    kafka_bootstrap: str, report_topics: tuple[str, str]
) -> None:
    reporter = Reporter({"bootstrap.servers": kafka_bootstrap}, reports_topic=report_topics[0])
    assert reporter.report(force=True)
    process_id = reporter.process_id
    del reporter
    gc.collect()  # no thread of its own keeps an idle reporter alive
    reports = read_all(
        kafka_bootstrap,
        report_topics[0],
        1,
        lambda records: any(decoded(m)["process"]["status"] == "stopped" for m in records),
    )
    assert [(decoded(m)["process"]["id"], decoded(m)["process"]["status"]) for m in reports] == [
        (process_id, "initialized"),
        (process_id, "stopped"),
    ]


class ReleasingSource:
    """A component that lets its partition go as soon as it began stopping, as a consumer does
    while its stopping report may still be on the reporting thread's way."""

    def __init__(self) -> None:
        self.holding = True

    def report_sample(self) -> SourceSample:
        held = [PartitionSample("orders", 0, lag=4, committed_offset=96)] if self.holding else []
        return SourceSample(group="billing", partitions=held)


def test_the_stopping_report_shows_what_the_component_held_when_it_began_stopping(
    kafka_bootstrap: str, report_topics: tuple[str, str]
) -> None:
    reporter = Reporter(
        {"bootstrap.servers": kafka_bootstrap},
        reports_topic=report_topics[0],
        errors_topic=report_topics[1],
        interval=3600.0,
    )
    source = ReleasingSource()
    reporter.track(source)
    with TopicTail(kafka_bootstrap, report_topics[0], codecs.decode_process_report) as tail:
        reporter.stopping(source)
        source.holding = False  # before the reporting thread could sample it
        reports = tail.wait_for(
            lambda rs: any(r["process"]["status"] == "stopping" for r in rs),
            "the stopping report",
        )
        reporter.untrack(source)
    stopping = next(r for r in reports if r["process"]["status"] == "stopping")
    partition = topics_of(stopping, "billing")["orders"]["partitions"]["0"]
    assert (partition["committed_offset"], partition["lag"]) == (96, 4)


def test_a_stopping_consumer_reports_its_final_commits_not_stale_statistics(
    kafka_bootstrap: str, topic_factory: TopicFactory, report_topics: tuple[str, str]
) -> None:
    topic = topic_factory(partitions=2)
    group = f"final-{topic}"
    # Statistics every 5 s: the records below are handled and committed between two of them.
    reporter = Reporter(
        {"bootstrap.servers": kafka_bootstrap},
        reports_topic=report_topics[0],
        errors_topic=report_topics[1],
        interval=5.0,
    )
    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group},
        [topic],
        lambda batch: None,
        commit_interval=0.1,
        reporter=reporter,
    )
    with TopicTail(kafka_bootstrap, report_topics[0], codecs.decode_process_report) as tail:
        consumer.start()
        tail.wait_for(
            lambda rs: any(
                len(topics_of(r, group).get(topic, {}).get("partitions", {})) == 2 for r in rs
            ),
            "a report with the partitions' statistics",
        )
        Client({"bootstrap.servers": kafka_bootstrap}).produce(topic, b"x", partition=0)
        with AsyncProducer({"bootstrap.servers": kafka_bootstrap}) as producer:
            producer.produce_many([{"value": b"r", "partition": 1}] * 300, topic=topic)
            producer.flush()

        def committed() -> list[int | None]:
            return [p["committed"] for p in consumer.stats()["partitions"]]

        wait_until(lambda: committed() == [1, 300], WAIT, "every record committed")
        consumer.stop()
        reporter.close()
        reports = tail.wait_for(
            lambda rs: bool(rs) and rs[-1]["process"]["status"] == "stopped",
            "the final stopped report",
        )
    # The consumer's last report (sent as it stopped; the final one lists no component).
    last = [r for r in reports if topic in topics_of(r, group)][-1]
    partitions = topics_of(last, group)[topic]["partitions"]
    assert {p: (f["committed_offset"], f["lag"]) for p, f in partitions.items()} == {
        "0": (1, 0),
        "1": (300, 0),
    }


def test_daemons_dropped_without_stop_are_collected_though_a_reporter_tracks_them(
    kafka_bootstrap: str,
    kafka_client: Client,
    topic_factory: TopicFactory,
    reporter: Reporter,
) -> None:
    # The reporter held its components strongly: each daemon dropped unstopped kept its threads,
    # sockets and group membership for the life of the process (30 dropped Schedulers: 400
    # threads, 672 fds), and stayed in the reports as running.
    schedules = f"tracking-dropped-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_client, schedules, num_partitions=1)
    queue, markers = topic_factory(partitions=1), topic_factory(partitions=1)
    config = {"bootstrap.servers": kafka_bootstrap}
    threads_before = len(os.listdir("/proc/self/task"))
    scheduler = Scheduler(config, [schedules], group_id=f"{schedules}-g", reporter=reporter)
    tracker = RedeliveryTracker(config, queue, markers, group_id=f"{queue}-g", reporter=reporter)
    tracker.start()
    assert len(reporter._tracked()) == 2
    gone: list[weakref.ref[Any]] = [weakref.ref(scheduler), weakref.ref(tracker)]
    del scheduler, tracker

    def collected() -> bool:
        gc.collect()
        return all(ref() is None for ref in gone)

    wait_until(collected, 10.0, "the dropped daemons collected")
    assert reporter._tracked() == []
    wait_until(
        lambda: len(os.listdir("/proc/self/task")) <= threads_before + 2,
        30.0,
        "the daemons' threads ended",
    )
    kafka_client.delete_topics([schedules, f"{schedules}_states"], timeout=30.0)
