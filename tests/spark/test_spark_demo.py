"""`ferrokafka spark-demo` runs end to end on a local SparkSession and the real broker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_spark_demo_runs_its_three_steps(kafka_bootstrap: str) -> None:
    cache = Path(os.environ.get("FERROKAFKA_CACHE", Path.home() / ".cache" / "ferrokafka"))
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        # The connector jars come from the cache the test session's SparkSession filled.
        "PYSPARK_SUBMIT_ARGS": f"--conf spark.jars.ivy={cache / 'ivy'} pyspark-shell",
    }
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
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    out = shown.stdout
    assert '{"id":0,"col2":"customer-0"}' in out  # deflated and inflated back by the UDFs
    assert "all 200 dispatched by the scheduler" in out
    assert "consumed 200 reminders as process" in out
    process_id = out.split("consumed 200 reminders as process ")[1].split()[0]
    assert f"|{process_id}|stopped " in out  # its final report, read back by read_reports
