"""Consumer and AsyncConsumer against the real broker: ordering, concurrency, at-least-once after
kill -9, draining, rebalancing, error policies, load control and notifications."""

from __future__ import annotations

import asyncio
import collections
import gc
import itertools
import json
import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from ferrokafka import (
    AsyncConsumer,
    AsyncProducer,
    Batch,
    Client,
    Consumer,
    ConsumerOptions,
    TopicPartition,
)
from tests.conftest import (
    TopicFactory,
    committed_offsets,
    read_messages,
    wait_until,
    write_transactions,
)
from tests.kafka.recorder import Recorder

pytestmark = pytest.mark.kafka

WAIT = 30.0
# Batch.to_arrow()'s columns, in order.
ARROW_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "headers"]


class Handled:
    """A thread-safe log of handled records that a test can wait on."""

    def __init__(self) -> None:
        self.records: list[tuple[int, int]] = []
        self.changed = threading.Condition()

    def add(self, batch: Batch) -> None:
        with self.changed:
            self.records.extend((m.partition(), m.offset()) for m in batch)
            self.changed.notify_all()

    def wait_for(self, predicate: Callable[[list[tuple[int, int]]], bool], what: str) -> None:
        with self.changed:
            ok = self.changed.wait_for(lambda: predicate(self.records), WAIT)
            assert ok, f"timed out waiting for {what}; handled {len(self.records)}"

    def wait_count(self, count: int) -> None:
        self.wait_for(lambda records: len(set(records)) >= count, f"{count} records")

    def by_partition(self) -> dict[int, list[int]]:
        with self.changed:
            result: dict[int, list[int]] = collections.defaultdict(list)
            for partition, offset in self.records:
                result[partition].append(offset)
            return result


def consume_until(
    kind: str,
    config: dict[str, Any],
    topic: str,
    handlers: tuple[Callable[[Batch], None], Callable[[Batch], Awaitable[None]]],
    options: ConsumerOptions,
    handled: Handled,
    count: int,
) -> dict[str, Any]:
    """Consumes ``topic`` with a :class:`Consumer` (``kind`` "thread", the first handler) or an
    :class:`AsyncConsumer` (the second) until ``handled`` holds ``count`` records; returns the
    consumer's stats."""
    if kind == "thread":
        with Consumer(config, [topic], handlers[0], options) as consumer:
            handled.wait_count(count)
            return consumer.stats()

    async def main() -> dict[str, Any]:
        async with AsyncConsumer(config, [topic], handlers[1], options) as consumer:
            await asyncio.get_running_loop().run_in_executor(None, handled.wait_count, count)
            return consumer.stats()

    return asyncio.run(main())


def eventually(predicate: Callable[[], bool], what: str) -> None:
    """Polls a condition that no event announces (e.g. a stats() figure)."""
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def partition_0_consumer(
    config: dict[str, Any], topic: str, handler: Callable[[Batch], object], **settings: Any
) -> Consumer:
    """A :class:`Consumer` assigned partition 0 of ``topic`` (not subscribed to the topic)."""
    return Consumer(config, [TopicPartition(topic, 0)], handler, **settings)


def committed(config: dict[str, Any], topic: str, partitions: int) -> dict[int, int]:
    """The offsets the group of ``config`` committed for ``topic``'s first ``partitions``."""
    return committed_offsets(config["bootstrap.servers"], config["group.id"], topic, partitions)


@pytest.fixture
def base_config(kafka_bootstrap: str) -> dict[str, str | int | float | bool]:
    return {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": f"test-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }


@pytest.fixture(params=["thread", "asyncio"])
def kind(request: pytest.FixtureRequest) -> str:
    """Which consumer the test runs (as :func:`consume_until` takes it): "thread", a
    :class:`Consumer`, or "asyncio", an :class:`AsyncConsumer`."""
    value: str = request.param
    return value


Produce = Callable[[str, list[dict[str, Any]]], set[tuple[int, int]]]


@pytest.fixture
def produce(kafka_bootstrap: str, kafka_client: Client) -> Produce:
    """Writes records to a topic; returns the (partition, offset) of everything now in it."""

    def run(topic: str, records: list[dict[str, Any]]) -> set[tuple[int, int]]:
        # Idempotent, so a retried send cannot reorder a partition: the tests check the
        # consumer's order against the order written.
        with AsyncProducer(
            {"bootstrap.servers": kafka_bootstrap, "linger.ms": 5, "enable.idempotence": True},
            max_queue_size=len(records) + 1,
        ) as producer:
            producer.produce_many(records, topic=topic)
            producer.flush()
        stored = kafka_client.read_topic(topic, max_messages=len(records) + 1, timeout=20.0)
        return {(m.partition(), m.offset()) for m in stored}

    return run


