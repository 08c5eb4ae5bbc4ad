"""The scheduler daemon against the real broker: dispatch, cancel, tombstones, state reports,
bad records, restarts (clean and kill -9), two daemons in one group, and faults: read-back
through a broker outage, targets the broker refuses, out-of-range epochs, static-membership
failover and offsets committed while running."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ferrokafka import AsyncProducer, Client, Message, NewTopic
from ferrokafka.scheduling import (
    SCHEDULES_TOPIC_CONFIG,
    Scheduler,
    cancel,
    cancel_message,
    schedule,
    schedule_message,
)
from tests.conftest import (
    GROUP_SETTINGS,
    KAFKA_SCRIPT,
    LateTopic,
    TopicFactory,
    committed_offsets,
    schedule_later,
    wait_until,
    write_transactions,
)

pytestmark = pytest.mark.kafka


def header(message: Message, name: str) -> bytes | None:
    return dict(message.headers() or []).get(name)


@pytest.fixture
def daemon_config(kafka_bootstrap: str) -> dict[str, str | int | float | bool]:
    return {"bootstrap.servers": kafka_bootstrap, **GROUP_SETTINGS}


@pytest.fixture
def target(topic: str) -> str:
    """The one-partition topic the test's schedules are dispatched to."""
    return topic


def start_scheduler(config: dict[str, Any], topic: str, group: str) -> Scheduler:
    return Scheduler(config, [topic], group_id=group, state_interval=0.2)


def test_schedules_are_dispatched_once_not_before_their_epoch(
    kafka_client: Client,
    topic_factory: TopicFactory,
    schedules_topic: str,
    daemon_config: dict[str, Any],
) -> None:
    target = topic_factory(partitions=3)
    now = int(time.time())
    offsets = [-5, 0, 1, 2, 4]
    for n, delta in enumerate(offsets):
        schedule_message(
            kafka_client,
            {
                "topic": target,
                "payload": f"m{n}".encode(),
                "key": f"k{n}",
                "headers": {"origin": "test"},
                **({"partition": 2} if n == 3 else {}),
                **({"partition_key": "customer-9"} if n == 4 else {}),
            },
            now + delta,
            {"topic": schedules_topic, "key": f"proxy-{n}"},
        )
    with start_scheduler(daemon_config, schedules_topic, f"g-{uuid.uuid4().hex}") as scheduler:
        wait_until(lambda: len(kafka_client.read_topic(target)) >= 5, 30, "5 dispatches")
        dispatched = kafka_client.read_topic(target)
        wait_until(lambda: sum(s["dispatched"] for s in scheduler.status()) == 5, 10, "status")
    assert sorted((m.value() or b"").decode() for m in dispatched) == [f"m{n}" for n in range(5)]
    for message in dispatched:
        n = int((message.value() or b"m").decode()[1:])
        epoch = now + offsets[n]
        assert message.timestamp()[1] >= epoch * 1000, f"m{n} dispatched before its epoch"
        assert message.key() == f"k{n}".encode()
        assert header(message, "origin") == b"test"
        assert header(message, "schedule_target_epoch") == str(epoch).encode()
        assert header(message, "schedule_source_topic") == schedules_topic.encode()
        assert header(message, "schedule_source_key") == f"proxy-{n}".encode()
        assert header(message, "schedule_source_partition") in (b"0", b"1")
        assert int(header(message, "schedule_source_offset") or b"-1") >= 0
    by_value = {m.value(): m for m in dispatched}
    assert by_value[b"m3"].partition() == 2
    assert by_value[b"m4"].partition() == zlib.crc32(b"customer-9") % 3

    tombstones = [m for m in kafka_client.read_topic(schedules_topic) if m.value() is None]
    assert sorted(m.key() or b"" for m in tombstones) == [f"proxy-{n}".encode() for n in range(5)]
    assert all(header(m, "schedule_source_type") == b"tombstone" for m in tombstones)
    assert all(header(m, "schedule_source_offset") is not None for m in tombstones)


@pytest.mark.parametrize("transactional", [False, True], ids=["at-least-once", "transactional"])
def test_a_partition_keyed_dispatch_waits_for_its_target_topic_naming_it(
    kafka_client: Client,
    schedules_topic: str,
    daemon_config: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
    late_topic: LateTopic,
    transactional: bool,
) -> None:
    """Due schedules whose target topic does not exist yet (and that the daemon does not create)
    are retried after a backoff whose log line names that topic, until it exists; then each
    target lands on its partition key's partition, not wherever librdkafka's partitioner would
    put a record sent without one."""
    caplog.set_level(logging.ERROR)
    target = late_topic.name
    users = [f"user-{n}" for n in range(12)]
    for user in users:
        schedule_message(
            kafka_client,
            {"topic": target, "payload": user.encode(), "partition_key": user},
            int(time.time()) - 1,
            {"topic": schedules_topic, "key": f"proxy-{user}"},
        )
    config = {**daemon_config, "allow.auto.create.topics": False}
    if transactional:
        config["transactional.id"] = f"txn-{uuid.uuid4().hex}"
    with start_scheduler(config, schedules_topic, f"g-{uuid.uuid4().hex}") as scheduler:
        wait_until(
            lambda: f"topic {target!r}" in caplog.text.replace('"', "'"),
            30,
            "a dispatch retried for want of its target topic",
        )
        late_topic.create(partitions=6)
        wait_until(
            lambda: sum(s["dispatched"] for s in scheduler.status()) == len(users),
            30,
            "every schedule dispatched",
        )
    placed = {
        (m.value() or b"").decode(): m.partition()
        for m in kafka_client.read_topic(target, timeout=20.0)
    }
    assert placed == {user: zlib.crc32(user.encode()) % 6 for user in users}


