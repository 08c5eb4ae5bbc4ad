"""A non-ASCII ``partition_key`` lands where a Ruby (WaterDrop) producer puts it.

karafka-rdkafka hands librdkafka's partitioner the key's UTF-8 bytes with its length in
*characters*, so librdkafka's CRC32 covers only that many leading bytes. The expected partitions
here come from librdkafka itself: confluent-kafka producing with the ``consistent`` partitioner
(what ``consistent_random`` does with a non-empty key) and, as the message key, the bytes
karafka-rdkafka would hash (the first N bytes) or every byte.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from ferrokafka import AsyncProducer, Client
from ferrokafka.scheduling import Scheduler, cancel_message, create_topics, schedule
from tests.conftest import TopicFactory, read_messages, wait_until

pytestmark = pytest.mark.kafka

KEYS = ["customer-7", "zamówienie-3", "Zażółć gęślą jaźń", "заказ-42", "注文-12", "🎉-order"]
"""ASCII, Polish, Cyrillic, CJK and emoji partition keys."""


def waterdrop_bytes(key: str) -> bytes:
    """What karafka-rdkafka hashes: as many leading UTF-8 bytes as the key has characters."""
    return key.encode()[: len(key)]


def librdkafka_partitions(bootstrap: str, probe_topic: str, keys: list[bytes]) -> list[int]:
    """The partition librdkafka's consistent partitioner gives each key on ``probe_topic``."""
    from confluent_kafka import Producer as ConfluentProducer

    peer = ConfluentProducer({"bootstrap.servers": bootstrap, "partitioner": "consistent"})
    landed: dict[bytes, int] = {}

    def record(error: Any, message: Any) -> None:
        assert error is None, error
        landed[message.key()] = message.partition()

    for key in keys:
        peer.produce(probe_topic, b"probe", key=key, on_delivery=record)
    assert peer.flush(10) == 0
    return [landed[key] for key in keys]


def expected_partitions(
    bootstrap: str, topic_factory: TopicFactory, partitions: int
) -> dict[str, tuple[int, int]]:
    """Per key of KEYS: (WaterDrop's partition, the all-bytes partition) among ``partitions``."""
    probe = topic_factory(partitions=partitions)
    waterdrop = librdkafka_partitions(bootstrap, probe, [waterdrop_bytes(k) for k in KEYS])
    every_byte = librdkafka_partitions(bootstrap, probe, [k.encode() for k in KEYS])
    expected = dict(zip(KEYS, zip(waterdrop, every_byte, strict=True), strict=True))
    assert expected["customer-7"][0] == expected["customer-7"][1], "ASCII: one rule"
    assert sum(w != b for w, b in expected.values()) >= 2, "the keys do not tell the rules apart"
    return expected


def landed_by_value(bootstrap: str, topic: str, partitions: int) -> dict[bytes, int]:
    landed: dict[bytes, int] = {}
    for message in read_messages(bootstrap, topic, partitions):
        landed[message.value() or b""] = message.partition() or 0
    return landed


