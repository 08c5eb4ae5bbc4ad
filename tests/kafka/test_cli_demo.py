"""`ferrokafka demo` and `ferrokafka topics` against the real broker."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import Broker

pytestmark = pytest.mark.kafka


def test_demo_produces_and_reads_back(outage_broker: Broker) -> None:
    # A broker of its own, new: the demo's first idempotent producer is the first on the
    # cluster, which librdkafka answers with a "Coordinator load in progress" warning.
    bootstrap, _ = outage_broker
    shown = subprocess.run(
        [sys.executable, "-m", "ferrokafka", "demo", "--bootstrap-servers", bootstrap],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert shown.stdout.count("produced") == 3
    for city in ["Lisbon", "Nairobi", "Osaka"]:
        assert f"read back 'hello from {city}'" in shown.stdout
    assert "producer: delivered 2500 in 3 background rounds" in shown.stdout
    assert re.search(
        r"^scheduler: scheduled \S+ for \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$",
        shown.stdout,
        re.MULTILINE,
    ), shown.stdout
    assert "scheduler: dispatched b'time to call back'" in shown.stdout
    assert "redelivery: received b'resize photo 42' again, redelivery count 1" in shown.stdout
    assert "demo finished" in shown.stderr
    assert "GETPID" not in shown.stderr
    assert " WARNING " not in shown.stderr


def test_topics_create_then_list(kafka_bootstrap: str) -> None:
    name = "test-cli-topics-create"
    common = ["--bootstrap-servers", kafka_bootstrap]
    run = [sys.executable, "-m", "ferrokafka", "topics"]
    subprocess.run(
        [*run, "create", name, "--partitions", "2", "--exist-ok", *common], check=True, timeout=60
    )
    listed = subprocess.run(
        [*run, "list", *common], capture_output=True, text=True, check=True, timeout=60
    )
    assert f"{name}\t2 partitions" in listed.stdout.splitlines()


def test_topics_create_names_the_setting_the_broker_refuses(kafka_bootstrap: str) -> None:
    shown = subprocess.run(
        [
            *(sys.executable, "-m", "ferrokafka", "topics", "create", "test-cli-refused-config"),
            *("--config", "unknown.key=1", "--bootstrap-servers", kafka_bootstrap),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 2, shown.stderr
    assert "Traceback" not in shown.stderr
    assert shown.stderr.splitlines()[-1] == (
        "ferrokafka topics create: error: argument --config: the broker refused a topic setting "
        "(an unknown key or a bad value) among: unknown.key"
    )