def test_cancelled_schedules_are_never_dispatched(
    kafka_client: Client,
    target: str,
    schedules_topic: str,
    daemon_config: dict[str, Any],
) -> None:
    now = int(time.time())
    envelope = {"topic": schedules_topic, "partition": 0}
    schedule_message(
        kafka_client,
        {"topic": target, "payload": b"cancelled"},
        now + 2,
        {**envelope, "key": "doomed"},
    )
    cancel_message(kafka_client, "doomed", envelope)
    # Sent later and due later, on the same partition: once it is dispatched, the cancelled one
    # would have been dispatched before it.
    schedule_message(
        kafka_client,
        {"topic": target, "payload": b"sentinel"},
        now + 3,
        {**envelope, "key": "sentinel"},
    )
    with start_scheduler(daemon_config, schedules_topic, f"g-{uuid.uuid4().hex}"):
        wait_until(lambda: len(kafka_client.read_topic(target)) >= 1, 30, "the sentinel")
    assert [m.value() for m in kafka_client.read_topic(target)] == [b"sentinel"]


def test_status_carries_librdkafkas_statistics_without_a_reporter(
    kafka_client: Client, schedules_topic: str, daemon_config: dict[str, Any]
) -> None:
    """The group consumer has librdkafka's statistics by default: each row carries its
    partition's offsets on the broker, with no reporter and no statistics.interval.ms given."""
    for n in range(3):
        schedule_message(
            kafka_client,
            {"topic": "never-dispatched", "payload": b"later"},
            int(time.time()) + 3600,
            {"topic": schedules_topic, "partition": 1, "key": f"later-{n}"},
        )
    with start_scheduler(daemon_config, schedules_topic, f"g-{uuid.uuid4().hex}") as scheduler:

        def high_watermarks() -> dict[int, int] | None:
            rows = scheduler.status()
            if len(rows) < 2 or any(row["broker"] is None for row in rows):
                return None
            return {row["partition"]: row["broker"]["hi_offset"] for row in rows}

        wait_until(lambda: high_watermarks() == {0: 0, 1: 3}, 30, "the partitions' statistics")


def test_state_reports_are_zlib_json_with_the_reference_fields(
    kafka_client: Client, schedules_topic: str, daemon_config: dict[str, Any]
) -> None:
    future = schedule_later(kafka_client, schedules_topic, 3)
    scheduler = start_scheduler(daemon_config, schedules_topic, f"g-{uuid.uuid4().hex}")
    wait_until(lambda: {s["state"] for s in scheduler.status()} == {"loaded"}, 30, "loaded")
    assert scheduler.stop()
    states = kafka_client.read_topic(f"{schedules_topic}_states")
    assert states, "no state report"
    for message in states:
        assert header(message, "zlib") == b"true"
    decoded = [
        (m.partition(), m.key(), json.loads(zlib.decompress(m.value() or b""))) for m in states
    ]
    final = {p: report for p, key, report in decoded if key == b"stopped_state"}
    assert set(final) == {0, 1}
    report = final[1]
    assert report["schema_version"] == "1.0.0"
    assert report["state"] == "stopped"
    assert report["offsets"] == {"low": 0, "high": 2}
    day = time.strftime("%Y-%m-%d", time.gmtime(future))
    assert report["daily"] == {day: 3}
    assert {"dispatched_at", "started_at", "reloads"} <= set(report)
    assert any(key == b"loaded_state" for _, key, _ in decoded)


def test_bad_records_are_counted_and_skipped(
    kafka_client: Client,
    target: str,
    schedules_topic: str,
    daemon_config: dict[str, Any],
) -> None:
    kafka_client.produce(schedules_topic, b"no headers at all", key="junk", partition=0)
    kafka_client.produce(
        schedules_topic,
        b"?",
        key="odd",
        partition=0,
        headers={"schedule_schema_version": "1.0.0", "schedule_source_type": "teleport"},
    )
    # Due now and aimed at the schedules topic itself (as a Karafka producer may write it): its
    # dispatched copy would keep the schedule_* headers and be read back as due, forever.
    kafka_client.produce(
        schedules_topic,
        b"loop",
        key="loop",
        partition=0,
        headers={
            "schedule_schema_version": "1.0.0",
            "schedule_source_type": "schedule",
            "schedule_target_epoch": str(int(time.time())),
            "schedule_target_topic": schedules_topic,
            "schedule_target_key": "loop",
        },
    )
    schedule_message(
        kafka_client,
        {"topic": target, "payload": b"good"},
        int(time.time()),
        {"topic": schedules_topic, "partition": 0},
    )
    with start_scheduler(daemon_config, schedules_topic, f"g-{uuid.uuid4().hex}") as scheduler:
        wait_until(lambda: len(kafka_client.read_topic(target)) == 1, 30, "the good schedule")
        # The good schedule's tombstone follows its dispatch, in the round that would also have
        # dispatched the looping one.
        wait_until(
            lambda: any(m.value() is None for m in kafka_client.read_topic(schedules_topic)),
            30,
            "the good schedule's tombstone",
        )
        status = {s["partition"]: s for s in scheduler.status()}
    assert status[0]["skipped"] == 3
    assert status[0]["dispatched"] == 1
    assert [m.value() for m in kafka_client.read_topic(target)] == [b"good"]
    on_schedules = [m.key() for m in kafka_client.read_topic(schedules_topic)]
    assert on_schedules == [b"junk", b"odd", b"loop", *on_schedules[3:]]
    assert len(on_schedules) == 5, on_schedules  # + the good proxy and its tombstone, no copy


