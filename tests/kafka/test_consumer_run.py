"""Ctrl-C in ``Consumer.run()``: the consumer stops as ``stop()`` does and ``run`` returns, so a
script ends with status 0 and no traceback, its handled records committed.

The script runs in a child process and gets a real SIGINT once it handled every record.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

import ferrokafka
from tests.conftest import TopicFactory, committed_offsets

pytestmark = pytest.mark.kafka

SCRIPT = textwrap.dedent(
    """
    import sys

    import ferrokafka

    bootstrap, topic, group, expected = sys.argv[1:]
    handled = 0

    def handle(batch):
        global handled
        handled += len(batch)
        if handled == int(expected):
            print("handled all", flush=True)

    consumer = ferrokafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group}, [topic], handle
    )
    consumer.run()
    print("run returned", flush=True)
    """
)


def test_ctrl_c_in_run_stops_commits_and_returns(
    kafka_bootstrap: str, kafka_client: ferrokafka.Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=2)
    for n in range(10):
        kafka_client.produce(topic, f"record {n}", key=str(n), timeout=10.0)
    group = f"{topic}-group"
    script = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, kafka_bootstrap, topic, group, "10"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert script.stdout is not None
        assert script.stdout.readline() == "handled all\n"
        script.send_signal(signal.SIGINT)
        out, err = script.communicate(timeout=30)
    finally:
        script.kill()
    assert "Traceback" not in err
    assert "KeyboardInterrupt" not in err
    assert out == "run returned\n"
    assert script.returncode == 0
    committed = committed_offsets(kafka_bootstrap, group, topic, 2)
    assert sum(committed.values()) == 10
