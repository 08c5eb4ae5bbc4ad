"""AsyncProducer across real broker outages: every accepted message is acknowledged or handed
back, never both and never neither; idempotent and transactional producers keep their promises.

The outage broker is one of this module's own (so pausing it leaves the session broker alone);
every count is made afterwards by an independent confluent-kafka consumer.
"""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any, Literal

import pytest

from ferrokafka import (
    AsyncProducer,
    BufferOverflow,
    Client,
    DeliveryReport,
    KafkaFatalError,
    Message,
    NewTopic,
)
from tests.conftest import Broker, outage, read_all, read_messages, wait_until

pytestmark = pytest.mark.kafka


def make_topic(bootstrap: str, name: str, partitions: int = 3) -> str:
    topic = f"{name}-{time.monotonic_ns()}"
    Client({"bootstrap.servers": bootstrap}).create_topics(
        [NewTopic(topic, num_partitions=partitions)], timeout=30.0
    )
    return topic


def wait_for(event: threading.Event, what: str, timeout: float = 30.0) -> None:
    assert event.wait(timeout), f"timed out waiting for {what}"


def idempotent_producer(
    bootstrap: str, settings: dict[str, str | int | bool] | None = None, **options: Any
) -> AsyncProducer:
    """An idempotent AsyncProducer lingering 5 ms with room for 10,000 records, plus
    librdkafka ``settings`` and AsyncProducer ``options``."""
    return AsyncProducer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            **(settings or {}),
        },
        max_queue_size=10_000,
        **options,
    )


def assert_each_once_in_order_per_key(
    on_topic: list[tuple[bytes, bytes]], count: int, handed_back: list[bytes] | None = None
) -> None:
    """Values ``00000000`` to ``count - 1`` produced in order: each one is on the topic (as
    (key, value), in offset order) or handed back, once, and each key's are in order."""
    values = [value for _, value in on_topic]
    assert len(values) == len(set(values)), "a record twice on the topic"
    expected = [f"{n:08d}".encode() for n in range(count)]
    assert sorted(values + (handed_back or [])) == expected, "each record exactly once"
    for key in {k for k, _ in on_topic}:
        per_key = [value for k, value in on_topic if k == key]
        assert per_key == sorted(per_key), f"records of {key!r} out of order"


