"""Scheduler argument checks and the proxy helpers, without a broker."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ferrokafka import ConfigError, ScheduleError
from ferrokafka.scheduling import Scheduler, cancel, schedule, send_proxy

NOWHERE = {"bootstrap.servers": "127.0.0.1:1"}


def test_schedules_topics_must_be_a_list() -> None:
    with pytest.raises(TypeError, match="list of topic names"):
        Scheduler(NOWHERE, "schedules")


@pytest.mark.parametrize(
    ("topics", "options", "message"),
    [
        ([], {}, "at least one non-empty schedules topic"),
        ([""], {}, "at least one non-empty schedules topic"),
        (["s"], {"flush_batch_size": 1}, "flush_batch_size must be >= 2"),
        (["s"], {"state_interval": 0.0}, "state_interval"),
        (["s"], {"horizon": -1.0}, "horizon"),
        (["s"], {"dead_letter_topic": ""}, "dead_letter_topic must not be empty"),
        (["s"], {"instance_id": ""}, "instance_id must not be empty"),
    ],
)
def test_bad_options_are_named(topics: list[str], options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Scheduler(NOWHERE, topics, **options)  # type: ignore[arg-type]


def test_unknown_config_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"not\.a\.key"):
        Scheduler({**NOWHERE, "not.a.key": "1"}, ["schedules"])


def test_schedule_refuses_millisecond_epochs_and_the_past() -> None:
    message: dict[str, Any] = {"topic": "orders", "payload": b"x"}
    with pytest.raises(ScheduleError, match="milliseconds"):
        schedule(message, int(time.time() * 1000), {"topic": "schedules"})  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match="in the past"):
        schedule(message, int(time.time()) - 60, {"topic": "schedules"})  # type: ignore[arg-type]


def test_cancel_needs_a_key() -> None:
    with pytest.raises(ScheduleError, match="key"):
        cancel("", {"topic": "schedules"})


def test_partition_key_envelope_needs_a_partitioning_sender() -> None:
    from ferrokafka import Client

    proxy = schedule(
        {"topic": "orders", "payload": b"x"},
        int(time.time()) + 60,
        {"topic": "schedules", "partition_key": "customer-1"},
    )
    with pytest.raises(ValueError, match="partition_key needs an AsyncProducer"):
        send_proxy(Client(NOWHERE), proxy)


def test_cli_passes_instance_and_dead_letter_options(monkeypatch: pytest.MonkeyPatch) -> None:
    from ferrokafka import cli

    seen: dict[str, Any] = {}

    class Recorder:
        def __init__(self, config: dict[str, Any], topics: list[str], **options: Any) -> None:
            seen.update(options, config=config, topics=topics)

    monkeypatch.setattr("ferrokafka.scheduling.Scheduler", Recorder)
    monkeypatch.setattr(cli, "_run_until_signalled", lambda start: start() and 0)
    argv = ["scheduler", "--schedules-topic", "s", "--instance-id", "sched-1"]
    cli.main([*argv, "--dead-letter-topic", "refused"])
    assert (seen["instance_id"], seen["dead_letter_topic"]) == ("sched-1", "refused")
