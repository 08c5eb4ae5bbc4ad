"""Every call that takes a timeout keeps it with the broker unreachable (127.0.0.1:1), and a
malformed broker address is refused before any client exists."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from ferrokafka import AsyncProducer, Client, ConfigError, Consumer, KafkaTimeoutError, NewTopic
from ferrokafka.status import StatusReader

UNREACHABLE = {"bootstrap.servers": "127.0.0.1:1"}
TIMEOUT = 2.0
# What a call may take beyond its timeout (the bound: timeout + 1 s).
SLACK = 1.0


@pytest.mark.parametrize(
    ("servers", "problem"),
    [
        ("::::", "more than one ':'"),
        ("http://host:9092", "http://"),
        ("host:99999", 'port "99999"'),
        ("host:-5", 'port "-5"'),
    ],
)
def test_a_malformed_broker_address_is_refused_at_once_by_every_client(
    servers: str, problem: str
) -> None:
    config = {"bootstrap.servers": servers}
    makers: list[Callable[[], object]] = [
        lambda: Client(config),
        lambda: AsyncProducer(config),
        # A Consumer creates its librdkafka client when it starts.
        lambda: Consumer({**config, "group.id": "g"}, ["t"], lambda batch: None).start(),
    ]
    for make in makers:
        started = time.monotonic()
        with pytest.raises(ConfigError, match=r"bootstrap\.servers") as refused:
            make()
        assert problem in str(refused.value)
        assert time.monotonic() - started < 1.0


CALLS: dict[str, Callable[[Client], object]] = {
    "list_topics": lambda c: c.list_topics(timeout=TIMEOUT),
    "create_topics": lambda c: c.create_topics([NewTopic("t", 1)], timeout=TIMEOUT),
    "delete_topics": lambda c: c.delete_topics(["t"], timeout=TIMEOUT),
    "produce": lambda c: c.produce("t", b"v", timeout=TIMEOUT),
    "produce with partition_key": lambda c: c.produce(
        "t", b"v", partition_key=b"k", timeout=TIMEOUT
    ),
    "read_topic": lambda c: c.read_topic("t", timeout=TIMEOUT),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
def test_every_client_call_keeps_its_timeout_with_the_broker_unreachable(
    call: Callable[[Client], object],
) -> None:
    client = Client(UNREACHABLE)
    started = time.monotonic()
    no_answer = re.escape("no answer from bootstrap.servers=127.0.0.1:1")
    with pytest.raises(KafkaTimeoutError, match=no_answer):
        call(client)
    took = time.monotonic() - started
    assert TIMEOUT - 0.1 < took < TIMEOUT + SLACK


def test_status_reader_start_keeps_its_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError):
        StatusReader(UNREACHABLE).start(timeout=TIMEOUT)
    assert time.monotonic() - started < TIMEOUT + SLACK


@pytest.mark.parametrize(
    "command",
    [
        ["topics", "create", "t", "--timeout", str(TIMEOUT)],
        ["status", "--timeout", str(TIMEOUT)],
        ["dashboard", "--timeout", str(TIMEOUT)],
    ],
    ids=["topics create", "status", "dashboard"],
)
def test_cli_commands_keep_their_timeout(command: list[str]) -> None:
    started = time.monotonic()
    ran = subprocess.run(
        [sys.executable, "-m", "ferrokafka", *command, "--bootstrap-servers", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    took = time.monotonic() - started
    assert ran.returncode == 1, ran.stderr
    assert "KafkaTimeoutError" in ran.stderr
    # The interpreter's start and exit come on top of the call itself.
    assert took < TIMEOUT + SLACK + 2.0, ran.stderr