def test_six_partitions_ordered_within_and_concurrent_across(
    base_config: dict[str, Any], kafka_bootstrap: str, topic_factory: TopicFactory, produce: Produce
) -> None:
    # 6,000 records (not the 60,000) keep this test at a few seconds; the per-partition
    # and per-key checks are the same.
    topic = topic_factory(partitions=6)
    keys, total = 60, 6000
    produce(
        topic,
        [{"key": f"k{n % keys}", "value": str(n // keys)} for n in range(total)],
    )
    # Each key's values in the order the topic stores them, read by confluent-kafka: the consumer
    # is held to that order, not to the order of production (a producer may reorder what it
    # retries; the consumer never may).
    stored: dict[bytes, list[int]] = collections.defaultdict(list)
    for message in read_messages(kafka_bootstrap, topic, partitions=6):
        stored[message.key() or b""].append(int(message.value() or b"-1"))
    handled = Handled()
    active: set[int] = set()
    overlaps: list[tuple[int, int]] = []
    lock = threading.Lock()
    per_key: dict[bytes, list[int]] = collections.defaultdict(list)

    def handle(batch: Batch) -> None:
        partition = batch[0].partition()
        with lock:
            overlaps.extend((partition, other) for other in active)
            active.add(partition)
            for m in batch:
                assert m.key() is not None
                per_key[m.key() or b""].append(int(m.value() or b"-1"))
        time.sleep(random.uniform(0.0005, 0.004))
        with lock:
            active.discard(partition)
        handled.add(batch)

    with Consumer(base_config, [topic], handle, max_batch_size=50, commit_interval=0.2):
        handled.wait_count(total)
    assert overlaps, "no two partitions were ever handled at the same time"
    assert all(a != b for a, b in overlaps), "two batches of one partition ran at once"
    by_partition = handled.by_partition()
    assert len(by_partition) == 6
    for partition, offsets in by_partition.items():
        assert offsets == sorted(set(offsets)), f"partition {partition} out of order"
        assert offsets == list(range(len(offsets)))
    assert sum(len(o) for o in by_partition.values()) == total
    assert len(per_key) == keys
    assert per_key == stored, "the consumer broke a key's stored order"
    # The produce fixture is idempotent: the topic keeps each key's order of production.
    written = {f"k{k}".encode(): list(range(total // keys)) for k in range(keys)}
    assert stored == written, "the idempotent producer stored a key out of order"


CHILD = textwrap.dedent(
    """
    import sys, time
    import ferrokafka

    bootstrap, group, topic, out, ordering = sys.argv[1:6]
    sink = open(out, "a")

    def handle(batch):
        time.sleep(0.01)
        sink.write("".join(f"{m.partition()} {m.offset()}\\n" for m in batch))
        sink.flush()

    def on_event(name, payload):
        if name == "commit" and payload["error"] is None:
            sink.write("committed\\n")
            sink.flush()

    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        # The killed member holds its partitions until the broker times its session out.
        "session.timeout.ms": 6000,
    }
    consumer = ferrokafka.Consumer(
        config, [topic], handle, max_batch_size=20, commit_interval=0.2, ordering=ordering
    )
    consumer.subscribe(on_event)
    consumer.run()
    """
)


def test_a_batchs_messages_are_not_walked_by_the_garbage_collector(
    base_config: dict[str, Any], topic_factory: TopicFactory, produce: Produce
) -> None:
    # A message refers to no Python object, so it can never be in a reference cycle: tracked,
    # every batch a handler keeps would be walked again at each collection.
    topic = topic_factory(partitions=1)
    produce(topic, [{"value": f"v{n}"} for n in range(5)])
    tracked: list[bool] = []
    handled = threading.Event()

    def handle(batch: Batch) -> None:
        tracked.extend(gc.is_tracked(m) for m in batch)
        tracked.append(gc.is_tracked(batch[0]))
        handled.set()

    with Consumer(base_config, [topic], handle):
        assert handled.wait(WAIT)
    assert tracked
    assert not any(tracked)


@pytest.mark.parametrize("ordering", ["partition", "key"])
def test_kill_9_then_a_new_consumer_handles_every_record(
    base_config: dict[str, Any],
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
    produce: Produce,
    tmp_path: Path,
    ordering: str,
) -> None:
    topic, total = topic_factory(partitions=3), 6000
    produced = produce(topic, [{"value": f"v{n}", "key": f"k{n}"} for n in range(total)])
    group, out = base_config["group.id"], tmp_path / "handled.txt"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out.touch()
    child = subprocess.Popen(
        [sys.executable, str(script), kafka_bootstrap, group, topic, str(out), ordering],
    )
    try:
        deadline = time.monotonic() + WAIT
        # The child's progress (records, then a commit) is only visible in its file: poll it.
        while (text := out.read_text()).count("\n") < total // 3 or "committed" not in text:
            assert child.poll() is None, "the child consumer exited"
            assert time.monotonic() < deadline, "the child consumer made no progress"
            time.sleep(0.02)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    lines = out.read_text().splitlines()
    first_run = [tuple(map(int, line.split())) for line in lines if line.count(" ") == 1]
    # A commit the child sent just before the kill may reach the broker after a first read:
    # read until two reads a moment apart agree, so the offsets are the ones the next consumer
    # starts from.
    reads: list[dict[int, int]] = []

    def settled() -> bool:
        reads.append(committed(base_config, topic, 3))
        return len(reads) >= 2 and reads[-1] == reads[-2]

    wait_until(settled, 10, "the committed offsets to settle", interval=0.3)
    commits = reads[-1]
    assert commits, "the child committed nothing before it was killed"

    handled = Handled()
    with Consumer(base_config, [topic], handled.add, commit_interval=0.2):
        handled.wait_for(
            lambda records: set(first_run) | set(records) >= produced,
            "every record",
        )
    second_run = handled.by_partition()
    assert set(first_run) | set(handled.records) == produced
    for partition, offsets in second_run.items():
        # The new consumer starts exactly at the committed offset: it skips nothing, and it
        # repeats only what the killed one handled after its last commit.
        assert offsets[0] == commits.get(partition, 0)
    duplicates = len(set(first_run) & set(handled.records))
    uncommitted = sum(1 for p, o in set(first_run) if o >= commits.get(p, 0))
    assert duplicates == uncommitted


def test_key_ordering_runs_keys_concurrently_in_order_and_commits_the_handled_prefix(
    base_config: dict[str, Any],
    topic_factory: TopicFactory,
    produce: Produce,
    kind: str,
) -> None:
    topic, keys, total = topic_factory(partitions=1), 60, 600
    produced = produce(
        topic, [{"key": f"k{n % keys}", "value": str(n // keys)} for n in range(total)]
    )
    handled = Handled()
    lock = threading.Lock()
    running: collections.Counter[bytes] = collections.Counter()
    overlapping_keys: list[bytes] = []
    most_at_once = 0
    per_key: dict[bytes, list[int]] = collections.defaultdict(list)
    batches_at_once = 0

    def started(batch: Batch) -> set[bytes]:
        nonlocal most_at_once, batches_at_once
        keys_in_order = batch.keys()  # the batch's column of keys, not a dict's
        batch_keys = {key or b"" for key in keys_in_order}
        with lock:
            overlapping_keys.extend(k for k in batch_keys if running[k])
            for key in batch_keys:
                running[key] += 1
            batches_at_once += 1
            most_at_once = max(most_at_once, batches_at_once)
            for message in batch:
                per_key[message.key() or b""].append(int(message.value() or b"-1"))
        return batch_keys

    def finished(batch: Batch, batch_keys: set[bytes]) -> None:
        nonlocal batches_at_once
        with lock:
            for key in batch_keys:
                running[key] -= 1
            batches_at_once -= 1
        handled.add(batch)

    def handle(batch: Batch) -> None:
        batch_keys = started(batch)
        time.sleep(random.uniform(0.001, 0.004))
        finished(batch, batch_keys)

    async def handle_async(batch: Batch) -> None:
        batch_keys = started(batch)
        await asyncio.sleep(random.uniform(0.001, 0.004))
        finished(batch, batch_keys)

    options = ConsumerOptions(
        ordering="key", max_concurrency=6, max_batch_size=5, commit_interval=0.1
    )
    stats = consume_until(kind, base_config, topic, (handle, handle_async), options, handled, total)
    assert not overlapping_keys, "two batches held the same key at once"
    assert most_at_once > 1, "batches of the partition never ran at the same time"
    assert all(seq == list(range(total // keys)) for seq in per_key.values())
    assert len(per_key) == keys
    assert sorted(handled.records) == sorted(produced), "a record was lost or handled twice"
    assert stats["handled"] == total
    assert committed(base_config, topic, 1) == {0: total}


def test_key_ordering_holds_across_a_rebalance(
    base_config: dict[str, Any], kafka_bootstrap: str, topic_factory: TopicFactory, produce: Produce
) -> None:
    # Slow enough (4 partitions x 2 batches of 5 at once, 50 ms each: ~3 s) that records remain
    # when the second consumer has joined.
    topic, keys, total = topic_factory(partitions=4), 40, 2400
    produced = produce(
        topic, [{"key": f"k{n % keys}", "value": str(n // keys)} for n in range(total)]
    )
    first, second = Handled(), Handled()
    lock = threading.Lock()
    running: collections.Counter[bytes] = collections.Counter()
    overlapping: list[bytes] = []
    handled_in_order: dict[bytes, list[int]] = collections.defaultdict(list)

    def handler(log: Handled) -> Callable[[Batch], None]:
        def handle(batch: Batch) -> None:
            messages = list(batch)
            batch_keys = {m.key() or b"" for m in messages}
            with lock:
                # Across both consumers: a key's partition changes owner only after its
                # running batches finished.
                overlapping.extend(k for k in batch_keys if running[k])
                running.update(batch_keys)
                for m in messages:
                    handled_in_order[m.key() or b""].append(int(m.value() or b"-1"))
            time.sleep(0.05)
            with lock:
                running.subtract(batch_keys)
            log.add(batch)

        return handle

    options = ConsumerOptions(
        ordering="key", max_concurrency=2, max_batch_size=5, commit_interval=0.2, drain=10.0
    )
    with Consumer(base_config, [topic], handler(first), options):
        first.wait_count(200)
        with Consumer(base_config, [topic], handler(second), options):
            second.wait_count(1)
            first.wait_for(
                lambda _: set(first.records) | set(second.records) >= produced, "every record"
            )
    assert not overlapping, "two batches held the same key at once"
    assert set(first.records) | set(second.records) == produced
    for key, values in handled_in_order.items():
        # A new owner may repeat what was handled past the committed prefix, never go ahead
        # of the key: the first time each record is handled, the key's records come in order.
        firsts = list(dict.fromkeys(values))
        assert firsts == sorted(firsts), key


def test_stop_drains_the_running_batch_commits_it_and_drops_the_queue(
    base_config: dict[str, Any], topic: str, produce: Produce
) -> None:
    produce(topic, [{"value": f"v{n}"} for n in range(100)])
    release, running = threading.Event(), threading.Event()
    handled = Handled()
    order: list[str] = []

    def handle(batch: Batch) -> None:
        running.set()
        assert release.wait(WAIT)
        handled.add(batch)
        order.append("handled")

    consumer = partition_0_consumer(
        base_config,
        topic,
        handle,
        max_batch_size=10,
        drain=20.0,
        on_unassigned=lambda partitions: order.append("unassigned"),
    )
    recorder = Recorder.subscribed(consumer)
    consumer.start()
    assert running.wait(WAIT)
    eventually(lambda: consumer.stats()["partitions"][0]["queued"] == 90, "90 queued records")
    stopper = threading.Thread(target=consumer.stop)
    stopper.start()
    # Stopping drops what is queued first, then waits for the running batch.
    recorder.wait_for(lambda: recorder.named("draining"), "draining to begin")
    assert recorder.named("draining") == [{"partitions": [(topic, 0)], "dropped": 90}]
    release.set()
    stopper.join(WAIT)
    assert not stopper.is_alive()
    assert handled.records == [(0, n) for n in range(10)]
    assert order == ["handled", "unassigned"]
    assert committed(base_config, topic, 1) == {0: 10}
    stats = consumer.stats()
    assert (stats["handled"], stats["dropped"], stats["abandoned"]) == (10, 90, 0)
    assert [e["offsets"] for e in recorder.named("commit")][-1] == [(topic, 0, 10)]

    again = Handled()
    with partition_0_consumer(base_config, topic, again.add):
        again.wait_count(90)
    assert again.records[0] == (0, 10)


def test_stop_called_in_the_handler_returns_at_once_and_commits_its_batch(
    base_config: dict[str, Any], topic: str, produce: Produce, kind: str
) -> None:
    # A poison message: the handler stops its own consumer. Waiting there for the drain would
    # wait for that very handler (an AsyncConsumer's stop() awaited itself: RecursionError).
    produce(topic, [{"value": v} for v in (b"v0", b"v1", b"poison")])
    seen: list[bytes | None] = []
    took: list[float] = []
    options = ConsumerOptions(max_batch_size=1, drain=5.0)
    subscriptions = [TopicPartition(topic, 0)]
    if kind == "thread":

        def handle(batch: Batch) -> None:
            seen.extend(batch.values())
            if b"poison" in batch.values():
                started = time.monotonic()
                consumer.stop()
                took.append(time.monotonic() - started)

        consumer = Consumer(base_config, subscriptions, handle, options)
        consumer.run()
        stats = consumer.stats()
    else:

        async def handle_async(batch: Batch) -> None:
            seen.extend(batch.values())
            if b"poison" in batch.values():
                started = time.monotonic()
                await aconsumer.stop()
                took.append(time.monotonic() - started)

        aconsumer = AsyncConsumer(base_config, subscriptions, handle_async, options)
        asyncio.run(asyncio.wait_for(aconsumer.run(), WAIT))
        stats = aconsumer.stats()
    assert seen == [b"v0", b"v1", b"poison"]
    assert took[0] < 2.0, f"stop() in the handler took {took[0]:.1f} s"  # the drain is 5 s
    assert (stats["handled"], stats["abandoned"]) == (3, 0)
    assert committed(base_config, topic, 1) == {0: 3}


@pytest.mark.parametrize("exiting", [SystemExit, KeyboardInterrupt])
def test_a_handler_that_exits_stops_the_consumer_without_committing_its_batch(
    base_config: dict[str, Any],
    topic: str,
    produce: Produce,
    exiting: type[BaseException],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # sys.exit() in a handler killed its worker thread unsaid: the partition was never handled
    # again, and stop() waited out the drain for a handler long gone.
    produce(topic, [{"value": v} for v in (b"v0", b"exit", b"v2")])
    seen: list[bytes | None] = []

    def handle(batch: Batch) -> None:
        seen.extend(batch.values())
        if b"exit" in batch.values():
            raise exiting("the handler ends the process")

    consumer = Consumer(
        base_config, [TopicPartition(topic, 0)], handle, max_batch_size=1, drain=5.0
    )
    started = time.monotonic()
    consumer.run()  # returns: the consumer stopped itself
    assert time.monotonic() - started < 4.0  # well within the drain: nothing waited for it
    assert seen == [b"v0", b"exit"]
    assert committed(base_config, topic, 1) == {0: 1}  # the exiting batch is handed again
    said = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any(f"raised {exiting.__name__} on {topic} [0] offsets 1-1" in s for s in said), said


@pytest.mark.parametrize("exiting", [SystemExit, KeyboardInterrupt, asyncio.CancelledError])
def test_an_async_handler_that_exits_stops_the_consumer_without_committing_its_batch(
    base_config: dict[str, Any],
    topic: str,
    produce: Produce,
    exiting: type[BaseException],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Left to asyncio, a handler's SystemExit escaped the loop after stop() had waited out the
    # drain for that very handler, and a CancelledError of its own (not a cancellation of its
    # task) ended the partition's task unsaid: the partition was never handled again.
    produce(topic, [{"value": v} for v in (b"v0", b"exit", b"v2")])
    seen: list[bytes | None] = []

    async def handle(batch: Batch) -> None:
        seen.extend(batch.values())
        if b"exit" in batch.values():
            raise exiting("the handler ends the process")

    consumer = AsyncConsumer(
        base_config, [TopicPartition(topic, 0)], handle, max_batch_size=1, drain=5.0
    )
    started = time.monotonic()
    asyncio.run(asyncio.wait_for(consumer.run(), WAIT))  # returns: the consumer stopped itself
    assert time.monotonic() - started < 4.0  # well within the drain: nothing waited for it
    assert seen == [b"v0", b"exit"]
    assert committed(base_config, topic, 1) == {0: 1}  # the exiting batch is handed again
    said = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any(f"raised {exiting.__name__} on {topic} [0] offsets 1-1" in s for s in said), said


def test_an_async_notification_callback_that_exits_does_not_end_the_notifications(
    base_config: dict[str, Any], topic: str, produce: Produce
) -> None:
    # The callback's SystemExit escaped the event loop with the notification task: asyncio.run()
    # raised it and no commit was ever reported.
    produce(topic, [{"value": b"v", "partition": p} for p in range(3)])

    async def on_assigned(partitions: list[tuple[str, int]]) -> None:
        raise SystemExit("a callback that exits")

    async def main() -> None:
        commits = asyncio.Event()
        consumer = AsyncConsumer(
            base_config, [topic], _handle_nothing, on_assigned=on_assigned, commit_interval=0.2
        )
        consumer.subscribe(lambda event, payload: commits.set() if event == "commit" else None)
        async with consumer:
            await asyncio.wait_for(commits.wait(), WAIT)

    asyncio.run(main())


async def _handle_nothing(batch: Batch) -> None:
    pass


def test_a_notification_callback_that_exits_does_not_end_the_notifications(
    base_config: dict[str, Any], topic: str, produce: Produce
) -> None:
    # The event thread died with the callback's SystemExit: later assignments got no worker
    # and no commit was ever reported.
    commits = threading.Event()

    def on_assigned(partitions: list[tuple[str, int]]) -> None:
        raise SystemExit("a callback that exits")

    consumer = Consumer(
        base_config, [topic], Handled().add, on_assigned=on_assigned, commit_interval=0.2
    )
    consumer.subscribe(lambda event, payload: commits.set() if event == "commit" else None)
    produce(topic, [{"value": b"v", "partition": p} for p in range(3)])
    with consumer:
        assert commits.wait(WAIT), "no commit was reported after the callback exited"


def test_a_handler_slower_than_drain_is_abandoned_and_redelivered(
    base_config: dict[str, Any], topic: str, produce: Produce
) -> None:
    produce(topic, [{"value": f"v{n}"} for n in range(20)])
    release, running = threading.Event(), threading.Event()

    def stuck(batch: Batch) -> None:
        running.set()
        release.wait(WAIT)

    consumer = partition_0_consumer(base_config, topic, stuck, max_batch_size=5, drain=0.3)
    consumer.start()
    try:
        assert running.wait(WAIT)
        consumer.stop()
        stats = consumer.stats()
        assert (stats["abandoned"], stats["handled"], stats["commits"]) == (1, 0, 0)
    finally:
        release.set()
    assert committed(base_config, topic, 1) == {}
    again = Handled()
    with partition_0_consumer(base_config, topic, again.add):
        again.wait_count(20)
    assert again.records[:5] == [(0, n) for n in range(5)]


def test_a_handler_that_overruns_max_poll_interval_is_named_once(
    base_config: dict[str, Any], topic: str, produce: Produce, caplog: pytest.LogCaptureFixture
) -> None:
    # The poller keeps the consumer in its group, so nobody takes over a stuck handler's
    # partition: the consumer says which handler overran. 6 s is librdkafka's floor here
    # (max.poll.interval.ms may not be below session.timeout.ms, which the broker keeps >= 6 s).
    produce(topic, [{"value": f"v{n}"} for n in range(3)])
    config = {**base_config, "max.poll.interval.ms": 6000}

    def overdue() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelname == "WARNING" and "max.poll.interval.ms" in r.getMessage()
        ]

    def slow(batch: Batch) -> None:
        deadline = time.monotonic() + 15
        while not overdue() and time.monotonic() < deadline:
            time.sleep(0.05)

    with (
        caplog.at_level(logging.WARNING),
        partition_0_consumer(config, topic, slow, max_batch_size=3) as consumer,
    ):
        eventually(lambda: consumer.stats()["handled"] == 3, "the batch handled")
    [said] = overdue()
    assert f"{topic}-0 offsets 0-2 (3 records)" in said
    assert "longer than max.poll.interval.ms (6 s)" in said


class SlowRecordHandler(logging.Handler):
    """A logging handler that writes slowly (as to a full pipe or a remote collector): it sleeps,
    so the GIL goes to other threads while the logging thread is inside ``emit``."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.emitting = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.emitting.set()
        time.sleep(self.seconds)


def test_an_engine_log_record_does_not_lock_out_a_python_thread(
    base_config: dict[str, Any], topic: str, produce: Produce, caplog: pytest.LogCaptureFixture
) -> None:
    # The poller says an overdue handler (WARNING), and ack says the batch is settled (INFO),
    # through Python's logging. Had either still held the partition's lock while its slow
    # handler sleeps, stats() called meanwhile would wait on that lock with the GIL held, and
    # the logging thread would wait for the GIL: the process would hang for good.
    produce(topic, [{"value": "v0"}])
    config = {**base_config, "max.poll.interval.ms": 6000}
    slow_log = SlowRecordHandler(0.5)
    logger = logging.getLogger("ferrokafka_kafka.consumer.overdue")
    handled = threading.Event()

    def overrun(batch: Batch) -> None:
        assert slow_log.emitting.wait(WAIT), "the overdue handler was never said"
        handled.set()

    logger.addHandler(slow_log)
    try:
        with (
            caplog.at_level(logging.INFO, logger=logger.name),
            partition_0_consumer(config, topic, overrun, max_batch_size=1) as consumer,
        ):
            for said in ("overdue", "settled"):
                assert slow_log.emitting.wait(WAIT), f"nothing {said} was logged"
                slow_log.emitting.clear()
                # Inside the handler's sleep: the record is being logged right now.
                assert consumer.stats()["partitions"][0]["partition"] == 0
                if said == "overdue":
                    assert handled.wait(WAIT)
            eventually(lambda: consumer.stats()["handled"] == 1, "the batch handled")
    finally:
        logger.removeHandler(slow_log)


def test_a_drain_warning_does_not_lock_out_a_python_thread(
    base_config: dict[str, Any], topic: str, produce: Produce, caplog: pytest.LogCaptureFixture
) -> None:
    # As above, for the WARNING that a stop abandons a handler past its drain time, which the
    # poller said while it held the partition's lock.
    produce(topic, [{"value": "v0"}])
    slow_log = SlowRecordHandler(0.5)
    logger = logging.getLogger("ferrokafka_kafka.consumer.rebalance")
    started, release = threading.Event(), threading.Event()

    def stuck(batch: Batch) -> None:
        started.set()
        release.wait(WAIT)

    logger.addHandler(slow_log)
    try:
        with (
            caplog.at_level(logging.WARNING, logger=logger.name),
            partition_0_consumer(base_config, topic, stuck, drain=0.2) as consumer,
        ):
            assert started.wait(WAIT), "the handler never ran"
            stopping = threading.Thread(target=consumer.stop)
            stopping.start()
            assert slow_log.emitting.wait(WAIT), "the abandoned handler was never said"
            # Inside the handler's sleep: the record is being logged right now.
            assert consumer.stats()["abandoned"] == 1
            release.set()
            stopping.join(WAIT)
            assert not stopping.is_alive()
        assert "did not finish within the drain time" in caplog.text
    finally:
        release.set()
        logger.removeHandler(slow_log)


def test_rebalance_moves_partitions_without_skipping_records(
    base_config: dict[str, Any], kafka_bootstrap: str, topic_factory: TopicFactory, produce: Produce
) -> None:
    topic, total = topic_factory(partitions=6), 3000
    produced = produce(topic, [{"value": f"v{n}", "key": f"k{n}"} for n in range(total)])
    first, second = Handled(), Handled()
    active: set[int] = set()
    lock = threading.Lock()
    violations: list[str] = []
    unassigned: list[list[tuple[str, int]]] = []

    def slow_first(batch: Batch) -> None:
        partition = batch[0].partition()
        with lock:
            active.add(partition)
        time.sleep(0.01)
        first.add(batch)
        with lock:
            active.discard(partition)

    def first_unassigned(partitions: list[tuple[str, int]]) -> None:
        with lock:
            running = active & {p for _, p in partitions}
            if running:
                violations.append(f"unassigned while handlers of {running} ran")
            unassigned.append(partitions)

    def slow_second(batch: Batch) -> None:
        time.sleep(0.005)
        second.add(batch)

    options: dict[str, Any] = {"max_batch_size": 10, "commit_interval": 0.2, "drain": 10.0}
    with Consumer(
        base_config, [topic], slow_first, on_unassigned=first_unassigned, **options
    ) as consumer_a:
        first.wait_count(300)
        with Consumer(base_config, [topic], slow_second, **options):
            second.wait_count(1)
            assert unassigned, "the first consumer gave nothing up"
            first.wait_for(
                lambda _: set(first.records) | set(second.records) >= produced, "every record"
            )
        assert consumer_a.stats()["commits"] > 0
    assert not violations
    assert set(first.records) | set(second.records) == produced
    for log in (first, second):
        for partition, offsets in log.by_partition().items():
            # Within one consumer a partition may restart at its committed offset after a
            # rebalance; between restarts it moves forward one record at a time.
            steps = [b - a for a, b in itertools.pairwise(offsets)]
            assert all(step == 1 or step <= 0 for step in steps), partition


def test_commit_policy_logs_publishes_and_moves_on(
    base_config: dict[str, Any],
    kafka_bootstrap: str,
    topic: str,
    produce: Produce,
    caplog: pytest.LogCaptureFixture,
) -> None:
    produce(topic, [{"value": f"v{n}"} for n in range(10)])
    handled = Handled()

    def handle(batch: Batch) -> None:
        if batch[0].offset() == 3:
            raise RuntimeError("boom at 3")
        handled.add(batch)

    with partition_0_consumer(
        base_config, topic, handle, max_batch_size=1, commit_interval=0.2
    ) as consumer:
        recorder = Recorder.subscribed(consumer)
        handled.wait_count(9)
        recorder.wait_for(
            lambda: any(c["offsets"] == [(topic, 0, 10)] for c in recorder.named("commit")),
            "offset 10 committed",
        )
        stats = consumer.stats()
    assert [o for _, o in handled.records] == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    (failure,) = recorder.named("handler.exception")
    assert (failure["first_offset"], failure["policy"], failure["attempt"]) == (3, "commit", 1)
    assert isinstance(failure["error"], RuntimeError)
    assert failure["duration"] >= 0
    assert "boom at 3" in caplog.text
    assert (stats["failed"], stats["handled"]) == (1, 9)
    stops = recorder.named("handler.stop")
    assert len(stops) == 9
    assert all(s["record_count"] == 1 and s["duration"] >= 0 for s in stops)


# A backoff of 0 retries at once (the binding checks the partition is still the worker's without
# waiting); a positive one doubles.
@pytest.mark.parametrize(("backoff", "retries_in"), [(0.05, [0.05, 0.1]), (0.0, [0.0, 0.0])])
def test_retry_policy_backs_off_and_blocks_the_partition(
    backoff: float,
    retries_in: list[float],
    base_config: dict[str, Any],
    kafka_bootstrap: str,
    topic: str,
    produce: Produce,
) -> None:
    produce(topic, [{"value": f"v{n}"} for n in range(8)])
    calls: list[int] = []
    handled = Handled()
    failures = iter([True, True])

    def handle(batch: Batch) -> None:
        offset = batch[0].offset()
        calls.append(offset)
        if offset == 3 and next(failures, False):
            raise ConnectionError("downstream unavailable")
        handled.add(batch)

    with partition_0_consumer(
        base_config, topic, handle, max_batch_size=1, on_error="retry", retry_backoff=backoff
    ) as consumer:
        recorder = Recorder.subscribed(consumer)
        handled.wait_count(8)
        stats = consumer.stats()
    # Offset 4 waits until 3 succeeded: the partition is blocked while retrying.
    assert calls == [0, 1, 2, 3, 3, 3, 4, 5, 6, 7]
    retries = recorder.named("handler.exception")
    assert [(r["attempt"], r["retry_in"]) for r in retries] == list(enumerate(retries_in, 1))
    assert (stats["retries"], stats["handled"], stats["failed"]) == (2, 8, 0)


def test_a_revocation_cuts_a_retry_backoff_short(
    kind: str, base_config: dict[str, Any], topic_factory: TopicFactory, produce: Produce
) -> None:
    # A partition revoked while its batch sleeps out a retry backoff is given up at once: the
    # group does not wait for the backoff or the drain time (a minute each here), and the
    # batch is abandoned, so its records go to whoever owns the partition next.
    topic = topic_factory(partitions=1)
    produced = produce(topic, [{"value": f"v{n}"} for n in range(5)])
    handled, failed_once, unassigned = Handled(), threading.Event(), threading.Event()
    recorder = Recorder()

    def fail_first(batch: Batch) -> None:
        if not failed_once.is_set():
            failed_once.set()
            raise ConnectionError("downstream unavailable")
        handled.add(batch)

    async def fail_first_async(batch: Batch) -> None:
        fail_first(batch)

    options: dict[str, Any] = {
        "on_error": "retry",
        "retry_backoff": 60.0,
        "max_retry_backoff": 60.0,
        "drain": 60.0,
        "on_unassigned": lambda _: unassigned.set(),
    }

    def take_over() -> None:
        assert recorder.first("handler.exception", timeout=WAIT)["retry_in"] == 60.0
        second = {**options, "on_unassigned": None}
        with Consumer(base_config, [topic], handled.add, **second):
            assert unassigned.wait(WAIT), "the revocation waited for the backoff"
            handled.wait_for(lambda records: set(records) >= produced, "every record")

    if kind == "thread":
        with Consumer(base_config, [topic], fail_first, **options) as first:
            first.subscribe(recorder)
            take_over()
            stats = first.stats()
    else:

        async def main() -> dict[str, Any]:
            async with AsyncConsumer(base_config, [topic], fail_first_async, **options) as first:
                first.subscribe(recorder)
                await asyncio.get_running_loop().run_in_executor(None, take_over)
                return first.stats()

        stats = asyncio.run(main())
    assert stats["abandoned"] == 1


def test_dead_letter_policy_writes_the_record_with_error_headers(
    base_config: dict[str, Any],
    kafka_bootstrap: str,
    kafka_client: Client,
    topic_factory: TopicFactory,
    produce: Produce,
) -> None:
    topic, dead_letters = topic_factory(partitions=1), topic_factory(partitions=1)
    records = [{"value": f"v{n}", "key": f"k{n}", "headers": {"trace": "t1"}} for n in range(6)]
    records[2]["value"] = "poison"
    produce(topic, records)
    handled = Handled()

    def handle(batch: Batch) -> None:
        if batch[0].value() == b"poison":
            raise ValueError("cannot parse 'poison'")
        handled.add(batch)

    with partition_0_consumer(
        base_config,
        topic,
        handle,
        max_batch_size=1,
        on_error="dead_letter",
        dead_letter_topic=dead_letters,
    ) as consumer:
        handled.wait_count(5)
        stats = consumer.stats()
    assert stats["dead_lettered"] == 1
    (dead,) = kafka_client.read_topic(dead_letters, timeout=20.0)
    assert (dead.key(), dead.value()) == (b"k2", b"poison")
    assert dict(dead.headers() or []) == {
        "trace": b"t1",
        "ferrokafka_error_class": b"ValueError",
        "ferrokafka_error_message": b"cannot parse 'poison'",
        "ferrokafka_original_topic": topic.encode(),
        "ferrokafka_original_partition": b"0",
        "ferrokafka_original_offset": b"2",
    }


def read_with_confluent(bootstrap: str, topic: str, count: int) -> list[Any]:
    """Every record of ``topic`` (expecting ``count``), read by confluent-kafka as an outside
    observer; waits a moment longer for records beyond ``count`` so extras are caught."""
    from confluent_kafka import Consumer as ConfluentConsumer

    observer = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"observer-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        observer.subscribe([topic])
        records: list[Any] = []
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            wait = 1.0 if len(records) >= count else 0.5
            batch = observer.consume(100, wait)
            records.extend(m for m in batch if m.error() is None)
            if len(records) >= count and not batch:
                return records
        return records
    finally:
        observer.close()


def test_retry_then_dead_letter_does_not_block_the_records_behind(
    base_config: dict[str, Any],
    kafka_bootstrap: str,
    topic_factory: TopicFactory,
    produce: Produce,
    kind: str,
) -> None:
    topic, dead_letters = topic_factory(partitions=1), topic_factory(partitions=1)
    records: list[dict[str, Any]] = [{"value": f"v{n}", "key": f"k{n}"} for n in range(10)]
    records[3] = {"value": "poison", "key": "k3", "headers": {"trace": "t3"}}
    produce(topic, records)
    attempts: collections.Counter[int] = collections.Counter()
    handled = Handled()

    def handle(batch: Batch) -> None:
        attempts[batch[0].offset()] += 1
        if batch[0].value() == b"poison":
            raise ValueError("cannot parse 'poison'")
        handled.add(batch)

    async def handle_async(batch: Batch) -> None:
        handle(batch)

    options = ConsumerOptions(
        max_batch_size=1,
        commit_interval=0.1,
        on_error="retry",
        max_retries=2,
        retry_backoff=0.01,
        dead_letter_topic=dead_letters,
    )
    # The dead letter is handed to the writer before the record behind it is fetched.
    stats = consume_until(kind, base_config, topic, (handle, handle_async), options, handled, 9)
    # Tried once and retried max_retries times, then dead-lettered; the rest once each.
    assert attempts[3] == 3
    assert all(attempts[n] == 1 for n in range(10) if n != 3)
    assert handled.by_partition() == {0: [0, 1, 2, 4, 5, 6, 7, 8, 9]}
    assert (stats["retries"], stats["dead_lettered"], stats["handled"]) == (2, 1, 9)
    (dead,) = read_with_confluent(kafka_bootstrap, dead_letters, 1)
    assert (dead.key(), dead.value()) == (b"k3", b"poison")
    assert dead.headers() == [
        ("trace", b"t3"),
        ("ferrokafka_error_class", b"ValueError"),
        ("ferrokafka_error_message", b"cannot parse 'poison'"),
        ("ferrokafka_original_topic", topic.encode()),
        ("ferrokafka_original_partition", b"0"),
        ("ferrokafka_original_offset", b"3"),
    ]
    # Everything was committed, the dead-lettered record included (stop commits the rest).
    assert committed(base_config, topic, 1) == {0: 10}


def test_slow_handler_pauses_and_resumes_with_bounded_queue(
    base_config: dict[str, Any], kafka_bootstrap: str, topic_factory: TopicFactory, produce: Produce
) -> None:
    topic, total = topic_factory(partitions=1), 3000
    produce(topic, [{"value": "x" * 100} for _ in range(total)])
    handled = Handled()
    snapshots: list[dict[str, Any]] = []
    consumer: Consumer | None = None

    def slow(batch: Batch) -> None:
        time.sleep(0.002)
        assert consumer is not None
        snapshots.append(consumer.stats()["partitions"][0])
        handled.add(batch)

    consumer = partition_0_consumer(
        base_config, topic, slow, max_batch_size=20, max_queue_records=100
    )
    recorder = Recorder.subscribed(consumer)
    with consumer:
        handled.wait_count(total)
    assert any(s["paused"] for s in snapshots)
    paused, resumed = recorder.named("paused"), recorder.named("resumed")
    assert paused
    assert resumed
    assert all(e["queued"] >= 100 for e in paused)
    assert all(e["queued"] <= 50 for e in resumed)
    # The queue never holds more than its bound plus the rest of one routed chunk (256).
    assert max(s["queued"] for s in snapshots) <= 100 + 256
    assert max(s["queued_bytes"] for s in snapshots) <= (100 + 256) * 100
    stats = consumer.stats()
    assert stats["pauses"] == len(paused)
    assert stats["resumes"] == len(resumed)


def test_a_subscriber_added_while_running_hears_pauses_and_resumes(
    base_config: dict[str, Any], topic_factory: TopicFactory, produce: Produce
) -> None:
    # The engine sends pauses and resumes only once someone subscribed: a subscriber that comes
    # after the start must turn them on.
    topic, total = topic_factory(partitions=1), 600
    handled = Handled()

    def slow(batch: Batch) -> None:
        time.sleep(0.002)
        handled.add(batch)

    consumer = partition_0_consumer(
        base_config, topic, slow, max_batch_size=20, max_queue_records=100
    )
    with consumer:
        recorder = Recorder.subscribed(consumer)
        produce(topic, [{"value": "x" * 100} for _ in range(total)])
        handled.wait_count(total)
    assert consumer.stats()["pauses"] > 0
    assert recorder.named("paused"), "no pause heard"
    assert recorder.named("resumed"), "no resume heard"


# A consumer in a child process (pyo3-log keeps the logging level it first saw, so the parent's
# librdkafka debug records may be filtered already) whose handler waits until librdkafka logged
# that it backed off fetching the partition, whose queue is full: it prints that line.
BACKOFF_CHILD = textwrap.dedent(
    """
    import asyncio, json, logging, sys, threading
    from ferrokafka import AsyncConsumer, Consumer

    kind, config, topic = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    backed_off, done, handled = threading.Event(), threading.Event(), []

    class BackoffLine(logging.Handler):
        def emit(self, record):
            line = record.getMessage()
            if "Fetch backoff for" in line and "Queue full" in line and not backed_off.is_set():
                print(line, flush=True)
                backed_off.set()

    logging.getLogger().addHandler(BackoffLine())
    logging.getLogger().setLevel(logging.DEBUG)

    def count(batch):
        handled.extend(batch)
        if len(handled) >= 2000:
            done.set()

    def handle(batch):
        backed_off.wait(30)
        count(batch)

    async def handle_async(batch):
        await asyncio.to_thread(backed_off.wait, 30)
        count(batch)

    async def consume_async():
        async with AsyncConsumer(config, [topic], handle_async, max_queue_records=10):
            await asyncio.to_thread(done.wait, 30)

    if kind == "thread":
        with Consumer(config, [topic], handle, max_queue_records=10):
            done.wait(30)
    else:
        asyncio.run(consume_async())
    print("handled", len(handled), flush=True)
    """
)


@pytest.mark.parametrize(
    ("kind", "configured", "expected"), [("thread", None, 10), ("asyncio", 250, 250)]
)
def test_a_full_partition_is_fetched_again_after_10_ms_unless_configured(
    base_config: dict[str, Any],
    topic_factory: TopicFactory,
    produce: Produce,
    tmp_path: Path,
    kind: str,
    configured: int | None,
    expected: int,
) -> None:
    # librdkafka's own default (1 s) left a partition unfetched for a second once its prefetch
    # held queued.min.messages, which a fast handler emptied long before.
    topic = topic_factory(partitions=1)
    produce(topic, [{"value": "x" * 100} for _ in range(2000)])
    config = {**base_config, "debug": "fetch", "queued.min.messages": 100}
    if configured is not None:
        config["fetch.queue.backoff.ms"] = configured
    script = tmp_path / "child.py"
    script.write_text(BACKOFF_CHILD)
    child = subprocess.run(
        [sys.executable, str(script), kind, json.dumps(config), topic],
        capture_output=True,
        text=True,
        timeout=WAIT * 2,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    lines = child.stdout.splitlines()
    assert len(lines) == 2, child.stdout
    assert lines[0].endswith(f"[0]: Fetch backoff for {expected}ms: Local: Queue full")
    assert lines[1] == "handled 2000"


COUNTERS = {
    "received",
    "handled",
    "failed",
    "dead_lettered",
    "retries",
    "batches",
    "pauses",
    "resumes",
    "dropped",
    "abandoned",
}


def test_stats_dict_keeps_its_shape_and_agrees_with_the_typed_snapshot(
    base_config: dict[str, Any], topic: str, produce: Produce
) -> None:
    produce(topic, [{"value": f"v{n}"} for n in range(5)])
    handled = Handled()
    config = {**base_config, "statistics.interval.ms": 100}

    def with_statistics() -> bool:
        stats = consumer.stats()
        if not stats["partitions"] or None in (stats["group"], stats["bytes_received"]):
            return False
        broker = stats["partitions"][0]["broker"]
        return broker is not None and broker["hi_offset"] == 5

    with Consumer(config, [topic], handled.add, commit_interval=0.1) as consumer:
        handled.wait_count(5)
        eventually(with_statistics, "librdkafka statistics of the partition's end and the group")
        stats = consumer.stats()
        typed = consumer._core.require_raw().stats()
    assert set(stats) == COUNTERS | {
        "commits",
        "commit_errors",
        "partitions",
        "group",
        "poll_age",
        "bytes_received",
        "bytes_sent",
    }
    [partition] = stats["partitions"]
    assert set(partition) == COUNTERS | {
        "topic",
        "partition",
        "worker",
        "queued",
        "queued_bytes",
        "paused",
        "in_flight",
        "position",
        "committed",
        "broker",
        "first_received",
    }
    assert set(partition["broker"]) == {
        "lo_offset",
        "hi_offset",
        "ls_offset",
        "committed_offset",
        "stored_offset",
        "next_offset",
        "fetch_state",
        "eof_offset",
        "partitions_cnt",
        "lag",
        "lag_d",
        "lag_stored",
        "lag_stored_d",
        "committed_offset_fd",
        "stored_offset_fd",
        "hi_offset_fd",
        "ls_offset_d",
        "ls_offset_fd",
    }
    assert set(stats["group"]) == {
        "state",
        "join_state",
        "stateage",
        "rebalance_age",
        "rebalance_cnt",
        "rebalance_reason",
    }
    assert (stats["received"], stats["handled"]) == (5, 5)
    assert (partition["topic"], partition["partition"], partition["first_received"]) == (
        topic,
        0,
        0,
    )
    # The dict is the typed snapshot's as_dict(): the same figures under the same names.
    [typed_partition] = typed.partitions
    assert (typed.counters.received, typed.counters.handled) == (5, 5)
    assert (typed_partition.topic, typed_partition.first_received) == (topic, 0)
    assert typed_partition.counters.as_dict().items() <= partition.items()
    assert typed_partition.broker is not None
    assert typed_partition.broker.hi_offset == 5
    assert typed.group is not None
    assert set(typed.group.as_dict()) == set(stats["group"])


def run_until_caught_up(
    config: dict[str, Any],
    subscriptions: list[Any],
    handler: Callable[[Batch], object],
    partitions: int,
    **options: Any,
) -> list[tuple[str, int, int]]:
    """Runs a consumer without a group until ``partitions`` partitions reported caught up;
    returns those reports."""
    caught_up: list[tuple[str, int, int]] = []
    consumer: Consumer | None = None

    def on_caught_up(topic: str, partition: int, offset: int) -> None:
        caught_up.append((topic, partition, offset))
        if len(caught_up) == partitions and consumer is not None:
            consumer.stop()

    consumer = Consumer(config, subscriptions, handler, on_caught_up=on_caught_up, **options)
    consumer.run()
    return caught_up


def test_explicit_partitions_start_at_offset_or_timestamp_and_report_caught_up(
    kafka_bootstrap: str, topic_factory: TopicFactory, produce: Produce
) -> None:
    topic = topic_factory(partitions=2)
    base = 1_700_000_000_000
    produce(
        topic,
        [
            {"value": f"p{p}-{n}", "partition": p, "timestamp": base + n * 1000}
            for p in range(2)
            for n in range(10)
        ],
    )
    handled = Handled()
    caught_up = run_until_caught_up(
        {"bootstrap.servers": kafka_bootstrap},
        [(topic, 0, 4), TopicPartition(topic, 1, timestamp=base + 7000)],
        handled.add,
        partitions=2,
    )
    assert sorted(caught_up) == [(topic, 0, 10), (topic, 1, 10)]
    assert handled.by_partition() == {0: list(range(4, 10)), 1: [7, 8, 9]}


def test_the_commit_and_caught_up_pass_transaction_markers_and_aborted_records(
    kafka_bootstrap: str, base_config: dict[str, Any], topic_factory: TopicFactory
) -> None:
    # A transactional producer (Java, Karafka, ferrokafka's own) ends each transaction with a
    # marker, and aborted records are never handed out: the commit goes past both, as Java's
    # and confluent-kafka's do (the group's lag stayed above zero for ever), and a consumer
    # without a group reports reaching the end (it never did).
    topic = topic_factory(partitions=1)
    end = write_transactions(kafka_bootstrap, topic, aborted=(False, True, False))
    handled = Handled()
    with Consumer(base_config, [topic], handled.add, commit_interval=0.1):
        handled.wait_count(6)
        eventually(lambda: committed(base_config, topic, 1) == {0: end}, "the commit at the end")
    assert handled.by_partition() == {0: [0, 1, 2, 8, 9, 10]}

    caught_up = run_until_caught_up(
        {"bootstrap.servers": kafka_bootstrap}, [topic], Handled().add, partitions=1
    )
    assert caught_up == [(topic, 0, end)]


def test_consumer_without_group_reads_every_partition_of_a_topic_from_the_earliest(
    kafka_bootstrap: str, topic_factory: TopicFactory, produce: Produce
) -> None:
    topic = topic_factory(partitions=3)
    stored = produce(topic, [{"value": f"v{n}", "partition": n % 3} for n in range(30)])
    handled = Handled()
    assigned: list[list[tuple[str, int]]] = []
    # No group.id and no auto.offset.reset: the topic name assigns all three partitions, and the
    # backlog is read from the earliest offset.
    caught_up = run_until_caught_up(
        {"bootstrap.servers": kafka_bootstrap},
        [topic],
        handled.add,
        partitions=3,
        on_assigned=assigned.append,
    )
    assert sorted(assigned[0]) == [(topic, 0), (topic, 1), (topic, 2)]
    assert sorted(caught_up) == [(topic, p, 10) for p in range(3)]
    assert set(handled.records) == stored
    assert handled.by_partition() == {p: list(range(10)) for p in range(3)}


def test_consumer_without_group_names_a_missing_topic(kafka_bootstrap: str) -> None:
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap}, [missing], lambda batch: None)
    with pytest.raises(ValueError, match=f"{missing}.*does not exist"):
        consumer.start()


def test_batch_columns_and_arrow_equal_its_messages(
    kafka_bootstrap: str, topic: str, produce: Produce
) -> None:
    pa = pytest.importorskip("pyarrow")
    base = 1_700_000_000_000
    records: list[dict[str, Any]] = [
        {"value": f"v{n}", "key": f"k{n}", "timestamp": base + n, "headers": {"h": f"{n}"}}
        for n in range(5)
    ]
    records[1] = {"value": None, "key": "gone", "timestamp": base + 1}
    records[2] = {"value": b"", "timestamp": base + 2, "headers": [("a", None), ("a", b"x")]}
    produce(topic, records)
    seen: list[tuple[Any, ...]] = []
    consumer: Consumer | None = None

    def handle(batch: Batch) -> None:
        messages = list(batch)
        arrow = batch.to_arrow()
        seen.append((messages, arrow, batch.values(), batch.keys(), batch.offsets()))
        seen.append((batch.timestamps(), batch[-1].offset(), batch[1:3], len(batch)))
        with pytest.raises(IndexError):
            batch[len(batch)]
        if consumer is not None:
            consumer.stop()

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap}, [topic], handle)
    consumer.run()
    (messages, arrow, values, keys, offsets), (timestamps, last, middle, length) = seen
    assert length == len(messages) == 5
    assert last == 4
    assert [m.offset() for m in middle] == [1, 2]
    assert values == [m.value() for m in messages] == [b"v0", None, b"", b"v3", b"v4"]
    assert keys == [m.key() for m in messages]
    assert offsets == [m.offset() for m in messages] == list(range(5))
    assert timestamps == [m.timestamp()[1] for m in messages] == [base + n for n in range(5)]
    assert isinstance(arrow, pa.RecordBatch)
    assert arrow.schema.names == ARROW_COLUMNS
    assert arrow.schema.field("partition").type == pa.int32()
    assert arrow.schema.field("timestamp").type == pa.timestamp("ms")
    columns = arrow.to_pydict()
    assert columns["key"] == keys
    assert columns["value"] == values
    assert columns["topic"] == [topic] * 5
    assert columns["partition"] == [0] * 5
    assert columns["offset"] == offsets
    assert arrow.column("timestamp").cast(pa.int64()).to_pylist() == timestamps
    assert columns["headers"] == [
        [{"key": k, "value": v} for k, v in (m.headers() or [])] for m in messages
    ]
    assert columns["headers"][2] == [{"key": "a", "value": None}, {"key": "a", "value": b"x"}]


def test_async_consumer_takes_partitions_in_turn_when_handlers_hold_the_loop(
    kafka_bootstrap: str, topic_factory: TopicFactory, produce: Produce
) -> None:
    # A coroutine handler that computes without awaiting must not keep the event loop for its
    # partition until that partition runs dry: the others' records would pile up meanwhile.
    # Like threads under the GIL, a partition yields after a switch interval.
    topic, per_partition = topic_factory(partitions=2), 20
    produce(
        topic,
        [{"value": f"p{p}-{n}", "partition": p} for n in range(per_partition) for p in (0, 1)],
    )
    order: list[int] = []

    async def main() -> None:
        everything_queued, done = asyncio.Event(), asyncio.Event()

        async def handle(batch: Batch) -> None:
            # Suspends only until every record is queued; from then on it never suspends and
            # holds the loop for two switch intervals per batch, as CPU-bound work would.
            await everything_queued.wait()
            time.sleep(2 * sys.getswitchinterval())
            order.append(batch[0].partition())
            if len(order) == 2 * per_partition:
                done.set()

        async with AsyncConsumer(
            {"bootstrap.servers": kafka_bootstrap},
            [TopicPartition(topic, p, offset="beginning") for p in (0, 1)],
            handle,
            max_batch_size=1,
        ) as consumer:
            # No event announces records reaching the queues: poll the stats for it.
            deadline = time.monotonic() + WAIT
            while sum(p["queued"] for p in consumer.stats()["partitions"]) < 2 * per_partition - 2:
                assert time.monotonic() < deadline, f"records never queued: {consumer.stats()}"
                await asyncio.sleep(0.01)
            everything_queued.set()
            await asyncio.wait_for(done.wait(), WAIT)

    asyncio.run(main())
    assert sorted(order) == [0] * per_partition + [1] * per_partition
    longest_run = max(len(list(run)) for _, run in itertools.groupby(order))
    assert longest_run <= 2, f"one partition kept the loop: {order}"


def test_async_consumer_takes_records_and_events_on_the_loop_without_a_pool_thread(
    kafka_bootstrap: str, topic_factory: TopicFactory, produce: Produce
) -> None:
    # Partitions with nothing queued wait on the event loop itself (the engine signals a file
    # descriptor the loop watches): no pool thread fetches records or waits for the engine's
    # events (the assignment that starts every task), and records that arrive later still reach
    # every partition's handler, in order.
    partitions, per_partition = 8, 10
    topic = topic_factory(partitions=partitions)
    records = [
        {"value": f"p{p}-{n}", "partition": p}
        for n in range(per_partition)
        for p in range(partitions)
    ]
    # A first record per partition, so that each has a leader before the consumer assigns it.
    produce(topic, records[:partitions])
    handled = Handled()
    # What the engine's methods were called for on threads other than the loop's (the pool's
    # threads start after the profile is set; the loop runs on this thread, which has none).
    off_loop: set[str] = set()

    def profile(_frame: object, event: str, arg: Any) -> None:
        if event == "c_call" and type(getattr(arg, "__self__", None)).__name__ == "_RawConsumer":
            off_loop.add(arg.__name__)

    async def handle(batch: Batch) -> None:
        handled.add(batch)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with AsyncConsumer(
            {"bootstrap.servers": kafka_bootstrap},
            [TopicPartition(topic, p, offset="beginning") for p in range(partitions)],
            handle,
        ):
            # Every partition runs dry after its first record; the rest arrive while they wait.
            await loop.run_in_executor(None, handled.wait_count, partitions)
            await loop.run_in_executor(None, produce, topic, records[partitions:])
            await loop.run_in_executor(None, handled.wait_count, partitions * per_partition)

    threading.setprofile(profile)
    try:
        asyncio.run(main())
    finally:
        threading.setprofile(None)
    # stop() waits on a pool thread: seen there, the profile watched the pool.
    assert "stop" in off_loop, f"the profile saw no pool thread: {off_loop}"
    taken = {name for name in off_loop if "fetch" in name or name == "poll_events"}
    assert not taken, f"records or events taken off the loop: {off_loop}"
    by_partition = handled.by_partition()
    assert sorted(by_partition) == list(range(partitions))
    for offsets in by_partition.values():
        assert offsets == list(range(per_partition))


def test_stopped_consumers_hold_no_file_descriptor_even_when_kept(
    kafka_bootstrap: str, topic_factory: TopicFactory, produce: Produce, kind: str
) -> None:
    # librdkafka's sockets and the engine's ready signal (an asyncio loop's, which a thread-based
    # consumer never makes) are closed by the stop, not when the owner lets go of the consumer:
    # a service that keeps its stopped consumers (for their stats) does not run out of them.
    topic = topic_factory(partitions=2)
    produce(topic, [{"value": f"v{p}", "partition": p} for p in (0, 1)])
    config = {"bootstrap.servers": kafka_bootstrap}
    subscriptions = [TopicPartition(topic, p, offset="beginning") for p in (0, 1)]
    kept: list[Consumer | AsyncConsumer] = []

    def open_and_stop() -> None:
        handled = threading.Event()
        if kind == "thread":
            consumer = Consumer(config, subscriptions, lambda batch: handled.set())
            kept.append(consumer)
            with consumer:
                assert handled.wait(WAIT), "no batch handled"
            return

        async def run() -> None:
            async def handle(batch: Batch) -> None:
                handled.set()

            consumer = AsyncConsumer(config, subscriptions, handle)
            kept.append(consumer)
            async with consumer:
                await asyncio.wait_for(asyncio.to_thread(handled.wait, WAIT), WAIT)

        asyncio.run(run())

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    open_and_stop()  # the first one may open what the process keeps (loggers)
    before = descriptors()
    for _ in range(5):
        open_and_stop()
    assert descriptors() <= before, f"{descriptors() - before} more descriptors after 5 stops"
    assert all(consumer.stats()["handled"] >= 1 for consumer in kept)
    kept.clear()
    gc.collect()
    assert descriptors() <= before


def test_async_consumer_handles_partitions_concurrently_in_order(
    kafka_bootstrap: str, topic_factory: TopicFactory, produce: Produce
) -> None:
    topic, total = topic_factory(partitions=3), 600
    produce(topic, [{"value": f"v{n}", "key": f"k{n}"} for n in range(total)])
    handled = Handled()
    active: set[int] = set()
    overlapped = False

    async def handle(batch: Batch) -> None:
        nonlocal overlapped
        partition = batch[0].partition()
        overlapped = overlapped or bool(active)
        active.add(partition)
        await asyncio.sleep(0.002)
        active.discard(partition)
        handled.add(batch)

    async def main() -> list[tuple[str, int, int]]:
        caught_up: list[tuple[str, int, int]] = []
        done = asyncio.Event()

        async def on_caught_up(topic_name: str, partition: int, offset: int) -> None:
            caught_up.append((topic_name, partition, offset))
            if len(caught_up) == 3:
                done.set()

        async with AsyncConsumer(
            {"bootstrap.servers": kafka_bootstrap},
            [TopicPartition(topic, p, offset="beginning") for p in range(3)],
            handle,
            max_batch_size=10,
            on_caught_up=on_caught_up,
        ):
            await asyncio.wait_for(done.wait(), WAIT)
        return caught_up

    caught_up = asyncio.run(main())
    assert len(caught_up) == 3
    assert len(handled.records) == total
    for offsets in handled.by_partition().values():
        assert offsets == list(range(len(offsets)))
    assert overlapped


class _LoopWithoutReaders(asyncio.SelectorEventLoop):
    """An event loop that cannot watch file descriptors, as Windows' proactor loop cannot."""

    def add_reader(self, fd: Any, callback: Any, *args: Any) -> None:  # type: ignore[override]
        raise NotImplementedError


def test_an_async_consumer_whose_loop_cannot_watch_its_fd_says_so_and_leaves_the_group(
    kafka_bootstrap: str, topic_factory: TopicFactory, produce: Produce
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [{"value": f"v{n}"} for n in range(20)])
    config = {"bootstrap.servers": kafka_bootstrap, "group.id": f"no-readers-{topic}"}

    async def handle(batch: Batch) -> None:
        raise AssertionError("a consumer that failed to start handled a batch")

    refused = AsyncConsumer(config, [topic], handle)
    loop = _LoopWithoutReaders()
    try:
        with pytest.raises(RuntimeError, match=r"loop\.add_reader.*_LoopWithoutReaders"):
            loop.run_until_complete(refused.start())
    finally:
        loop.close()
    with pytest.raises(RuntimeError, match="was stopped"):
        asyncio.run(refused.start())
    # The engine it had opened left the group: a consumer that joins next is given the partition
    # (a leftover member would keep it, sticky, for session.timeout.ms).
    handled = Handled()
    with Consumer(config, [topic], handled.add):
        handled.wait_for(lambda records: len(records) == 20, "all 20 records")


def take_the_partition_for_a_moment(config: dict[str, Any], topic: str) -> None:
    """A second member of ``config``'s group (confluent-kafka, committing nothing) joins until
    it is assigned a partition of ``topic``, then leaves: the partition goes back."""
    from confluent_kafka import Consumer as ConfluentConsumer

    member = ConfluentConsumer({**config, "enable.auto.commit": False})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + WAIT
        while not member.assignment():
            assert time.monotonic() < deadline, "the second member was never assigned"
            member.poll(0.1)
    finally:
        member.close()


def test_a_partition_given_back_waits_for_its_abandoned_handler(
    kind: str,
    base_config: dict[str, Any],
    topic_factory: TopicFactory,
    produce: Produce,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A handler still running after the drain time of a revocation is abandoned, not stopped:
    # when the partition came back to this process, a new worker handled it from the committed
    # offset while the abandoned handler still ran, and that one then wrote its older records
    # after the newer ones. The new worker waits for it now.
    # Two partitions, the records on the first: whichever the second member is given, the
    # eager rebalance takes both from this consumer, and it gets them back when the member leaves.
    topic = topic_factory(partitions=2)
    produce(topic, [{"value": f"v{n}", "partition": 0} for n in range(60)])
    lock, release = threading.Lock(), threading.Event()
    running: list[int] = []  # first offsets of the batches being handled
    overlaps: list[tuple[int, list[int]]] = []
    handled, assigned_both = Handled(), threading.Semaphore(0)

    def begin(batch: Batch) -> bool:
        with lock:
            if running:
                overlaps.append((batch[0].offset(), list(running)))
            running.append(batch[0].offset())
            return len(handled.records) == 0 and not release.is_set()  # the first batch

    def end(batch: Batch) -> None:
        with lock:
            running.remove(batch[0].offset())
        handled.add(batch)

    def handle(batch: Batch) -> None:
        if begin(batch):
            release.wait(WAIT)
        end(batch)

    async def handle_async(batch: Batch) -> None:
        if begin(batch):
            await asyncio.to_thread(release.wait, WAIT)
        end(batch)

    def on_assigned(partitions: list[tuple[str, int]]) -> None:
        if len(partitions) == 2:
            assigned_both.release()

    settings: dict[str, Any] = {"max_batch_size": 10, "drain": 0.3, "on_assigned": on_assigned}

    def exercise() -> None:
        assert assigned_both.acquire(timeout=WAIT)
        eventually(lambda: bool(running), "the first batch handled")
        take_the_partition_for_a_moment(base_config, topic)
        assert assigned_both.acquire(timeout=WAIT), "the partitions never came back"
        # Before: a new worker's first batch overlapped the abandoned one at once.
        eventually(
            lambda: bool(overlaps) or "a handler abandoned at its revocation" in caplog.text,
            "the new worker waiting (or overlapping)",
        )
        release.set()
        handled.wait_for(lambda records: len(records) >= 70, "every record after the first batch")

    with caplog.at_level(logging.WARNING, logger="ferrokafka.consumer"):
        if kind == "thread":
            with Consumer(base_config, [topic], handle, **settings):
                exercise()
        else:

            async def main() -> None:
                async with AsyncConsumer(base_config, [topic], handle_async, **settings):
                    await asyncio.to_thread(exercise)

            asyncio.run(main())
    assert overlaps == []
    # The abandoned batch ended first; then the partition from its committed offset, in order.
    offsets = [offset for _, offset in handled.records]
    assert offsets[:10] == list(range(10))
    assert offsets[10:] == list(range(60)), offsets


DEBUG_CHILD = """
import sys, threading, time
import ferrokafka

bootstrap, group, topic = sys.argv[1:4]
handled = threading.Event()
started = time.monotonic()
config = {"bootstrap.servers": bootstrap, "group.id": group, "debug": "all"}
with ferrokafka.Consumer(config, [topic], lambda batch: handled.set()):
    handled.wait(60)
    print(time.monotonic() - started if handled.is_set() else "none", flush=True)
"""


def test_a_consumer_logging_every_librdkafka_debug_line_gets_its_partitions_at_once(
    kafka_bootstrap: str, topic_factory: TopicFactory, produce: Produce, tmp_path: Path
) -> None:
    # librdkafka queues its log lines with the rebalances. Served one per poll turn, the ~650
    # lines a process's first consumer logs with `debug` before its assignment held that
    # assignment back 33 s (a fresh process: later consumers of a process were not held).
    topic = topic_factory(partitions=3)
    produce(topic, [{"value": f"v{n}"} for n in range(30)])
    script = tmp_path / "debug_child.py"
    script.write_text(DEBUG_CHILD)
    group = f"test-{uuid.uuid4().hex[:8]}"
    child = subprocess.run(
        [sys.executable, str(script), kafka_bootstrap, group, topic],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )
    first_record = child.stdout.strip()
    assert first_record != "none", "the consumer handled nothing within 60 s"
    assert float(first_record) < 10.0, f"the first record came after {first_record} s"
