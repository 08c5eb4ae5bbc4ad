"""ferrokafka.Client against the real broker, and interop with confluent-kafka."""

from __future__ import annotations

import logging
import time
import uuid
import zlib
from typing import Any

import pytest

from ferrokafka import AsyncProducer, Client, KafkaError, NewTopic
from tests.conftest import TopicFactory, module_broker

pytestmark = pytest.mark.kafka


def test_list_topics_shows_a_new_topic_with_its_partitions(
    kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=4)
    metadata = kafka_client.list_topics(timeout=10.0)
    assert len(metadata.brokers) == 1
    assert metadata.brokers[0].host == "127.0.0.1"
    partitions = metadata.topics[topic].partitions
    assert [p.id for p in partitions] == [0, 1, 2, 3]
    assert all(p.leader == metadata.brokers[0].id for p in partitions)
    assert all(p.isr == [metadata.brokers[0].id] for p in partitions)


def test_one_topic_metadata_and_broker_default_partitions(
    kafka_client: Client, topic_factory: TopicFactory
) -> None:
    name = topic_factory(partitions=-1)
    topic = kafka_client.list_topics(name, timeout=10.0).topics[name]
    assert len(topic.partitions) == 3  # num.partitions of the test broker


def test_creating_an_existing_topic_names_the_error(
    kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory()
    with pytest.raises(KafkaError) as caught:
        kafka_client.create_topics([NewTopic(topic, 1)])
    assert caught.value.name == "TOPIC_ALREADY_EXISTS"
    assert topic in str(caught.value)
    assert kafka_client.create_topics([topic], exist_ok=True) == []


def test_topic_config_is_applied(
    kafka_client: Client, topic_factory: TopicFactory, confluent_admin: Any
) -> None:
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

    topic = topic_factory(config={"cleanup.policy": "compact", "segment.ms": "3600000"})
    resource = ConfigResource("topic", topic)
    described = confluent_admin.describe_configs([resource])[resource].result(timeout=10)
    assert described["cleanup.policy"].value == "compact"
    assert described["segment.ms"].value == "3600000"


def test_produce_and_read_back_keep_every_field(
    kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=2)
    sent = [
        kafka_client.produce(
            topic,
            value=f"value-{n}".encode(),
            key=f"key-{n}",
            partition=n % 2,
            headers=[("trace", f"t{n}".encode()), ("trace", None), ("utf8", "ü")],
            timestamp=1_700_000_000_000 + n,
        )
        for n in range(6)
    ]
    assert [(m.partition(), m.offset()) for m in sent] == [
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
        (0, 2),
        (1, 2),
    ]
    read = kafka_client.read_topic(topic, timeout=20.0)
    assert len(read) == 6
    by_key = {m.key(): m for m in read}
    for n in range(6):
        message = by_key[f"key-{n}".encode()]
        assert message.topic() == topic
        assert message.partition() == n % 2
        assert message.value() == f"value-{n}".encode()
        assert message.headers() == [
            ("trace", f"t{n}".encode()),
            ("trace", None),
            ("utf8", "ü".encode()),
        ]
        assert message.timestamp() == (1, 1_700_000_000_000 + n)


def test_tombstones_and_empty_values_are_distinct(
    kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=1)
    kafka_client.produce(topic, None, key="gone")
    kafka_client.produce(topic, b"", key="empty")
    values = [(m.key(), m.value()) for m in kafka_client.read_topic(topic)]
    assert values == [(b"gone", None), (b"empty", b"")]


def test_read_topic_of_unknown_topic_is_a_clear_error_and_creates_nothing(
    kafka_client: Client,
) -> None:
    # The test broker creates topics a producer asks for: asking about one must not.
    missing = f"no-such-topic-{uuid.uuid4().hex[:8]}"
    with pytest.raises((ValueError, KafkaError), match=missing):
        kafka_client.read_topic(missing, timeout=5.0)
    assert kafka_client.list_topics(missing, timeout=5.0).topics == {}
    assert missing not in kafka_client.list_topics(timeout=5.0).topics


def test_confluent_kafka_reads_what_ferrokafka_wrote_and_back(
    kafka_bootstrap: str, kafka_client: Client, topic_factory: TopicFactory
) -> None:
    from confluent_kafka import Consumer, Producer

    topic = topic_factory(partitions=1)
    kafka_client.produce(topic, b"from-ferrokafka", key="a", headers={"h": b"1"})

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, b"from-confluent", key=b"b", headers=[("h", b"2")])
    assert producer.flush(10) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"{topic}-reader",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    seen: list[tuple[bytes | None, bytes | None, Any]] = []
    try:
        while len(seen) < 2:
            message = consumer.poll(10.0)
            assert message is not None, f"timed out after {seen}"
            assert message.error() is None
            seen.append((message.key(), message.value(), message.headers()))
    finally:
        consumer.close()
    assert seen == [
        (b"a", b"from-ferrokafka", [("h", b"1")]),
        (b"b", b"from-confluent", [("h", b"2")]),
    ]
    ours = kafka_client.read_topic(topic)
    assert [(m.key(), m.value(), m.headers()) for m in ours] == seen


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_compression_codec_goes_both_ways_with_confluent_kafka(
    codec: str, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    # Java and Ruby producers compress with any of Kafka's four codecs: a codec missing from
    # the build left the consumer logging "Decompression ... Not implemented" for ever.
    from confluent_kafka import Consumer, Producer

    topic = topic_factory(partitions=1)
    text = "compressible " * 40
    ours = Client({"bootstrap.servers": kafka_bootstrap, "compression.type": codec})
    for n in range(3):
        ours.produce(topic, f"ferrokafka {n} {text}")
    theirs = Producer({"bootstrap.servers": kafka_bootstrap, "compression.type": codec})
    for n in range(3):
        theirs.produce(topic, f"confluent {n} {text}".encode())
    assert theirs.flush(10) == 0
    expected = [
        f"{who} {n} {text}".encode() for who in ("ferrokafka", "confluent") for n in range(3)
    ]
    assert [m.value() for m in ours.read_topic(topic)] == expected

    reader = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"{topic}-reader",
            "auto.offset.reset": "earliest",
        }
    )
    reader.subscribe([topic])
    seen: list[bytes | None] = []
    try:
        while len(seen) < len(expected):
            message = reader.poll(10.0)
            assert message is not None, f"timed out after {len(seen)} records"
            assert message.error() is None, message.error()
            seen.append(message.value())
    finally:
        reader.close()
    assert seen == expected


