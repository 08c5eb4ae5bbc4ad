"""A small Spark job on a SparkSession (local[2], or the cluster ``--master`` names) and a live
broker: ``ferrokafka spark-demo`` (or ``python -m ferrokafka spark-demo``).

It compresses and decodes a DataFrame with the Rust Arrow UDFs, schedules one message per row
with :func:`ferrokafka.spark.schedule_dataframe` while a scheduler daemon runs, consumes the
dispatched messages with a reporting consumer, and reads the scheduler's state reports and the
consumer's process reports back as DataFrames. Needs pyspark and Java; the spark-sql-kafka
connector is fetched from Maven Central on first use.

Example:
    $ ferrokafka spark-demo --bootstrap-servers 127.0.0.1:9092
    $ ferrokafka spark-demo --bootstrap-servers 127.0.0.1:9092 --master spark://127.0.0.1:7077
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import uuid
import warnings
from datetime import datetime, timezone
from typing import Any

from ferrokafka._native import Batch, Client, NewTopic
from ferrokafka.consumer import Consumer
from ferrokafka.scheduling import Scheduler, create_topics
from ferrokafka.tracking import Reporter

log = logging.getLogger("ferrokafka.spark_demo")

MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"


def _session(app: str, master: str) -> object:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import pyspark
    from pyspark.sql import SparkSession

    package = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    # Spark resolves the connector with Ivy through Maven Central and then
    # repos.spark-packages.org, which the connector does not need. Where that host does not
    # resolve, each parent POM fetched on a first run makes Ivy print "You probably access the
    # destination server through a proxy server that is not well configured." Spark roots both
    # resolvers at DEFAULT_ARTIFACT_REPOSITORY when it is set: Maven Central, unless the user
    # named a mirror.
    os.environ.setdefault("DEFAULT_ARTIFACT_REPOSITORY", MAVEN_CENTRAL)
    # pyspark's Py4J converters import pyspark.testing.utils, whose import checks pandas and
    # warns that pandas 3 is "not yet fully supported"; the demo's UDFs use Arrow, not pandas.
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")  # times show as ISO 8601 in UTC
        .config("spark.jars.packages", package)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_spark_demo(
    bootstrap_servers: str, rows: int = 1000, timeout: float = 60.0, master: str = "local[2]"
) -> None:
    """Run the demo job on the Spark ``master``; raises if a scheduled message does not arrive
    within ``timeout``."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from ferrokafka import spark as fks

    spark = _session("ferrokafka-spark-demo", master)
    assert isinstance(spark, SparkSession)
    client = Client({"bootstrap.servers": bootstrap_servers, "client.id": "ferrokafka-spark-demo"})
    suffix = uuid.uuid4().hex[:8]
    schedules, target, reports, errors = (
        f"demo-schedules-{suffix}",
        f"demo-reminders-{suffix}",
        f"demo-reports-{suffix}",
        f"demo-errors-{suffix}",
    )
    create_topics(client, schedules, num_partitions=2)
    client.create_topics(
        [NewTopic(target, 2), NewTopic(reports, 1), NewTopic(errors, 1)], timeout=30.0
    )
    try:
        print("1. zlib in Rust, one call per Arrow batch")
        orders = spark.range(rows).select(
            F.col("id"),
            F.to_json(F.struct(F.col("id"), F.concat(F.lit("customer-"), F.col("id") % 7))).alias(
                "json"
            ),
        )
        packed = orders.select("id", fks.deflate("json").alias("packed"))
        packed.select(
            "id",
            F.length("packed").alias("zlib_bytes"),
            fks.inflate("packed").cast("string").alias("inflated"),
        ).show(3, truncate=False)

        print(f"2. schedule {rows} messages from a DataFrame (schedules topic {schedules})")
        daemon = Scheduler({"bootstrap.servers": bootstrap_servers}, [schedules], state_interval=1)
        try:
            epoch = int(time.time()) + 8
            fks.schedule_dataframe(
                orders.withColumn("epoch", F.lit(epoch) + F.col("id") % 3),
                schedules,
                "epoch",
                target_topic=target,
                value_col="json",
                key_col=F.concat(F.lit("order-"), F.col("id")),
                bootstrap_servers=bootstrap_servers,
            )
            deadline = time.monotonic() + timeout
            while sum(s["dispatched"] for s in daemon.status()) < rows:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"scheduled messages did not all arrive in {timeout} s")
                time.sleep(0.5)
            since = datetime.fromtimestamp(epoch, timezone.utc).isoformat()
            print(f"   all {rows} dispatched by the scheduler, due from {since} on")
        finally:
            daemon.stop()
        fks.read_states(spark, bootstrap_servers, f"{schedules}_states").select(
            "kafka_partition", "key", "state", "dispatched", "offsets"
        ).show(truncate=False)

        print("3. a consumer with a tracking reporter reads the reminders; its reports as rows")
        _consume_with_reporter(bootstrap_servers, target, reports, errors, rows, timeout)
        frame = fks.read_reports(spark, bootstrap_servers, reports)
        frame.select("process_id", "status", "lag", _iso_time("dispatched_at")).show(truncate=False)
        lags = fks.lag_table(frame)
        lags.withColumn("dispatched_at", _iso_time("dispatched_at")).show(truncate=False)
    finally:
        client.delete_topics(
            [schedules, f"{schedules}_states", target, reports, errors], timeout=30.0
        )
        spark.stop()
    log.info("spark demo finished")


def _iso_time(seconds: str) -> Any:
    """The column of Unix seconds ``seconds`` as ISO 8601 text in UTC, to the millisecond."""
    from pyspark.sql import functions as F

    iso = F.date_format(F.timestamp_seconds(seconds), "yyyy-MM-dd'T'HH:mm:ss.SSSXXX")
    return iso.alias(seconds)


def _consume_with_reporter(
    bootstrap_servers: str, topic: str, reports: str, errors: str, rows: int, timeout: float
) -> None:
    """Consume ``rows`` records of ``topic`` with a reporter attached, then stop (which sends
    the final "stopped" report)."""
    handled = 0
    done = threading.Event()

    def handle(batch: Batch) -> None:
        nonlocal handled
        handled += len(batch)
        if handled >= rows:
            done.set()

    config = {"bootstrap.servers": bootstrap_servers}
    reporter = Reporter(config, reports_topic=reports, errors_topic=errors, interval=0.5)
    consumer = Consumer(
        {**config, "group.id": f"{topic}-readers", "auto.offset.reset": "earliest"},
        [topic],
        handle,
        commit_interval=0.5,
        reporter=reporter,
    )
    with consumer:
        if not done.wait(timeout):
            raise TimeoutError(f"the consumer handled {handled} of {rows} records in {timeout} s")
        # One more report once the broker confirmed every handled offset. The consumer's own
        # commit state decides, not librdkafka's statistics, which arrive on their own clock.
        deadline = time.monotonic() + timeout
        while not _all_committed(partitions := consumer.stats()["partitions"]):
            if time.monotonic() > deadline:
                state = [(p["partition"], p["position"], p["committed"]) for p in partitions]
                raise TimeoutError(
                    f"offsets were not committed within {timeout} s "
                    f"(partition, position, committed): {state}"
                )
            time.sleep(0.1)
        reporter.report(force=True)
    print(f"   consumed {handled} reminders as process {reporter.process_id}")


def _all_committed(partitions: list[dict[str, Any]]) -> bool:
    # A partition that received nothing has neither (None == None).
    return bool(partitions) and all(p["committed"] == p["position"] for p in partitions)
