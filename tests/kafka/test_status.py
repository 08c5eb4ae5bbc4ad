"""The status reader and ``ferrokafka status`` against the real broker, with reports, errors and
scheduler states produced by the Rust codecs the way reporters send them."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
import uuid
import weakref
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pytest

from ferrokafka import Client, KafkaError, Message, NewTopic, codecs
from ferrokafka.status import StatusReader
from tests.conftest import wait_until
from tests.tracking_samples import (
    ZLIB_HEADER,
    error_report,
    process_report,
    produce_unchecked,
    send_error_report,
    send_process_report,
    send_state_report,
    state_report,
)

pytestmark = pytest.mark.kafka


@dataclass(frozen=True)
class TrackingTopics:
    reports: str
    errors: str
    states: str

    @property
    def schedules(self) -> str:
        return self.states.removesuffix("_states")

    def options(self) -> list[str]:
        return [
            "--reports-topic",
            self.reports,
            "--errors-topic",
            self.errors,
            "--states-topic",
            self.states,
        ]


@pytest.fixture
def tracking_topics(kafka_client: Client) -> Iterator[TrackingTopics]:
    suffix = uuid.uuid4().hex[:8]
    topics = TrackingTopics(
        f"test-reports-{suffix}", f"test-errors-{suffix}", f"test-schedules-{suffix}_states"
    )
    kafka_client.create_topics(
        [NewTopic(topics.reports, 2), NewTopic(topics.errors, 1), NewTopic(topics.states, 2)],
        timeout=30.0,
    )
    yield topics
    kafka_client.delete_topics([topics.reports, topics.errors, topics.states])


def fill(client: Client, topics: TrackingTopics, now: float) -> None:
    """Three processes (alive, stale, stopped), errors out of order, a scheduler, junk."""
    alive, stale, stopped = "host-a:11:aa", "host-b:22:bb", "host-c:33:cc"
    send_process_report(client, topics.reports, process_report(alive, dispatched_at=now - 20))
    send_process_report(
        client, topics.reports, process_report(alive, dispatched_at=now - 2, lags={0: 40, 1: 2})
    )
    send_process_report(client, topics.reports, process_report(stale, dispatched_at=now - 120))
    send_process_report(
        client, topics.reports, process_report(stopped, dispatched_at=now - 1, status="stopped")
    )
    for error_id, at in [("err-2", now - 50), ("err-3", now - 10), ("err-1", now - 90)]:
        send_error_report(
            client, topics.errors, error_report(error_id, occurred_at=at, process_id=alive)
        )
    send_state_report(client, topics.states, state_report(dispatched_at=now - 3), partition=1)
    # Corrupt and foreign records: bad zlib, bad JSON, valid JSON of the wrong schema, tombstone.
    client.produce(topics.reports, b"\x00garbage", key=alive, headers=ZLIB_HEADER)
    client.produce(topics.reports, zlib.compress(b"{oops"), key=alive, headers=ZLIB_HEADER)
    client.produce(
        topics.reports, codecs.encode_state_report(state_report(dispatched_at=now)), key="x"
    )
    client.produce(topics.reports, None, key=stale)
    client.produce(topics.errors, b"not an error report")
    client.produce(topics.states, b"\x78\x9cjunk", partition=0)


PROCESS = "host-a:11:aa"


def send_report(
    client: Client, topic: str, *, dispatched_at: float, lags: dict[int, int] | None = None
) -> None:
    """Sends a running report of PROCESS with ``lags`` (partition -> lag, default {0: 3})."""
    send_process_report(
        client, topic, process_report(PROCESS, dispatched_at=dispatched_at, lags=lags)
    )


def counting(reader: StatusReader) -> Counter[str]:
    """Counts every record the reader's consumer hands over, per topic."""
    seen: Counter[str] = Counter()
    add_messages = reader.view.add_messages

    def add_and_count(messages: Iterable[Message]) -> int:
        batch = list(messages)
        seen.update(message.topic() for message in batch)
        return add_messages(batch)

    reader.view.add_messages = add_and_count  # type: ignore[method-assign]
    return seen


