"""The daemons' stop with a broker that does not answer: SIGINT or SIGTERM ends the command
within 10 s, with exit status 0, and a WARNING names what could not be sent.

Each test runs the real command line in a child process and stops it with a real signal.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from ferrokafka import Client
from ferrokafka.scheduling import create_topics
from tests.conftest import Broker, outage

pytestmark = pytest.mark.kafka

UNREACHABLE = "127.0.0.1:1"
STOP_BOUND = 10.0


class RunningCommand:
    """A ``ferrokafka`` command in a child process whose stderr is collected line by line, so a
    test can wait for a line and then stop the command with a signal."""

    def __init__(self, *argv: str) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ferrokafka", *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for_line(self, text: str, timeout: float = 30.0) -> None:
        with self._changed:
            found = self._changed.wait_for(
                lambda: any(text in line for line in self.lines), timeout
            )
        assert found, f"no line with {text!r} within {timeout} s:\n{self.stderr}"

    def stop_with(self, signum: signal.Signals, wait: float) -> float:
        """Sends ``signum``; returns the seconds until the process ended (killed after
        ``wait``)."""
        sent = time.monotonic()
        self.process.send_signal(signum)
        try:
            self.process.wait(wait)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return time.monotonic() - sent

    def close(self) -> None:
        """Kills the process if it still runs, and closes its pipe."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(10)
        assert self.process.stderr is not None
        self.process.stderr.close()

    @property
    def stderr(self) -> str:
        with self._changed:
            return "".join(self.lines)


@pytest.fixture
def commands() -> Iterator[list[RunningCommand]]:
    started: list[RunningCommand] = []
    yield started
    for command in started:
        command.close()


@pytest.mark.parametrize(
    ("argv", "started", "signum"),
    [
        (
            ["scheduler", "--schedules-topic", "schedules"],
            "scheduler started",
            signal.SIGINT,
        ),
        (
            ["redelivery", "--queue-topic", "jobs", "--markers-topic", "jobs-markers"],
            "redelivery tracker started",
            signal.SIGTERM,
        ),
    ],
    ids=["scheduler-SIGINT", "redelivery-SIGTERM"],
)
def test_a_reporting_daemon_stops_within_its_bound_when_the_broker_is_unreachable(
    commands: list[RunningCommand], argv: list[str], started: str, signum: signal.Signals
) -> None:
    daemon = RunningCommand(
        *argv, "--bootstrap-servers", UNREACHABLE, "--report", "--reports-topic", "reports-x"
    )
    commands.append(daemon)
    daemon.wait_for_line(started)
    took = daemon.stop_with(signum, wait=2 * STOP_BOUND)
    daemon.close()  # all of stderr read
    assert took < STOP_BOUND, f"stopped {took:.1f} s after {signum.name}:\n{daemon.stderr}"
    assert daemon.process.returncode == 0, daemon.stderr
    assert "Traceback" not in daemon.stderr, daemon.stderr
    warnings = [line for line in daemon.lines if " WARNING " in line and "not sent" in line]
    assert any("final report" in line and "reports-x" in line for line in warnings), daemon.stderr


def test_a_scheduler_stops_within_its_bound_when_the_broker_goes_away(
    commands: list[RunningCommand], outage_broker: Broker
) -> None:
    """The broker goes away while the scheduler holds a loaded partition: neither its final
    state report nor its process reports can be sent."""
    bootstrap, env = outage_broker
    schedules = f"stop-schedules-{uuid.uuid4().hex[:8]}"
    create_topics(Client({"bootstrap.servers": bootstrap}), schedules, num_partitions=1)
    daemon = RunningCommand(
        "scheduler",
        "--schedules-topic",
        schedules,
        "--group-id",
        f"g-{schedules}",
        "--bootstrap-servers",
        bootstrap,
        "--report",
        "--reports-topic",
        "reports-x",
    )
    commands.append(daemon)
    daemon.wait_for_line(f"loaded {schedules}-0")
    with outage(env):
        daemon.wait_for_line("Connection refused")
        took = daemon.stop_with(signal.SIGTERM, wait=2 * STOP_BOUND)
        daemon.close()
    assert took < STOP_BOUND, f"stopped {took:.1f} s after SIGTERM:\n{daemon.stderr}"
    assert daemon.process.returncode == 0, daemon.stderr
    assert "Traceback" not in daemon.stderr, daemon.stderr
    warnings = [line for line in daemon.lines if " WARNING " in line]
    assert any("final state report(s) not acknowledged" in line for line in warnings), daemon.stderr
    assert any("final report" in line and "reports-x" in line for line in warnings), daemon.stderr
