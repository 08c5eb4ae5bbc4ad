"""Spark decoders: ferrokafka's ``decode_report`` / ``decode_state`` Arrow UDFs and ``inflate`` over
whole record batches, against the ``pandas_udf`` a PySpark user writes, on a local SparkSession.

Input: ``--rows`` Karafka Web consumer reports (built by ferrokafka's ReportBuilder from
``--distinct`` different processes: 1-3 consumer groups of up to 12 partitions and a few running
jobs each, zlib-compressed as on the wire) and as many scheduler state reports (a week of
``daily`` counts, encoded by ``encode_state_report``), cached in memory once; every case reads
the same cached column. Cases, each against its peer:

- ``decode_report`` / ``decode_state`` (Spark 4 Arrow UDFs: one Rust call per Arrow batch)
  against a ``@pandas_udf`` returning the same struct (``zlib.decompress`` + ``json.loads`` per
  row, the fields taken from the document as the UDF's schema names them);
- ``inflate`` as a ``mapInArrow`` over whole record batches (``ferrokafka.arrow.inflate``, one
  call per batch) against a ``@pandas_udf`` calling ``zlib.decompress`` per row. A plain pass
  over the column (Spark's own ``length``) is timed as the floor every case pays, and for
  ``decode_state`` an Arrow UDF returning a ready-made struct of its type (no decoding) as the
  floor of that case.

The cases run A-B-B-A interleaved (``--rounds`` each, median reported), in one session; each
run counts its rows in the same pass (decoded rows without an error, inflated bytes), and the
two sides' results are compared for equality on a sample of rows first. Ratios are peer time /
ferrokafka time (above 1: ferrokafka is faster); the load average is printed with them::

    .venv/bin/python benches/spark_decode_bench.py --rows 1000000     # --rows 100000: quick run
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from _common import add_smoke_option, load_average
from _spark import session, timed_call
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import BinaryType, StructType

from ferrokafka import arrow as fka
from ferrokafka import spark as fks
from ferrokafka.codecs import encode_state_report
from ferrokafka.tracking import (
    JobSample,
    PartitionSample,
    ProcessFacts,
    ReportBuilder,
    SourceSample,
)

NOW = 1_780_000_000.0
CASES = ["decode_report", "decode_state", "inflate"]


# ---- input: real reports, as on the wire ------------------------------------------------------


def consumer_report(index: int) -> bytes:
    """Process ``index``'s consumer report, as ferrokafka's Reporter sends it."""
    process = ProcessFacts(
        id=f"worker-{index % 50}.eu-west:{4000 + index}:{index:06x}",
        status="running",
        started_at=NOW - 3600 - index,
        rss_kib=200_000 + index,
        host_used_kib=8_000_000,
        memory_limit_kib=16_000_000,
        cpus=8,
        threads=12 + index % 5,
        load_average=(0.5 + index % 7 / 10, 0.75, 1.25),
        tags=["eu-west", f"release-{index % 4}"],
    )
    sources = []
    for group in range(1 + index % 3):
        topic = f"orders-{group}"
        partitions = [
            PartitionSample(
                topic,
                partition,
                lag=(index * 7 + partition) % 500,
                lag_stored=(index * 3 + partition) % 400,
                committed_offset=1_000_000 + index * 13 + partition,
                statistics={
                    "hi_offset": 1_000_500 + index * 13 + partition,
                    "lo_offset": 0,
                    "stored_offset": 1_000_100 + index * 13 + partition,
                    "partitions_cnt": 12,
                },
            )
            for partition in range(1 + (index + group) % 12)
        ]
        jobs = [
            JobSample(f"OrdersConsumer{group}", topic, job, 1_000, 1_099, 100, NOW - 2)
            for job in range(index % 3)
        ]
        sources.append(
            SourceSample(
                group=f"billing-{group}",
                partitions=partitions,
                batches=10 + index,
                messages=1_000 + index,
                busy=len(jobs),
                enqueued=index % 4,
                jobs=jobs,
            )
        )
    return ReportBuilder().consumer_report(process, sources, NOW)


def state_report(index: int) -> bytes:
    """Schedules partition ``index``'s state report, as the scheduler daemon sends it."""
    days = {f"2026-06-{day:02d}": (index * day) % 1_000 for day in range(1, 8)}
    return encode_state_report(
        {
            "schema_version": "1.0.0",
            "dispatched_at": NOW + index / 8,
            "state": "loaded",
            "offsets": {"low": index, "high": index + 10_000},
            "daily": days,
            "started_at": int(NOW) - index,
            "reloads": index % 3,
            "skipped_records": 0,
            "dispatched": index * 11,
            "failed": index % 2,
        }
    )