def test_batch_reports_settle_every_record_when_shutdown_cuts_an_outage_short(
    outage_broker: Broker,
) -> None:
    """Records in librdkafka, in its full queue's overflow and in the buffer when shutdown's
    grace ends: each batch's report still comes, and counts each record once, as delivered
    (it is on the topic) or failed (it was handed back)."""
    bootstrap, env = outage_broker
    topic = make_topic(bootstrap, "shutdown-reports")
    producer = AsyncProducer(
        {"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 1000},
        max_queue_size=10_000,
        delivery_threshold=100,
    )
    reports: dict[int, DeliveryReport] = {}
    batches = [[f"b{b}-{n}".encode() for n in range(1000)] for b in range(4)]
    producer.produce_many(batches[0], topic=topic, on_delivery=partial(reports.__setitem__, 0))
    producer.flush(timeout=30.0)
    with outage(env):
        for b in (1, 2, 3):
            producer.produce_many(
                batches[b], topic=topic, on_delivery=partial(reports.__setitem__, b)
            )
        handed_back = producer.shutdown(timeout=2.0)
    assert sorted(reports) == [0, 1, 2, 3], "every report is in when shutdown returns"
    on_topic = {value for _, value in read_all(bootstrap, topic)}
    returned = [m.value() or b"" for m in handed_back + producer.take_failed()]
    assert len(returned) == len(set(returned))
    assert reports[0].delivered == 1000
    for b, report in reports.items():
        assert report.count == report.delivered + report.failed == 1000
        offsets = report.offsets()
        assert {batches[b][n] for n in range(1000) if offsets[n] >= 0} <= on_topic
        assert {batches[b][n] for n, _ in report.errors()} <= set(returned)
    assert sum(r.delivered for r in reports.values()) == len(on_topic)
    assert sum(r.failed for r in reports.values()) == len(returned) == 4000 - len(on_topic)


@pytest.mark.parametrize("overflow", ["block", "raise", "drop_oldest"])
def test_shutdown_during_an_outage_hands_back_everything_not_acknowledged(
    outage_broker: Broker, overflow: Literal["block", "raise", "drop_oldest"]
) -> None:
    # More is accepted than librdkafka's own queue holds (1,000), so records sit both inside
    # librdkafka and in ferrokafka's buffer when shutdown's grace period ends.
    bootstrap, env = outage_broker
    topic = make_topic(bootstrap, f"shutdown-{overflow.replace('_', '-')}")
    producer = AsyncProducer(
        {"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 1000},
        max_queue_size=2000,
        overflow=overflow,
        block_timeout=0.5,
        delivery_threshold=100,
        delivery_interval=0.1,
    )
    dropped: list[Message] = []
    producer.subscribe(
        lambda name, payload: (
            dropped.extend(payload["messages"]) if name == "drop_messages" else None
        )
    )
    producer.produce_many([(f"before-{n}", f"before-{n}") for n in range(500)], topic=topic)
    producer.flush(timeout=30.0)
    accepted = {f"before-{n}".encode() for n in range(500)}
    with outage(env):
        for n in range(5000):
            try:
                producer.produce(f"during-{n}", topic=topic, key=f"during-{n}")
            except BufferOverflow:
                break  # both queues are full: nothing more goes in until the broker is back
            accepted.add(f"during-{n}".encode())
        started = time.monotonic()
        handed_back = producer.shutdown(timeout=2.0)
        took = time.monotonic() - started
    assert took < 2.0 + 8.0, f"shutdown took {took:.1f} s"
    assert len(accepted) > 500 + 1000  # more than librdkafka holds: the buffer had some too
    on_topic = [key for key, _ in read_all(bootstrap, topic)]
    returned = [m.key() or b"" for m in handed_back + dropped]
    assert len(on_topic) == len(set(on_topic))
    assert len(returned) == len(set(returned))
    assert not set(on_topic) & set(returned)
    assert set(on_topic) | set(returned) == accepted
    assert all(m.error() is not None for m in handed_back)


def test_idempotent_producer_keeps_order_per_key_when_messages_time_out(
    outage_broker: Broker,
) -> None:
    bootstrap, env = outage_broker
    topic = make_topic(bootstrap, "idempotent-order")
    producer = idempotent_producer(bootstrap, {"message.timeout.ms": 3000}, delivery_interval=0.05)
    timed_out = threading.Event()
    producer.subscribe(lambda name, payload: timed_out.set() if name == "delivery_error" else None)
    sequence = 0

    def produce(count: int) -> None:
        nonlocal sequence
        for _ in range(count):
            key = f"k{sequence % 10}"
            producer.produce(f"{sequence:08d}", topic=topic, key=key)
            sequence += 1

    produce(500)
    producer.flush(timeout=30.0)
    with outage(env):
        produce(1000)  # these time out in librdkafka during the outage ...
        wait_for(timed_out, "a message to time out")
        produce(1000)  # ... and these are still queued when the broker comes back
    producer.flush(timeout=60.0)
    handed_back = producer.shutdown(timeout=10.0)
    on_topic = read_all(bootstrap, topic)
    returned = [m.value() or b"" for m in handed_back]
    assert returned, "the outage was meant to outlast message.timeout.ms"
    assert_each_once_in_order_per_key(on_topic, sequence, returned)


def test_transactional_producer_outlives_an_outage_longer_than_its_transaction_timeout(
    outage_broker: Broker,
) -> None:
    # Records stream in while the broker is down for longer than transaction.timeout.ms, so
    # the open transaction dies with it (librdkafka reports it as fenced or failed fatally)
    # and more rounds wait behind it. Every record must still be committed exactly once, in
    # order per key, be reported delivered only once committed, and new records must be
    # delivered within seconds of the broker's return.
    bootstrap, env = outage_broker
    topic = make_topic(bootstrap, "transactional-long-outage")
    transaction_timeout = 3.0
    producer = AsyncProducer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"long-outage-{topic}",
            "transaction.timeout.ms": int(transaction_timeout * 1000),
        },
        max_queue_size=1_000_000,
        delivery_interval=0.05,
    )
    produced = 0
    stop = threading.Event()
    back = threading.Event()
    recovered = threading.Event()  # a batch produced after the outage was committed
    reports: list[DeliveryReport] = []

    def on_delivery(after_outage: bool, report: DeliveryReport) -> None:
        reports.append(report)
        if after_outage and report.delivered:
            recovered.set()

    def stream() -> None:
        # About 5,000 records per second (the trial) in batches of 125, keys k0..k9,
        # values in produce order: rounds of hundreds of records to many partitions are in
        # flight when the broker goes, which is when an aborted round's reports come back in
        # an order of librdkafka's own.
        nonlocal produced
        while not stop.is_set():
            producer.produce_many(
                [(f"{n:08d}", f"k{n % 10}") for n in range(produced, produced + 125)],
                topic=topic,
                on_delivery=partial(on_delivery, back.is_set()),
            )
            produced += 125
            time.sleep(0.025)

    streamer = threading.Thread(target=stream)
    streamer.start()
    try:
        wait_until(  # several rounds committed before the outage
            lambda: producer.stats()["delivered"] >= 1000, 30.0, "1000 records committed"
        )
        with outage(env):
            # the outage itself: longer than transaction.timeout.ms, while records stream in
            time.sleep(transaction_timeout + 2.0)
        back.set()
        returned = time.monotonic()
        wait_for(recovered, "a record produced after the outage to be committed", timeout=30.0)
        recovery = time.monotonic() - returned
    finally:
        stop.set()
        streamer.join()
    producer.flush(timeout=60.0)
    assert producer.shutdown(timeout=10.0) == []
    # mostly the broker's own restart and a new instance's init_transactions; ~10-20 s here
    assert recovery < 30.0, f"the producer took {recovery:.1f} s to recover"
    on_topic = read_all(bootstrap, topic)
    assert sum(r.delivered for r in reports) == producer.stats()["delivered"] == len(on_topic)
    assert sum(r.failed for r in reports) == 0
    assert_each_once_in_order_per_key(on_topic, produced)