def test_reader_builds_the_live_view(
    kafka_bootstrap: str, kafka_client: Client, tracking_topics: TrackingTopics
) -> None:
    topics, now = tracking_topics, time.time()
    fill(kafka_client, topics, now)
    reader = StatusReader(
        {"bootstrap.servers": kafka_bootstrap},
        reports_topic=topics.reports,
        errors_topic=topics.errors,
        ttl=30.0,
    )
    with reader:
        assert reader.wait_caught_up(timeout=30.0)
        snapshot = reader.snapshot()
    assert snapshot.caught_up
    assert [(p.id, p.health) for p in snapshot.processes] == [
        ("host-a:11:aa", "alive"),
        ("host-b:22:bb", "stale"),
        ("host-c:33:cc", "stopped"),
    ]
    alive = snapshot.processes[0]
    assert alive.dispatched_at == pytest.approx(now - 2)  # the latest report won
    assert [(p.group, p.topic, p.partition, p.lag_hybrid) for p in alive.partitions] == [
        ("billing", "orders", 0, 40),
        ("billing", "orders", 1, 2),
    ]
    assert (snapshot.totals.alive, snapshot.totals.lag) == (1, 42)
    assert [e.id for e in snapshot.errors] == ["err-3", "err-2", "err-1"]
    # Every *_states topic is read by default; this test's is one of them.
    assert topics.states in snapshot.states_topics
    (scheduler,) = [s for s in snapshot.schedulers if s.topic == topics.schedules]
    assert (scheduler.partition, scheduler.state, scheduler.pending) == (1, "loaded", 7)
    assert snapshot.skipped[topics.reports] == 4
    assert snapshot.skipped[topics.errors] == 1
    assert snapshot.skipped[topics.states] == 1
    assert snapshot.read[topics.reports] == 8


def test_reader_tails_without_rereading_and_finds_new_states_topics(
    kafka_bootstrap: str, kafka_client: Client, tracking_topics: TrackingTopics
) -> None:
    topics, now = tracking_topics, time.time()
    send_report(kafka_client, topics.reports, dispatched_at=now)
    reader = StatusReader(
        {"bootstrap.servers": kafka_bootstrap},
        reports_topic=topics.reports,
        errors_topic=topics.errors,
        discover_interval=0.5,
    )
    seen = counting(reader)
    new_states = f"test-schedules-{uuid.uuid4().hex[:8]}_states"
    with reader:
        assert reader.wait_caught_up(timeout=30.0)
        assert seen[topics.reports] == 1
        assert not reader.refresh()  # nothing new: the tail goes on as it is

        send_report(kafka_client, topics.reports, dispatched_at=now + 1, lags={0: 77})
        wait_until(
            lambda: reader.snapshot().processes[0].lag == 77, 20.0, "the new report to be read"
        )

        kafka_client.create_topics([NewTopic(new_states, 1)], timeout=30.0)
        try:
            send_state_report(kafka_client, new_states, state_report(dispatched_at=now), 0)
            wait_until(
                lambda: any(
                    s.topic == new_states.removesuffix("_states")
                    for s in reader.snapshot().schedulers
                ),
                20.0,
                "the new states topic to be found and read",
            )
        finally:
            kafka_client.delete_topics([new_states])
        history = reader.snapshot().lag_history
    # The reports topic was read once in all, although the tail was rebuilt for the new topic.
    assert seen[topics.reports] == 2
    (series,) = [s for s in history if s.process_id == PROCESS and s.partition == 0]
    assert [lag for _, lag in series.points] == [3, 77]


def run_status(bootstrap: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferrokafka", "status", "--bootstrap-servers", bootstrap, *options],
        capture_output=True,
        text=True,
        check=True,
        timeout=90,
    )


