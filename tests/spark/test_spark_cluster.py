"""The README's cluster recipe, run as written against a standalone Spark cluster (a Master and
a Worker from pyspark's own ``spark-class``): the wheel shipped as a venv-pack archive, a job
(tests/spark/cluster_job.py) calling every ferrokafka.spark helper submitted by spark-submit, its
results, and where its tasks ran."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ferrokafka import Client
from ferrokafka.scheduling import Scheduler
from tests.conftest import ROOT, TopicFactory, read_all, wait_until
from tests.reports import process_report, produce_report
from tests.spark import cluster_job
from tests.spark.conftest import StandaloneCluster, clean_env

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

README = ROOT / "README.md"
BUILD = ".venv/bin/maturin build"
"""The recipe's first line, which scripts/setup.sh already ran: dist/ holds its wheel."""
PLACEHOLDER_MASTER = "spark://spark-master:7077"


def recipe() -> str:
    """The README's bash block that packs the environment and submits ``job.py``."""
    blocks = re.findall(r"^```bash\n(.*?)^```", README.read_text(), re.DOTALL | re.MULTILINE)
    (block,) = [block for block in blocks if "venv-pack" in block]
    return str(block)


def as_run_here(block: str, master_url: str, job_arguments: list[str]) -> tuple[str, str]:
    """The recipe's commands that pack the environment, and its spark-submit command with this
    cluster's master and the job's arguments; less the wheel build."""
    import pyspark

    first, *commands = block.splitlines()
    assert first.startswith(BUILD), first
    script = "\n".join(commands)
    pack, submit = script.split("\nspark-submit ")
    submit = f"spark-submit {submit}"
    package = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    assert package in submit, f"the recipe's connector is not {package}"
    assert submit.count(PLACEHOLDER_MASTER) == 1
    assert submit.endswith("  job.py")
    return pack, submit.replace(PLACEHOLDER_MASTER, master_url) + " " + " ".join(job_arguments)


def run_logged(script: str, cwd: Path, env: dict[str, str], log: Path, timeout: float) -> None:
    """Run a bash ``script`` (errexit, pipefail), its output to ``log``; fail with its tail."""
    with log.open("w") as output:
        run = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=cwd,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    assert run.returncode == 0, f"{script}\nfailed:\n{log.read_text()[-5000:]}"


