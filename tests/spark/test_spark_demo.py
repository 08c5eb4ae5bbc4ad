"""`ferrokafka spark-demo` runs end to end on the real broker, on the standalone cluster its
``--master`` names."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import wait_until
from tests.spark.conftest import StandaloneCluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _ivy_missing_slf4j(to: Path) -> Path:
    """A copy (hard links) of the Ivy directory the test session's SparkSession filled, less
    slf4j-api and its parent POMs: resolving them again fetches parent POMs from the network,
    as on a first run, which is when Ivy prints its chatter."""
    cache = Path(os.environ.get("FERROKAFKA_CACHE", Path.home() / ".cache" / "ferrokafka"))
    shutil.copytree(cache / "ivy", to, copy_function=os.link)
    shutil.rmtree(to / "cache" / "org.slf4j")
    for jar in (to / "jars").glob("org.slf4j_*"):
        jar.unlink()
    return to


ISO_UTC_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.mark.timeout(600)  # a Spark job in a child process, its executor on the cluster
def test_spark_demo_runs_its_three_steps_on_the_master_it_is_given(
    kafka_bootstrap: str, spark: SparkSession, spark_cluster: StandaloneCluster, tmp_path: Path
) -> None:
    ivy = _ivy_missing_slf4j(tmp_path / "ivy")
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYSPARK_SUBMIT_ARGS": f"--conf spark.jars.ivy={ivy} pyspark-shell",
    }
    env.pop("DEFAULT_ARTIFACT_REPOSITORY", None)
    spark_cluster.wait_ready()
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "ferrokafka",
            "spark-demo",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--rows",
            "200",
            "--master",
            spark_cluster.master_url,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    out = shown.stdout
    assert '{"id":0,"col2":"customer-0"}' in out  # deflated and inflated back by the UDFs
    assert "all 200 dispatched by the scheduler" in out
    assert "consumed 200 reminders as process" in out
    process_id = out.split("consumed 200 reminders as process ")[1].split()[0]
    # its final report, read back by read_reports, its time as ISO 8601 (not 1.79E9)
    assert re.search(rf"\|{process_id}\|stopped +\|0 +\|{ISO_UTC_TIME.pattern}\|", out), out
    assert re.search(r"due from \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 on", out)
    assert not re.search(r"\d\.\d+E9", out)
    assert "found org.slf4j#slf4j-api;2.0.17 in central" in shown.stderr  # resolved anew
    assert "proxy server" not in shown.stderr
    assert not re.search(r"Host \S+ not found", shown.stderr)
    assert "FutureWarning" not in shown.stderr
    # It ran on the cluster, not in a local[2] of its own.
    wait_until(
        lambda: "ferrokafka-spark-demo" in spark_cluster.completed_apps(),
        30,
        "the master to list the demo as a completed application",
    )
