"""Scheduler argument checks and the proxy helpers, without a broker."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ferrokafka import ConfigError, ScheduleError
from ferrokafka.scheduling import Scheduler, cancel, schedule

NOWHERE = {"bootstrap.servers": "127.0.0.1:1"}


def test_schedules_topics_must_be_a_list() -> None:
    with pytest.raises(TypeError, match="list of topic names"):
        Scheduler(NOWHERE, "schedules")


@pytest.mark.parametrize(
    ("topics", "options", "message"),
    [
        ([], {}, "at least one schedules topic is required"),
        ([""], {}, "schedules topic must not be empty"),
        (["s"], {"flush_batch_size": 1}, "flush_batch_size must be >= 2"),
        (["s"], {"state_interval": 0.0}, "state_interval"),
        (["s"], {"horizon": -1.0}, "horizon"),
        (["s"], {"dead_letter_topic": ""}, "dead_letter_topic must not be empty"),
        (["s"], {"dead_letter_topic": "bad topic!"}, "not a legal topic name"),
        (["s"], {"instance_id": ""}, "instance_id must not be empty"),
        # Written to a topic it reads: read back and written again, for ever.
        (["s"], {"dead_letter_topic": "s"}, 'dead_letter_topic "s" is a schedules topic, which'),
        (["s"], {"states_postfix": ""}, "states_postfix must not be empty"),
        (["s", "s_states"], {}, 'a states topic "s_states" is a schedules topic, which'),
    ],
)
def test_bad_options_are_named(topics: list[str], options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Scheduler(NOWHERE, topics, **options)


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


@pytest.mark.parametrize(
    ("message", "envelope", "problem"),
    [
        ({"topic": "bad topic!"}, {"topic": "schedules"}, "not a legal topic name"),
        ({"topic": "orders", "partition": -2}, {"topic": "schedules"}, "must be >= -1"),
        ({"topic": "orders", "key": ""}, {"topic": "schedules"}, "target key must not be empty"),
        ({"topic": "orders", "partition_key": ""}, {"topic": "schedules"}, "partition_key"),
        ({"topic": "orders"}, {"topic": "sched/ules"}, "not a legal topic name"),
        ({"topic": "orders"}, {"topic": "schedules", "partition": -3}, "must be >= -1"),
        ({"topic": "orders"}, {"topic": "schedules", "partition_key": ""}, "partition_key"),
    ],
)
def test_waterdrop_message_rules(
    message: dict[str, Any], envelope: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ScheduleError, match=problem):
        schedule({**message, "payload": b"x"}, int(time.time()) + 60, envelope)  # type: ignore[typeddict-item,arg-type]


def test_payloads_over_waterdrops_max_payload_size_are_refused_naming_it() -> None:
    epoch = int(time.time()) + 60
    envelope: Any = {"topic": "schedules"}

    def message(size: int) -> Any:
        return {"topic": "orders", "payload": b"x" * size}

    assert schedule(message(1_000_012), epoch, envelope).value == b"x" * 1_000_012
    with pytest.raises(ScheduleError, match=r"max_payload_size\) exceeds the limit of 1000012"):
        schedule(message(1_000_013), epoch, envelope)
    bigger = schedule(message(2_000_000), epoch, envelope, max_payload_size=2_000_000)
    assert len(bigger.value or b"") == 2_000_000
    with pytest.raises(ScheduleError, match=r"limit of 10$"):
        schedule(message(11), epoch, envelope, max_payload_size=10)
    assert schedule({"topic": "orders"}, epoch, envelope, max_payload_size=0).value is None


def test_cancel_applies_the_envelope_rules() -> None:
    with pytest.raises(ScheduleError, match="not a legal topic name"):
        cancel("k", {"topic": "bad topic"})


def test_integral_float_epochs_are_accepted_fractions_refused() -> None:
    epoch = int(time.time()) + 60
    proxy = schedule({"topic": "orders", "payload": b"x"}, float(epoch), {"topic": "schedules"})
    assert dict(proxy.headers)["schedule_target_epoch"] == str(epoch).encode()
    with pytest.raises(ScheduleError, match="whole Unix seconds"):
        schedule({"topic": "orders", "payload": b"x"}, epoch + 0.5, {"topic": "schedules"})


@pytest.mark.parametrize(
    ("target", "partition_key"),
    [
        ({"key": "user-7", "partition_key": "customer-1", "partition": 4}, "4"),
        ({"key": "user-7", "partition_key": "customer-1"}, "customer-1"),
        ({"key": "user-7"}, "user-7"),
        ({}, None),
    ],
)
def test_defaulted_proxy_key_gets_karafkas_partition_key(
    target: dict[str, Any], partition_key: str | None
) -> None:
    message = {"topic": "orders", "payload": b"x", **target}
    proxy = schedule(message, int(time.time()) + 60, {"topic": "schedules"})  # type: ignore[arg-type]
    assert proxy.partition_key == partition_key
    keyed = schedule(message, int(time.time()) + 60, {"topic": "schedules", "key": "k"})  # type: ignore[arg-type]
    assert keyed.partition_key is None, "an explicit proxy key is left alone"


def test_schema_versions_compare_as_karafka_does() -> None:
    from ferrokafka._native import parse_proxy_headers

    headers = dict(
        schedule(
            {"topic": "orders", "payload": b"x"}, int(time.time()) + 60, {"topic": "s"}
        ).headers
    )
    for accepted in ("1.0", "1", "1.0.0"):
        assert (
            parse_proxy_headers({**headers, "schedule_schema_version": accepted}).kind == "schedule"
        )
    with pytest.raises(Exception, match="schema"):
        parse_proxy_headers({**headers, "schedule_schema_version": "1.0.1"})


def test_cli_passes_instance_dead_letter_and_hashing_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
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
    assert seen["partition_key_hashing"] == "waterdrop"
    cli.main([*argv, "--partition-key-hashing", "bytes"])
    assert seen["partition_key_hashing"] == "bytes"


def test_a_stopped_scheduler_refuses_to_run_again() -> None:
    # run() after stop() returned at once: a `while True: scheduler.run()` loop spun.
    scheduler = Scheduler(NOWHERE, ["s"])
    assert scheduler.stop(timeout=5.0)
    with pytest.raises(RuntimeError, match="this Scheduler was stopped"):
        scheduler.run()
