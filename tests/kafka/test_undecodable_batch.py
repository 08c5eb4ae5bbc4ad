"""A fetched batch that librdkafka cannot decode: a zstd record that inflates past the reader's
``receive.message.max.bytes``. librdkafka fetches it again and again and reads nothing behind
it; every reader names where it is and the setting that reads it, none returns nothing for ever.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import confluent_kafka
import pytest

from ferrokafka import Batch, Client, Consumer, KafkaError
from ferrokafka.redelivery import QueueConsumer, QueueMessage
from ferrokafka.scheduling import Scheduler
from tests.conftest import GROUP_SETTINGS, TopicFactory, wait_until
from tests.kafka.recorder import Recorder

pytestmark = pytest.mark.kafka

# 2 MB of zeros: a few hundred bytes once zstd-compressed, more than these readers inflate.
INFLATED = 2_000_000
SMALL_READER = {"receive.message.max.bytes": 1_100_000, "fetch.max.bytes": 1_000_000}
NOT_DECODED = "cannot decode the batch at"


def write_bomb(bootstrap: str, topic: str) -> None:
    """Partition 0 of ``topic``: b"before" (offset 0), the inflating record (1), then three
    records behind it (2-4), each in a batch of its own (keyed: a schedules topic is compacted)."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": "zstd",
            "linger.ms": 0,
            "message.max.bytes": 10_000_000,
        }
    )
    for n, value in enumerate([b"before", bytes(INFLATED), b"after-0", b"after-1", b"after-2"]):
        producer.produce(topic, value, key=b"%d" % n, partition=0)
        assert producer.flush(10) == 0


@pytest.fixture
def bombed(kafka_bootstrap: str, topic_factory: TopicFactory) -> str:
    topic = topic_factory(partitions=1)
    write_bomb(kafka_bootstrap, topic)
    return topic


def test_read_topic_says_where_and_which_setting_reads_it(
    kafka_bootstrap: str, bombed: str
) -> None:
    small = Client({"bootstrap.servers": kafka_bootstrap, **SMALL_READER})
    with pytest.raises(KafkaError) as raised:
        small.read_topic(bombed, timeout=20)
    said = str(raised.value)
    assert f'{NOT_DECODED} topic "{bombed}"' in said, said
    assert "receive.message.max.bytes" in said, said
    assert raised.value.name == "_BAD_COMPRESSION", said
    # The way out it names reads every record.
    roomy = Client(
        {
            "bootstrap.servers": kafka_bootstrap,
            "receive.message.max.bytes": 4_000_000,
            "fetch.max.bytes": 3_000_000,
        }
    )
    read = roomy.read_topic(bombed, timeout=20)
    assert [(m.offset(), len(m.value() or b"")) for m in read] == [
        (0, 6),
        (1, INFLATED),
        (2, 7),
        (3, 7),
        (4, 7),
    ]


def test_the_consumer_reports_the_batch_once_with_its_partition_and_offset(
    kafka_bootstrap: str, bombed: str
) -> None:
    handled: list[int] = []

    def handle(batch: Batch) -> None:
        handled.extend(batch.offsets())

    config: dict[str, Any] = {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": f"g-{uuid.uuid4().hex}",
        **GROUP_SETTINGS,
        **SMALL_READER,
        "fetch.error.backoff.ms": 50,
    }
    consumer = Consumer(config, [bombed], handle)
    recorder = Recorder.subscribed(consumer)
    with consumer:
        recorder.wait_for(lambda: recorder.named("error"), "the error event")
        # librdkafka fetches the batch again every fetch.error.backoff.ms (50 ms here): said
        # once. What must not happen has no event to wait for: about 20 fetches pass.
        time.sleep(1.0)
        errors = recorder.named("error")
    assert handled == [0]
    assert len(errors) == 1, errors
    said = str(errors[0]["error"])
    assert f"{NOT_DECODED} {bombed} [0] at offset 1: Decompression" in said, said
    assert "receive.message.max.bytes" in said, said


def test_the_queue_consumer_raises_instead_of_returning_nothing(
    kafka_bootstrap: str, bombed: str, topic_factory: TopicFactory
) -> None:
    markers = topic_factory(partitions=1)
    config = {"bootstrap.servers": kafka_bootstrap, **GROUP_SETTINGS, **SMALL_READER}
    with QueueConsumer(config, bombed, markers, group_id=f"g-{uuid.uuid4().hex}") as queue:
        taken: list[QueueMessage] = []

        def consume_until_it_raises() -> None:
            for _ in range(20):  # 40 s: it returned [] for ever
                taken.extend(queue.consume(10, timeout=2.0))

        with pytest.raises(KafkaError, match=f'{NOT_DECODED} queue topic "{bombed}"') as raised:
            consume_until_it_raises()
        assert [m.offset() for m in taken] == [0]
        assert "receive.message.max.bytes" in str(raised.value)
        queue.ack_many(taken)


def test_the_scheduler_logs_the_batch_with_the_way_out(
    kafka_bootstrap: str, schedules_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    write_bomb(kafka_bootstrap, schedules_topic)
    config = {"bootstrap.servers": kafka_bootstrap, **GROUP_SETTINGS, **SMALL_READER}
    with (
        caplog.at_level("ERROR", logger="ferrokafka_kafka"),
        Scheduler(config, [schedules_topic], group_id=f"g-{uuid.uuid4().hex}"),
    ):
        wait_until(
            lambda: f"{NOT_DECODED} a partition scheduler reads" in caplog.text,
            20,
            "the scheduler's error line",
        )
    assert "receive.message.max.bytes" in caplog.text