def test_deleted_topics_disappear(kafka_client: Client) -> None:
    name = f"test-delete-{uuid.uuid4().hex[:8]}"
    kafka_client.create_topics([NewTopic(name, 1)])
    kafka_client.delete_topics([name])
    with pytest.raises(KafkaError) as caught:
        kafka_client.delete_topics([name])
    assert caught.value.name == "UNKNOWN_TOPIC_OR_PART"  # librdkafka's name (confluent's too)
    assert name in str(caught.value)


def test_partition_key_chooses_the_partition_as_waterdrop_does(
    kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=5)
    for user in [f"customer-{n}" for n in range(20)]:
        delivered = kafka_client.produce(topic, b"v", key="k", partition_key=user)
        assert delivered.partition() == zlib.crc32(user.encode()) % 5
        assert delivered.key() == b"k"  # the partition key is not the record key
    explicit = kafka_client.produce(topic, b"v", partition=4, partition_key="customer-0")
    assert explicit.partition() == 4
    # Even though this broker would create the topic: with its default partition count, which
    # nobody chose for the key.
    with pytest.raises(ValueError, match="partition_key"):
        kafka_client.produce(f"missing-{uuid.uuid4().hex}", b"v", partition_key="x", timeout=5.0)


def test_a_fresh_client_refuses_a_partition_key_for_a_missing_topic_and_creates_nothing(
    kafka_bootstrap: str,
) -> None:
    # A new client's first question about the topic came from its producer, which asked the
    # brokers to create it: most such calls delivered to a topic of the brokers' default size.
    for _ in range(3):
        topic = f"missing-{uuid.uuid4().hex}"
        client = Client({"bootstrap.servers": kafka_bootstrap})
        with pytest.raises(ValueError, match="cannot choose a partition for partition_key"):
            client.produce(topic, b"v", partition_key="customer-7", timeout=5.0)
        assert topic not in client.list_topics(timeout=5.0).topics


