"""Acknowledged processing with redelivery against the real broker: acks, a consumer killed with
kill -9, hanging handlers and keepalives, dead letters, and a tracker killed and restarted."""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any, Literal, NamedTuple, cast

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka import Producer as ConfluentProducer

from ferrokafka import Client, ConfigError, KafkaError, MarkerRefusedError, NewTopic
from ferrokafka.codecs import decode_marker
from ferrokafka.redelivery import (
    ORIGINAL_OFFSET_HEADER,
    ORIGINAL_TOPIC_HEADER,
    REDELIVERY_COUNT_HEADER,
    QueueConsumer,
    QueueMessage,
    RedeliveryTracker,
    redelivery_count,
)
from tests.conftest import (
    GROUP_SETTINGS,
    KAFKA_SCRIPT,
    TopicFactory,
    committed_offsets,
    outage,
    wait_until,
    write_transactions,
)

pytestmark = pytest.mark.kafka

TIMEOUT = 2.0


@pytest.fixture
def config(kafka_bootstrap: str) -> dict[str, str | int | float | bool]:
    return {"bootstrap.servers": kafka_bootstrap, **GROUP_SETTINGS}


@pytest.fixture
def topics(topic_factory: TopicFactory) -> tuple[str, str]:
    """A queue topic and its markers topic, two partitions each."""
    return topic_factory(partitions=2), topic_factory(partitions=2)


@pytest.fixture
def tracker(config: dict[str, Any], topics: tuple[str, str]) -> Iterator[RedeliveryTracker]:
    queue, markers = topics
    with RedeliveryTracker(
        config, queue, markers, group_id=f"t-{uuid.uuid4().hex}", commit_interval=0.2
    ) as daemon:
        yield daemon


def produce(client: Client, topic: str, values: list[str]) -> None:
    for n, value in enumerate(values):
        client.produce(topic, value, key=value, partition=n % 2, headers={"origin": "test"})


def redelivered(client: Client, topic: str) -> Counter[str]:
    """Values of the queue messages that carry a redelivery count, with how often they came."""
    return Counter(
        (m.value() or b"").decode()
        for m in client.read_topic(topic, timeout=30.0)
        if redelivery_count(m) > 0
    )


def settled(tracker: RedeliveryTracker, partitions: int = 2) -> bool:
    """Every markers partition read to its end with nothing open any more."""
    status = tracker.status()
    return len(status) == partitions and all(s["caught_up"] and s["open"] == 0 for s in status)


def take(queue: QueueConsumer, count: int) -> list[QueueMessage]:
    taken: list[QueueMessage] = []
    deadline = time.monotonic() + 30
    while len(taken) < count:
        assert time.monotonic() < deadline, f"only {len(taken)} of {count} messages came"
        taken.extend(queue.consume(count - len(taken), timeout=1.0))
    return taken


@pytest.fixture
def dead_letters(topic_factory: TopicFactory) -> str:
    return topic_factory(partitions=1)


@pytest.fixture(params=["markers", "share"])
def backend(
    request: pytest.FixtureRequest,
    config: dict[str, Any],
    topics: tuple[str, str],
    dead_letters: str,
) -> Iterator[Backend]:
    """Each backend with what it needs to redeliver: a tracker for the markers, the broker
    for share groups; both dead-letter after two redeliveries."""
    if request.param == "share":
        yield Backend("share", None, config, topics, dead_letters)
        return
    queue, markers = topics
    with RedeliveryTracker(
        config,
        queue,
        markers,
        max_redeliveries=2,
        dead_letter_topic=dead_letters,
        group_id=f"t-{uuid.uuid4().hex}",
        commit_interval=0.2,
    ) as daemon:
        yield Backend("markers", daemon, config, topics, dead_letters)


class Backend(NamedTuple):
    """A backend with the test's config, (queue, markers) topics and dead-letter topic."""

    name: Literal["markers", "share"]
    tracker: RedeliveryTracker | None
    config: dict[str, Any]
    topics: tuple[str, str]
    dead_letters: str

    def open(self, timeout: float, group: str) -> QueueConsumer:
        queue_topic, markers = self.topics
        return QueueConsumer(
            self.config,
            queue_topic,
            markers,
            timeout,
            group_id=group,
            backend=self.name,
            max_redeliveries=2,
            dead_letter_topic=self.dead_letters,
        )