def make_input(spark: SparkSession, rows: int, distinct: int, partitions: int) -> DataFrame:
    """``rows`` rows of ``id``, ``report`` and ``state`` (compressed), cached and counted."""
    blobs = [(index, consumer_report(index), state_report(index)) for index in range(distinct)]
    pool = spark.createDataFrame(blobs, "pick long, report binary, state binary")
    frame = (
        spark.range(rows, numPartitions=partitions)
        .withColumn("pick", F.col("id") % distinct)
        .join(F.broadcast(pool), "pick")
        .select("id", "report", "state")
        .cache()
    )
    counted = frame.count()
    assert counted == rows, f"input has {counted:,} rows, not {rows:,}"
    report, state = (
        statistics.mean(len(zlib.decompress(row[column])) for row in blobs) for column in (1, 2)
    )
    sizes = frame.agg(F.avg(F.length("report")), F.avg(F.length("state"))).first()
    assert sizes is not None
    print(
        f"input: {rows:,} rows, {distinct:,} distinct processes; reports {sizes[0]:.0f} B zlib "
        f"({report:,.0f} B of JSON), state reports {sizes[1]:.0f} B zlib ({state:.0f} B)"
    )
    return frame


# ---- the peers: what a PySpark user writes ----------------------------------------------------


def _hybrid_lag(partition: dict[str, Any]) -> int:
    # Karafka Web's lag: the stored lag where known, else the committed one.
    stored = partition["lag_stored"]
    return partition["lag"] if stored < 0 else stored


def _partition_id(partition: dict[str, Any]) -> int:
    return int(partition["id"])


def report_fields(document: dict[str, Any]) -> dict[str, Any]:
    """A report's JSON as the row of ``decode_report``'s struct."""
    process, stats, total = document["process"], document["stats"], document["stats"]["total"]
    partitions = [
        {
            "consumer_group": group["id"],
            "topic": topic["name"],
            "partition": partition["id"],
            "lag": partition["lag"],
            "lag_stored": partition["lag_stored"],
            "committed_offset": partition["committed_offset"],
            "stored_offset": partition["stored_offset"],
            "hi_offset": partition["hi_offset"],
            "lo_offset": partition["lo_offset"],
            "fetch_state": partition["fetch_state"],
            "poll_state": partition["poll_state"],
        }
        for group in document["consumer_groups"].values()
        for subscription in group["subscription_groups"].values()
        for topic in subscription["topics"].values()
        # Keyed by the id as text ("10" before "2"): in id order, as the struct has them.
        for partition in sorted(topic["partitions"].values(), key=_partition_id)
    ]
    return {
        "schema_version": document["schema_version"],
        "dispatched_at": document["dispatched_at"],
        "process": {
            "id": process["id"],
            "status": process["status"],
            "started_at": process["started_at"],
            "memory_usage": process["memory_usage"],
            "memory_total_usage": process["memory_total_usage"],
            "memory_size": process["memory_size"],
            "cpus": process["cpus"],
            "threads": process["threads"],
            "cpu_usage": process["cpu_usage"],
            "tags": process["tags"],
        },
        "stats": {
            "busy": stats["busy"],
            "enqueued": stats["enqueued"],
            "utilization": stats["utilization"],
            "total": {
                "batches": total["batches"],
                "messages": total["messages"],
                "errors": total["errors"],
                "retries": total["retries"],
                "dead": total["dead"],
            },
            "lag": sum(max(_hybrid_lag(partition), 0) for partition in partitions),
            "lag_stored": sum(max(partition["lag_stored"], 0) for partition in partitions),
        },
        "partitions": partitions,
        "jobs": [
            {
                "consumer_group": job["consumer_group"],
                "topic": job["topic"],
                "partition": job["partition"],
                "first_offset": job["first_offset"],
                "last_offset": job["last_offset"],
                "committed_offset": job["committed_offset"],
                "messages": job["messages"],
                "kind": job["type"],
                "updated_at": job["updated_at"],
            }
            for job in document["jobs"]
        ],
        "error": None,
    }