def test_outage_shorter_than_message_timeout_loses_and_duplicates_nothing(
    outage_broker: Broker,
) -> None:
    bootstrap, env = outage_broker
    topic = make_topic(bootstrap, "outage")
    producer = idempotent_producer(bootstrap)
    producer.produce_many([f"before-{n}" for n in range(100)], topic=topic)
    producer.flush(timeout=30.0)
    with outage(env):
        producer.produce_many([f"during-{n}" for n in range(1000)], topic=topic)
        producer.deliver_messages()
    producer.flush(timeout=60.0)
    assert producer.take_failed() == []
    assert producer.shutdown() == []
    got = sorted(value for _, value in read_all(bootstrap, topic))
    expected = [f"before-{n}" for n in range(100)] + [f"during-{n}" for n in range(1000)]
    assert got == sorted(v.encode() for v in expected)  # each exactly once


def test_records_sent_again_after_timing_out_keep_their_keys_headers_partitions_and_times(
    outage_broker: Broker,
) -> None:
    """A record librdkafka timed out is rebuilt from librdkafka's copy and sent again by the
    producer's own retries: nothing of it may change on the way."""
    bootstrap, env = outage_broker
    topic = make_topic(bootstrap, "resent-fields")
    producer = AsyncProducer(
        {"bootstrap.servers": bootstrap, "message.timeout.ms": 1500, "linger.ms": 5},
        max_queue_size=10_000,
        delivery_interval=0.05,
    )
    retried = threading.Event()
    producer.subscribe(lambda name, payload: retried.set() if name == "delivery_error" else None)
    expected: dict[bytes, dict[str, object]] = {}
    with outage(env):
        for n in range(300):
            value = f"r{n:04d}".encode()
            fields: dict[str, object]
            if n % 4 == 0:  # headers: sent one by one, rebuilt from librdkafka's copy
                fields = {"headers": [("h", value), ("empty", None)]}
            elif n % 4 == 1:  # and a timestamp, which librdkafka's report lacks
                fields = {"headers": [("h", value)], "timestamp": 1_700_000_000_000 + n}
            elif n % 4 == 2:  # a partition of its own: sent in a batch call
                fields = {"partition": n % 3}
            else:  # a key: librdkafka's partitioner, in a batch call
                fields = {"key": f"k{n}".encode()}
            producer.produce(value, topic=topic, **fields)  # type: ignore[arg-type]
            expected[value] = fields
        wait_for(retried, "a record to time out and be retried")
    producer.flush(timeout=60.0)
    assert producer.shutdown(timeout=10.0) == []
    assert producer.stats()["delivered"] == 300

    seen: dict[bytes, list[tuple[int, bytes | None, object, int]]] = {}
    for message in read_messages(bootstrap, topic):
        seen.setdefault(message.value() or b"", []).append(
            (message.partition() or 0, message.key(), message.headers(), message.timestamp()[1])
        )
    assert set(seen) == set(expected)  # at least once: a timed-out request may still land
    for value, fields in expected.items():
        for partition, key, headers, timestamp in seen[value]:
            assert key == fields.get("key"), value
            if "partition" in fields:
                assert partition == fields["partition"], value
            assert headers == fields.get("headers"), value
            if "timestamp" in fields:
                assert timestamp == fields["timestamp"], value