def test_read_topic_with_a_limit_returns_the_first_records_by_partition_and_offset(
    kafka_bootstrap: str,
    kafka_client: Client,
    topic_factory: TopicFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Partition 0 is short and the others long: the long ones' records arrive first and used to
    # fill the limit.
    topic = topic_factory(partitions=3)
    producer = AsyncProducer({"bootstrap.servers": kafka_bootstrap}, max_queue_size=5000)
    for partition, count in [(1, 2000), (2, 2000), (0, 3)]:
        records = [{"value": b"%d" % i, "partition": partition} for i in range(count)]
        producer.produce_many(records, topic=topic)
    producer.flush(20)
    assert producer.shutdown() == []
    for _ in range(3):
        with caplog.at_level("INFO", logger="ferrokafka_kafka.client.read"):
            first = kafka_client.read_topic(topic, max_messages=5, timeout=20)
        assert [(m.partition(), m.offset()) for m in first] == [
            (0, 0),
            (0, 1),
            (0, 2),
            (1, 0),
            (1, 1),
        ]
        assert "the first 5 records by (partition, offset); the topic holds more" in caplog.text
        caplog.clear()
    whole = kafka_client.read_topic(topic, max_messages=4003, timeout=20)
    assert len(whole) == 4003
    assert "the topic holds more" not in caplog.text


def test_a_record_too_large_names_the_limit_that_refused_it(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    # The topic takes 5,000 bytes; the client's own message.max.bytes refuses 3,000 first.
    topic = topic_factory(partitions=1, config={"max.message.bytes": "5000"})
    small_client = Client({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 2000})
    with pytest.raises(KafkaError, match=r"over this client's message.max.bytes") as refused:
        small_client.produce(topic, b"x" * 3000, timeout=10.0)
    assert refused.value.name == "MSG_SIZE_TOO_LARGE"
    assert "Broker:" not in str(refused.value)
    # A client that takes it sends it, and the topic's limit refuses 8,000: both are named.
    roomy_client = Client({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 100_000})
    assert roomy_client.produce(topic, b"x" * 3000, timeout=10.0).offset() == 0
    with pytest.raises(KafkaError, match=r"the topic's max.message.bytes") as refused:
        roomy_client.produce(topic, b"x" * 8000, timeout=10.0)
    assert refused.value.name == "MSG_SIZE_TOO_LARGE"


def test_produce_to_a_missing_topic_without_auto_create_says_so_at_once(
    kafka_bootstrap: str,
) -> None:
    client = Client({"bootstrap.servers": kafka_bootstrap, "allow.auto.create.topics": False})
    missing = f"test-missing-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    with pytest.raises(KafkaError, match="unknown topic or partition") as refused:
        client.produce(missing, b"v", timeout=20.0)
    assert time.monotonic() - started < 5.0
    assert not isinstance(refused.value, TimeoutError)
    assert missing in str(refused.value)
    assert missing not in client.list_topics(timeout=10.0).topics


def test_produce_to_a_missing_topic_on_brokers_that_create_none_says_so_at_once() -> None:
    """The client asks for auto-creation (librdkafka's producer default) but the brokers do not
    create topics, as on most managed clusters: librdkafka alone would wait 30 s."""
    with module_broker(KAFKA_AUTO_CREATE_TOPICS="false") as (bootstrap, _):
        client = Client({"bootstrap.servers": bootstrap})
        existing = f"test-existing-{uuid.uuid4().hex[:8]}"
        client.create_topics([NewTopic(existing, num_partitions=1)], timeout=20.0)
        assert client.produce(existing, b"v", timeout=20.0).offset() == 0
        missing = f"test-missing-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        with pytest.raises(KafkaError, match=r"auto\.create\.topics\.enable=false") as refused:
            client.produce(missing, b"v", timeout=20.0)
        assert time.monotonic() - started < 5.0
        assert not isinstance(refused.value, TimeoutError)
        assert missing in str(refused.value)


def test_a_log_level_set_while_a_client_runs_applies_to_its_next_records(
    kafka_bootstrap: str, topic_factory: TopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # The engines cache each logger's level after its first record; a level set later must
    # still apply to the same client (not only to clients created after it).
    topic = topic_factory(partitions=1)
    client = Client({"bootstrap.servers": kafka_bootstrap})
    for value in (b"a", b"b"):
        client.produce(topic, value)
    said = "the first 1 records by (partition, offset); the topic holds more"
    logger = "ferrokafka_kafka.client.read"
    with caplog.at_level(logging.WARNING, logger=logger):
        assert len(client.read_topic(topic, max_messages=1, timeout=20)) == 1
    assert said not in caplog.text
    with caplog.at_level(logging.INFO, logger=logger):
        assert len(client.read_topic(topic, max_messages=1, timeout=20)) == 1
    assert said in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=logger):
        assert len(client.read_topic(topic, max_messages=1, timeout=20)) == 1
    assert said not in caplog.text