def state_fields(document: dict[str, Any]) -> dict[str, Any]:
    """A state report's JSON as the row of ``decode_state``'s struct."""
    return {
        "schema_version": document["schema_version"],
        "dispatched_at": document["dispatched_at"],
        "state": document["state"],
        "offsets": {"low": document["offsets"]["low"], "high": document["offsets"]["high"]},
        "daily": [{"day": day, "count": count} for day, count in document["daily"].items()],
        "started_at": document["started_at"],
        "reloads": document["reloads"],
        "skipped_records": document["skipped_records"],
        "dispatched": document["dispatched"],
        "failed": document["failed"],
        "error": None,
    }


def pandas_decoder(
    fields: Callable[[dict[str, Any]], dict[str, Any]], schema: StructType
) -> Callable[[Column], Column]:
    """A ``pandas_udf`` decoding zlib JSON into ``schema``'s struct with ``fields``; a row that
    does not decode gets only its ``error`` field, as ferrokafka's decoders give it."""
    names = schema.fieldNames()
    failed = dict.fromkeys(names)

    def decode(value: bytes) -> dict[str, Any]:
        try:
            return fields(json.loads(zlib.decompress(value)))
        except (zlib.error, ValueError, KeyError, TypeError) as err:
            return {**failed, "error": f"{type(err).__name__}: {err}"}

    def decode_series(values: pd.Series) -> pd.DataFrame:
        return pd.DataFrame([decode(value) for value in values], columns=names)

    return F.pandas_udf(decode_series, schema)  # type: ignore[call-overload]


def pandas_inflate() -> Callable[[Column], Column]:
    def inflate_series(values: pd.Series) -> pd.Series:
        return pd.Series([zlib.decompress(value) for value in values])

    return F.pandas_udf(inflate_series, BinaryType())  # type: ignore[call-overload]


def map_in_arrow_inflate(frame: DataFrame) -> DataFrame:
    """``frame``'s (``id``, zlib value) rows with the value inflated (``out``), as a
    ``mapInArrow`` over whole record batches: one Rust call per batch."""

    def inflate_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            inflated = fka.inflate(batch.column(1))
            yield pa.RecordBatch.from_arrays([batch.column(0), inflated], names=["id", "out"])

    return frame.mapInArrow(inflate_batches, "id long, out binary")


def ready_made_states() -> Callable[[Column], Column]:
    """An Arrow UDF giving every row the same state report, decoded once beforehand (of
    ``decode_state``'s struct type): a decoder case without the decoding, so what Spark itself
    costs it (the Arrow hand-over both ways, the rows read back) -- the floor of the case."""
    decoded = fka.decode_state(pa.array([state_report(0)]))

    def ready(values: pa.Array) -> pa.Array:
        return decoded.take(np.zeros(len(values), dtype=np.int64))

    return F.arrow_udf(ready, struct_type(fka.decode_state))  # type: ignore[call-overload]


def inflated_reports(distinct: int) -> pa.Array:
    """The inflated report of every process (``make_input``'s row ``id`` has process
    ``id % distinct``'s)."""
    return pa.array([zlib.decompress(consumer_report(i)) for i in range(distinct)], pa.binary())