def test_status_command_tables_and_json(
    kafka_bootstrap: str, kafka_client: Client, tracking_topics: TrackingTopics
) -> None:
    topics, now = tracking_topics, time.time()
    fill(kafka_client, topics, now)
    shown = run_status(kafka_bootstrap, *topics.options(), "--ttl", "30")
    lines = [line.split() for line in shown.stdout.splitlines()]
    assert shown.stdout.startswith(
        "Processes: 1 alive, 1 stale, 1 stopped (TTL 30 s); total lag 42"
    )
    assert ["host-a:11:aa", "alive", "running"] in [line[:3] for line in lines]
    assert ["host-b:22:bb", "stale", "running"] in [line[:3] for line in lines]
    assert ["host-c:33:cc", "stopped", "stopped"] in [line[:3] for line in lines]
    assert ["host-a:11:aa", "billing", "orders", "0", "40"] in [line[:5] for line in lines]
    assert "Recent errors: 3 (newest first)" in shown.stdout
    assert [topics.schedules, "1", "loaded", "7", "7"] in [line[:5] for line in lines]
    assert f"Skipped records: {topics.errors}=1, {topics.reports}=4, {topics.states}=1" in (
        shown.stdout
    )

    document = json.loads(run_status(kafka_bootstrap, *topics.options(), "--json").stdout)
    assert document["caught_up"] is True
    assert [(p["id"], p["alive"]) for p in document["processes"]] == [
        ("host-a:11:aa", True),
        ("host-b:22:bb", False),
        ("host-c:33:cc", False),
    ]
    assert [p["lag_hybrid"] for p in document["processes"][0]["partitions"]] == [40, 2]
    assert [e["id"] for e in document["errors"]] == ["err-3", "err-2", "err-1"]
    assert document["schedulers"][0]["daily"] == {"2030-01-01": 3, "2030-01-02": 4}
    assert document["skipped"] == {topics.errors: 1, topics.reports: 4, topics.states: 1}

    # A shorter TTL makes the same process stale.
    document = json.loads(
        run_status(kafka_bootstrap, *topics.options(), "--json", "--ttl", "1").stdout
    )
    assert [p["health"] for p in document["processes"]] == ["stale", "stale", "stopped"]


def test_status_watch_refreshes_until_interrupted(
    kafka_bootstrap: str, kafka_client: Client, tracking_topics: TrackingTopics
) -> None:
    topics, now = tracking_topics, time.time()
    send_report(kafka_client, topics.reports, dispatched_at=now)
    command = [
        *(sys.executable, "-m", "ferrokafka", "status", "--bootstrap-servers", kafka_bootstrap),
        *topics.options(),
        *("--json", "--watch", "0.5"),
    ]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as watch:
        try:
            assert watch.stdout is not None
            first = json.loads(watch.stdout.readline())
            assert [p["lag"] for p in first["processes"]] == [3]
            send_report(kafka_client, topics.reports, dispatched_at=now + 1, lags={0: 55})
            deadline = time.monotonic() + 30
            while json.loads(watch.stdout.readline())["processes"][0]["lag"] != 55:
                assert time.monotonic() < deadline, "the new report never showed up"
            watch.send_signal(signal.SIGINT)
            assert watch.wait(timeout=30) == 130
        finally:
            watch.kill()


def test_status_command_under_hostile_records(
    kafka_bootstrap: str, kafka_client: Client, tracking_topics: TrackingTopics
) -> None:
    """Records no ferrokafka reporter writes, sent with confluent-kafka: a process id that
    clears the terminal, times in milliseconds and at 1e13, a stopped process."""
    topics, now = tracking_topics, time.time()
    hostile = "\x1b[2J\x1b[1;31mPWNED\x1b[0m\r\nfake-line:1:a"
    produce_unchecked(
        kafka_bootstrap,
        topics.reports,
        [
            process_report("host-a:11:aa", dispatched_at=now - 20),
            process_report("host-a:11:aa", dispatched_at=now * 1000),
            process_report(hostile, dispatched_at=now - 1),
            process_report("host-c:33:cc", dispatched_at=now - 1, status="stopped"),
        ],
    )
    produce_unchecked(
        kafka_bootstrap,
        topics.errors,
        [
            error_report("err-ok", occurred_at=now - 5, process_id=hostile),
            error_report("err-ms", occurred_at=now * 1000, process_id=hostile),
            error_report("err-1e13", occurred_at=1e13, process_id=hostile),
        ],
    )
    shown = run_status(kafka_bootstrap, *topics.options(), "--ttl", "30")
    assert "\x1b" not in shown.stdout + shown.stderr
    assert "\\x1b[2J\\x1b[1;31mPWNED\\x1b[0m\\r\\nfake-line:1:a" in shown.stdout
    assert not [line for line in shown.stdout.splitlines() if line.startswith("fake-line")]
    assert "Recent errors: 1 (newest first)" in shown.stdout
    assert f"Skipped records: {topics.errors}=2, {topics.reports}=1" in shown.stdout
    rows = [line.split() for line in shown.stdout.splitlines()]
    assert ["host-c:33:cc", "billing", "orders", "0", "3"] in [row[:5] for row in rows]
    assert [row[-1] for row in rows if row[:2] == ["host-c:33:cc", "billing"]] == ["stopped"]

    document = json.loads(run_status(kafka_bootstrap, *topics.options(), "--json").stdout)
    processes = {p["id"]: p for p in document["processes"]}
    assert processes["host-a:11:aa"]["age"] >= 20  # the report in milliseconds was skipped
    assert [e["id"] for e in document["errors"]] == ["err-ok"]


