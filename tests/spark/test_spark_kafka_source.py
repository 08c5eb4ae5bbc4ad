"""A real local SparkSession reads a Kafka topic through the spark-sql-kafka connector."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ferrokafka import Client
from tests.conftest import TopicFactory

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_spark_reads_what_ferrokafka_produced(
    spark: SparkSession, kafka_bootstrap: str, kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=3)
    for n in range(30):
        kafka_client.produce(topic, f"v{n}", key=f"k{n}", headers={"n": str(n)})

    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .selectExpr(
            "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "headers"
        )
    )
    rows = frame.collect()
    assert len(rows) == 30
    assert {(r.key, r.value) for r in rows} == {(f"k{n}", f"v{n}") for n in range(30)}
    assert {r.partition for r in rows} <= {0, 1, 2}
    assert all(r.headers[0].key == "n" and r.headers[0].value == r.key[1:].encode() for r in rows)
