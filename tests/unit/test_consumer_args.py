"""Consumer and AsyncConsumer argument checks, without a broker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ferrokafka import (
    AsyncConsumer,
    Batch,
    ConfigError,
    Consumer,
    ConsumerOptions,
    KafkaTimeoutError,
    TopicPartition,
)

NOWHERE: dict[str, str | int | float | bool] = {
    "bootstrap.servers": "127.0.0.1:1",
    "group.id": "args",
}


def noop(batch: Batch) -> None:
    del batch


async def async_noop(batch: Batch) -> None:
    del batch


def test_unknown_config_key_is_named_on_start() -> None:
    consumer = Consumer({**NOWHERE, "no.such.key": 1}, ["orders"], noop)
    with pytest.raises(ConfigError, match=r"no\.such\.key"):
        consumer.start()


def test_auto_commit_is_refused_because_the_consumer_commits() -> None:
    consumer = Consumer({**NOWHERE, "enable.auto.commit": True}, ["orders"], noop)
    with pytest.raises(ConfigError, match=r"enable\.auto\.commit"):
        consumer.start()


@pytest.mark.parametrize(("subscription", "reset"), [("orders", "error"), (("orders", 0), "ERROR")])
def test_without_a_group_auto_offset_reset_error_is_refused_where_nothing_says_where_to_start(
    subscription: str | tuple[str, int], reset: str
) -> None:
    # It would look for committed offsets it never has, log once and hand out nothing, for ever.
    # librdkafka reads the value without regard to case, so the check does too.
    config = {"bootstrap.servers": "127.0.0.1:1", "auto.offset.reset": reset}
    consumer = Consumer(config, [subscription], noop)
    with pytest.raises(
        ConfigError, match=rf'auto\.offset\.reset="{reset}" leaves a consumer without group\.id'
    ):
        consumer.start()


def test_topics_and_partitions_cannot_be_mixed() -> None:
    consumer = Consumer(NOWHERE, ["orders", ("payments", 0)], noop)
    with pytest.raises(ValueError, match="cannot mix"):
        consumer.start()


def test_a_dead_letter_topic_it_reads_is_refused_on_start() -> None:
    # A poison record dead-lettered into a subscribed topic was handled again for ever.
    consumer = Consumer(
        NOWHERE, ["orders", "audit"], noop, on_error="dead_letter", dead_letter_topic="audit"
    )
    with pytest.raises(ValueError, match='dead_letter_topic "audit" is a subscribed topic, which'):
        consumer.start()


def test_an_empty_dead_letter_topic_is_refused() -> None:
    # Under "retry" the failed batch would be written to "" for ever and never committed.
    with (
        pytest.raises(ValueError, match="dead_letter_topic must name a topic"),
        Consumer(NOWHERE, ["orders"], noop, on_error="retry", dead_letter_topic=""),
    ):
        pass


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"max_batch_size": 0}, ValueError, "max_batch_size"),
        ({"drain": -1.0}, ValueError, "drain"),
        ({"commit_interval": 0.0}, ValueError, "commit_interval"),
        ({"commit_interval": float("nan")}, ValueError, "commit_interval"),
        ({"on_error": "ignore"}, ValueError, "on_error must be"),
        ({"on_error": "dead_letter"}, ValueError, "dead_letter_topic"),
        ({"max_queue_records": 1}, ValueError, "at least 2"),
        ({"max_queue_bytes": 0}, ValueError, "max_queue_bytes"),
        ({"retry_backoff": "1s"}, TypeError, "retry_backoff"),
        (
            {"max_retries": -1},
            ValueError,
            "max_retries must be an int from 0 to 4294967295, got -1",
        ),
        ({"ordering": "offset"}, ValueError, "ordering must be"),
        ({"max_concurrency": 0}, ValueError, "max_concurrency"),
        ({"on_assigned": 1}, TypeError, "on_assigned must be callable, got int"),
        ({"on_unassigned": "x"}, TypeError, "on_unassigned must be callable, got str"),
        ({"on_caught_up": 2.5}, TypeError, "on_caught_up must be callable, got float"),
    ],
)
def test_bad_options_are_named(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Consumer(NOWHERE, ["orders"], noop, **options)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"max_retries": 2**32},
            ValueError,
            "max_retries must be an int from 0 to 4294967295, got 4294967296",
        ),
        (
            {"max_queue_bytes": 2**64},
            ValueError,
            "max_queue_bytes must be an int from 0 to 9223372036854775807, got 1844674407370955",
        ),
        ({"max_concurrency": True}, TypeError, "max_concurrency must be an int, got bool"),
        ({"max_batch_size": 2.5}, TypeError, "max_batch_size must be an int, got float"),
    ],
)
def test_options_the_engine_cannot_hold_are_refused_when_created(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    # Checked by the engine's own conversion when the options are created, not when the
    # consumer starts (where such a value used to fail as an OverflowError, or pass as 1).
    with pytest.raises(error, match=message):
        ConsumerOptions(**options)


@pytest.mark.parametrize(
    ("subscriptions", "error", "message"),
    [
        ([], ValueError, "at least one"),
        ("orders", TypeError, "not a single str"),
        ([""], ValueError, "must not be empty"),
        ([5], TypeError, "each subscription must be"),
        ([("orders", "0")], TypeError, "partition must be an int"),
        ([("orders", 0, -1)], ValueError, "offset must be an int from 0 to"),
        (
            [TopicPartition("orders", 0, offset=10**30)],
            ValueError,
            r"offset must be an int from 0 to 9223372036854775807 \(Kafka offsets are 64-bit\), "
            r"got 10{30}",
        ),
        (
            [TopicPartition("orders", 0, timestamp=2**63)],
            ValueError,
            "timestamp must be an int from 0 to 9223372036854775807",
        ),
        ([("orders", 2**31)], ValueError, "partition must be an int from 0 to 2147483647"),
        (
            [TopicPartition("orders", 0, offset="middle")],  # type: ignore[arg-type]
            TypeError,
            "'beginning' or 'end'",
        ),
        ([TopicPartition("orders", 0, offset=1, timestamp=2)], ValueError, "not both"),
    ],
)
def test_bad_subscriptions_are_named(
    subscriptions: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Consumer(NOWHERE, subscriptions, noop)


@pytest.mark.parametrize(("topic", "shown"), [("orders now", '"orders now"'), ("a\0b", '"a\\0b"')])
def test_a_subscribed_name_kafka_would_refuse_is_named_at_start(topic: str, shown: str) -> None:
    consumer = Consumer(NOWHERE, [topic], noop)
    with pytest.raises(ValueError, match="is not a legal topic name") as refused:
        consumer.start()
    assert f"subscription topic {shown} is not a legal topic name" in str(refused.value)


def test_options_are_one_type_and_keywords_override_them() -> None:
    options = ConsumerOptions(max_batch_size=10, commit_interval=2)
    consumer = Consumer(NOWHERE, ["orders"], noop, options, max_batch_size=20)
    assert consumer._core.options == ConsumerOptions(max_batch_size=20, commit_interval=2.0)
    assert options.max_batch_size == 10
    with pytest.raises(TypeError, match="max_batch"):
        Consumer(NOWHERE, ["orders"], noop, max_batch=5)
    with pytest.raises(TypeError, match="ConsumerOptions"):
        AsyncConsumer(NOWHERE, ["orders"], async_noop, {"drain": 1.0})  # type: ignore[arg-type]


def test_negative_partition_is_refused_on_start() -> None:
    consumer = Consumer(NOWHERE, [("orders", -1)], noop)
    with pytest.raises(ValueError, match="partition must be >= 0"):
        consumer.start()


def test_handler_kind_must_match_the_consumer() -> None:
    with pytest.raises(TypeError, match="AsyncConsumer"):
        Consumer(NOWHERE, ["orders"], async_noop)
    with pytest.raises(TypeError, match="coroutine function"):
        AsyncConsumer(NOWHERE, ["orders"], noop)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        Consumer(NOWHERE, ["orders"], "handler")  # type: ignore[arg-type]

    class AsyncHandler:
        async def __call__(self, batch: Batch) -> None:
            del batch

    # An object whose __call__ is a coroutine function is one, as its type hint says.
    AsyncConsumer(NOWHERE, ["orders"], AsyncHandler())
    with pytest.raises(TypeError, match="AsyncConsumer"):
        Consumer(NOWHERE, ["orders"], AsyncHandler())
    for consumer in (
        Consumer(NOWHERE, ["orders"], noop),
        AsyncConsumer(NOWHERE, ["orders"], async_noop),
    ):
        with pytest.raises(TypeError, match="callback must be callable, got int"):
            consumer.subscribe(1)  # type: ignore[arg-type]


def test_stop_before_start_and_twice_are_no_ops() -> None:
    consumer = Consumer(NOWHERE, ["orders"], noop)
    consumer.stop()
    assert consumer.stats() == {"partitions": []}
    with consumer:
        assert consumer.stats()["partitions"] == []
    consumer.stop()


def test_async_consumer_starts_and_stops_without_a_broker() -> None:
    async def main() -> dict[str, Any]:
        async with AsyncConsumer(NOWHERE, ["orders"], async_noop, drain=0.0) as consumer:
            pass
        return consumer.stats()

    assert asyncio.run(main())["handled"] == 0


def test_a_consumer_without_a_group_times_out_when_no_broker_answers() -> None:
    # Without group.id a topic name stands for its partitions, which need a broker to learn:
    # librdkafka ends the lookup nobody answered as a transport failure, a timeout for us.
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1"}, ["orders"], noop)
    no_answer = r"no answer from bootstrap\.servers=127\.0\.0\.1:1"
    with pytest.raises(KafkaTimeoutError, match=no_answer):
        consumer.start()
