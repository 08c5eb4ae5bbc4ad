"""A standalone Spark cluster for the cluster tests: one Master and one Worker (1 core), started
from pyspark's own ``bin/spark-class`` on free ports of this machine."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until

# Set by the session's local SparkSession or by scripts/test.sh; the cluster and what is
# submitted to it take their Python from their own settings, as on a reader's machine.
PYSPARK_ENV = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS")


def clean_env() -> dict[str, str]:
    """This process's environment without the PySpark settings the test session made."""
    return {key: value for key, value in os.environ.items() if key not in PYSPARK_ENV}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class StandaloneCluster:
    """A running Master and Worker: the master's URL, its web UI, the worker's work directory
    (each executor's working directory is ``<work_dir>/<app id>/<executor id>``) and logs."""

    master_url: str
    master_ui: str
    work_dir: Path
    logs: Path

    def state(self) -> dict[str, Any]:
        """The Master's view (its web UI's JSON): workers, active and completed apps."""
        with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=5) as response:
            state: dict[str, Any] = json.load(response)
        return state

    def completed_apps(self) -> list[str]:
        return [app["name"] for app in self.state()["completedapps"]]

    def log_tail(self) -> str:
        return "\n".join(
            f"--- {log.name}\n{log.read_text()[-3000:]}" for log in sorted(self.logs.glob("*.log"))
        )

    def _alive_workers(self) -> int:
        try:
            workers = self.state()["workers"]
        except OSError:  # the Master's UI is not up yet
            return 0
        return sum(1 for worker in workers if worker["state"] == "ALIVE")

    def wait_ready(self) -> None:
        """Wait until the worker registered with the master (the JVMs start in the background,
        meanwhile a test prepares what it submits)."""
        try:
            wait_until(lambda: self._alive_workers() == 1, 120, "the worker to register", 0.5)
        except AssertionError:
            pytest.fail(f"the standalone cluster did not start:\n{self.log_tail()}")


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """The cluster, starting: call its ``wait_ready()`` before submitting."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    root = tmp_path_factory.mktemp("spark-cluster")
    port, ui = free_port(), free_port()
    cluster = StandaloneCluster(
        master_url=f"spark://127.0.0.1:{port}",
        master_ui=f"http://127.0.0.1:{ui}",
        work_dir=root / "work",
        logs=root,
    )
    # Small daemons: the Master and Worker only book-keep (the executor has its own JVM).
    env = {**clean_env(), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m"}
    commands = {
        "master": [
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)),
        ],
        "worker": [
            "org.apache.spark.deploy.worker.Worker",
            cluster.master_url,
            *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g"),
            *("--webui-port", str(free_port()), "--work-dir", str(cluster.work_dir)),
        ],
    }
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        for name, arguments in commands.items():
            with (root / f"{name}.log").open("wb") as log:
                daemons.append(
                    subprocess.Popen(
                        [str(spark_class), *arguments], env=env, stdout=log, stderr=log
                    )
                )
        yield cluster
    finally:
        # spark-class execs java: these are the JVMs themselves. The Worker kills its executors.
        for daemon in reversed(daemons):
            daemon.terminate()
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
