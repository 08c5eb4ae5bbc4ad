"""QueueConsumer / RedeliveryTracker argument checks and the CLI command, without a broker."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from ferrokafka import ConfigError, Consumer, KafkaTimeoutError
from ferrokafka.cli import build_parser
from ferrokafka.redelivery import QueueConsumer, RedeliveryTracker
from ferrokafka.scheduling import Scheduler

NOWHERE = {"bootstrap.servers": "127.0.0.1:1"}


@pytest.mark.parametrize(
    ("topics", "options", "error", "message"),
    [
        (("", "m"), {}, ValueError, "queue_topic must not be empty"),
        (("a b", "m"), {"backend": "share"}, ValueError, 'queue_topic "a b" is not a legal'),
        (("q", "m"), {"backend": "auto", "dead_letter_topic": "x/y"}, ValueError, '"x/y" is not'),
        (("q", "a\0b"), {}, ValueError, r'markers_topic "a\\0b" is not a legal topic name'),
        (("q", "q"), {}, ValueError, "must differ"),
        # Dead-lettered into a topic it reads, a poison message came back for ever.
        (("q", "m"), {"dead_letter_topic": "q"}, ValueError, '"q" is the queue topic, which'),
        (("q", "m"), {"dead_letter_topic": "m"}, ValueError, '"m" is the markers topic, which'),
        (("q", "m"), {"redelivery_timeout": 0.0}, ValueError, "redelivery_timeout"),
        (("q", "m"), {"marker_timeout": -1.0}, ValueError, "marker_timeout"),
        (("q", "m"), {"max_batch_size": 0}, ValueError, "max_batch_size"),
        (("q", "m"), {"backend": "kafka"}, ValueError, "backend must be"),
        (("q", "m"), {"backend": "share", "max_redeliveries": -1}, ValueError, "max_redel"),
        (("q", "m"), {"backend": "share", "redelivery_timeout": 0.0}, ValueError, "> 0"),
        (("q", "m"), {"backend": "auto", "redelivery_timeout": math.nan}, ValueError, "> 0"),
    ],
)
def test_queue_consumer_refuses_bad_arguments(
    topics: tuple[str, str], options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        QueueConsumer(NOWHERE, *topics, **options)


def test_queue_consumer_names_unknown_keys_and_times_out_without_a_broker() -> None:
    with pytest.raises(ConfigError, match=r"not\.a\.key"):
        QueueConsumer({**NOWHERE, "not.a.key": 1}, "q", "m")
    with pytest.raises(ValueError, match="dead_letter_topic"):
        QueueConsumer(NOWHERE, "q", "m", dead_letter_topic="")
    # No broker answers the markers topic's metadata: a fetch says so after marker_timeout.
    with (
        QueueConsumer(NOWHERE, "q", "m", marker_timeout=0.3) as queue,
        pytest.raises(KafkaTimeoutError, match="markers topic"),
    ):
        queue.poll(timeout=5.0)
    # No broker answers the share group's settings: "share" says so, "auto" falls back.
    with pytest.raises(ConfigError, match="share group"):
        QueueConsumer(NOWHERE, "q", "m", backend="share", marker_timeout=0.3)
    with QueueConsumer(NOWHERE, "q", "m", backend="auto", marker_timeout=0.3) as queue:
        assert queue.backend == "markers"


def test_queue_consumer_keeps_every_timeout_without_a_broker() -> None:
    # Nothing waits for the broker behind the caller's back (once: the markers topic's
    # metadata, with a 30 s timeout of its own, inside poll(timeout=3)).
    started = time.monotonic()
    queue = QueueConsumer(NOWHERE, "q", "m")
    assert time.monotonic() - started < 1.0
    polled = time.monotonic()
    assert queue.poll(timeout=3.0) is None
    assert 2.9 < time.monotonic() - polled < 4.0
    closing = time.monotonic()
    queue.close()
    assert time.monotonic() - closing < 4.0


class Stranger:
    """A message this queue never handed out."""

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 7


def test_ack_nack_keepalive_name_what_they_take() -> None:
    with QueueConsumer(NOWHERE, "q", "m", marker_timeout=0.3) as queue:
        for call in (queue.ack, queue.nack, queue.keepalive):
            with pytest.raises(TypeError, match=r"take the messages it handed out.*got str"):
                call("x")  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="offset 7 is not an open message"):
                call(Stranger())  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="not an open message"):
            queue.ack_many([Stranger()])  # type: ignore[list-item]
        assert queue.stats()["acked"] == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_offsets_per_commit": 0}, "num_offsets_per_commit"),
        ({"dead_letter_topic": ""}, "dead_letter_topic"),
        ({"commit_interval": 0.0}, "commit_interval"),
        ({"use_now_if_no_marker_seen": -1.0}, "use_now_if_no_marker_seen"),
        ({"max_backoff": float("nan")}, "max_backoff"),
        ({"produce_timeout": 0.0}, "produce_timeout"),
        # Dead-lettered into a topic it reads, a poison job was handed out for ever.
        ({"dead_letter_topic": "q"}, 'dead_letter_topic "q" is the queue topic, which'),
        ({"dead_letter_topic": "m"}, 'dead_letter_topic "m" is the markers topic, which'),
    ],
)
def test_tracker_refuses_bad_options_at_start(options: dict[str, Any], message: str) -> None:
    tracker = RedeliveryTracker(NOWHERE, "q", "m", **options)
    with pytest.raises(ValueError, match=message):
        tracker.start()


def test_tracker_refuses_one_topic_for_queue_and_markers_at_start() -> None:
    with pytest.raises(ValueError, match="queue_topic and markers_topic must differ"):
        RedeliveryTracker(NOWHERE, "q", "q").start()


def test_tracker_checks_counts_up_front_and_is_inert_until_started() -> None:
    with pytest.raises(ValueError, match="max_redeliveries"):
        RedeliveryTracker(NOWHERE, "q", "m", max_redeliveries=-1)
    tracker = RedeliveryTracker({**NOWHERE, "not.a.key": 1}, "q", "m")
    assert tracker.status() == []
    assert tracker.stop()
    with pytest.raises(ConfigError, match=r"not\.a\.key"):
        tracker.start()


def test_cli_redelivery_command() -> None:
    args = build_parser().parse_args(
        [
            "redelivery",
            "--queue-topic",
            "jobs",
            "--markers-topic",
            "jobs-markers",
            "--max-redeliveries",
            "5",
            "--dead-letter-topic",
            "jobs-dlq",
            "--config",
            "session.timeout.ms=6000",
        ]
    )
    assert (args.queue_topic, args.markers_topic) == ("jobs", "jobs-markers")
    assert (args.max_redeliveries, args.dead_letter_topic) == (5, "jobs-dlq")
    assert args.config == [("session.timeout.ms", "6000")]
    defaults = build_parser().parse_args(
        ["redelivery", "--queue-topic", "q", "--markers-topic", "m"]
    )
    assert (defaults.max_redeliveries, defaults.dead_letter_topic) == (3, None)


def test_an_empty_group_id_is_refused_by_name() -> None:
    config = {"bootstrap.servers": "127.0.0.1:1"}
    for start in (
        lambda: QueueConsumer(config, "jobs", "jobs-markers", group_id=""),
        lambda: RedeliveryTracker(config, "jobs", "jobs-markers", group_id="").start(),
        lambda: Scheduler(config, ["schedules"], group_id=""),
    ):
        with pytest.raises(ValueError, match="group_id must be a non-empty consumer group name"):
            start()
    for start in (
        lambda: QueueConsumer(config, "jobs", "jobs-markers", group_id="jobs\0"),
        lambda: RedeliveryTracker(config, "jobs", "jobs-markers", group_id="jobs\0").start(),
        lambda: Scheduler(config, ["schedules"], group_id="jobs\0"),
    ):
        with pytest.raises(ValueError, match=r'group_id "jobs\\0" contains a NUL byte'):
            start()


@pytest.mark.parametrize(
    ("start", "named"),
    [
        (lambda: QueueConsumer(NOWHERE, "^(", "jobs-markers"), r'queue_topic "\^\("'),
        (lambda: RedeliveryTracker(NOWHERE, "jobs", "^(").start(), r'markers_topic "\^\("'),
        (lambda: Scheduler(NOWHERE, ["s", "^("]), r'schedules topic "\^\("'),
    ],
    ids=["QueueConsumer", "RedeliveryTracker", "Scheduler"],
)
def test_a_daemon_topic_must_be_a_name_not_a_pattern(start: Any, named: str) -> None:
    # The daemons write to the topics they are given (redeliveries, END markers, tombstones):
    # a pattern, or any name Kafka would refuse, is a bad argument named at once.
    with pytest.raises(ValueError, match=f"{named} is not a legal topic name"):
        start()


def test_a_topic_pattern_librdkafka_refuses_is_a_value_error_naming_it() -> None:
    # A subscribed name starting with "^" is a regular expression to librdkafka, which refuses
    # an invalid one locally, before any broker is asked: a bad argument, not a Kafka error.
    consumer = Consumer(NOWHERE | {"group.id": "g"}, ["^("], lambda batch: None)
    with pytest.raises(ValueError, match=r'cannot subscribe to the topics \["\^\("\]'):
        consumer.start()


def test_header_names_are_the_contract_other_tools_read() -> None:
    # One spelling, the engines', for the markers and share backends and the Consumer's dead
    # letters; these strings are what dashboards and other languages' consumers match on.
    from ferrokafka import consumer, redelivery

    assert (
        redelivery.REDELIVERY_COUNT_HEADER,
        redelivery.ORIGINAL_TOPIC_HEADER,
        redelivery.ORIGINAL_PARTITION_HEADER,
        redelivery.ORIGINAL_OFFSET_HEADER,
    ) == (
        "ferrokafka_redelivery_count",
        "ferrokafka_original_topic",
        "ferrokafka_original_partition",
        "ferrokafka_original_offset",
    )
    assert consumer.DEAD_LETTER_HEADERS == (
        "ferrokafka_error_class",
        "ferrokafka_error_message",
        "ferrokafka_original_topic",
        "ferrokafka_original_partition",
        "ferrokafka_original_offset",
    )


def test_both_backends_write_one_dead_letter_header_layout() -> None:
    # The share backend's dead letters (written by confluent-kafka) carry the headers the
    # tracker writes, built by the tracker's own code; and both read the count the same way.
    from ferrokafka._native import queue_dead_letter_headers

    headers = queue_dead_letter_headers(
        [("trace", b"t1"), ("ferrokafka_redelivery_count", b"2"), ("empty", None)],
        queue_topic="jobs",
        partition=1,
        offset=7,
        count=3,
    )
    assert headers == [
        ("trace", b"t1"),
        ("empty", None),
        ("ferrokafka_redelivery_count", b"3"),
        ("ferrokafka_original_topic", b"jobs"),
        ("ferrokafka_original_partition", b"1"),
        ("ferrokafka_original_offset", b"7"),
    ]

    class Redelivered:
        def headers(self) -> list[tuple[str, bytes]]:
            return [("ferrokafka_redelivery_count", b"1"), ("ferrokafka_redelivery_count", b" 4")]

    from ferrokafka.redelivery import redelivery_count

    assert redelivery_count(Redelivered()) == 4  # type: ignore[arg-type]


def test_a_stopped_tracker_refuses_to_start_or_run_again() -> None:
    # start() after stop() returned the tracker without starting it, and run() returned at once.
    tracker = RedeliveryTracker(NOWHERE, "q", "m").start()
    assert tracker.stop(timeout=5.0)
    for again in (tracker.start, tracker.run):
        with pytest.raises(RuntimeError, match="this RedeliveryTracker was stopped"):
            again()