def test_batches_handed_off_by_the_caller_keep_their_order_when_librdkafka_is_full(
    outage_broker: Broker,
) -> None:
    # produce_many hands due records to librdkafka from the calling thread; during an outage
    # librdkafka's queue (500 here) fills, and what it refused must go back in front of the
    # buffer, in order, for the worker: nothing lost, nothing twice, order kept per partition.
    bootstrap, env = outage_broker
    topic = make_topic(bootstrap, "caller-hand-off", partitions=1)
    producer = idempotent_producer(
        bootstrap, {"queue.buffering.max.messages": 500}, delivery_threshold=200
    )
    values = [f"{n:06d}" for n in range(3000)]
    with outage(env):
        for start in range(0, len(values), 300):
            producer.produce_many(values[start : start + 300], topic=topic)
        stats = producer.stats()
        held = stats["queue_size"] + stats["retry_queue_size"]
        assert held + stats["in_flight"] == len(values)
        assert held > 0, "librdkafka's full queue should have refused some"
    producer.flush(timeout=60.0)
    assert producer.take_failed() == []
    assert producer.shutdown() == []
    got = [value for _, value in read_all(bootstrap, topic, partitions=1)]
    assert got == [v.encode() for v in values]  # each once, in produce order


def test_a_refused_message_aborts_its_transaction_and_the_others_go_again(
    kafka_bootstrap: str,
) -> None:
    # The broker refuses one record of the round (larger than its topic allows), which aborts
    # the transaction its neighbours (on another topic) were acknowledged in: they are not
    # delivered until a transaction of their own commits.
    topic = f"transaction-refusal-{time.monotonic_ns()}"
    strict = f"{topic}-strict"
    Client({"bootstrap.servers": kafka_bootstrap}).create_topics(
        [
            NewTopic(topic, num_partitions=1),
            NewTopic(strict, num_partitions=1, config={"max.message.bytes": "1000"}),
        ],
        timeout=30.0,
    )
    producer = AsyncProducer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"refusal-{topic}"}
    )
    delivered: list[bytes] = []

    def on_delivery(error: Exception | None, message: Message) -> None:
        if error is None:
            delivered.append(message.value() or b"")

    small = [f"small-{n}".encode() for n in range(20)]
    for value in small[:10]:
        producer.produce(value, topic=topic, on_delivery=on_delivery)
    producer.produce(b"x" * 5000, topic=strict, on_delivery=on_delivery)
    for value in small[10:]:
        producer.produce(value, topic=topic, on_delivery=on_delivery)
    producer.flush(timeout=30.0)
    handed_back = producer.shutdown(timeout=10.0)
    assert [(m.topic(), len(m.value() or b"")) for m in handed_back] == [(strict, 5000)]
    assert [value for _, value in read_all(kafka_bootstrap, topic, partitions=1)] == small
    assert delivered == small


