"""Spark UDFs: ferrokafka's Rust Arrow UDFs against the Python UDFs a PySpark user writes today,
in one run on a local SparkSession (not a test).

Input: ``--rows`` rows of about 1 KB of JSON (an id, a user, a dozen SHA-256 hex strings: about
as compressible as real event payloads), written once to Parquet with their zlib form, so each
case reads the same file. Cases, for inflate and for deflate:

- ``ferrokafka.spark.inflate`` / ``deflate``: Spark 4 Arrow UDF, one Rust call per Arrow batch;
- row-at-a-time ``@udf(useArrow=False)`` with Python's ``zlib`` (pickled rows);
- Spark 4's Arrow-optimised ``@udf(useArrow=True)``, same function (Arrow transfer, then one
  Python call per row);
- ``@pandas_udf`` calling Python's ``zlib`` per element of the pandas Series;
- native Spark functions: Spark has no zlib function (nothing to compare with; noted in the
  output). A plain read of the column is timed as the floor every case pays.

Each case forces every row through the UDF with ``write.format("noop")``. Ratios are peer time /
ferrokafka time (above 1: ferrokafka is faster)::

    .venv/bin/python benches/spark_bench.py --rows 1000000      # --rows 100000 for a quick run
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable

import pandas as pd
from _common import add_smoke_option
from _spark import session, timed
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

from ferrokafka import spark as fks


def make_input(spark: SparkSession, rows: int, path: str, partitions: int) -> float:
    hashes = [F.sha2(F.concat(F.col("id").cast("string"), F.lit(f"-{i}")), 256) for i in range(12)]
    document = F.to_json(
        F.struct(
            F.col("id"),
            F.concat(F.lit("user-"), (F.col("id") % 1000).cast("string")).alias("user"),
            F.array(*hashes).alias("hashes"),
        )
    )
    frame = spark.range(rows, numPartitions=partitions).select(document.alias("json"))
    frame = frame.select("json", fks.deflate("json").alias("packed"))
    frame.write.mode("overwrite").parquet(path)
    stats = spark.read.parquet(path).agg(F.avg(F.length("json")), F.avg(F.length("packed")))
    json_size, packed_size = stats.first() or (0, 0)
    print(f"input: {rows:,} rows, {json_size:.0f} B of JSON, {packed_size:.0f} B zlib per row")
    return float(json_size)


def python_udfs() -> dict[str, dict[str, Callable[[Column], Column]]]:
    def inflate_row(value: bytes | None) -> bytes | None:
        return None if value is None else zlib.decompress(value)

    def deflate_row(value: str | None) -> bytes | None:
        return None if value is None else zlib.compress(value.encode())

    def inflate_series(values: pd.Series) -> pd.Series:
        return values.map(inflate_row)

    def deflate_series(values: pd.Series) -> pd.Series:
        return values.map(deflate_row)

    binary = BinaryType()
    return {
        "inflate": {
            "ferrokafka Arrow UDF (Rust)": fks.inflate,
            "Python @udf, useArrow=False": F.udf(inflate_row, binary, useArrow=False),
            "Python @udf, useArrow=True": F.udf(inflate_row, binary, useArrow=True),
            "pandas_udf (Python zlib)": F.pandas_udf(inflate_series, binary),  # type: ignore[call-overload]
        },
        "deflate": {
            "ferrokafka Arrow UDF (Rust)": fks.deflate,
            "Python @udf, useArrow=False": F.udf(deflate_row, binary, useArrow=False),
            "Python @udf, useArrow=True": F.udf(deflate_row, binary, useArrow=True),
            "pandas_udf (Python zlib)": F.pandas_udf(deflate_series, binary),  # type: ignore[call-overload]
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--only", choices=["inflate", "deflate"], default=None)
    parser.add_argument("--limit", type=float, default=600.0, help="cancel a case after N s")
    add_smoke_option(parser)
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.partitions = 1_000, 2

    spark = session(args.cores)
    workdir = tempfile.mkdtemp(prefix="ferrokafka-spark-bench-")
    try:
        path = os.path.join(workdir, "input.parquet")
        make_input(spark, args.rows, path, args.partitions)
        data = spark.read.parquet(path)
        columns = {"inflate": "packed", "deflate": "json"}
        # Warm-up: Python workers started, UDF code imported, on a small slice.
        sample = data.limit(10_000).cache()
        sample.count()
        for kind, cases in python_udfs().items():
            for name, udf in cases.items():
                print(f"warm-up {kind}: {name}", flush=True)
                timed(sample.select(udf(F.col(columns[kind]))), args.limit)
        print(f"\nlocal[{args.cores}], {args.rows:,} rows; seconds (lower is better)")
        for kind, cases in python_udfs().items():
            if args.only and kind != args.only:
                continue
            column = F.col(columns[kind])
            # Cached in memory: every case reads the same cached column. (Reading the Parquet file
            # straight into an Arrow-optimised Python UDF stalls with pyspark 4.2.0 here.)
            cached = data.select(column).cache()
            cached.count()
            floor = timed(cached.select(F.length(column)))
            times = {}
            for name, udf in cases.items():
                times[name] = timed(cached.select(udf(column).alias("out")), args.limit)
                print(f"  {kind}: {name}: {times[name]:.2f} s", flush=True)
            ours = times["ferrokafka Arrow UDF (Rust)"]
            print(f"\n### {kind}\n")
            print("| case | seconds | rows/s | ferrokafka speed-up |")
            print("|---|---:|---:|---:|")
            for name, seconds in times.items():
                rate = args.rows / seconds
                print(f"| {name} | {seconds:.2f} | {rate:,.0f} | {seconds / ours:.2f}x |")
            print(f"| read the column only (floor) | {floor:.2f} | {args.rows / floor:,.0f} | |")
            print("| native Spark function | none: Spark has no zlib function | | |")
            cached.unpersist()
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
