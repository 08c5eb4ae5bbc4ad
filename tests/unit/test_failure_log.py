"""A user callback that keeps failing is logged once, then at most every QUIET_SECONDS with a
count of the failures in between."""

from __future__ import annotations

import logging

import pytest

from ferrokafka import _failure_log
from ferrokafka._instrumentation import publish


def test_repeated_failures_are_counted_between_logged_ones(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(_failure_log, "_clock", lambda: now[0])
    monkeypatch.setattr(_failure_log, "_last", {})
    log = logging.getLogger("ferrokafka.test-failures")

    def bad_subscriber(name: str, payload: dict[str, object]) -> None:
        raise RuntimeError(f"subscriber bug on {name}")

    with caplog.at_level(logging.ERROR, logger=log.name):
        for _ in range(500):
            publish([bad_subscriber], "delivered", {}, log)
        publish([bad_subscriber], "failed", {}, log)  # another kind: logged on its own
        now[0] += _failure_log.QUIET_SECONDS
        publish([bad_subscriber], "delivered", {}, log)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "instrumentation subscriber failed on delivered",
        "instrumentation subscriber failed on failed",
        "instrumentation subscriber failed on delivered (499 more failure(s) in the last 10 s "
        "were counted, not logged)",
    ]
    assert all(r.exc_info and "subscriber bug" in str(r.exc_info[1]) for r in caplog.records)