CONSUMER_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from ferrokafka.redelivery import QueueConsumer

    bootstrap, queue_topic, markers_topic, group, backend = sys.argv[1:6]
    total = int(sys.argv[6])
    config = {"bootstrap.servers": bootstrap, "session.timeout.ms": 6000}
    queue = QueueConsumer(
        config, queue_topic, markers_topic, 2.0, group_id=group, backend=backend
    )
    # One batch (a share consumer may not poll again while any of it is open).
    taken = []
    while not taken:
        taken = queue.consume(20, timeout=1.0)
    # Both partitions hold both kinds: 0, 1, 4, 5, ... are acked, 2, 3, 6, 7, ... held.
    done = [m for m in taken if int(m.value()) % 4 < 2]
    queue.ack_many(done)
    queue.flush()
    acked = [m.value().decode() for m in done]
    held = [m.value().decode() for m in taken if int(m.value()) % 4 >= 2]
    if backend == "markers":
        # The prefetch goes on marking the rest: killed between a batch's START and its commit,
        # that batch would come back twice (read again, and redelivered; at-least-once). The
        # kill comes once every message is marked and committed.
        deadline = time.monotonic() + 30
        while queue.stats()["received"] < total and time.monotonic() < deadline:
            time.sleep(0.01)
    report = {"acked": acked, "held": held, "received": queue.stats()["received"]}
    print(json.dumps(report), flush=True)
    time.sleep(600)
    """
)


def test_taken_messages_are_not_walked_by_the_garbage_collector(
    kafka_client: Client, config: dict[str, Any], topics: tuple[str, str]
) -> None:
    # The iterator's buffer holds up to max_batch_size messages between collections; a message
    # refers to no Python object, so the collector has no reason to walk them.
    queue_topic, markers = topics
    produce(kafka_client, queue_topic, ["a", "b", "c"])
    with QueueConsumer(config, queue_topic, markers, group_id=f"g-{uuid.uuid4().hex}") as queue:
        taken = take(queue, 3)
        assert [gc.is_tracked(m) for m in taken] == [False, False, False]
        queue.ack_many(taken)


def test_killed_consumer_unacked_come_back_acked_never(
    kafka_bootstrap: str, kafka_client: Client, topics: tuple[str, str], backend: Backend
) -> None:
    queue_topic, markers = topics
    values = [str(n) for n in range(20)]
    produce(kafka_client, queue_topic, values)
    group = f"g-{uuid.uuid4().hex}"
    args = [kafka_bootstrap, queue_topic, markers, group, backend.name, str(len(values))]
    child = subprocess.Popen(
        [sys.executable, "-c", CONSUMER_SCRIPT, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, child.stderr.read() if child.stderr else "no output"
        report = json.loads(line)
    finally:
        child.kill()
        child.communicate(timeout=10)
    acked, held = set(report["acked"]), set(report["held"])
    assert acked
    assert held
    if backend.name == "markers":
        assert report["received"] == len(values), "the child was killed before it marked all"
    # Everything not acked comes back once: the held ones as a redelivery, the rest (never
    # handed out) as a first delivery or, if the child had marked them already, a redelivery.
    came: dict[str, int] = {}
    with backend.open(TIMEOUT, group) as queue:
        deadline = time.monotonic() + 45
        while set(came) != set(values) - acked:
            assert time.monotonic() < deadline, f"came back: {sorted(came)}"
            batch = queue.consume(20, timeout=1.0)
            for message in batch:
                value = (message.value() or b"").decode()
                assert value not in came, f"{value} came back twice"
                came[value] = redelivery_count(message)
            queue.ack_many(batch)
        queue.flush()
        if backend.tracker is not None:
            tracker = backend.tracker
            wait_until(lambda: settled(tracker), 30, "every marker closed")
        assert queue.consume(20, timeout=1.0) == [], "a message came back again"
    assert not acked & set(came), "an acked message came back"
    assert {v: came[v] for v in held} == dict.fromkeys(held, 1)
    assert set(came.values()) <= {0, 1}


def test_automatic_keepalive_holds_a_slow_handler_nack_after_timeout_lets_go(
    config: dict[str, Any],
    kafka_client: Client,
    topics: tuple[str, str],
    tracker: RedeliveryTracker,
) -> None:
    queue_topic, markers = topics
    produce(kafka_client, queue_topic, ["slow", "interrupted"])
    with QueueConsumer(
        config, queue_topic, markers, TIMEOUT, group_id=f"g-{uuid.uuid4().hex}"
    ) as queue:
        by_value = {(m.value() or b"").decode(): m for m in take(queue, 2)}
        # kafka-mq-go's Interrupt: no marker, its keepalive stops, its deadline runs out.
        queue.nack(by_value["interrupted"], redeliver="after_timeout")
        wait_until(
            lambda: "interrupted" in redelivered(kafka_client, queue_topic), 30, "interrupted"
        )
        # "slow" got no call at all; the engine kept it alive past its first deadline (both
        # STARTs were written together) and for at least two more half-timeouts.
        kept = queue.stats()["keepalives"]
        wait_until(lambda: queue.stats()["keepalives"] >= kept + 2, 30, "two more keepalives")
        queue.ack(by_value["slow"])
        [again] = take(queue, 1)
        assert (again.value(), redelivery_count(again)) == (b"interrupted", 1)
        queue.ack(again)
        queue.flush()
        wait_until(lambda: settled(tracker), 30, "every marker closed")
        assert queue.stats()["nacked"] == 1
    assert redelivered(kafka_client, queue_topic) == Counter({"interrupted": 1})


def test_nack_now_redelivers_at_once_dead_letter_after_max_redeliveries(
    kafka_client: Client, topics: tuple[str, str], dead_letters: str, backend: Backend
) -> None:
    produce(kafka_client, topics[0], ["poison"])
    counts: list[int] = []
    with backend.open(30.0, f"g-{uuid.uuid4().hex}") as queue:
        # Every attempt fails: nack makes it due at once, long before the 30 s timeout.
        while len(counts) < 3:
            message = queue.poll(timeout=20.0)
            assert message is not None, f"attempt {len(counts) + 1} never came"
            counts.append(redelivery_count(message))
            queue.nack(message)
        wait_until(lambda: kafka_client.read_topic(dead_letters) != [], 30, "the dead letter")
        if backend.tracker is not None:
            tracker = backend.tracker
            wait_until(lambda: settled(tracker), 30, "every marker closed")
            status = tracker.status()
            dead = sum(s["dead_lettered"] for s in status)
            assert sum(s["redelivered"] for s in status) == 2
        else:
            dead = queue.stats()["dead_lettered"]
        assert queue.poll(timeout=1.0) is None, "redelivered past max_redeliveries"
    assert counts == [0, 1, 2]
    assert dead == 1
    [letter] = kafka_client.read_topic(dead_letters)
    headers = dict(letter.headers() or [])
    assert (letter.key(), letter.value()) == (b"poison", b"poison")
    assert headers["origin"] == b"test"
    assert headers[REDELIVERY_COUNT_HEADER] == b"2"
    assert headers[ORIGINAL_TOPIC_HEADER] == topics[0].encode()


def committed_markers(bootstrap: str, group: str, markers: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offsets = reader.committed([TopicPartition(markers, p) for p in (0, 1)], timeout=10)
    finally:
        reader.close()
    return sum(max(tp.offset, 0) for tp in offsets)


def test_tracker_killed_and_restarted_forgets_nothing_and_bursts_nothing(
    kafka_bootstrap: str,
    config: dict[str, Any],
    kafka_client: Client,
    topics: tuple[str, str],
) -> None:
    queue_topic, markers = topics
    group = f"t-{uuid.uuid4().hex}"
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ferrokafka",
            "redelivery",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--queue-topic",
            queue_topic,
            "--markers-topic",
            markers,
            "--group-id",
            group,
            "--commit-interval-ms",
            "100",
            *[f"--config={k}={v}" for k, v in GROUP_SETTINGS.items()],
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    first, second = [f"a{n}" for n in range(6)], [f"b{n}" for n in range(6)]
    unacked = {"b1", "b3", "b5"}
    try:
        with QueueConsumer(
            config, queue_topic, markers, 3.0, group_id=f"g-{uuid.uuid4().hex}"
        ) as queue:
            produce(kafka_client, queue_topic, first)
            for message in take(queue, 6):
                queue.ack(message)
            queue.flush()
            # The tracker read and committed past the first batch: 6 STARTs and 6 ENDs.
            wait_until(
                lambda: committed_markers(kafka_bootstrap, group, markers) == 12,
                30,
                "the tracker's commit",
            )
            produce(kafka_client, queue_topic, second)
            for message in take(queue, 6):
                if (message.value() or b"").decode() not in unacked:
                    queue.ack(message)
            queue.flush()
            daemon.kill()
            _, stderr = daemon.communicate(timeout=10)
            assert "redelivery tracker started" in stderr
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.communicate(timeout=10)
    with RedeliveryTracker(config, queue_topic, markers, group_id=group) as restarted:
        wait_until(lambda: set(redelivered(kafka_client, queue_topic)) == unacked, 45, "unacked")
        wait_until(lambda: settled(restarted), 30, "every marker closed")
        status = restarted.status()
    assert redelivered(kafka_client, queue_topic) == Counter(dict.fromkeys(unacked, 1))
    assert sum(s["redelivered"] for s in status) == len(unacked)


def test_close_from_another_thread_ends_iteration(backend: Backend) -> None:
    queue = backend.open(TIMEOUT, f"g-{uuid.uuid4().hex}")
    closer = threading.Timer(0.5, queue.close)
    closer.start()
    assert list(queue) == []
    closer.join()


def dead_lettering_tracker(
    config: dict[str, Any], topics: tuple[str, str], dead_letters: str
) -> RedeliveryTracker:
    """A tracker (not started) that dead-letters a message at its first redelivery: one
    that comes back counted was not put back."""
    queue_topic, markers = topics
    return RedeliveryTracker(
        config,
        queue_topic,
        markers,
        max_redeliveries=0,
        dead_letter_topic=dead_letters,
        group_id=f"t-{uuid.uuid4().hex}",
        commit_interval=0.2,
    )


@pytest.mark.parametrize("ending", ["close", "drop"])
@pytest.mark.parametrize("name", ["markers", "share"])
def test_a_closing_consumer_puts_back_what_it_marked_and_never_handed_out(
    name: Literal["markers", "share"],
    ending: Literal["close", "drop"],
    config: dict[str, Any],
    topics: tuple[str, str],
    dead_letters: str,
    kafka_client: Client,
) -> None:
    # With max_redeliveries=0 a message that comes back counted as redelivered is dead-lettered
    # unseen: what a loop left in its batch and what the prefetch marked must come back as new.
    queue_topic, markers = topics
    values = [str(n) for n in range(20)]
    produce(kafka_client, queue_topic, values)
    group = f"g-{uuid.uuid4().hex}"
    settings: dict[str, Any] = {
        "group_id": group,
        "backend": name,
        "max_redeliveries": 0,
        "dead_letter_topic": dead_letters,
        "max_batch_size": 4,
    }
    tracker = None
    if name == "markers":
        tracker = dead_lettering_tracker(config, topics, dead_letters).start()
    try:
        queue = QueueConsumer(config, queue_topic, markers, 3.0, **settings)
        for job in queue:
            queue.ack(job)
            first = (job.value() or b"").decode()
            break
        if name == "markers":
            wait_until(lambda: queue.stats()["received"] == 20, 30, "every message marked")
        if ending == "close":
            queue.close()
        else:
            # Collected without a close: closed as close() would be.
            del queue
            gc.collect()
        again: list[QueueMessage] = []
        with QueueConsumer(config, queue_topic, markers, 3.0, **settings) as queue:
            deadline = time.monotonic() + 30
            while len(again) < 19:
                assert time.monotonic() < deadline, f"only {len(again)} of 19 messages came"
                batch = queue.consume(19 - len(again), timeout=1.0)
                queue.ack_many(batch)
                again.extend(batch)
        assert sorted((m.value() or b"").decode() for m in again) == sorted(set(values) - {first})
        assert {redelivery_count(m) for m in again} == {0}
        assert {dict(m.headers() or [])["origin"] for m in again} == {b"test"}
        if tracker is not None:
            markers_tracker = tracker
            wait_until(lambda: settled(markers_tracker), 30, "every marker closed")
            status = tracker.status()
            assert sum(s["dead_lettered"] + s["redelivered"] for s in status) == 0
        assert kafka_client.read_topic(dead_letters) == []
    finally:
        if tracker is not None:
            tracker.stop()


def test_a_close_puts_back_each_message_whose_copy_the_broker_takes(
    config: dict[str, Any],
    topic_factory: TopicFactory,
    dead_letters: str,
    kafka_bootstrap: str,
    kafka_client: Client,
) -> None:
    # The queue topic takes at most 1,000 bytes a batch, and the large messages fit only as
    # their producer compressed them: their uncompressed copies are refused. The small ones are
    # put back as new all the same; only the large ones come back counted as redelivered (so
    # dead-lettered with max_redeliveries=0), and nothing comes twice. (The share backend has
    # the same rule, but librdkafka hands it one partition's records a poll, and copies fail a
    # partition's batch at a time, so a close never has both kinds there.)
    queue_topic = topic_factory(partitions=2, config={"max.message.bytes": "1000"})
    markers = topic_factory(partitions=2)
    small = {f"small-{n}" for n in range(3)}
    large = {f"large-{n}-" + "x" * 2000 for n in range(3)}
    writer = ConfluentProducer({"bootstrap.servers": kafka_bootstrap, "compression.type": "zstd"})
    for partition, values in ((0, small), (1, large)):
        for value in sorted(values):
            writer.produce(queue_topic, value, value, partition=partition)
            writer.flush(10)  # one record a batch: three small ones together fit too
    assert writer.flush(10) == 0
    settings: dict[str, Any] = {
        "group_id": f"g-{uuid.uuid4().hex}",
        "max_redeliveries": 0,
        "dead_letter_topic": dead_letters,
    }
    with dead_lettering_tracker(config, (queue_topic, markers), dead_letters):
        with QueueConsumer(config, queue_topic, markers, 2.0, **settings) as queue:
            for job in queue:
                queue.ack(job)
                first = (job.value() or b"").decode()
                break
            wait_until(lambda: queue.stats()["received"] == 6, 30, "every message marked")
        again: list[str] = []
        dead: list[str] = []
        deadline = time.monotonic() + 40
        with QueueConsumer(config, queue_topic, markers, 30.0, **settings) as queue:
            while len(again) + len(dead) < 5:
                assert time.monotonic() < deadline, f"came again: {again}; dead letters: {dead}"
                batch = queue.consume(5, timeout=1.0)
                queue.ack_many(batch)
                again.extend((m.value() or b"").decode() for m in batch)
                dead = [(r.value() or b"").decode() for r in kafka_client.read_topic(dead_letters)]
    assert sorted(again) == sorted(small - {first})
    assert sorted(dead) == sorted(large - {first})


def test_one_config_serves_every_client_without_confwarn(
    config: dict[str, Any], topics: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    # Consumer-only (group, offset reset) and producer-only (linger) settings side by side, as a
    # user writes one config dict for a component; each client gets only its own.
    queue_topic, markers = topics
    mixed = {**config, "auto.offset.reset": "earliest", "linger.ms": 2}
    with caplog.at_level(logging.WARNING):
        tracker = RedeliveryTracker(mixed, queue_topic, markers, group_id=f"t-{uuid.uuid4().hex}")
        tracker.start()
        QueueConsumer(mixed, queue_topic, markers, TIMEOUT).close()
        tracker.stop()
    assert not [r.getMessage() for r in caplog.records if "CONFWARN" in r.getMessage()]


class Position(NamedTuple):
    """A message as a user may hand it to ack_many: anything with partition() and offset()."""

    at: tuple[int, int]

    def partition(self) -> int:
        return self.at[0]

    def offset(self) -> int:
        return self.at[1]


def test_ack_many_writes_one_end_per_message_fetched_or_duck_typed(
    config: dict[str, Any], topics: tuple[str, str], kafka_client: Client
) -> None:
    queue_topic, markers = topics
    produce(kafka_client, queue_topic, [f"e{n}" for n in range(6)])
    with QueueConsumer(
        config, queue_topic, markers, 30.0, group_id=f"g-{uuid.uuid4().hex}"
    ) as queue:
        taken = take(queue, 6)
        positions = {(m.partition() or 0, m.offset() or 0) for m in taken}
        # Fetched messages are read natively; other objects (outside the declared type, as
        # a user's own wrapper may be) through their methods.
        ducks = [Position((m.partition() or 0, m.offset() or 0)) for m in taken[4:]]
        queue.ack_many([*taken[:4], *cast(list[QueueMessage], ducks)])
        queue.flush(10.0)
        assert queue.stats()["acked"] == 6
    ends = [
        decode_marker(record.value() or b"")
        for record in kafka_client.read_topic(markers, timeout=30.0)
    ]
    assert sorted((m.partition, m.offset) for m in ends if m.kind == "end") == sorted(positions)


def end_positions(client: Client, markers: str) -> set[tuple[int, int]]:
    """(partition, offset) of every message an END marker on ``markers`` closes."""
    decoded = (decode_marker(r.value() or b"") for r in client.read_topic(markers, timeout=10.0))
    return {(m.partition, m.offset) for m in decoded if m.kind == "end"}


def test_single_acks_are_written_without_flush_or_keepalive_and_by_close(
    config: dict[str, Any], topics: tuple[str, str], kafka_client: Client
) -> None:
    # A single ack's END is held back to be written with others: the marker thread writes it
    # within a millisecond even with nothing to keep alive, and close writes what is held.
    queue_topic, markers = topics
    produce(kafka_client, queue_topic, [f"s{n}" for n in range(6)])

    def ends() -> set[tuple[int, int]]:
        return end_positions(kafka_client, markers)

    queue = QueueConsumer(
        config, queue_topic, markers, 30.0, group_id=f"g-{uuid.uuid4().hex}", auto_keepalive=False
    )
    try:
        taken = take(queue, 6)
        first = {(m.partition() or 0, m.offset() or 0) for m in taken[:3]}
        for message in taken[:3]:
            queue.ack(message)
        wait_until(lambda: ends() == first, 20, "the single acks' END markers, without a flush")
        for message in taken[3:]:
            queue.ack(message)
        assert queue.stats()["acked"] == 6
    finally:
        queue.close()
    assert ends() == {(m.partition() or 0, m.offset() or 0) for m in taken}


def test_a_consumer_collected_without_close_writes_its_acks_and_leaves_its_group(
    config: dict[str, Any], topics: tuple[str, str], kafka_client: Client
) -> None:
    # The last reference goes right after the acks, with their END markers held or still in
    # librdkafka: the drop writes them, puts back what was marked and never handed out, and
    # leaves the group.
    queue_topic, markers = topics
    produce(kafka_client, queue_topic, [f"c{n}" for n in range(8)])
    group = f"g-{uuid.uuid4().hex}"
    unleft = {**config, "session.timeout.ms": 45000}  # a group not left holds 45 s, not 6
    queue = QueueConsumer(unleft, queue_topic, markers, 30.0, group_id=group)
    taken = take(queue, 4)
    for message in taken:
        queue.ack(message)
    acked = {(m.partition() or 0, m.offset() or 0) for m in taken}
    del queue
    gc.collect()
    assert_acked_and_the_rest_put_back(kafka_client, topics, acked, produced=8)
    assert_group_left(config, kafka_client, (queue_topic, markers), group)


UNCLOSED_SCRIPT = textwrap.dedent(
    """
    import json, sys, threading, time
    from ferrokafka.redelivery import QueueConsumer

    bootstrap, queue_topic, markers_topic, group = sys.argv[1:5]
    config = {"bootstrap.servers": bootstrap, "session.timeout.ms": 45000}
    queue = QueueConsumer(config, queue_topic, markers_topic, 30.0, group_id=group)
    taken = []
    while len(taken) < 4:
        taken.extend(queue.consume(4 - len(taken), timeout=5.0))
    for job in taken:
        queue.ack(job)
    print(json.dumps([[m.partition(), m.offset()] for m in taken]), flush=True)
    # Only a daemon thread's running frame holds the consumer now: Python never frees it, so
    # nothing but the exit hook closes it.
    threading.Thread(target=lambda held=queue: time.sleep(3600), daemon=True).start()
    del queue
    """
)


def test_an_unclosed_consumer_is_closed_at_exit_its_acks_written_and_its_group_left(
    kafka_bootstrap: str, config: dict[str, Any], topics: tuple[str, str], kafka_client: Client
) -> None:
    queue_topic, markers = topics
    produce(kafka_client, queue_topic, [f"x{n}" for n in range(8)])
    group = f"g-{uuid.uuid4().hex}"
    child = subprocess.run(
        [sys.executable, "-c", UNCLOSED_SCRIPT, kafka_bootstrap, queue_topic, markers, group],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    acked = {(p, o) for p, o in json.loads(child.stdout)}
    assert_acked_and_the_rest_put_back(kafka_client, topics, acked, produced=8)
    assert_group_left(config, kafka_client, topics, group)


def assert_acked_and_the_rest_put_back(
    client: Client, topics: tuple[str, str], acked: set[tuple[int, int]], produced: int
) -> None:
    """Every END on the markers topic closes a message acked or one the close put back: a copy
    of each of the latter follows the ``produced`` originals on the queue topic."""
    queue_topic, markers = topics
    ended = end_positions(client, markers)
    assert acked <= ended, "an ack's END is missing"
    records = client.read_topic(queue_topic, timeout=10.0)
    per_partition = produced // 2  # produce() alternates the two partitions
    originals = {
        (m.partition(), m.offset()): m.value() for m in records if (m.offset() or 0) < per_partition
    }
    copies = Counter(m.value() for m in records if (m.offset() or 0) >= per_partition)
    assert len(originals) == produced
    assert Counter(originals[p] for p in ended - acked) == copies


def assert_group_left(
    config: dict[str, Any], client: Client, topics: tuple[str, str], group: str
) -> None:
    """A consumer of ``group`` (with a 45 s session timeout) left it: a new member gets the
    partitions, and so a message produced now, within 20 s."""
    queue_topic, markers = topics
    produce(client, queue_topic, ["after"])
    deadline = time.monotonic() + 20
    came: list[bytes | None] = []
    with QueueConsumer(config, queue_topic, markers, 30.0, group_id=group) as queue:
        # Messages the first had not marked yet come first, as they would to any next member.
        while b"after" not in came:
            assert time.monotonic() < deadline, "the first consumer did not leave its group"
            batch = queue.consume(10, timeout=1.0)
            came.extend(m.value() for m in batch)
            queue.ack_many(batch)


def read_with_confluent(bootstrap: str, topic: str) -> list[Any]:
    """Every record of the one-partition ``topic``, read by confluent-kafka to its end."""
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"counter-{uuid.uuid4().hex}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    reader.assign([TopicPartition(topic, 0, 0)])
    records: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while True:
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            message = reader.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is None:
                records.append(message)
            elif error.code() == ConfluentError._PARTITION_EOF:
                return records
            else:
                raise AssertionError(error)
    finally:
        reader.close()


def committed(bootstrap: str, group: str, topic: str) -> int:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [position] = reader.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        reader.close()
    return int(position.offset)


@pytest.mark.parametrize("dead_letter", [True, False], ids=["dead-lettered", "handed-back"])
def test_a_start_the_markers_topic_always_refuses_blocks_nothing_behind_it(
    config: dict[str, Any],
    topic_factory: TopicFactory,
    kafka_client: Client,
    dead_letter: bool,
) -> None:
    # The markers topic refuses the START of one message for good (too large for it); the
    # batches around it are written as usual. Before, that batch failed on every read forever.
    queue_topic = topic_factory(partitions=1)
    markers = topic_factory(partitions=1, config={"max.message.bytes": "2000"})
    dead_letters = topic_factory(partitions=1) if dead_letter else None
    big = "x" * 5000
    values = [f"m{n}" for n in range(12)]
    values.insert(5, big)
    for value in values:
        kafka_client.produce(queue_topic, value, key=value[:8], partition=0)
    group = f"g-{uuid.uuid4().hex}"
    came: list[str] = []
    handed_back: list[MarkerRefusedError] = []
    with QueueConsumer(
        config,
        queue_topic,
        markers,
        30.0,
        group_id=group,
        max_batch_size=3,
        dead_letter_topic=dead_letters,
    ) as queue:
        deadline = time.monotonic() + 30
        while len(came) < len(values) - 1:
            assert time.monotonic() < deadline, f"only {came} came"
            try:
                batch = queue.consume(20, timeout=1.0)
            except MarkerRefusedError as error:
                handed_back.append(error)
                continue
            came.extend((m.value() or b"").decode() for m in batch)
            queue.ack_many(batch)
        queue.flush()
        assert queue.consume(20, timeout=0.5) == []
        assert queue.stats()["refused"] == 1
    assert came == [v for v in values if v != big]
    bootstrap = str(config["bootstrap.servers"])
    # Committed past every message, the refused one included.
    assert committed(bootstrap, group, queue_topic) == len(values)
    if dead_letters is not None:
        assert handed_back == []
        [letter] = read_with_confluent(bootstrap, dead_letters)
        headers = dict(letter.headers() or [])
        assert (letter.key(), letter.value()) == (big[:8].encode(), big.encode())
        assert headers[ORIGINAL_TOPIC_HEADER] == queue_topic.encode()
        assert headers[ORIGINAL_OFFSET_HEADER] == b"5"
    else:
        [refused] = handed_back
        assert refused.name == "MSG_SIZE_TOO_LARGE"
        assert (refused.message.value(), refused.message.offset()) == (big.encode(), 5)
    # Every START but the refused one is on the markers topic, counted by another client.
    starts = {
        decode_marker(r.value() or b"").offset
        for r in read_with_confluent(bootstrap, markers)
        if decode_marker(r.value() or b"").kind == "start"
    }
    assert starts == set(range(len(values))) - {5}


def test_each_backend_has_its_own_default_group_and_a_classic_group_is_named(
    config: dict[str, Any], topics: tuple[str, str], kafka_client: Client
) -> None:
    # The README's blocks one after the other: the markers backend, then share groups on the
    # same queue. Both used ferrokafka-queue-<topic>: the share heartbeat died with "The group
    # id does not exist".
    queue_topic, markers = topics
    produce(kafka_client, queue_topic, ["first", "second"])
    with QueueConsumer(config, queue_topic, markers, 30.0) as queue:
        taken = take(queue, 2)
        queue.ack_many(taken)
        queue.flush()
    with QueueConsumer(config, queue_topic, markers, 30.0, backend="share") as shared:
        assert shared.backend == "share"
        again: list[QueueMessage] = []
        deadline = time.monotonic() + 30
        while len(again) < 2:
            assert time.monotonic() < deadline, f"only {len(again)} came"
            batch = shared.consume(2, timeout=1.0)
            shared.ack_many(batch)  # a share consumer takes more only once these are acked
            again.extend(batch)
        shared.flush()
    assert sorted((m.value() or b"") for m in again) == [b"first", b"second"]
    markers_group = f"ferrokafka-queue-{queue_topic}"
    with pytest.raises(ConfigError, match="is a classic consumer group"):
        QueueConsumer(config, queue_topic, markers, 30.0, backend="share", group_id=markers_group)
    with QueueConsumer(
        config, queue_topic, markers, 30.0, backend="auto", group_id=markers_group
    ) as kept:
        assert kept.backend == "markers"


def queue_of(bootstrap: str, jobs: int) -> tuple[str, str]:
    """A new one-partition queue topic on ``bootstrap`` holding ``jobs`` messages, and its new
    one-partition markers topic."""
    queue_topic, markers = f"q-{uuid.uuid4().hex}", f"m-{uuid.uuid4().hex}"
    client = Client({"bootstrap.servers": bootstrap})
    client.create_topics([NewTopic(queue_topic, 1), NewTopic(markers, 1)], timeout=30.0)
    for n in range(jobs):
        client.produce(queue_topic, f"j{n}", partition=0)
    return queue_topic, markers


def test_closing_with_the_broker_down_takes_seconds_and_counts_what_is_not_written(
    outage_broker: tuple[str, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap, env = outage_broker
    queue_topic, markers = queue_of(bootstrap, 5)
    queue = QueueConsumer(
        {"bootstrap.servers": bootstrap, **GROUP_SETTINGS}, queue_topic, markers, 30.0
    )
    taken = take(queue, 5)
    with outage(env), caplog.at_level(logging.WARNING, logger="ferrokafka"):
        queue.ack_many(taken)  # END markers librdkafka cannot send now
        started = time.monotonic()
        queue.close()
        elapsed = time.monotonic() - started
    assert elapsed < 10.0, f"close took {elapsed:.1f} s"
    assert any(
        "5 END/KEEPALIVE markers" in r.getMessage() and "not written" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]


FULL_QUEUE_SCRIPT = textwrap.dedent(
    """
    import json, subprocess, sys, time
    from ferrokafka.redelivery import QueueConsumer

    bootstrap, queue_topic, markers_topic, kafka_script = sys.argv[1:5]
    # librdkafka's queue holds 5 markers: full at once while the broker is down, as a long
    # outage fills the default queue of 100,000.
    config = {"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 5}
    queue = QueueConsumer(config, queue_topic, markers_topic, 30.0)
    taken = []
    while len(taken) < 20:
        taken.extend(queue.consume(20 - len(taken), timeout=5.0))
    subprocess.run(["bash", kafka_script, "pause"], check=True, capture_output=True)
    try:
        started = time.monotonic()
        for job in taken:
            queue.ack(job)
        time.sleep(0.5)  # the marker thread writes the held ENDs: 5 taken, 15 refused
        try:
            queue.ack_many([])
            queue.flush(1.0)
        except Exception as error:
            flushed = type(error).__name__
        else:
            flushed = "flushed"
        failed = queue.stats()["failed_markers"]
        queue.close(1.0)
        elapsed = time.monotonic() - started
    finally:
        subprocess.run(["bash", kafka_script, "resume"], check=True, capture_output=True)
    print(json.dumps([elapsed, flushed, failed]), flush=True)
    """
)


def test_a_full_librdkafka_queue_with_the_broker_down_never_blocks_acks_or_close(
    outage_broker: tuple[str, dict[str, str]],
) -> None:
    # Before, the marker thread retried the full queue forever holding the in-flight lock, and
    # the next ack_many waited for that lock holding the GIL: the process hung until the
    # broker came back or the markers expired (message.timeout.ms, 5 minutes by default). A
    # child process, so that a hang fails the test instead of the suite.
    bootstrap, env = outage_broker
    queue_topic, markers = queue_of(bootstrap, 20)
    script = [sys.executable, "-c", FULL_QUEUE_SCRIPT, bootstrap, queue_topic, markers]
    environment = {**os.environ, **env}
    try:
        child = subprocess.run(
            [*script, str(KAFKA_SCRIPT)],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        # A child that hung leaves the broker down; the module's next tests need it.
        subprocess.run(["bash", str(KAFKA_SCRIPT), "resume"], env=environment, capture_output=True)
    assert child.returncode == 0, child.stderr
    elapsed, flushed, failed = json.loads(child.stdout)
    assert elapsed < 10.0, f"acks, flush and close took {elapsed:.1f} s"
    assert flushed != "flushed"
    # At most 5 of the 20 END markers fit in the queue: the others are refused and counted.
    assert failed >= 15, failed
    assert "END markers not written" in child.stderr, child.stderr
    # Every END is accounted for: on the markers topic (read by another client once the broker
    # is back), counted as failed, or named by close as not written.
    unwritten = re.search(r"(\d+) END/KEEPALIVE markers of \S+ not written", child.stderr)
    at_close = int(unwritten.group(1)) if unwritten else 0
    ends = [
        record
        for record in read_with_confluent(bootstrap, markers)
        if decode_marker(record.value() or b"").kind == "end"
    ]
    assert len(ends) + failed + at_close == 20, (len(ends), failed, at_close, child.stderr)


def test_auto_takes_share_groups_on_this_broker_whose_lock_cannot_be_extended(
    config: dict[str, Any], topics: tuple[str, str], kafka_client: Client
) -> None:
    queue_topic, markers = topics
    produce(kafka_client, queue_topic, ["job"])
    with QueueConsumer(
        config, queue_topic, markers, TIMEOUT, group_id=f"g-{uuid.uuid4().hex}", backend="auto"
    ) as queue:
        assert queue.backend == "share"
        [message] = take(queue, 1)
        with pytest.raises(NotImplementedError, match="RENEW"):
            queue.keepalive(message)
        with pytest.raises(NotImplementedError, match="after_timeout"):
            queue.nack(message, redeliver="after_timeout")
        with pytest.raises(RuntimeError, match="ack or nack every message"):
            queue.consume(1, timeout=0.1)
        with pytest.raises(TypeError, match="take the messages it handed out"):
            queue.ack("x")  # type: ignore[arg-type]
        queue.ack(message)


def test_share_lock_runs_out_the_late_ack_is_refused_and_another_member_has_it(
    config: dict[str, Any], topic_factory: TopicFactory, kafka_client: Client
) -> None:
    # One partition: both members of the share group get records from it.
    queue_topic = topic_factory(partitions=1)
    kafka_client.produce(queue_topic, "slow")
    group = f"g-{uuid.uuid4().hex}"
    with (
        QueueConsumer(config, queue_topic, "unused", 1.0, group_id=group, backend="share") as a,
        QueueConsumer(config, queue_topic, "unused", 1.0, group_id=group, backend="share") as b,
    ):
        [held] = take(a, 1)
        [again] = take(b, 1)  # comes once a's lock of 1 s ran out
        assert (again.value(), redelivery_count(again)) == (b"slow", 1)
        a.ack(held)
        with pytest.raises(KafkaError, match="record state is invalid"):
            a.flush()
        assert a.stats()["failed_markers"] == 1
        b.ack(again)
        b.flush()
        with pytest.raises(ValueError, match="not an open message"):
            b.ack(again)


def test_share_ack_twice_is_refused_before_the_broker_sees_it_and_a_wrapper_acks_by_position(
    config: dict[str, Any], topic_factory: TopicFactory, kafka_client: Client
) -> None:
    # Open messages are tracked by identity; confluent-kafka itself takes a second ack of the
    # same record before the commit (the later type would win), so the refusal is ours.
    queue_topic = topic_factory(partitions=1)
    for value in ("a", "b", "c"):
        kafka_client.produce(queue_topic, value)
    group = f"g-{uuid.uuid4().hex}"
    with QueueConsumer(
        config, queue_topic, "unused", 30.0, group_id=group, backend="share"
    ) as queue:
        a, b, c = take(queue, 3)
        with pytest.raises(ValueError, match=rf"{queue_topic}-0@0 is not an open message"):
            queue.ack_many([a, a])
        # Nothing of the refused batch was acknowledged: all three are still open.
        with pytest.raises(RuntimeError, match=r"\(3 open"):
            queue.consume(1, timeout=0.1)
        queue.ack(cast(QueueMessage, Position((0, 0))))  # a user's wrapper of `a`
        queue.ack(b)
        with pytest.raises(ValueError, match="not an open message"):
            queue.ack(b)
        with pytest.raises(ValueError, match="not an open message"):
            queue.nack(b)
        queue.ack_many([c])
        queue.flush()
        assert queue.stats()["acked"] == 3
    kafka_client.produce(queue_topic, "d")
    kafka_client.produce(queue_topic, "e")
    # The same group gets only the new records: a, b and c were accepted, none released.
    with QueueConsumer(
        config, queue_topic, "unused", 30.0, group_id=group, backend="share"
    ) as again:
        batch: list[QueueMessage] = []
        while not batch:
            batch = again.consume(2, timeout=1.0)
        came = list(batch)
        kept = batch.pop()  # the list consume returned, changed: only what is left is acked
        again.ack_many(batch)
        again.ack(kept)
        with pytest.raises(ValueError, match="not an open message"):
            again.ack(kept)
        if len(came) < 2:
            came += take(again, 1)
            again.ack(came[-1])
        assert [(m.value(), redelivery_count(m)) for m in came] == [(b"d", 0), (b"e", 0)]


def test_the_queue_offsets_pass_transaction_markers_and_aborted_records(
    kafka_bootstrap: str, config: dict[str, Any], topic_factory: TopicFactory
) -> None:
    # A queue topic written by a transactional producer (Karafka, Java, ferrokafka's own): each
    # transaction ends with a marker, and aborted records are never handed out. The committed
    # queue offsets go past both, so the group's lag reaches zero (it stayed above it for ever).
    queue_topic, markers = topic_factory(partitions=1), topic_factory(partitions=1)
    end = write_transactions(kafka_bootstrap, queue_topic, aborted=(False, True, False))
    group = f"g-{uuid.uuid4().hex}"
    with QueueConsumer(config, queue_topic, markers, group_id=group) as queue:
        taken = take(queue, 6)
        assert [m.offset() for m in taken] == [0, 1, 2, 8, 9, 10]
        queue.ack_many(taken)
        wait_until(
            lambda: committed_offsets(kafka_bootstrap, group, queue_topic, 1) == {0: end},
            20,
            "the queue offset committed past the last marker",
        )


def test_a_queue_partition_holding_only_aborted_records_is_passed_too(
    kafka_bootstrap: str, config: dict[str, Any], topic_factory: TopicFactory
) -> None:
    # No record of the partition is ever handed out, so no batch carries its position: the
    # queue offset must still go past the aborted transactions, or the lag stays for ever.
    queue_topic, markers = topic_factory(partitions=1), topic_factory(partitions=1)
    end = write_transactions(kafka_bootstrap, queue_topic, aborted=(True, True))
    group = f"g-{uuid.uuid4().hex}"
    with QueueConsumer(config, queue_topic, markers, group_id=group) as queue:

        def passed() -> bool:
            assert queue.consume(10, timeout=0.2) == []
            return committed_offsets(kafka_bootstrap, group, queue_topic, 1) == {0: end}

        wait_until(passed, 20, "the queue offset committed past the aborted transactions")