def test_a_newer_schema_stops_its_partition_instead_of_losing_the_schedule(
    kafka_bootstrap: str,
    kafka_client: Client,
    target: str,
    schedules_topic: str,
    daemon_config: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    now = int(time.time())
    newer = schedule(
        {"topic": target, "payload": b"newer"}, now, {"topic": schedules_topic, "key": "newer"}
    )
    kafka_client.produce(
        schedules_topic,
        newer.value,
        key="newer",
        partition=0,
        headers=proxy_headers(newer, schedule_schema_version="1.1.0"),
    )
    for partition, payload in ((0, b"behind"), (1, b"sentinel")):
        schedule_message(
            kafka_client,
            {"topic": target, "payload": payload},
            now,
            {"topic": schedules_topic, "partition": partition},
        )
    with start_scheduler(daemon_config, schedules_topic, f"g-{uuid.uuid4().hex}") as scheduler:
        # Partition 1 is served in the same loop: once its schedule is out, partition 0 would
        # have dispatched "behind" too had it skipped the newer record.
        assert [m.value() for m in confluent_messages(kafka_bootstrap, target, 1, 30)] == [
            b"sentinel"
        ]
        status = {s["partition"]: s for s in scheduler.status()}
    assert status[0]["state"] == "blocked"
    assert (status[0]["skipped"], status[0]["dispatched"]) == (0, 0)
    assert "until this daemon is upgraded" in caplog.text


def test_karafka_header_names_and_formats_byte_for_byte() -> None:
    proxy = schedule(
        {
            "topic": "orders",
            "payload": b"paid",
            "key": "order-1",
            "partition": 4,
            "partition_key": "customer-7",
            "headers": {"trace": "abc"},
        },
        1_900_000_000,
        {"topic": "schedules"},
    )
    # Karafka's documented proxy headers: names, string values, epoch in whole seconds.
    assert proxy.headers == [
        ("trace", b"abc"),
        ("schedule_schema_version", b"1.0.0"),
        ("schedule_target_epoch", b"1900000000"),
        ("schedule_source_type", b"schedule"),
        ("schedule_target_topic", b"orders"),
        ("schedule_target_partition", b"4"),
        ("schedule_target_key", b"order-1"),
        ("schedule_target_partition_key", b"customer-7"),
    ]
    assert proxy.key.startswith("orders-")
    uuid.UUID(proxy.key.removeprefix("orders-"))
    assert SCHEDULES_TOPIC_CONFIG["cleanup.policy"] == "compact"


def scheduler_process(
    bootstrap: str, topic: str, group: str, *options: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ferrokafka",
            "scheduler",
            "--bootstrap-servers",
            bootstrap,
            "--schedules-topic",
            topic,
            "--group-id",
            group,
            "--interval-ms",
            "200",
            *options,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_daemon_process(
    bootstrap: str, topic: str, group: str, txn_id: str
) -> subprocess.Popen[str]:
    """A transactional daemon with the suite's short group timeouts."""
    settings = [f"--config={k}={v}" for k, v in GROUP_SETTINGS.items()]
    return scheduler_process(
        bootstrap, topic, group, f"--config=transactional.id={txn_id}", *settings
    )


def burst(kafka_bootstrap: str, schedules_topic: str, target: str, count: int, spread: int) -> int:
    """Schedules `count` messages spread over the next `spread` seconds; returns the first epoch."""
    start = int(time.time()) + 2
    with AsyncProducer({"bootstrap.servers": kafka_bootstrap}, max_queue_size=count) as producer:
        for n in range(count):
            proxy = schedule(
                {"topic": target, "payload": str(n).encode()},
                start + n * spread // count,
                {"topic": schedules_topic, "key": f"burst-{n}"},
            )
            producer.produce(proxy.value, proxy.topic, key=proxy.key, headers=proxy.headers)
    return start


def schedule_numbered(
    client: Client, target: str, schedules_topic: str, count: int, epoch: int, partitions: int
) -> None:
    """Schedules payloads ``b"0"`` to ``count - 1`` for ``epoch``, the proxy of ``n`` on
    partition ``n % partitions`` of ``schedules_topic``."""
    for n in range(count):
        schedule_message(
            client,
            {"topic": target, "payload": str(n).encode()},
            epoch,
            {"topic": schedules_topic, "partition": n % partitions},
        )


def count_values(client: Client, topic: str) -> Counter[bytes | None]:
    return Counter(m.value() for m in client.read_topic(topic, timeout=30.0))


def restart_then_assert_burst_dispatched_once(
    client: Client,
    config: dict[str, Any],
    schedules_topic: str,
    group: str,
    target: str,
    count: int,
) -> None:
    """Runs a daemon again in ``group`` until every schedule of a :func:`burst` of ``count`` is
    on ``target``, then asserts that none is there twice."""
    with start_scheduler(config, schedules_topic, group):
        wait_until(lambda: len(count_values(client, target)) == count, 90, "every schedule")
    seen = count_values(client, target)
    assert set(seen) == {str(n).encode() for n in range(count)}
    assert max(seen.values()) == 1, "a schedule was dispatched twice"


@pytest.mark.parametrize("how", ["sigterm", "kill -9"])
def test_restart_mid_burst_dispatches_every_schedule_exactly_once(
    how: str,
    kafka_bootstrap: str,
    kafka_client: Client,
    topic_factory: TopicFactory,
    schedules_topic: str,
    daemon_config: dict[str, Any],
) -> None:
    target = topic_factory(partitions=2)
    group, txn_id = f"g-{uuid.uuid4().hex}", f"txn-{uuid.uuid4().hex}"
    count = 5000
    burst(kafka_bootstrap, schedules_topic, target, count, spread=12)
    daemon = run_daemon_process(kafka_bootstrap, schedules_topic, group, txn_id)
    try:
        wait_until(
            lambda: sum(count_values(kafka_client, target).values()) >= count // 2,
            60,
            "half the burst",
        )
    finally:
        daemon.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        _, stderr = daemon.communicate(timeout=30)
    if how == "sigterm":
        assert daemon.returncode == 0, stderr
        assert "scheduler stopped" in stderr
    config = {**daemon_config, "transactional.id": txn_id}
    restart_then_assert_burst_dispatched_once(
        kafka_client, config, schedules_topic, group, target, count
    )


def test_stop_mid_burst_lets_pipelined_chunks_settle_so_a_restart_sends_none_twice(
    kafka_bootstrap: str,
    kafka_client: Client,
    topic_factory: TopicFactory,
    schedules_topic: str,
    daemon_config: dict[str, str | int | float | bool],
) -> None:
    """At-least-once: stopped while many chunks are on their way, the daemon still writes the
    tombstone of every target the broker acknowledged, so the next daemon skips them."""
    target = topic_factory(partitions=2)
    group = f"g-{uuid.uuid4().hex}"
    # Several times the 25,000 schedules the pipeline holds: the daemon dispatches over 100,000
    # per second and marks a pipeline's worth at once, so a smaller burst can be over by the
    # time the first dispatch is seen.
    count = 100_000
    burst(kafka_bootstrap, schedules_topic, target, count, spread=0)
    with start_scheduler(daemon_config, schedules_topic, group) as daemon:
        wait_until(
            lambda: sum(s["dispatched"] for s in daemon.status()) > 0,
            60,
            "the first dispatch",
            interval=0.005,
        )
        stopped_at = sum(s["dispatched"] for s in daemon.status())
    assert stopped_at < count, "the burst ended before the stop; the test needs a larger one"
    restart_then_assert_burst_dispatched_once(
        kafka_client, daemon_config, schedules_topic, group, target, count
    )


def test_two_daemons_split_partitions_and_survive_a_kill(
    kafka_bootstrap: str,
    kafka_client: Client,
    schedules_topic_factory: Callable[[int], str],
    target: str,
    daemon_config: dict[str, Any],
) -> None:
    topic = schedules_topic_factory(4)
    group = f"g-{uuid.uuid4().hex}"
    other = run_daemon_process(kafka_bootstrap, topic, group, f"txn-{uuid.uuid4().hex}")
    try:
        with Scheduler(daemon_config, [topic], group_id=group, state_interval=0.2) as scheduler:
            wait_until(lambda: 0 < len(scheduler.status()) < 4, 30, "a split of the partitions")
            other.kill()
            killed = time.monotonic()
            other.communicate(timeout=10)
            schedule_numbered(kafka_client, target, topic, 40, int(time.time()) + 1, 4)
            wait_until(lambda: len(scheduler.status()) == 4, 30, "all partitions moved here")
            wait_until(lambda: len(kafka_client.read_topic(target)) >= 40, 30, "all dispatches")
            took = time.monotonic() - killed
    finally:
        if other.poll() is None:
            other.kill()
            other.communicate(timeout=10)
    assert sorted(int(m.value() or b"-1") for m in kafka_client.read_topic(target)) == list(
        range(40)
    )
    # The dead daemon's partitions wait out its 6 s session, then reload in about a second.
    assert took < 6 + 5, f"the survivor dispatched the dead daemon's schedules after {took:.1f} s"


def test_a_partition_that_comes_back_keeps_counting_what_this_daemon_dispatched(
    kafka_bootstrap: str,
    kafka_client: Client,
    schedules_topic_factory: Callable[[int], str],
    target: str,
    daemon_config: dict[str, Any],
) -> None:
    # status() and the state reports count since the daemon started: a partition revoked and
    # assigned again (another daemon came and went) started again from 0.
    topic = schedules_topic_factory(2)
    group = f"g-{uuid.uuid4().hex}"
    with Scheduler(daemon_config, [topic], group_id=group, state_interval=0.2) as scheduler:
        wait_until(lambda: len(scheduler.status()) == 2, 30, "both partitions here")
        schedule_numbered(kafka_client, target, topic, 10, int(time.time()), 2)

        def dispatched() -> int:
            return sum(row["dispatched"] for row in scheduler.status())

        wait_until(lambda: dispatched() == 10, 30, "10 dispatches counted")
        other = run_daemon_process(kafka_bootstrap, topic, group, f"txn-{uuid.uuid4().hex}")
        try:
            wait_until(lambda: len(scheduler.status()) == 1, 30, "a partition moved away")
        finally:
            other.kill()
            other.communicate(timeout=10)
        wait_until(lambda: len(scheduler.status()) == 2, 30, "the partition back")
        assert dispatched() == 10


def confluent_messages(
    bootstrap: str, topic: str, expected: int, timeout: float, *, uncommitted: bool = False
) -> list[Any]:
    """Every record of `topic` read by an independent confluent-kafka consumer (committed
    transactions only, unless `uncommitted`): waits until `expected` arrived, then drains
    briefly so that duplicates would show."""
    from confluent_kafka import Consumer as ConfluentConsumer

    observer = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"observer-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted" if uncommitted else "read_committed",
        }
    )
    observer.subscribe([topic])
    found: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < expected and time.monotonic() < deadline:
            found.extend(m for m in observer.consume(100, timeout=0.5) if not m.error())
        drain_until = time.monotonic() + 1.0
        while time.monotonic() < drain_until:
            found.extend(m for m in observer.consume(100, timeout=0.2) if not m.error())
    finally:
        observer.close()
    return found


