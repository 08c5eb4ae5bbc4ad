"""AsyncProducer against the real broker: delivery triggers, backpressure, outages, ordering."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import zlib
from typing import Any

import pytest

from ferrokafka import (
    AsyncProducer,
    BufferOverflow,
    Client,
    ClosedError,
    DeliveryReport,
    KafkaError,
    Message,
)
from tests.conftest import LateTopic, TopicFactory, read_all, wait_until
from tests.kafka.recorder import Recorder

pytestmark = pytest.mark.kafka


def values(client: Client, topic: str) -> list[bytes | None]:
    return [m.value() for m in client.read_topic(topic, timeout=20.0)]


@pytest.fixture
def config(kafka_bootstrap: str) -> dict[str, str | int | bool]:
    return {"bootstrap.servers": kafka_bootstrap, "linger.ms": 5}


def test_threshold_delivers_only_when_reached(
    config: dict[str, Any], kafka_client: Client, topic: str
) -> None:
    with AsyncProducer(config, delivery_threshold=10) as producer:
        recorder = Recorder.subscribed(producer)
        for n in range(9):
            producer.produce(f"m{n}", topic=topic)
        assert values(kafka_client, topic) == []
        assert producer.stats()["deliveries"] == 0
        producer.produce("m9", topic=topic)
        assert recorder.first("deliver_messages")["message_count"] == 10
        producer.flush()
        assert values(kafka_client, topic) == [f"m{n}".encode() for n in range(10)]
    enqueued = recorder.named("enqueue_message")
    assert [e["queue_size"] for e in enqueued] == list(range(1, 11))
    assert {e["max_queue_size"] for e in enqueued} == {1000}


def test_reaching_the_threshold_delivers_the_whole_buffer(
    config: dict[str, Any], kafka_client: Client, topic: str
) -> None:
    """As ruby-kafka: the trigger delivers everything buffered, not one hand-off chunk."""
    with AsyncProducer(config, max_queue_size=5000, delivery_threshold=2500) as producer:
        producer.produce_many([f"m{n}".encode() for n in range(2500)], topic=topic)
        wait_until(lambda: producer.stats()["delivered"] == 2500, 20, "the whole buffer delivered")
        assert producer.stats()["queue_size"] == 0
    assert len(values(kafka_client, topic)) == 2500


def test_interval_delivers_without_being_asked(
    config: dict[str, Any], kafka_client: Client, topic: str
) -> None:
    with AsyncProducer(config, delivery_interval=2.0) as producer:
        recorder = Recorder.subscribed(producer)
        producer.produce_many([b"a", b"b", b"c"], topic=topic)
        # The interval runs from the producer's creation: nothing has been handed over yet.
        stats = producer.stats()
        assert (stats["deliveries"], stats["in_flight"], stats["queue_size"]) == (0, 0, 3)
        assert recorder.first("deliver_messages")["message_count"] == 3
        producer.flush()
        assert values(kafka_client, topic) == [b"a", b"b", b"c"]


def test_nothing_is_delivered_until_deliver_messages(
    config: dict[str, Any], kafka_client: Client, topic: str
) -> None:
    producer = AsyncProducer(config)
    recorder = Recorder.subscribed(producer)
    producer.produce_many([f"v{n}" for n in range(50)], topic=topic)
    assert values(kafka_client, topic) == []
    producer.deliver_messages()
    assert recorder.first("deliver_messages")["message_count"] == 50
    producer.flush()
    assert len(values(kafka_client, topic)) == 50
    assert producer.stats()["delivered"] == 50
    assert producer.shutdown() == []


def test_flush_sends_at_once_instead_of_after_the_linger(
    kafka_bootstrap: str, kafka_client: Client, topic_factory: TopicFactory
) -> None:
    # As confluent-kafka's flush(): librdkafka counts linger.ms as elapsed while a flush waits.
    topic = topic_factory(partitions=1)
    producer = AsyncProducer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5000})
    producer.produce(b"warm-up", topic=topic)  # the topic's metadata and the producer id
    producer.flush(timeout=30.0)
    for value in (b"one", b"two"):
        started = time.monotonic()
        producer.produce(value, topic=topic)
        producer.flush(timeout=30.0)
        assert time.monotonic() - started < 2.5, "flush waited for linger.ms (5 s)"
    producer.shutdown()
    assert values(kafka_client, topic) == [b"warm-up", b"one", b"two"]


def test_shutdown_delivers_everything_buffered(
    config: dict[str, Any], kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=3)
    producer = AsyncProducer(config, max_queue_size=5000)
    producer.produce_many([(f"v{n}", f"k{n}") for n in range(3000)], topic=topic)
    assert producer.shutdown(timeout=30.0) == []
    assert len(values(kafka_client, topic)) == 3000
    with pytest.raises(ClosedError):
        producer.produce(b"late", topic=topic)


def test_raise_policy_raises_buffer_overflow_with_event(config: dict[str, Any]) -> None:
    producer = AsyncProducer(config, max_queue_size=3)
    recorder = Recorder.subscribed(producer)
    producer.produce_many([b"1", b"2", b"3"], topic="orders")
    with pytest.raises(BufferOverflow, match=r"max queue size \(3 messages\)") as caught:
        producer.produce(b"4", topic="orders")
    assert caught.value.topic == "orders"
    assert recorder.named("buffer_overflow") == [
        {"topic": "orders", "limit": "max queue size (3 messages) reached"}
    ]
    with pytest.raises(BufferOverflow) as batch:
        producer.produce_many([b"5"], topic="orders")
    assert batch.value.accepted == 0
    assert producer.stats()["overflowed"] == 2
    producer.shutdown(timeout=5.0)


def test_bytes_limit_and_oversize_message(config: dict[str, Any]) -> None:
    producer = AsyncProducer(config, max_queue_bytes=100)
    producer.produce(b"x" * 60, topic="orders")
    with pytest.raises(BufferOverflow, match="max queue bytes"):
        producer.produce(b"y" * 60, topic="orders")
    with pytest.raises(BufferOverflow, match="exceeds max queue bytes"):
        producer.produce(b"z" * 101, topic="orders")
    producer.shutdown(timeout=5.0)


def test_block_policy_delivers_a_full_queue_instead_of_waiting(
    config: dict[str, Any], kafka_client: Client, topic: str
) -> None:
    # No delivery trigger at all: waiting for room would wait forever, so a full queue is
    # delivered at once and the blocked record goes in behind it.
    producer = AsyncProducer(config, max_queue_size=5, overflow="block", block_timeout=30.0)
    producer.produce_many([f"v{n}" for n in range(5)], topic=topic)
    producer.produce(b"v5", topic=topic)
    producer.flush()
    assert values(kafka_client, topic) == [f"v{n}".encode() for n in range(6)]
    assert producer.stats()["overflowed"] == 0  # waiting for room is not a refusal
    producer.shutdown()


def test_block_policy_gives_up_after_its_timeout_and_counts_the_refusal() -> None:
    # No broker and a librdkafka queue of one record: nothing frees room, so the block ends.
    producer = AsyncProducer(
        {"bootstrap.servers": "127.0.0.1:1", "queue.buffering.max.messages": 1},
        max_queue_size=1,
        overflow="block",
        block_timeout=0.3,
    )
    accepted = 0
    refusal = None
    for n in range(10):
        try:
            producer.produce(f"v{n}".encode(), topic="orders")
        except BufferOverflow as overflow:
            refusal = overflow
            break
        accepted += 1
    assert refusal is not None
    assert "after blocking 0.3 s" in str(refusal)
    assert 1 <= accepted < 10
    assert producer.stats()["overflowed"] == 1
    handed_back = producer.shutdown(timeout=0.5)
    assert sorted(m.value() or b"" for m in handed_back) == sorted(
        f"v{n}".encode() for n in range(accepted)
    )


def test_drop_oldest_counts_and_hands_back_drops(
    config: dict[str, Any], kafka_client: Client, topic: str
) -> None:
    producer = AsyncProducer(config, max_queue_size=3, overflow="drop_oldest")
    recorder = Recorder.subscribed(producer)
    dropped_future = producer.produce_future(b"0", topic=topic)
    producer.produce_many([b"1", b"2", b"3", b"4"], topic=topic)
    assert producer.stats()["dropped"] == 2
    with pytest.raises(BufferOverflow, match="drop_oldest"):
        dropped_future.result(timeout=10)
    producer.flush()
    drops = recorder.named("drop_messages")
    assert [m.value() for d in drops for m in d["messages"]] == [b"0", b"1"]
    assert values(kafka_client, topic) == [b"2", b"3", b"4"]
    producer.shutdown()


def test_callbacks_and_futures_get_delivery_results(
    config: dict[str, Any], topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=2)
    seen: list[tuple[Exception | None, Message]] = []
    with AsyncProducer(config, delivery_threshold=3) as producer:
        producer.produce(
            b"a", topic=topic, partition=1, on_delivery=lambda e, m: seen.append((e, m))
        )
        future = producer.produce_future(b"b", topic=topic, partition=1)

        async def wait_for_it() -> Message:
            producer.produce(b"c", topic=topic, partition=1)
            return await asyncio.wrap_future(future)

        delivered = asyncio.run(wait_for_it())
        producer.flush()
    assert (delivered.topic(), delivered.partition(), delivered.offset()) == (topic, 1, 1)
    assert delivered.error() is None
    assert [(e, m.value(), m.offset()) for e, m in seen] == [(None, b"a", 0)]


@pytest.mark.parametrize("where", ["on_delivery", "subscriber"])
def test_flush_and_shutdown_called_in_a_callback_return_and_the_rest_is_delivered(
    config: dict[str, Any], kafka_client: Client, topic: str, where: str
) -> None:
    # Callbacks and subscribers run on the producer's event thread, while it publishes: a
    # flush() or shutdown() there waited for that very thread, for ever (and so did the exit).
    producer = AsyncProducer(config)
    called: dict[str, Any] = {}
    done = threading.Event()
    second: list[Exception | None] = []

    def stop_from_here() -> None:
        if done.is_set():
            return
        producer.flush(10)
        called["flush"] = "returned"
        called["shutdown"] = producer.shutdown(10)
        done.set()

    if where == "subscriber":
        producer.subscribe(lambda name, _: stop_from_here() if name == "deliver_messages" else None)
        producer.produce(b"first", topic)
    else:
        producer.produce(b"first", topic, on_delivery=lambda e, m: stop_from_here())
    producer.produce(b"second", topic, on_delivery=lambda e, m: second.append(e))
    producer.deliver_messages()
    assert done.wait(30), "flush() and shutdown() in the callback did not return"
    assert called == {"flush": "returned", "shutdown": []}
    wait_until(lambda: second == [None], 10, "the second record's callback")
    assert producer.shutdown(5) == []
    with pytest.raises(ClosedError):
        producer.produce(b"late", topic)
    assert values(kafka_client, topic) == [b"first", b"second"]


def test_each_callback_runs_once_in_partition_order_and_a_raising_one_stops_nothing(
    config: dict[str, Any], topic_factory: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    topic = topic_factory(partitions=3)
    calls: list[tuple[int, int, bytes | None]] = []  # (partition, offset, value) per call

    def record(error: Exception | None, message: Message) -> None:
        assert error is None
        calls.append((message.partition(), message.offset(), message.value()))

    def record_then_raise(error: Exception | None, message: Message) -> None:
        record(error, message)
        raise RuntimeError("callback bug")

    # Idempotent, so the partition stores the records in the order produced: without it a
    # request refused at first (a new topic's leader not known to the broker yet) is retried
    # behind the ones pipelined after it, and the callbacks follow the stored order.
    idempotent = {**config, "enable.idempotence": True}
    with AsyncProducer(idempotent, max_queue_size=3000, delivery_threshold=500) as producer:
        futures = []
        for i in range(3000):
            callback = record_then_raise if i % 100 == 7 else record
            value = str(i).encode()
            if i % 10 == 3:
                futures.append((value, producer.produce_future(value, topic, partition=i % 3)))
            else:
                producer.produce(value, topic, partition=i % 3, on_delivery=callback)
        producer.flush()
        assert producer.stats()["in_flight"] == 0
    assert len(calls) == 2700
    assert len(set(calls)) == 2700  # once each
    for partition in range(3):
        in_partition = [(offset, value) for p, offset, value in calls if p == partition]
        assert [offset for offset, _ in in_partition] == sorted(o for o, _ in in_partition)
        sent = [int(value or b"") for _, value in in_partition]
        assert sent == sorted(sent)  # callbacks run in the order the records were produced
    for value, future in futures:
        message = future.result(timeout=0)
        assert message.value() == value
        assert message.error() is None
    # 30 callbacks raised: the first is logged with its traceback, the others within
    # _failure_log.QUIET_SECONDS are only counted (one traceback per delivery flooded the log).
    [failure] = [r for r in caplog.records if "on_delivery callback failed" in r.getMessage()]
    assert failure.exc_info
    assert "callback bug" in str(failure.exc_info[1])
    assert topic in failure.getMessage()


def test_shutdown_settles_the_waiters_of_records_it_hands_back() -> None:
    # librdkafka holds one record: "a" is in flight (purged at shutdown), "b" and "c" stay in the
    # buffer and come back from shutdown itself; every waiter gets its record and the error.
    seen: list[tuple[Exception | None, bytes | None]] = []
    unreachable: dict[str, str | int] = {
        "bootstrap.servers": "127.0.0.1:1",
        "message.timeout.ms": 60_000,
        "queue.buffering.max.messages": 1,
    }
    producer = AsyncProducer(unreachable)  # nothing is delivered until asked
    for value in [b"a", b"b"]:
        producer.produce(value, "t", on_delivery=lambda e, m: seen.append((e, m.value())))
    future = producer.produce_future(b"c", "t")
    handed_back = producer.shutdown(timeout=0.5)
    errors = {m.value(): type(m.error()) for m in handed_back}
    assert errors == {b"a": KafkaError, b"b": ClosedError, b"c": ClosedError}
    assert sorted((value or b"", type(error)) for error, value in seen) == [
        (b"a", KafkaError),
        (b"b", ClosedError),
    ]
    with pytest.raises(ClosedError):
        future.result(timeout=0)


def test_records_keep_keys_headers_partitions_and_timestamps(
    config: dict[str, Any], kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=3)
    with AsyncProducer(config) as producer:
        producer.produce(
            b"explicit",
            topic=topic,
            key="k",
            partition=2,
            headers=[("a", b"1"), ("a", None), ("b", "ü")],
            timestamp=1_600_000_000_123,
        )
        producer.produce_many(
            [{"value": b"from-dict", "key": b"dk", "partition": 0, "headers": {"h": b"v"}}],
            topic=topic,
        )
    by_value = {m.value(): m for m in kafka_client.read_topic(topic)}
    explicit = by_value[b"explicit"]
    assert explicit.partition() == 2
    assert explicit.key() == b"k"
    assert explicit.headers() == [("a", b"1"), ("a", None), ("b", "ü".encode())]
    assert explicit.timestamp() == (1, 1_600_000_000_123)
    from_dict = by_value[b"from-dict"]
    assert (from_dict.partition(), from_dict.key(), from_dict.headers()) == (
        0,
        b"dk",
        [("h", b"v")],
    )


def test_order_is_kept_per_partition_and_partition_key_is_crc32(
    config: dict[str, Any], kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=3)
    users = [f"user-{n}" for n in range(12)]
    with AsyncProducer(config, max_queue_size=10_000, delivery_threshold=500) as producer:
        for seq in range(400):
            for user in users:
                producer.produce(f"{user}:{seq}", topic=topic, partition_key=user)
    seen: dict[str, list[int]] = {}
    for message in kafka_client.read_topic(topic, timeout=30.0):
        user, sequence = (message.value() or b"").decode().split(":")
        assert message.partition() == zlib.crc32(user.encode()) % 3
        assert message.key() is None
        seen.setdefault(user, []).append(int(sequence))
    assert seen == {user: list(range(400)) for user in users}


def test_a_partition_key_waits_for_its_topic_instead_of_landing_on_any_partition(
    config: dict[str, Any], kafka_client: Client, late_topic: LateTopic
) -> None:
    """Partition-keyed records for a topic that does not exist yet (and that this producer does
    not create) are retried, with a ``delivery_error`` event naming the cause, until the topic
    exists; then each lands on its key's partition. librdkafka's partitioner, given them without
    a partition, put them anywhere."""
    topic = late_topic.name
    users = [f"user-{n}" for n in range(24)]
    with AsyncProducer(
        {**config, "allow.auto.create.topics": False}, delivery_threshold=1
    ) as producer:
        recorder = Recorder.subscribed(producer)
        for user in users:
            producer.produce(user, topic=topic, partition_key=user)
        waiting = recorder.first("delivery_error")
        assert waiting["final"] is False
        assert topic in str(waiting["error"]), waiting["error"]
        late_topic.create(partitions=6)
        producer.flush(timeout=30.0)
    placed = {
        (m.value() or b"").decode(): m.partition()
        for m in kafka_client.read_topic(topic, timeout=20.0)
    }
    assert placed == {user: zlib.crc32(user.encode()) % 6 for user in users}


def test_keyless_batches_go_one_partition_each_in_turn_unless_the_partitioner_hashes(
    config: dict[str, Any], kafka_client: Client, topic_factory: TopicFactory
) -> None:
    """librdkafka's default partitioner puts keyless records on one partition for a while (sticky);
    the producer does the same per handed-off batch, the partitions in turn. A partitioner that
    hashes the missing key (``consistent``) keeps every keyless record on one partition."""
    sticky, hashed = topic_factory(partitions=3), topic_factory(partitions=3)
    for topic, extra in ((sticky, {}), (hashed, {"partitioner": "consistent"})):
        with AsyncProducer({**config, **extra}, delivery_threshold=100) as producer:
            for run in range(6):
                producer.produce_many([f"{run}:{n}".encode() for n in range(100)], topic=topic)
                producer.flush()
    runs: dict[int, list[tuple[int, int]]] = {}
    for message in kafka_client.read_topic(sticky, timeout=20.0):
        run, n = map(int, (message.value() or b"").decode().split(":"))
        runs.setdefault(run, []).append((message.partition(), n))
    partitions = []
    for run in range(6):
        assert [n for _, n in runs[run]] == list(range(100)), f"run {run} incomplete or reordered"
        assert len({p for p, _ in runs[run]}) == 1, f"run {run} was split across partitions"
        partitions.append(runs[run][0][0])
    assert sorted(partitions) == [0, 0, 1, 1, 2, 2]  # in turn: each partition twice
    assert partitions[:3] == partitions[3:]
    on_hashed = kafka_client.read_topic(hashed, timeout=20.0)
    assert len(on_hashed) == 600
    assert len({m.partition() for m in on_hashed}) == 1


def test_a_batch_report_gives_every_record_its_partition_and_offset_in_batch_order(
    config: dict[str, Any], kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=3)
    reports: list[DeliveryReport] = []
    settled = threading.Event()

    def on_delivery(report: DeliveryReport) -> None:
        reports.append(report)
        if len(reports) == 3:
            settled.set()

    batches = [[(f"b{b}-{n}", f"key-{n % 7}") for n in range(1000)] for b in range(3)]
    with AsyncProducer(config, max_queue_size=10_000, delivery_threshold=500) as producer:
        for batch in batches:
            assert producer.produce_many(batch, topic=topic, on_delivery=on_delivery) == 1000
        assert settled.wait(30), "three reports, one per batch"
    on_topic = {m.value(): (m.partition(), m.offset()) for m in kafka_client.read_topic(topic)}
    assert len(on_topic) == 3000
    for report in reports:
        assert (report.count, report.delivered, report.failed, len(report)) == (1000, 1000, 0, 1000)
        assert report.errors() == []
        batch = next(b for b in batches if on_topic[b[0][0].encode()][1] in report.offsets())
        positions = list(zip(report.partitions(), report.offsets(), strict=True))
        assert positions == [on_topic[value.encode()] for value, _ in batch]


def test_a_transactional_batch_report_comes_once_its_transactions_committed(
    kafka_bootstrap: str, kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=2)
    config = {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic}-tx"}
    with AsyncProducer(config, max_queue_size=5000) as producer:
        future = producer.produce_many_future([f"t{n}" for n in range(2500)], topic=topic)
        producer.deliver_messages()
        report = future.result(timeout=30)  # three transactions of at most 1,000 records
        assert (report.count, report.delivered, report.failed) == (2500, 2500, 0)
    committed = {m.value(): (m.partition(), m.offset()) for m in kafka_client.read_topic(topic)}
    positions = list(zip(report.partitions(), report.offsets(), strict=True))
    assert positions == [committed[f"t{n}".encode()] for n in range(2500)]


def test_a_batch_report_names_the_records_that_failed_and_the_rest_are_delivered(
    kafka_bootstrap: str, kafka_client: Client, topic: str
) -> None:
    producer = AsyncProducer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 2000})
    future = producer.produce_many_future([b"ok-0", b"x" * 5000, b"ok-2"], topic=topic)
    producer.deliver_messages()
    report = future.result(timeout=20)
    assert (report.count, report.delivered, report.failed) == (3, 2, 1)
    [(index, error)] = report.errors()
    assert index == 1
    assert isinstance(error, KafkaError)
    assert (report.partitions()[1], report.offsets()[1]) == (-1, -1)
    assert values(kafka_client, topic) == [b"ok-0", b"ok-2"]
    assert [len(m.value() or b"") for m in producer.take_failed()] == [5000]
    assert producer.shutdown() == []


def test_batch_reports_cover_what_was_queued_and_await_in_asyncio(
    config: dict[str, Any], topic: str
) -> None:
    producer = AsyncProducer(config, max_queue_size=10)
    reports: list[DeliveryReport] = []
    with pytest.raises(BufferOverflow) as overflow:
        producer.produce_many([f"m{n}" for n in range(15)], topic=topic, on_delivery=reports.append)
    assert overflow.value.accepted == 10
    producer.flush()
    wait_until(lambda: len(reports) == 1, 10, "the report of the ten queued records")
    assert (reports[0].count, reports[0].delivered) == (10, 10)

    async def both() -> tuple[DeliveryReport, DeliveryReport]:
        empty = asyncio.wrap_future(producer.produce_many_future([], topic=topic))
        some = asyncio.wrap_future(producer.produce_many_future([b"a", b"b"], topic=topic))
        producer.deliver_messages()
        return await asyncio.wait_for(empty, 10), await asyncio.wait_for(some, 10)

    empty, some = asyncio.run(both())
    assert (empty.count, some.count, some.delivered) == (0, 2, 2)
    assert some.offsets() == [10, 11]
    assert producer.shutdown() == []


def test_a_bad_message_fails_alone_and_is_handed_back(
    kafka_bootstrap: str, kafka_client: Client, topic: str
) -> None:
    producer = AsyncProducer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 2000})
    recorder = Recorder.subscribed(producer)
    failed_future = producer.produce_future(b"x" * 5000, topic=topic, key="big")
    producer.produce_many([b"ok-1", b"ok-2"], topic=topic)
    producer.flush()
    # The client's own limit refused it, and the error says so (librdkafka's words blame the
    # broker).
    with pytest.raises(KafkaError, match=r"TooLarge: .* this client's message.max.bytes"):
        failed_future.result(timeout=10)
    failed = producer.take_failed()
    assert [(m.key(), len(m.value() or b"")) for m in failed] == [(b"big", 5000)]
    assert isinstance(failed[0].error(), KafkaError)
    final = [e for e in recorder.named("delivery_error") if e["final"]]
    assert len(final) == 1
    assert values(kafka_client, topic) == [b"ok-1", b"ok-2"]
    assert producer.shutdown() == []


def test_a_batch_refused_for_one_record_delivers_its_neighbours(
    kafka_bootstrap: str, topic_factory: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # One keyless record on a compacted topic makes the broker refuse its whole batch, and
    # librdkafka reports every record of it with that record's error: the neighbours were
    # handed back with it. They are sent again in halves until only the bad one is refused.
    caplog.set_level(logging.INFO, logger="ferrokafka_kafka.producer.isolation")
    topic = topic_factory(partitions=1, config={"cleanup.policy": "compact"})
    producer = AsyncProducer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 100})
    for n in range(40):
        key = None if n == 17 else f"k{n}"
        producer.produce(f"v{n}".encode(), topic=topic, key=key, partition=0)
    producer.flush(timeout=30.0)
    failed = producer.take_failed()
    assert [m.value() for m in failed] == [b"v17"]
    assert failed[0].key() is None
    assert "refused this record when it was sent alone (a keyless record" in str(failed[0].error())
    written = read_all(kafka_bootstrap, topic, partitions=1)
    assert sorted(written) == sorted(
        (f"k{n}".encode(), f"v{n}".encode()) for n in range(40) if n != 17
    )
    stats = producer.stats()
    assert (stats["delivered"], stats["failed"], stats["in_flight"]) == (39, 1, 0)
    assert any("refused with their batch" in r.getMessage() for r in caplog.records)
    assert producer.shutdown() == []


def test_a_batch_over_the_topics_size_limit_is_split_until_it_fits(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    # A batch over the topic's max.message.bytes fails whole, though each record fits; Java's
    # producer splits it, and so does this one. A record over the limit alone is handed back.
    topic = topic_factory(partitions=1, config={"max.message.bytes": "3000"})
    producer = AsyncProducer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 100})
    small = [(f"k{n}".encode(), bytes([65 + n % 26]) * 200) for n in range(30)]
    for key, value in small[:15]:
        producer.produce(value, topic=topic, key=key, partition=0)
    producer.produce(b"z" * 5000, topic=topic, key="big", partition=0)
    for key, value in small[15:]:
        producer.produce(value, topic=topic, key=key, partition=0)
    producer.flush(timeout=30.0)
    failed = producer.take_failed()
    assert [m.key() for m in failed] == [b"big"]
    assert "over the topic's max.message.bytes" in str(failed[0].error())
    assert sorted(read_all(kafka_bootstrap, topic, partitions=1)) == sorted(small)
    assert producer.shutdown() == []


def test_exhausted_retries_hand_messages_back() -> None:
    producer = AsyncProducer(
        {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 500},
        max_retries=1,
    )
    producer.produce_many([f"v{n}" for n in range(5)], topic="nowhere")
    producer.flush(timeout=20.0)
    failed = producer.take_failed()
    assert sorted(m.value() or b"" for m in failed) == [f"v{n}".encode() for n in range(5)]
    assert all(isinstance(m.error(), KafkaError) for m in failed)
    # librdkafka's message.timeout.ms reaches the engine without its length: no "after 0.0 s".
    assert {str(m.error()) for m in failed} == {"produce timed out"}
    stats = producer.stats()
    assert (stats["failed"], stats["retried"], stats["delivered"]) == (5, 5, 0)
    producer.shutdown(timeout=2.0)


def test_a_users_statistics_interval_is_not_logged_by_producers_and_clients(
    config: dict[str, Any],
    kafka_client: Client,
    topic: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """librdkafka's statistics go only to the contexts that read them (a Consumer's, the
    daemons' group consumers): an AsyncProducer's or a Client's would reach rdkafka's default
    handler, which logs the whole document at INFO once per interval."""
    caplog.set_level(logging.INFO)
    with_statistics = {**config, "statistics.interval.ms": 20}
    producer = AsyncProducer(with_statistics)
    client = Client(with_statistics)
    producer.produce(b"x", topic=topic)
    producer.flush(timeout=30.0)
    assert [m.value() for m in client.read_topic(topic, timeout=20.0)] == [b"x"]
    # Absence needs a window: ten intervals more with both clients connected.
    time.sleep(0.2)
    producer.shutdown(timeout=5.0)
    logged = [r for r in caplog.records if "stats" in r.getMessage().lower()]
    assert logged == [], logged[0].getMessage()[:200]


def test_flush_settles_every_future_and_callback_beyond_one_chunk_of_deliveries(
    config: dict[str, Any], topic_factory: TopicFactory
) -> None:
    # flush promises that every record's callback ran and future is settled when it returns.
    # Deliveries settle in the binding and return no event to Python, so a drain that stopped
    # at the first empty answer left all but the first 10,000 of them waiting. The event
    # thread is stopped first so that every delivery is left to flush's own drain.
    topic = topic_factory(partitions=3)
    producer = AsyncProducer(config, max_queue_size=30_000)
    producer._events._closed.set()
    producer._events._thread.join(5)
    called = 0

    def count(_error: object, _message: object) -> None:
        nonlocal called
        called += 1

    futures = [producer.produce_future(b"x", topic) for _ in range(15_000)]
    for _ in range(15_000):
        producer.produce(b"y", topic, on_delivery=count)
    producer.flush(timeout=30)
    assert sum(not f.done() for f in futures) == 0
    assert called == 15_000
    assert all(f.result(timeout=0).offset() >= 0 for f in futures)
    producer.shutdown()
