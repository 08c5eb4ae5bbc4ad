"""Every bench script in benches/ runs at its smoke size (seconds), so a broken bench fails the
suite instead of rotting unseen. Sizes are tiny: the figures printed mean nothing here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHES = Path(__file__).resolve().parent.parent / "benches"

# Every script, with what it needs besides Python: a new bench must be added here (_common.py
# holds what they share and is no bench).
NEEDS = {
    "builds_bench.py": "kafka",
    "flush_latency.py": "kafka",
    "core_bench.py": None,
    "producer_bench.py": "kafka",
    "producer_instructions.py": "kafka",
    "consumer_bench.py": "kafka",
    "redelivery_bench.py": "kafka",
    "scheduler_bench.py": "kafka",
    "spark_bench.py": "spark",
    "spark_decode_bench.py": "spark",
}

SPARK_SECONDS = 300


def test_every_bench_script_is_listed() -> None:
    assert sorted(path.name for path in BENCHES.glob("[!_]*.py")) == sorted(NEEDS)


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(name, marks=[getattr(pytest.mark, need)] if need else [])
        for name, need in NEEDS.items()
        if need != "spark"
    ]
    + [
        # A Spark bench starts a session of its own (a JVM, then Python workers): minutes, not
        # seconds, on a loaded machine.
        pytest.param(name, marks=[pytest.mark.spark, pytest.mark.timeout(SPARK_SECONDS + 30)])
        for name, need in NEEDS.items()
        if need == "spark"
    ],
)
def test_bench_runs_at_smoke_size(script: str, request: pytest.FixtureRequest) -> None:
    env = dict(os.environ)
    if NEEDS[script] == "kafka":
        env["KAFKA_BOOTSTRAP"] = request.getfixturevalue("kafka_bootstrap")
    if NEEDS[script] == "spark":
        env["PYSPARK_PYTHON"] = sys.executable
    run = subprocess.run(
        [sys.executable, str(BENCHES / script), "--smoke"],
        env=env,
        capture_output=True,
        text=True,
        timeout=SPARK_SECONDS if NEEDS[script] == "spark" else 100,
        check=False,
    )
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "|---" in run.stdout.replace(":", "-"), run.stdout  # printed its markdown table