@pytest.fixture
def broker_control() -> Iterator[Any]:
    """Pauses (an outage) and resumes the test broker, the one scripts/kafka.sh runs on
    FERROKAFKA_TEST_KAFKA_PORT (started by scripts/test.sh or the session); resumes it after."""
    port = os.environ.get("FERROKAFKA_TEST_KAFKA_PORT", "19092")
    if os.environ.get("KAFKA_BOOTSTRAP", f"127.0.0.1:{port}") != f"127.0.0.1:{port}":
        pytest.fail(
            f"outage tests pause the test broker on 127.0.0.1:{port}; KAFKA_BOOTSTRAP names another"
        )
    env = {**os.environ, "KAFKA_PORT": port}

    def control(action: str) -> None:
        subprocess.run(
            ["bash", str(KAFKA_SCRIPT), action], env=env, check=True, capture_output=True
        )

    yield control
    control("resume")  # a no-op when it runs


def outage_until(
    broker_control: Any, caplog: pytest.LogCaptureFixture, logged: str, timeout: float, what: str
) -> None:
    """Stops the test broker until ``logged`` is in the log (``what``, within ``timeout``
    seconds), then starts it again."""
    broker_control("pause")
    try:
        wait_until(lambda: logged in caplog.text, timeout, what)
    finally:
        broker_control("resume")