def test_client_produce_puts_a_partition_key_where_waterdrop_does_or_hashes_every_byte(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    expected = expected_partitions(kafka_bootstrap, topic_factory, 12)
    topic = topic_factory(partitions=12)
    waterdrop = Client({"bootstrap.servers": kafka_bootstrap})
    every_byte = Client({"bootstrap.servers": kafka_bootstrap}, partition_key_hashing="bytes")
    for key in KEYS:
        waterdrop.produce(topic, f"waterdrop:{key}", key="k", partition_key=key)
        every_byte.produce(topic, f"bytes:{key}", key="k", partition_key=key)
    landed = landed_by_value(kafka_bootstrap, topic, 12)
    assert {key: landed[f"waterdrop:{key}".encode()] for key in KEYS} == {
        key: partitions[0] for key, partitions in expected.items()
    }
    assert {key: landed[f"bytes:{key}".encode()] for key in KEYS} == {
        key: partitions[1] for key, partitions in expected.items()
    }


def test_partitions_added_to_a_topic_take_partition_keys_as_soon_as_in_waterdrop(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    # WaterDrop caches a topic's partition count for 30 s: a long-lived client must follow a
    # partition increase as soon, or a Ruby producer and this one (a schedule and its cancel)
    # put one key on two partitions until it does.
    from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]

    before, after = (expected_partitions(kafka_bootstrap, topic_factory, n) for n in (3, 6))
    key = next(k for k in KEYS if before[k][0] != after[k][0])
    topic = topic_factory(partitions=3)
    client = Client({"bootstrap.servers": kafka_bootstrap})
    assert client.produce(topic, b"3", partition_key=key).partition() == before[key][0]
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_partitions([NewPartitions(topic, 6)])[topic].result(10)
    # 30 s and a margin; librdkafka's own refresh would take 5 min.
    wait_until(
        lambda: client.produce(topic, b"6", partition_key=key).partition() == after[key][0],
        45,
        "the key on its partition among 6",
        interval=1.0,
    )


def test_async_producer_puts_a_partition_key_where_waterdrop_does_or_hashes_every_byte(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    expected = expected_partitions(kafka_bootstrap, topic_factory, 12)
    topic = topic_factory(partitions=12)
    config = {"bootstrap.servers": kafka_bootstrap}
    with AsyncProducer(config) as producer:
        for key in KEYS:
            producer.produce(f"waterdrop:{key}", topic, partition_key=key)
        producer.produce_many(
            [{"value": f"many:{key}", "partition_key": key} for key in KEYS], topic=topic
        )
    with AsyncProducer(config, partition_key_hashing="bytes") as producer:
        for key in KEYS:
            producer.produce(f"bytes:{key}", topic, partition_key=key)
    landed = landed_by_value(kafka_bootstrap, topic, 12)
    for key, (waterdrop, every_byte) in expected.items():
        assert landed[f"waterdrop:{key}".encode()] == waterdrop, key
        assert landed[f"many:{key}".encode()] == waterdrop, key
        assert landed[f"bytes:{key}".encode()] == every_byte, key


def test_a_ruby_schedule_is_cancelled_from_python_by_its_non_ascii_partition_key(
    kafka_bootstrap: str, kafka_client: Client, topic_factory: TopicFactory
) -> None:
    """Ruby schedules with ``envelope: {partition_key: "zamówienie-3"}`` (WaterDrop puts the proxy
    on that key's partition, played here by confluent-kafka); Python cancels it with the same
    envelope. The cancel lands on the schedule's partition, so the schedule is never
    dispatched; the sentinel's target goes where WaterDrop puts its partition key."""
    from confluent_kafka import Producer as ConfluentProducer

    schedules = f"test-schedules-pk-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_client, schedules, num_partitions=5)
    target = topic_factory(partitions=5)
    expected = expected_partitions(kafka_bootstrap, topic_factory, 5)
    partition_key, target_key = "zamówienie-3", "заказ-42"
    assert expected[partition_key][0] != expected[partition_key][1]
    assert expected[target_key][0] != expected[target_key][1]
    schedule_partition = expected[partition_key][0]
    envelope: Any = {"topic": schedules, "partition_key": partition_key}
    ruby_envelope: Any = {**envelope, "key": "order-3"}
    sentinel_envelope: Any = {**envelope, "key": "sentinel"}
    try:
        now = int(time.time())
        ruby = schedule({"topic": target, "payload": b"cancelled"}, now + 2, ruby_envelope)
        peer = ConfluentProducer({"bootstrap.servers": kafka_bootstrap})
        peer.produce(
            schedules,
            ruby.value,
            key=ruby.key,
            partition=schedule_partition,
            headers=list[tuple[str, str | bytes | None]](ruby.headers),
        )
        assert peer.flush(10) == 0
        cancel_message(kafka_client, "order-3", envelope)
        # Due later on the same partition: once it is dispatched, the cancelled one would have
        # been dispatched before it.
        sentinel = schedule(
            {"topic": target, "payload": b"sentinel", "partition_key": target_key},
            now + 3,
            sentinel_envelope,
        )
        kafka_client.produce(
            schedules,
            sentinel.value,
            key=sentinel.key,
            partition_key=sentinel.partition_key,
            headers=sentinel.headers,
        )
        proxies = read_messages(kafka_bootstrap, schedules, 5)
        assert sorted((m.key(), m.partition()) for m in proxies) == [
            (b"order-3", schedule_partition),  # the schedule
            (b"order-3", schedule_partition),  # its cancel
            (b"sentinel", schedule_partition),
        ]
        group = f"g-{uuid.uuid4().hex}"
        with Scheduler({"bootstrap.servers": kafka_bootstrap}, [schedules], group_id=group):
            wait_until(lambda: bool(kafka_client.read_topic(target)), 30, "the sentinel")
        dispatched = read_messages(kafka_bootstrap, target, 5)
    finally:
        kafka_client.delete_topics([schedules, f"{schedules}_states"])
    assert [(m.value(), m.partition()) for m in dispatched] == [
        (b"sentinel", expected[target_key][0])
    ]