def inflated_total(inflated: pa.Array, rows: int) -> int:
    """The bytes inflating every report of ``rows`` input rows gives."""
    distinct = len(inflated)
    return sum(
        len(report.as_py()) * (rows // distinct + (index < rows % distinct))
        for index, report in enumerate(inflated)
    )


def ready_inflated(frame: DataFrame, inflated: pa.Array) -> DataFrame:
    """``frame``'s (``id``, zlib report) rows with the report of each row's process inflated
    beforehand (``out``), as a ``mapInArrow`` copying them in per batch: the inflate case
    without the inflating, so what Spark itself costs it (the batches handed over both ways, the
    inflated bytes read back) -- the floor of the case."""
    distinct = len(inflated)

    def ready_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            picks = batch.column(0).to_numpy() % distinct
            yield pa.RecordBatch.from_arrays([batch.column(0), inflated.take(picks)], ["id", "out"])

    return frame.mapInArrow(ready_batches, "id long, out binary")


def floor_runs(
    spark: SparkSession,
    name: str,
    action: Callable[[], int],
    runs: int,
    expected: int,
    limit: float,
) -> list[float]:
    """The seconds of ``runs`` runs of a floor ``action``, each checked to count ``expected``."""
    times = []
    for _ in range(runs):
        seconds, count = timed_call(spark, action, limit)
        assert count == expected, f"the floor of {name} counted {count:,}, expected {expected:,}"
        print(f"    floor of {name}: {seconds:.2f} s", flush=True)
        times.append(seconds)
    return times


# ---- the cases ------------------------------------------------------------------------------


def struct_type(decoder: Callable[..., pa.Array]) -> StructType:
    spark_type = from_arrow_type(decoder(pa.array([], pa.binary())).type)
    assert isinstance(spark_type, StructType)
    return spark_type


Counter = Callable[[DataFrame], Callable[[], int]]


def decoded_rows(frame: DataFrame) -> Callable[[], int]:
    """The action of a decoder case: rows decoded without an error (every row is read)."""
    ok = F.when(F.col("out").isNotNull() & F.col("out.error").isNull(), 1).otherwise(0)
    return lambda: (frame.agg(F.sum(ok)).first() or [0])[0]


def inflated_bytes(frame: DataFrame) -> Callable[[], int]:
    """The action of an inflate case: bytes inflated in all (every row is read)."""
    return lambda: (frame.agg(F.sum(F.length("out"))).first() or [0])[0]


Case = tuple[tuple[str, DataFrame], tuple[str, DataFrame], Counter, int]
"""(label, frame) of ferrokafka, then of the peer, the action timed, the count it must give."""


def decoder_case(
    data: DataFrame,
    column: str,
    ours: Callable[..., Column],
    arrow_decoder: Callable[..., pa.Array],
    fields: Callable[[dict[str, Any]], dict[str, Any]],
    rows: int,
) -> Case:
    """A decoder case: ferrokafka's Arrow UDF ``ours`` against the ``pandas_udf`` giving the
    same struct (``arrow_decoder``'s type) with ``fields``, both over ``column``."""
    peer = pandas_decoder(fields, struct_type(arrow_decoder))
    return (
        (
            f"ferrokafka.spark.{ours.__name__} (Arrow UDF, Rust)",
            data.select("id", ours(column).alias("out")),
        ),
        ("pandas_udf (zlib + json.loads)", data.select("id", peer(column).alias("out"))),
        decoded_rows,
        rows,
    )


def same_on_sample(name: str, ours: DataFrame, peer: DataFrame, step: int) -> int:
    """Both sides' rows for every ``step``-th id, compared; the number compared."""

    def rows(frame: DataFrame) -> list[Any]:
        return frame.where(F.col("id") % step == 0).orderBy("id").select("out").collect()

    mine, theirs = rows(ours), rows(peer)
    assert mine == theirs, f"{name}: the peer's rows differ from ferrokafka's"
    return len(mine)


def interleaved(
    spark: SparkSession,
    runs: dict[str, Callable[[], int]],
    rounds: int,
    expected: int,
    limit: float,
) -> dict[str, list[float]]:
    """Each case ``rounds`` times, A-B-B-A ordered; every run's count checked."""
    (first, ours), (second, theirs) = runs.items()
    times: dict[str, list[float]] = {first: [], second: []}
    counts: dict[str, set[int | None]] = {first: set(), second: set()}
    for round_ in range(rounds):
        order = [(first, ours), (second, theirs)]
        for name, action in order if round_ % 2 == 0 else order[::-1]:
            seconds, count = timed_call(spark, action, limit)
            times[name].append(seconds)
            counts[name].add(count)
            print(f"    {name}: {seconds:.2f} s ({count})", flush=True)
    assert counts[first] == counts[second], f"the counts differ: {counts}"
    assert counts[first] == {expected}, f"counted {counts[first]}, expected {expected:,}"
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--distinct", type=int, default=2_000, help="distinct processes")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each case (median)")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--only", choices=CASES, nargs="+", default=CASES, help="cases to run")
    parser.add_argument("--limit", type=float, default=900.0, help="cancel a run after N s")
    add_smoke_option(parser)
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.distinct, args.partitions, args.rounds = 2_000, 200, 2, 1

    spark = session(args.cores)
    try:
        data = make_input(spark, args.rows, args.distinct, args.partitions)
        step = max(1, args.rows // 2_000)
        reports = inflated_reports(args.distinct)
        total_inflated = inflated_total(reports, args.rows)
        cases: dict[str, Case] = {
            "decode_report": decoder_case(
                data, "report", fks.decode_report, fka.decode_report, report_fields, args.rows
            ),
            "decode_state": decoder_case(
                data, "state", fks.decode_state, fka.decode_state, state_fields, args.rows
            ),
            "inflate": (
                (
                    "mapInArrow(ferrokafka.arrow.inflate)",
                    map_in_arrow_inflate(data.select("id", "report")),
                ),
                (
                    "pandas_udf (zlib.decompress)",
                    data.select("id", pandas_inflate()("report").alias("out")),
                ),
                inflated_bytes,
                total_inflated,
            ),
        }
        cases = {name: case for name, case in cases.items() if name in args.only}
        sampled = {
            name: same_on_sample(name, ours[1], peer[1], step)
            for name, (ours, peer, _, _) in cases.items()
        }
        print("same rows on the sample: " + ", ".join(f"{k} {v:,}" for k, v in sampled.items()))
        floor, _ = timed_call(spark, inflated_bytes(data.select(F.col("report").alias("out"))), 900)

        print(f"\nlocal[{args.cores}], {args.rows:,} rows, medians of {args.rounds}")
        results = []
        for name, (ours, peer, counter, expected) in cases.items():
            print(f"  {name} (load {load_average()})", flush=True)
            runs = {label: counter(frame) for label, frame in (ours, peer)}
            results.append(
                (name, interleaved(spark, runs, args.rounds, expected, args.limit), load_average())
            )
        # What Spark itself costs a case: the same output made without decoding or inflating.
        floors: dict[str, list[float]] = {}
        if "decode_state" in cases:
            ready = decoded_rows(data.select("id", ready_made_states()("state").alias("out")))
            floors["decode_state: an Arrow UDF returning a ready struct"] = floor_runs(
                spark, "decode_state", ready, args.rounds, args.rows, args.limit
            )
        if "inflate" in cases:
            copied = inflated_bytes(ready_inflated(data.select("id", "report"), reports))
            floors["inflate: a mapInArrow copying in reports inflated beforehand"] = floor_runs(
                spark, "inflate", copied, args.rounds, total_inflated, args.limit
            )

        print(
            "\n| case | ferrokafka s | peer s | rows/s ferrokafka | rows/s peer | speed-up | load |"
        )
        print("|---|---:|---:|---:|---:|---:|---|")
        for name, times, after in results:
            (ours_name, ours_times), (peer_name, peer_times) = times.items()
            ours_s, peer_s = statistics.median(ours_times), statistics.median(peer_times)
            print(
                f"| {name}: {ours_name} vs {peer_name} | {ours_s:.2f} | {peer_s:.2f} | "
                f"{args.rows / ours_s:,.0f} | {args.rows / peer_s:,.0f} | "
                f"{peer_s / ours_s:.2f}x | {after} |"
            )
        print(f"| floor: Spark's length() of the column | {floor:.2f} | | | | | |")
        for name, times in floors.items():
            print(
                f"| floor of {name} (runs {', '.join(f'{t:.2f}' for t in times)}) | "
                f"{statistics.median(times):.2f} | | | | | |"
            )
    finally:
        spark.stop()


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"\n{time.monotonic() - started:.0f} s in all")