def test_far_future_read_back_is_retried_through_a_broker_outage(
    kafka_bootstrap: str,
    kafka_client: Client,
    schedules_topic_factory: Callable[[int], str],
    target: str,
    broker_control: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    topic = schedules_topic_factory(1)
    count = 20
    # A long session: the group must not rebalance during the outage (a reload would hide the
    # loss this test is about).
    config: dict[str, str | int | float | bool] = {
        "bootstrap.servers": kafka_bootstrap,
        "session.timeout.ms": 30000,
        "heartbeat.interval.ms": 500,
    }
    with Scheduler(
        config, [topic], group_id=f"g-{uuid.uuid4().hex}", state_interval=0.2, horizon=1.0
    ) as scheduler:
        wait_until(lambda: [s["state"] for s in scheduler.status()] == ["loaded"], 30, "load")
        # Beyond the 1 s horizon when applied: held without payload, read back ~9 s later.
        epoch = int(time.time()) + 10
        for n in range(count):
            schedule_message(
                kafka_client,
                {"topic": target, "payload": str(n).encode()},
                epoch,
                {"topic": topic, "key": f"far-{n}"},
            )
        wait_until(lambda: scheduler.status()[0]["pending"] == count, 10, "schedules applied")
        outage_until(broker_control, caplog, "could not be read back yet", 45, "a failed read-back")
        # Generous bounds: a resumed broker and the read-back backoff (up to 10 s) take
        # long on a loaded machine; a passing run does not wait for them.
        dispatched = confluent_messages(kafka_bootstrap, target, count, 90)

        def settled() -> bool:
            # Normally the same run dispatched them all. On a loaded machine the group may
            # still rebalance once the broker is back: the reloaded partition then starts
            # its counters afresh and finds every schedule tombstoned.
            status = scheduler.status()
            return len(status) == 1 and status[0]["pending"] == 0

        wait_until(settled, 30, "nothing left pending")
    assert sorted(int(m.value()) for m in dispatched) == list(range(count))


def test_a_transactional_scheduler_dispatches_again_after_an_outage_its_abort_cannot_outlast(
    kafka_bootstrap: str,
    schedules_topic_factory: Callable[[int], str],
    target: str,
    daemon_config: dict[str, Any],
    broker_control: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An outage longer than an abort may wait (the dispatch timeout, 30 s) leaves librdkafka's
    abort unfinished, and librdkafka then refuses every later transaction as conflicting with
    it: the daemon dispatched nothing more until restarted. A new dispatch producer instance
    now takes over once the broker is back; every schedule is dispatched, none twice."""
    caplog.set_level(logging.WARNING)
    topic = schedules_topic_factory(1)
    config = {
        **daemon_config,
        "transactional.id": f"txn-{uuid.uuid4().hex}",
        # The open transaction's records time out 2 s into the outage, so its abort begins
        # then and is cut short while the broker is still away.
        "transaction.timeout.ms": 2000,
    }
    per_second, seconds = 5, 50
    count = per_second * seconds
    with start_scheduler(config, topic, f"g-{uuid.uuid4().hex}") as scheduler:
        wait_until(lambda: [s["state"] for s in scheduler.status()] == ["loaded"], 30, "load")
        sender = AsyncProducer({"bootstrap.servers": kafka_bootstrap}, max_queue_size=10_000)
        first_due = int(time.time()) + 2
        for n in range(count):
            schedule_message(
                sender,
                {"topic": target, "payload": str(n).encode()},
                first_due + n // per_second,
                {"topic": topic, "key": f"s-{n}"},
            )
        assert sender.shutdown(30) == []
        wait_until(lambda: scheduler.status()[0]["dispatched"] > 0, 30, "the first dispatch")
        outage_until(broker_control, caplog, "could not end its transaction", 60, "an abort cut")
        dispatched = confluent_messages(kafka_bootstrap, target, count, 90)
    assert sorted(int(m.value()) for m in dispatched) == list(range(count))


def proxy_headers(proxy: Any, **replace: str) -> dict[str, bytes]:
    """A proxy's headers with some values replaced (records no ferrokafka builder would make)."""
    headers = dict(proxy.headers)
    headers.update({name: value.encode() for name, value in replace.items()})
    return headers


def produce_proxies(
    client: Client,
    schedules_topic: str,
    plan: list[tuple[str, str, bytes]],
    due: int,
    built_for: str,
) -> None:
    """Writes a proxy per ``(key, target topic, payload)`` of ``plan`` to partition 0 of
    ``schedules_topic``, due at ``due``: built for the topic ``built_for``, then addressed to its
    own target by header, so that a plan may name a topic no builder would accept."""
    for key, topic, payload in plan:
        proxy = schedule(
            {"topic": built_for, "payload": payload},
            due,
            {"topic": schedules_topic, "key": key, "partition": 0},
        )
        headers = proxy_headers(proxy, schedule_target_topic=topic)
        client.produce(schedules_topic, proxy.value, key=key, partition=0, headers=headers)


@pytest.mark.parametrize(
    ("dead_letter", "transactional"),
    [(True, False), (True, True), (False, False)],
    ids=["dead-letter", "dead-letter-transactional", "no-dead-letter"],
)
def test_refused_targets_fail_alone_and_never_block_the_others(
    dead_letter: bool,
    transactional: bool,
    kafka_bootstrap: str,
    kafka_client: Client,
    topic_factory: TopicFactory,
    schedules_topic: str,
    daemon_config: dict[str, Any],
) -> None:
    target = topic_factory(partitions=1, config={"max.message.bytes": "2000"})
    dead_letter_topic = topic_factory(partitions=1) if dead_letter else None
    now = int(time.time())
    plan = [
        ("small-0", target, b"s0"),
        ("too-big", target, b"x" * 5000),
        ("small-1", target, b"s1"),
        ("illegal-topic", "bad topic!", b"i"),
        ("small-2", target, b"s2"),
    ]
    produce_proxies(kafka_client, schedules_topic, plan, now, built_for=target)
    config = dict(daemon_config)
    if transactional:
        config["transactional.id"] = f"txn-{uuid.uuid4().hex}"
    with Scheduler(
        config,
        [schedules_topic],
        group_id=f"g-{uuid.uuid4().hex}",
        state_interval=0.2,
        dead_letter_topic=dead_letter_topic,
    ) as scheduler:
        delivered = confluent_messages(kafka_bootstrap, target, 3, 30)
        wait_until(
            lambda: sum(s["failed"] for s in scheduler.status()) == 2, 30, "two failed schedules"
        )
        status = {s["partition"]: s for s in scheduler.status()}
    assert sorted(m.value() for m in delivered) == [b"s0", b"s1", b"s2"]
    assert (status[0]["dispatched"], status[0]["failed"]) == (3, 2)
    refused = {"too-big", "illegal-topic"}
    tombstones = {
        (m.key() or b"").decode()
        for m in confluent_messages(kafka_bootstrap, schedules_topic, 0, 5)
        if m.value() is None
    }
    assert tombstones == {"small-0", "small-1", "small-2"} | (refused if dead_letter else set())
    final = [
        json.loads(zlib.decompress(m.value() or b""))
        for m in kafka_client.read_topic(f"{schedules_topic}_states")
        if m.partition() == 0 and m.key() == b"stopped_state"
    ]
    assert final[-1]["failed"] == 2
    from ferrokafka.status import StatusReader, render_text

    reader = StatusReader(
        {"bootstrap.servers": kafka_bootstrap}, states_topics=[f"{schedules_topic}_states"]
    ).start()
    try:
        assert reader.wait_caught_up(20)
        snapshot = reader.snapshot()
    finally:
        reader.stop()
    assert [s.failed for s in snapshot.schedulers if s.partition == 0] == [2]
    assert "FAILED" in render_text(snapshot)
    if dead_letter_topic:
        dead = confluent_messages(kafka_bootstrap, dead_letter_topic, 2, 30)
        assert {(m.key() or b"").decode() for m in dead} == refused
        for message in dead:
            reason = dict(message.headers())["schedule_dead_letter_reason"].decode()
            assert re.search("too large|topic", reason, re.IGNORECASE), reason
            assert dict(message.headers())["schedule_source_topic"] == schedules_topic.encode()


@pytest.mark.parametrize("refused", [False, True], ids=["all-accepted", "one-refused"])
def test_chunks_due_together_share_transactions_and_an_abort_sends_them_again(
    refused: bool,
    kafka_bootstrap: str,
    kafka_client: Client,
    topic_factory: TopicFactory,
    target: str,
    schedules_topic: str,
    daemon_config: dict[str, Any],
) -> None:
    """Transactional, in chunks of one schedule (flush_batch_size 2): schedules due together
    go out in a few transactions, not one commit per chunk. A target refused for good dooms
    the transaction it shares with the others: the abort leaves read_committed readers none of
    its records, and the others are dispatched again, once each."""
    refusing = topic_factory(partitions=1, config={"max.message.bytes": "2000"})
    count = 100
    now = int(time.time())
    plan = [(f"s{n}", target, str(n).encode()) for n in range(count)]
    if refused:
        plan.insert(count // 2, ("too-big", refusing, b"x" * 5000))
    produce_proxies(kafka_client, schedules_topic, plan, now, built_for=target)
    config = {**daemon_config, "transactional.id": f"txn-{uuid.uuid4().hex}"}
    with Scheduler(
        config,
        [schedules_topic],
        group_id=f"g-{uuid.uuid4().hex}",
        state_interval=0.2,
        flush_batch_size=2,
    ) as scheduler:
        committed = confluent_messages(kafka_bootstrap, target, count, 30)
        wait_until(
            lambda: (
                [(s["dispatched"], s["failed"]) for s in scheduler.status() if s["partition"] == 0]
                == [(count, int(refused))]
            ),
            30,
            "every schedule settled",
        )
    assert sorted(int(m.value() or b"-1") for m in committed) == list(range(count))
    written = confluent_messages(kafka_bootstrap, target, count, 5, uncommitted=True)
    from confluent_kafka import Consumer as ConfluentConsumer
    from confluent_kafka import TopicPartition

    observer = ConfluentConsumer({"bootstrap.servers": kafka_bootstrap, "group.id": "observer"})
    try:
        low, high = observer.get_watermark_offsets(TopicPartition(target, 0), timeout=10)
    finally:
        observer.close()
    # Every offset holds a record (committed, or aborted and seen only read_uncommitted) or a
    # transaction's commit or abort marker.
    markers = high - low - len(written)
    assert markers < count // 10, f"{markers} transactions for {count} chunks"


def test_out_of_range_epochs_are_skipped_and_state_reports_stay_valid(
    kafka_client: Client,
    target: str,
    schedules_topic: str,
    daemon_config: dict[str, Any],
) -> None:
    now = int(time.time())
    proxy = schedule(
        {"topic": target, "payload": b"odd"}, now + 60, {"topic": schedules_topic, "partition": 0}
    )
    for key, epoch in (("millis", now * 1000), ("max", 2**63 - 1), ("negative", -5)):
        kafka_client.produce(
            schedules_topic,
            proxy.value,
            key=key,
            partition=0,
            headers=proxy_headers(proxy, schedule_target_epoch=str(epoch)),
        )
    schedule_message(
        kafka_client,
        {"topic": target, "payload": b"good"},
        now,
        {"topic": schedules_topic, "partition": 0},
    )
    with start_scheduler(daemon_config, schedules_topic, f"g-{uuid.uuid4().hex}") as scheduler:
        wait_until(lambda: len(kafka_client.read_topic(target)) == 1, 30, "the good schedule")
        wait_until(lambda: scheduler.status()[0]["pending"] == 0, 10, "nothing pending")
        status = {s["partition"]: s for s in scheduler.status()}
    assert status[0]["skipped"] == 3
    reports = [
        (m.key(), json.loads(zlib.decompress(m.value() or b"")))
        for m in kafka_client.read_topic(f"{schedules_topic}_states")
        if m.partition() == 0
    ]
    assert {key for key, _ in reports} >= {b"loaded_state", b"stopped_state"}
    for _, report in reports:
        assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", day) for day in report["daily"])


def test_static_member_restarted_after_kill_dispatches_within_seconds(
    kafka_bootstrap: str, kafka_client: Client, target: str, schedules_topic: str
) -> None:
    group = f"g-{uuid.uuid4().hex}"
    # A session far longer than the target: only static membership can bring the partitions
    # back in time.
    options = ("--instance-id", "scheduler-a", "--config=session.timeout.ms=30000")
    envelope = {"topic": schedules_topic, "partition": 0}
    first = scheduler_process(kafka_bootstrap, schedules_topic, group, *options)
    try:
        schedule_message(
            kafka_client, {"topic": target, "payload": b"before"}, int(time.time()), envelope
        )
        assert len(confluent_messages(kafka_bootstrap, target, 1, 30)) == 1
    finally:
        first.kill()
        first.communicate(timeout=10)
    schedule_message(
        kafka_client, {"topic": target, "payload": b"after"}, int(time.time()), envelope
    )
    started = time.monotonic()
    second = scheduler_process(kafka_bootstrap, schedules_topic, group, *options)
    try:
        wait_until(lambda: len(kafka_client.read_topic(target)) >= 2, 30, "the second dispatch")
        took = time.monotonic() - started
    finally:
        second.send_signal(signal.SIGTERM)
        _, stderr = second.communicate(timeout=30)
    print(f"static member: restart to dispatch {took:.1f} s")
    assert took <= 5.0, f"restarted daemon dispatched after {took:.1f} s"
    assert second.returncode == 0, stderr
    values = [m.value() for m in confluent_messages(kafka_bootstrap, target, 2, 10)]
    assert sorted(values) == [b"after", b"before"]


def test_offsets_are_committed_while_running(
    kafka_bootstrap: str,
    kafka_client: Client,
    target: str,
    schedules_topic: str,
    daemon_config: dict[str, Any],
) -> None:
    group = f"g-{uuid.uuid4().hex}"
    schedule_numbered(kafka_client, target, schedules_topic, 3, int(time.time()), 1)
    with start_scheduler(daemon_config, schedules_topic, group) as scheduler:
        assert len(confluent_messages(kafka_bootstrap, target, 3, 30)) == 3
        # Three proxies, then their three tombstones (read back by the daemon): next offset 6.
        wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, schedules_topic, 2).get(0, -1) >= 6,
            15,
            "the dispatched offsets committed",
        )
        assert scheduler.status()[0]["state"] == "loaded", "still running"


def test_the_offsets_pass_transaction_markers_and_aborted_records(
    kafka_bootstrap: str, schedules_topic: str, daemon_config: dict[str, Any]
) -> None:
    # A schedules topic a transactional producer writes (Karafka's advice against duplicate
    # dispatches): each transaction ends with a marker, which the commit passes, or the
    # group's lag stays at one. (These records are no schedules: counted, logged and skipped.)
    end = write_transactions(kafka_bootstrap, schedules_topic, aborted=(False, True))
    group = f"g-{uuid.uuid4().hex}"
    with start_scheduler(daemon_config, schedules_topic, group):
        wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, schedules_topic, 2).get(0) == end,
            15,
            "the offset committed past the last marker",
        )