def test_status_says_a_missing_topic_does_not_exist(
    kafka_bootstrap: str, tracking_topics: TrackingTopics
) -> None:
    missing = f"test-missing-{uuid.uuid4().hex[:8]}"
    shown = subprocess.run(
        [
            *(sys.executable, "-m", "ferrokafka", "status", "--bootstrap-servers", kafka_bootstrap),
            *("--reports-topic", missing, "--errors-topic", tracking_topics.errors),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert (shown.returncode, shown.stdout) == (2, "")
    assert f"the reports topic '{missing}' does not exist" in shown.stderr


def test_reader_reads_a_reports_topic_deleted_and_created_again(
    kafka_bootstrap: str, kafka_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """A running reader dropped, unsaid, the records of a reports topic deleted and created
    again (as Karafka Web's reset does) while their offsets were below those it had read."""
    suffix = uuid.uuid4().hex[:8]
    reports, errors = f"test-reports-{suffix}", f"test-errors-{suffix}"
    kafka_client.create_topics([NewTopic(reports, 1)], timeout=30.0)
    now = time.time()
    for n in range(20):
        report = process_report("host-old:1:aa", dispatched_at=now - 20 + n)
        send_process_report(kafka_client, reports, report)
    reader = StatusReader(
        {"bootstrap.servers": kafka_bootstrap},
        reports_topic=reports,
        errors_topic=errors,
        discover_interval=0.5,
    )
    try:
        with reader:
            assert reader.wait_caught_up(timeout=30.0)
            assert reader.snapshot().read == {reports: 20}
            kafka_client.delete_topics([reports])

            def created_again() -> bool:
                try:
                    kafka_client.create_topics([NewTopic(reports, 1)], timeout=30.0)
                except KafkaError:  # still being deleted
                    return False
                return True

            wait_until(created_again, 60.0, "the reports topic to be created again", 1.0)
            for _ in range(3):
                report = process_report("host-new:2:bb", dispatched_at=time.time())
                send_process_report(kafka_client, reports, report)
            wait_until(
                lambda: reader.snapshot().read == {reports: 23},
                60.0,
                "the 3 reports of the topic created again to be read",
            )
            snapshot = reader.snapshot()
    finally:
        kafka_client.delete_topics([reports])
    assert [p.id for p in snapshot.processes] == ["host-new:2:bb", "host-old:1:aa"]
    assert snapshot.skipped == {}
    assert f"{reports}[0] starts over at offset 0, below the 20 read" in caplog.text


def test_a_reader_dropped_without_stop_stops_reading(
    kafka_bootstrap: str, kafka_client: Client, tracking_topics: TrackingTopics
) -> None:
    # Its discovery thread and its tail's callback held it: each reader dropped running kept
    # about 16 threads and 20 file descriptors for the life of the process.
    topics = tracking_topics
    fill(kafka_client, topics, time.time())
    threads_before = len(os.listdir("/proc/self/task"))
    reader = StatusReader(
        {"bootstrap.servers": kafka_bootstrap},
        reports_topic=topics.reports,
        errors_topic=topics.errors,
        states_topics=[topics.states],
        discover_interval=0.2,
    ).start()
    assert reader.wait_caught_up(timeout=30.0)
    assert len(os.listdir("/proc/self/task")) > threads_before
    dropped = weakref.ref(reader)
    del reader

    def collected() -> bool:
        gc.collect()
        return dropped() is None

    wait_until(collected, 10.0, "the dropped reader collected")
    wait_until(
        lambda: len(os.listdir("/proc/self/task")) <= threads_before,
        30.0,
        "the reader's threads ended",
    )
