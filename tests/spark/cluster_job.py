"""The job tests/spark/test_spark_cluster.py submits to a standalone Spark cluster with the
README's recipe: every ferrokafka.spark helper once, on the driver's Python of the shipped
environment, then where the tasks ran. It writes what it found as JSON to ``--out``; the test
judges it (this file only reports, so a wrong result shows as a failed assertion there).

It runs under spark-submit, not pytest: it imports nothing from the tests package.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.functions import arrow_udf

from ferrokafka import codecs
from ferrokafka import spark as fks

DUE = 6
"""Schedules due at once: the scheduler daemon dispatches them."""
CANCELLED = 4
"""Schedules due in an hour, cancelled by the job."""


def where_python_runs(ids: pa.Array) -> pa.Array:
    """An Arrow UDF: for each row, the Python worker's process id, its environment and the
    ferrokafka it imports (the one the shipped archive holds, if the recipe works)."""
    import ferrokafka

    where = {"pid": os.getpid(), "prefix": sys.prefix, "ferrokafka": ferrokafka.__file__}
    return pa.array([json.dumps(where)] * len(ids), pa.string())


def rows(frame: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in frame.collect()]


def executors(spark: SparkSession) -> list[dict[str, Any]]:
    """Spark's own count of the tasks each executor (and the driver) ran: its REST API."""
    ui = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/allexecutors") as response:
        found: list[dict[str, Any]] = json.load(response)
    return [
        {key: executor[key] for key in ("id", "hostPort", "totalTasks", "isActive")}
        for executor in found
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "schedules", "target", "reports", "out"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    spark = SparkSession.builder.appName("ferrokafka-cluster-job").getOrCreate()
    found: dict[str, Any] = {"master": spark.sparkContext.master, "driver_pid": os.getpid()}

    # The codec UDFs.
    orders = spark.range(100, numPartitions=2).select("id", F.to_json(F.struct("id")).alias("json"))
    # (The probe runs in the same Python workers as the codec UDFs of its select. pyspark's
    # stub overloads list fixed arities only: the call is checked at run time.)
    probe: Any = arrow_udf
    checked = orders.select(
        (fks.inflate(fks.deflate("json")).cast("string") == F.col("json")).alias("same"),
        probe(where_python_runs, "string")("id").alias("where"),
    ).collect()
    found["round_trips"] = sum(row.same for row in checked)
    found["python_workers"] = [json.loads(where) for where in {row.where for row in checked}]
    marker = codecs.encode_marker(codecs.Marker.end(3, 41))
    markers = spark.createDataFrame([(bytearray(marker),)], ["value"])
    found["markers"] = rows(markers.select(fks.decode_marker("value").alias("m")).select("m.*"))

    # schedule_dataframe (its schedule_headers UDF) and cancel_dataframe.
    # Due 5 s after the write is planned: an epoch is refused once 10 s past when the task runs.
    now = F.unix_timestamp()
    schedules = spark.range(DUE + CANCELLED, numPartitions=2).select(
        F.concat(F.lit("order-"), F.col("id")).alias("order_id"),
        F.when(F.col("id") < DUE, now + 5).otherwise(now + 3600).alias("epoch"),
        F.concat(F.lit("payload-"), F.col("id")).alias("payload"),
        F.col("id"),
    )
    fks.schedule_dataframe(
        schedules,
        args.schedules,
        "epoch",
        target_topic=args.target,
        value_col="payload",
        key_col="order_id",
        bootstrap_servers=args.bootstrap,
    )
    fks.cancel_dataframe(
        schedules.where(F.col("id") >= DUE),
        args.schedules,
        "order_id",
        bootstrap_servers=args.bootstrap,
    )

    # read_states (decode_state): the daemon's latest report per partition, once it says it
    # dispatched every due schedule.
    deadline = time.monotonic() + 60
    while True:
        states = fks.read_states(spark, args.bootstrap, f"{args.schedules}_states")
        latest = states.groupBy("kafka_partition").agg(
            F.max_by(F.struct("state", "dispatched"), "kafka_offset").alias("latest")
        )
        found["states"] = rows(latest.select("kafka_partition", "latest.*"))
        if sum(state["dispatched"] for state in found["states"]) >= DUE:
            break
        if time.monotonic() > deadline:
            break  # the test names what is missing
        time.sleep(0.5)

    # read_reports (decode_report), lag_table and stream_lag.
    reports = fks.read_reports(spark, args.bootstrap, args.reports)
    found["reports"] = rows(reports.select("process_id", "lag", "status"))
    lags = ("process_id", "partition", "lag", "lag_stored")
    found["lag_table"] = rows(fks.lag_table(reports).select(*lags))
    query = fks.stream_lag(spark, args.bootstrap, args.reports, available_now=True)
    query.processAllAvailable()
    found["stream_lag"] = rows(spark.table("ferrokafka_lag").select(*lags))

    # Where every task ran, by Spark's count.
    found["executors"] = executors(spark)
    spark.stop()
    with open(args.out, "w") as out:
        json.dump(found, out)


if __name__ == "__main__":
    main()