def test_two_daemons_in_karafkas_default_group_dispatch_each_schedule_once(
    kafka_bootstrap: str,
    kafka_client: Client,
    schedules_topic_factory: Callable[[int], str],
    confluent_admin: Any,
    target: str,
    daemon_config: dict[str, Any],
) -> None:
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

    topic = schedules_topic_factory(4)
    resource = ConfigResource("topic", topic)
    described = confluent_admin.describe_configs([resource])[resource].result(timeout=10)
    assert described["segment.bytes"].value == "52428800"
    count = 40
    # No group_id: both join Karafka's group, karafka_scheduled_messages.
    with (
        Scheduler(daemon_config, [topic], state_interval=0.2) as first,
        Scheduler(daemon_config, [topic], state_interval=0.2) as second,
    ):

        def split_and_loaded() -> bool:
            rows = first.status() + second.status()
            return (
                bool(first.status())
                and bool(second.status())
                and sorted(r["partition"] for r in rows) == [0, 1, 2, 3]
                and all(r["state"] == "loaded" for r in rows)
            )

        wait_until(split_and_loaded, 30, "the partitions split between the daemons")
        schedule_numbered(kafka_client, target, topic, count, int(time.time()) + 1, 4)
        dispatched = confluent_messages(kafka_bootstrap, target, count, 30)
        wait_until(
            lambda: sum(r["dispatched"] for r in first.status() + second.status()) == count,
            10,
            "both daemons' status",
        )
    assert sorted(int(m.value()) for m in dispatched) == list(range(count))


