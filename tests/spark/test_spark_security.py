"""ferrokafka.spark helpers against a secured cluster: the same librdkafka settings every other
component takes reach Spark's Kafka sink and source (SASL_SSL with SCRAM-SHA-512, the broker
verified against its CA) and the driver's own client."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

import pytest

from ferrokafka import Client
from ferrokafka import spark as fks
from ferrokafka.scheduling import create_topics
from ferrokafka.tracking import Reporter
from tests.conftest import SecureBroker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_schedule_dataframe_and_read_reports_over_sasl_ssl(
    spark: SparkSession, secure_broker: SecureBroker
) -> None:
    config = secure_broker.scram_config()
    client = Client(config)
    schedules = f"secure-spark-schedules-{uuid.uuid4().hex[:8]}"
    create_topics(client, schedules, num_partitions=2)
    rows = spark.createDataFrame(
        [(f"k{n}", f"v{n}", int(time.time()) + 3600) for n in range(20)],
        "key string, value string, at long",
    )
    # No partitions= given: the driver's client looks the count up over SASL_SSL too.
    fks.schedule_dataframe(
        rows,
        schedules,
        "at",
        target_topic="reminders",
        key_col="key",
        bootstrap_servers=secure_broker.sasl_ssl,
        config=config,
    )
    proxies = client.read_topic(schedules)
    assert sorted((m.key() or b"").decode() for m in proxies) == sorted(f"k{n}" for n in range(20))
    assert {m.partition() for m in proxies} == {0, 1}

    reports = f"secure-spark-reports-{uuid.uuid4().hex[:8]}"
    create_topics(client, reports, num_partitions=1)
    reporter = Reporter(config, reports_topic=reports, errors_topic=reports)
    try:
        assert reporter.report(force=True)
    finally:
        reporter.close()
    frame = fks.read_reports(spark, secure_broker.sasl_ssl, reports, config=config)
    assert {r.process_id for r in frame.collect()} == {reporter.process_id}