@pytest.mark.timeout(900)  # a minute or two; more on a busy machine
def test_the_readme_recipe_runs_every_helper_on_the_cluster_executor(
    spark_cluster: StandaloneCluster,
    kafka_bootstrap: str,
    kafka_client: Client,
    topic_factory: TopicFactory,
    schedules_topic: str,
    tmp_path: Path,
) -> None:
    target, reports = topic_factory(partitions=2), topic_factory(partitions=1)
    process = "host-c:1:cluster"
    produce_report(kafka_client, reports, process_report(process, {("g", "t", 0): 5}, 10.0))
    produce_report(
        kafka_client, reports, process_report(process, {("g", "t", 0): 2, ("g", "t", 1): 7}, 11.0)
    )
    scheduler = Scheduler(
        {"bootstrap.servers": kafka_bootstrap},
        [schedules_topic],
        group_id=f"g-{uuid.uuid4().hex}",
        state_interval=1,
    )
    try:
        # What the reader has: the wheel in dist/ and their job; the recipe makes the rest.
        (tmp_path / "dist").mkdir()
        for wheel in (ROOT / "dist").glob("ferrokafka-*.whl"):
            (tmp_path / "dist" / wheel.name).symlink_to(wheel)
        shutil.copy(cluster_job.__file__, tmp_path / "job.py")
        # The Ivy cache the session's SparkSession fills (tests/conftest.py), and the driver's
        # UI on a free port: its REST API counts the tasks per executor.
        conf = tmp_path / "conf"
        conf.mkdir()
        ivy = Path.home() / ".cache" / "ferrokafka" / "ivy"
        (conf / "spark-defaults.conf").write_text(
            f"spark.jars.ivy {ivy}\nspark.ui.port 0\nspark.ui.showConsoleProgress false\n"
        )
        out = tmp_path / "found.json"
        arguments = [
            *("--bootstrap", kafka_bootstrap, "--schedules", schedules_topic),
            *("--target", target, "--reports", reports, "--out", str(out)),
        ]
        venv_bin = Path(sys.executable).parent
        env = {
            **clean_env(),
            # The reader's shell: `python` and `spark-submit` are the development venv's, pip
            # installs the pinned pyarrow and venv-pack.
            "PATH": f"{venv_bin}:{clean_env()['PATH']}",
            "PIP_CONSTRAINT": str(ROOT / "requirements-dev.txt"),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "SPARK_CONF_DIR": str(conf),
        }
        pack, submit = as_run_here(recipe(), spark_cluster.master_url, arguments)
        started = time.monotonic()
        run_logged(pack, tmp_path, env, tmp_path / "pack.log", timeout=240)
        packed = time.monotonic()
        spark_cluster.wait_ready()
        try:
            run_logged(submit, tmp_path, env, tmp_path / "submit.log", timeout=420)
        except AssertionError as failed:
            raise AssertionError(f"{failed}\n{spark_cluster.log_tail()}") from None
        submitted = time.monotonic()
        found: dict[str, Any] = json.loads(out.read_text())

        # It ran on the cluster, and every task on the worker's executor, in the shipped
        # environment.
        assert found["master"] == spark_cluster.master_url
        wait_until(
            lambda: "ferrokafka-cluster-job" in spark_cluster.completed_apps(),
            30,
            "the master to list the job as a completed application",
        )
        tasks = {e["id"]: e["totalTasks"] for e in found["executors"]}
        assert tasks["driver"] == 0, found["executors"]
        assert set(tasks) == {"driver", "0"}, found["executors"]
        assert tasks["0"] > 0
        for worker in found["python_workers"]:
            environment = Path(worker["prefix"])
            assert environment.name == "environment"
            assert environment.parent.parent.parent == spark_cluster.work_dir
            assert Path(worker["ferrokafka"]).is_relative_to(environment)
            assert worker["pid"] != found["driver_pid"]

        # The helpers' results.
        assert found["round_trips"] == 100
        assert found["markers"] == [
            {
                "kind": "end",
                "partition": 3,
                "offset": 41,
                "deadline": None,
                "key": None,
                "value": None,
                "headers": [],
                "error": None,
            }
        ]
        assert [s["state"] for s in found["states"]] == ["loaded", "loaded"]
        assert sum(s["dispatched"] for s in found["states"]) == cluster_job.DUE
        assert found["reports"] == [
            {"process_id": process, "lag": 5, "status": "running"},
            {"process_id": process, "lag": 9, "status": "running"},
        ]
        # Each partition's lag to the committed offset, 2 more than to the stored one.
        latest = [{"process_id": process, "partition": 0, "lag": 4, "lag_stored": 2}]
        latest.append({"process_id": process, "partition": 1, "lag": 9, "lag_stored": 7})
        for table in ("lag_table", "stream_lag"):
            assert sorted(found[table], key=lambda row: row["partition"]) == latest

        # Read independently: the due schedules were dispatched, the cancelled ones are gone.
        # (The daemon's state reports counted them dispatched: acknowledged by the broker.)
        due = sorted(f"payload-{n}".encode() for n in range(cluster_job.DUE))
        assert sorted(value for _, value in read_all(kafka_bootstrap, target, 2)) == due
        wait_until(
            lambda: sum(s["pending"] for s in scheduler.status()) == 0,
            30,
            "the cancelled schedules to leave the daemon",
        )
    finally:
        scheduler.stop()
    print(f"packing took {packed - started:.0f} s, submitting the job {submitted - packed:.0f} s")