def test_proxies_land_where_karafka_and_confluent_producers_put_them(
    kafka_bootstrap: str,
    kafka_client: Client,
    topic_factory: TopicFactory,
    schedules_topic_factory: Callable[[int], str],
    target: str,
    daemon_config: dict[str, Any],
) -> None:
    from confluent_kafka import Producer as ConfluentProducer

    topic = schedules_topic_factory(5)
    probe_topic = topic_factory(partitions=5)
    peer = ConfluentProducer({"bootstrap.servers": kafka_bootstrap})
    landed: dict[str, int] = {}

    def record(error: Any, message: Any) -> None:
        assert error is None, error
        landed[message.key().decode()] = message.partition()

    now = int(time.time())
    # Default proxy key: Karafka's proxy sets partition_key = the target key, so the proxy
    # lands where librdkafka (WaterDrop) puts that key: the probe shows where that is.
    defaulted = schedule_message(
        kafka_client,
        {"topic": target, "payload": b"defaulted", "key": "user-7"},
        now + 1,
        {"topic": topic},
    )
    assert defaulted.partition_key == "user-7"
    with pytest.raises(ValueError, match="does not exist"):
        schedule_message(
            kafka_client,
            {"topic": target, "payload": b"x", "key": "user-7"},
            now + 1,
            {"topic": f"{topic}-missing"},
        )
    peer.produce(probe_topic, b"probe", key="user-7", on_delivery=record)
    # An explicit proxy key, cancelled by a plain confluent-kafka producer.
    schedule_message(
        kafka_client,
        {"topic": target, "payload": b"cancelled"},
        now + 1,
        {"topic": topic, "key": "order-1"},
    )
    cancel_proxy = cancel("order-1", {"topic": topic})
    peer.produce(
        topic,
        cancel_proxy.value,
        key="order-1",
        headers=list[tuple[str, str | bytes | None]](cancel_proxy.headers),
        on_delivery=record,
    )
    assert peer.flush(10) == 0
    proxies = {
        (m.key() or b"").decode(): m.partition()
        for m in kafka_client.read_topic(topic)
        if m.value() is not None
    }
    assert proxies[defaulted.key] == landed["user-7"]
    assert proxies["order-1"] == landed["order-1"], "the cancel missed its schedule"
    with start_scheduler(daemon_config, topic, f"g-{uuid.uuid4().hex}"):
        dispatched = confluent_messages(kafka_bootstrap, target, 1, 30)
    assert [m.value() for m in dispatched] == [b"defaulted"]


