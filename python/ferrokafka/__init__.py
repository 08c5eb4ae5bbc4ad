"""ferrokafka: Kafka patterns for Python services and Spark jobs, on a Rust core.

Example:
    >>> import ferrokafka
    >>> client = ferrokafka.Client({"bootstrap.servers": "127.0.0.1:9092"})
    >>> client.create_topics([ferrokafka.NewTopic("orders", 3), "payments"])
    ['orders', 'payments']
    >>> len(client.list_topics("orders", timeout=5.0).topics["orders"].partitions)
    3
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferrokafka import _librdkafka_log, _log_levels, codecs
from ferrokafka._native import (
    Batch,
    BrokerMetadata,
    Client,
    ClusterMetadata,
    DeadlineQueue,
    DeliveryReport,
    Message,
    NewTopic,
    PartitionMetadata,
    TopicMetadata,
    __version__,
)
from ferrokafka.consumer import (
    Consumer,
    ConsumerOptions,
    TopicPartition,
    _async_consumer_on_demand,
)
from ferrokafka.exceptions import (
    BufferOverflow,
    ClosedError,
    CodecError,
    ConfigError,
    ConsumeError,
    FerrokafkaError,
    KafkaError,
    KafkaFatalError,
    KafkaTimeoutError,
    MarkerRefusedError,
    ProduceError,
    ScheduleError,
)
from ferrokafka.producer import AsyncProducer

if TYPE_CHECKING:
    from ferrokafka._async_consumer import AsyncConsumer

_librdkafka_log.install()
_log_levels.install()

__all__ = [
    "AsyncConsumer",
    "AsyncProducer",
    "Batch",
    "BrokerMetadata",
    "BufferOverflow",
    "Client",
    "ClosedError",
    "ClusterMetadata",
    "CodecError",
    "ConfigError",
    "ConsumeError",
    "Consumer",
    "ConsumerOptions",
    "DeadlineQueue",
    "DeliveryReport",
    "FerrokafkaError",
    "KafkaError",
    "KafkaFatalError",
    "KafkaTimeoutError",
    "MarkerRefusedError",
    "Message",
    "NewTopic",
    "PartitionMetadata",
    "ProduceError",
    "ScheduleError",
    "TopicMetadata",
    "TopicPartition",
    "__version__",
    "codecs",
]


# AsyncConsumer is loaded when first named, as in ferrokafka.consumer (asyncio).
__getattr__, __dir__ = _async_consumer_on_demand(globals())
del _async_consumer_on_demand
