"""`ferrokafka demo` and `ferrokafka topics` against the real broker, and how `dashboard` and
`status` end: Ctrl-C, and a reader of the output that goes away."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid

import pytest

from tests.conftest import Broker, TopicFactory, wait_until

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


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except (urllib.error.URLError, ConnectionError):
        return False


def test_the_dashboard_ends_with_status_0_on_ctrl_c(kafka_bootstrap: str) -> None:
    # As on SIGTERM (the README): uvicorn stops, then raises the SIGINT again.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    missing = f"test-dash-none-{uuid.uuid4().hex[:8]}"
    command = [
        *(sys.executable, "-m", "ferrokafka", "dashboard", "--bootstrap-servers", kafka_bootstrap),
        *("--reports-topic", missing, "--errors-topic", missing, "--states-topic", missing),
        *("--port", str(port)),
    ]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as server:
        try:
            wait_until(
                lambda: server.poll() is None and answers(f"http://127.0.0.1:{port}/api/status"),
                60.0,
                "the dashboard to serve",
            )
            server.send_signal(signal.SIGINT)
            assert server.wait(timeout=30) == 0
            assert server.stderr is not None
            shown = server.stderr.read()
            assert "Traceback" not in shown, shown
            assert "ferrokafka: error" not in shown, shown
        finally:
            server.kill()


def test_status_watched_through_a_reader_that_goes_away_ends_quietly(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    # `ferrokafka status --watch 0.5 | head -c 10`: the pipe closes under the next refresh.
    reports = topic_factory(partitions=1)
    command = [
        *(sys.executable, "-m", "ferrokafka", "status", "--bootstrap-servers", kafka_bootstrap),
        *("--reports-topic", reports, "--watch", "0.5"),
    ]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as watching:
        assert watching.stdout is not None
        assert watching.stderr is not None
        assert watching.stdout.read(10)
        watching.stdout.close()
        assert watching.wait(timeout=30) == 128 + signal.SIGPIPE
        shown = watching.stderr.read()
    assert "Traceback" not in shown, shown
    assert "BrokenPipe" not in shown, shown
    assert "ferrokafka: error" not in shown, shown


@pytest.mark.parametrize(
    ("redirect", "said"),
    [(">&-", "standard output is closed"), ("> /dev/full", "No space left on device")],
    ids=["closed", "full"],
)
def test_output_that_cannot_be_written_is_an_error_not_status_0(
    kafka_bootstrap: str, redirect: str, said: str
) -> None:
    # As `ls >&-` says "write error" and fails: the listing would otherwise vanish unsaid.
    listing = f"{sys.executable} -m ferrokafka topics list --bootstrap-servers {kafka_bootstrap}"
    run = subprocess.run(
        ["bash", "-c", f"{listing} {redirect}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 1, run.stderr
    # The same line whether the last of the output or a print on the way could not be written.
    assert run.stderr == f"ferrokafka: error: cannot write the output: {said}\n", run.stderr