def test_a_states_topic_with_too_few_partitions_is_said_once_not_every_interval(
    kafka_client: Client, daemon_config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # After partitions were added to a schedules topic, its states topic is short of them: the
    # scheduler warned about the missing one every state_interval, for ever.
    schedules = f"test-short-states-{uuid.uuid4().hex[:8]}"
    states = f"{schedules}_states"
    kafka_client.create_topics(
        [
            NewTopic(schedules, 2, config=SCHEDULES_TOPIC_CONFIG),
            NewTopic(states, 1, config={"cleanup.policy": "compact"}),
        ],
        timeout=30.0,
    )
    missing = f"state report for {states}-1 not sent"
    scheduler = start_scheduler(daemon_config, schedules, f"g-{uuid.uuid4().hex}")
    try:
        # Partition 0's reports arrive every 0.2 s; each time, partition 1's was tried too. (Not
        # counted in the log: the Rust logger's level filter may hold DEBUG lines back.)
        wait_until(
            lambda: len(kafka_client.read_topic(states, max_messages=5, timeout=5.0)) >= 5,
            30,
            "five state reports of the partition the states topic has",
        )
        assert scheduler.stop()
        warned = [
            r for r in caplog.records if missing in r.getMessage() and r.levelno >= logging.WARNING
        ]
        assert len(warned) == 1, [r.getMessage() for r in warned]
        assert f"{states} needs as many partitions as {schedules}" in warned[0].getMessage()
    finally:
        scheduler.stop()
        kafka_client.delete_topics([schedules, states], timeout=30.0)
