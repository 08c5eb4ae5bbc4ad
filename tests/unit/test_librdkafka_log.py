"""librdkafka's routine start-up warnings are lowered to DEBUG; its other warnings stay."""

from __future__ import annotations

import logging

import pytest

from ferrokafka._librdkafka_log import RoutineAtDebug

# As librdkafka's lines reach the `librdkafka` logger (its facility, thread, then the text).
_GETPID = "librdkafka: GETPID [thrd:main]: Failed to acquire {kind} PID from broker b/1: {cause}"


def _record(text: str) -> logging.LogRecord:
    return logging.LogRecord("librdkafka", logging.WARNING, __file__, 1, text, None, None)


@pytest.mark.parametrize(
    "cause",
    [
        "Broker: Coordinator load in progress: retrying",
        "Broker: Not coordinator: retrying",
        "Broker: Coordinator not available: retrying",
    ],
)
def test_a_new_clusters_coordinator_warnings_are_debug(cause: str) -> None:
    record = _record(_GETPID.format(kind="transactional", cause=cause))
    assert RoutineAtDebug().filter(record) is logging.getLogger("librdkafka").isEnabledFor(
        logging.DEBUG
    )
    assert record.levelname == "DEBUG"


@pytest.mark.parametrize(
    "text",
    [
        _GETPID.format(kind="transactional", cause="Broker: Transactional Id authorization failed"),
        "librdkafka: FAIL [thrd:b/1]: b/1: Connect to ipv4#127.0.0.1:1 failed: Connection refused",
    ],
)
def test_other_warnings_stay_warnings(text: str) -> None:
    record = _record(text)
    assert RoutineAtDebug().filter(record)
    assert record.levelname == "WARNING"