def test_a_fenced_transactional_producer_raises_and_hands_everything_back(
    kafka_bootstrap: str,
) -> None:
    # A second producer with the same transactional.id fences the first: a fatal error, which
    # the first raises to its caller instead of stopping silently.
    topic = make_topic(kafka_bootstrap, "fenced", partitions=1)
    config = {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"fenced-{topic}"}
    first = AsyncProducer(config)
    first.produce_many([f"committed-{n}" for n in range(10)], topic=topic)
    first.flush(timeout=30.0)
    second = AsyncProducer(config)
    first.produce_many([f"fenced-{n}" for n in range(10)], topic=topic)
    with pytest.raises(KafkaFatalError) as raised:
        first.flush(timeout=30.0)
    assert raised.value.fatal
    with pytest.raises(KafkaFatalError):
        first.produce(b"after", topic=topic)
    handed_back = first.take_failed() + first.shutdown(timeout=5.0)
    assert sorted(m.value() or b"" for m in handed_back) == sorted(
        f"fenced-{n}".encode() for n in range(10)
    )
    assert [value for _, value in read_all(kafka_bootstrap, topic, partitions=1)] == [
        f"committed-{n}".encode() for n in range(10)
    ]
    second.shutdown(timeout=5.0)


def test_buffer_overflow_of_a_batch_counts_exactly_the_records_that_will_be_delivered(
    outage_broker: Broker,
) -> None:
    """A batch larger than both queues while the broker is down: the BufferOverflow says how
    many of its first records went in, and after the outage exactly those are on the topic."""
    bootstrap, env = outage_broker
    topic = make_topic(bootstrap, "overflow-count", partitions=1)
    producer = AsyncProducer(
        {"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 100},
        max_queue_size=200,
        overflow="raise",
        delivery_threshold=10,
    )
    producer.produce(b"warm-up", topic=topic)
    producer.flush(timeout=30.0)
    batch = [f"v{n}".encode() for n in range(1000)]
    with outage(env), pytest.raises(BufferOverflow) as refused:
        producer.produce_many_future(batch, topic=topic)
    accepted = refused.value.accepted
    assert accepted is not None
    assert 0 < accepted < len(batch)
    assert (
        f"the batch's first {accepted} record(s) were queued, the {len(batch) - accepted} "
        f"from index {accepted} on were not"
    ) in str(refused.value)
    # produce_many_future's caller still gets the report of what was queued.
    assert refused.value.future is not None
    report = refused.value.future.result(timeout=60.0)
    assert (report.count, report.delivered, report.failed) == (accepted, accepted, 0)
    producer.flush(timeout=60.0)
    assert producer.shutdown(timeout=5.0) == []
    on_topic = [value for _, value in read_all(bootstrap, topic, partitions=1)]
    assert sorted(on_topic) == sorted([b"warm-up", *batch[:accepted]])
