"""What the Spark benches share: the local SparkSession they measure in and the timer that pushes
every row of a DataFrame through its UDFs.

Not a bench itself (tests/test_benches.py runs every other script here); the Spark benches
import it as ``_spark``, their own folder being first on ``sys.path`` when run as scripts.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")


def session(cores: int) -> SparkSession:
    """A local SparkSession on ``cores`` cores whose Python workers run this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("ferrokafka-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def timed_call(
    spark: SparkSession, action: Callable[[], T], limit: float
) -> tuple[float, T | None]:
    """Seconds ``action`` (one Spark action) took and what it returned; ``(inf, None)`` if Spark
    had to cancel it after ``limit`` seconds."""
    context = spark.sparkContext
    group = f"bench-{time.monotonic_ns()}"
    context.setJobGroup(group, "spark bench case", interruptOnCancel=True)
    timer = threading.Timer(limit, context.cancelJobGroup, args=(group,))
    timer.start()
    started = time.perf_counter()
    try:
        result = action()
    except Exception as err:  # the cancelled job
        print(f"  cancelled after {limit:.0f} s: {type(err).__name__}", flush=True)
        return float("inf"), None
    finally:
        timer.cancel()
    return time.perf_counter() - started, result


def timed(frame: DataFrame, limit: float = 600.0) -> float:
    """Seconds to push every row through (into Spark's no-op sink); ``inf`` if cancelled."""
    sink = frame.write.format("noop").mode("overwrite")
    return timed_call(frame.sparkSession, sink.save, limit)[0]
