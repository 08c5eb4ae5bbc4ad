"""AsyncProducer argument checks, without a broker."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from ferrokafka import AsyncProducer, BufferOverflow, ConfigError, FerrokafkaError
from tests.unit.forked import outcome_in_child

NOWHERE = {"bootstrap.servers": "127.0.0.1:1"}


@pytest.fixture
def producer() -> AsyncProducer:
    return AsyncProducer(NOWHERE)


def test_unknown_config_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"no\.such\.key"):
        AsyncProducer({**NOWHERE, "no.such.key": 1})


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"max_queue_size": 0}, ValueError, "max_queue_size"),
        ({"max_queue_bytes": -1}, ValueError, "max_queue_bytes"),
        ({"overflow": "sometimes"}, ValueError, "overflow must be"),
        ({"delivery_threshold": 2000}, ValueError, "cannot exceed max_queue_size"),
        ({"delivery_interval": -1.0}, ValueError, "delivery_interval"),
        ({"max_retries": -2}, ValueError, "max_retries"),
        ({"block_timeout": 0.0}, ValueError, "block_timeout"),
        ({"max_queue_size": True}, TypeError, "max_queue_size must be an int, got bool"),
        (
            {"max_retries": 2**63},
            ValueError,
            "max_retries must be an int from -9223372036854775808 to 9223372036854775807",
        ),
        (
            {"delivery_threshold": -1},
            ValueError,
            "delivery_threshold must be an int from 0 to 9223372036854775807, got -1",
        ),
        ({"retry_backoff": "1s"}, TypeError, "retry_backoff must be a number of seconds"),
    ],
)
def test_bad_options_are_named(
    options: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        AsyncProducer(NOWHERE, **options)  # type: ignore[arg-type]


def test_bad_arguments_raise_before_anything_is_queued(producer: AsyncProducer) -> None:
    with pytest.raises(TypeError, match="topic must be a str"):
        producer.produce(b"v", topic=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="topic must not be empty"):
        producer.produce(b"v", topic="")
    with pytest.raises(ValueError, match=r'topic "a\\0b" is not a legal topic name'):
        producer.produce_many([b"v"], topic="a\0b")
    with pytest.raises(TypeError, match="value must be bytes, str or None"):
        producer.produce(3.5, topic="t")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key must be bytes"):
        producer.produce(b"v", topic="t", key=7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="headers must be a dict or a list"):
        producer.produce(b"v", topic="t", headers=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="contains a NUL byte"):
        producer.produce(b"v", topic="t", headers={"trace\0id": b"x"})
    with pytest.raises(TypeError, match="each record must be"):
        producer.produce_many([b"ok", 5], topic="t")  # type: ignore[list-item]
    with pytest.raises(ValueError, match="need topic="):
        producer.produce_many([b"no topic"])
    # A misspelled field would have sent a tombstone (no value) or dropped the headers.
    for misspelt, shown in (
        ({"key": b"user-7", "vaule": b"x"}, "'vaule'"),
        ({"header": {}}, "'header'"),
        ({1: 2}, "1"),
    ):
        with pytest.raises(TypeError, match=f"a dict record has unknown field\\(s\\) {shown};"):
            producer.produce_many([{"value": b"ok"}, misspelt], topic="t")  # type: ignore[list-item]
    # A callback that cannot be called is refused now, not logged on the event thread later.
    with pytest.raises(TypeError, match="on_delivery must be callable, got int"):
        producer.produce(b"v", topic="t", on_delivery=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_delivery must be callable, got str"):
        producer.produce_many([b"v"], topic="t", on_delivery="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callback must be callable, got int"):
        producer.subscribe(1)  # type: ignore[arg-type]
    assert producer.stats()["enqueued"] == 0
    producer.shutdown(timeout=2.0)


def test_str_values_and_keys_are_utf8(producer: AsyncProducer) -> None:
    producer.produce("ünïcode", topic="t", key="ключ")
    assert producer.stats()["queue_bytes"] == len("ünïcode".encode()) + len("ключ".encode())
    undelivered = producer.shutdown(timeout=1.0)
    assert [(m.value(), m.key()) for m in undelivered] in (
        [],
        [("ünïcode".encode(), "ключ".encode())],
    )


def test_shutdown_hands_back_undelivered_messages() -> None:
    producer = AsyncProducer({**NOWHERE, "message.timeout.ms": 60_000})
    producer.produce_many([b"a", b"b"], topic="t")
    undelivered = producer.shutdown(timeout=0.5)
    assert sorted(m.value() or b"" for m in undelivered) == [b"a", b"b"]
    assert all(isinstance(m.error(), FerrokafkaError) for m in undelivered)
    assert producer.shutdown() == []


def test_producer_refuses_use_after_fork(producer: AsyncProducer) -> None:
    reported = outcome_in_child(lambda: producer.produce(b"v", topic="t"))
    assert "cannot be used after fork" in reported
    producer.shutdown(timeout=1.0)


def test_stats_keep_their_keys_and_agree_with_the_typed_snapshot(producer: AsyncProducer) -> None:
    producer.produce_many([b"a", b"b", b"c"], topic="nowhere")
    stats = producer.stats()
    assert set(stats) == {
        "enqueued",
        "delivered",
        "failed",
        "retried",
        "dropped",
        "overflowed",
        "deliveries",
        "queue_size",
        "queue_bytes",
        "in_flight",
        "retry_queue_size",
    }
    typed = producer._raw.stats()
    assert {name: getattr(typed, name) for name in stats} == typed.as_dict()
    assert stats["enqueued"] == 3
    # Nothing can be delivered here: all three are still held somewhere, and counted once.
    assert stats["queue_size"] + stats["retry_queue_size"] + stats["in_flight"] == 3
    producer.shutdown(timeout=0.1)


def test_an_overflowing_batch_says_how_many_of_its_records_were_queued() -> None:
    # No delivery trigger: the batch stays in the buffer, whose limit refuses its fourth record.
    producer = AsyncProducer(NOWHERE, max_queue_size=3)
    with pytest.raises(BufferOverflow) as refused:
        producer.produce_many([b"a", b"b", b"c", b"d", b"e"], topic="orders")
    assert refused.value.accepted == 3
    assert str(refused.value) == (
        'cannot produce to "orders": max queue size (3 messages) reached; the batch\'s first '
        "3 record(s) were queued, the 2 from index 3 on were not"
    )
    copy = pickle.loads(pickle.dumps(refused.value))
    assert (copy.accepted, copy.topic, str(copy)) == (3, "orders", str(refused.value))
    with pytest.raises(BufferOverflow) as single:
        producer.produce(b"f", topic="orders")
    assert single.value.accepted is None
    assert str(single.value) == 'cannot produce to "orders": max queue size (3 messages) reached'
    assert sorted(m.value() or b"" for m in producer.shutdown(timeout=0.5)) == [b"a", b"b", b"c"]


def test_produce_takes_every_documented_argument_by_name_and_returns_none(
    producer: AsyncProducer,
) -> None:
    # Without subscribers `produce` is the binding's own method: the same names, the same result.
    queued = producer.produce(  # type: ignore[func-returns-value]
        value=b"v",
        topic="t",
        key=b"k",
        partition=0,
        partition_key=None,
        headers={"h": b"12"},
        timestamp=5,
        on_delivery=None,
    )
    assert queued is None
    producer.produce(b"w", "t", b"kk", None, b"pk", [("h", None)], None, None)
    # Keys, values, header names and values, and the partition key are what the queue holds.
    held = b"v" + b"k" + b"h" + b"12" + b"w" + b"kk" + b"pk" + b"h"
    assert producer.stats()["queue_bytes"] == len(held)
    producer.shutdown(timeout=0.5)


def test_a_producer_used_before_subscribing_publishes_its_events_after() -> None:
    producer = AsyncProducer(NOWHERE, max_queue_size=2)
    producer.produce(b"before", topic="t")
    events: list[tuple[str, dict[str, object]]] = []
    producer.subscribe(lambda name, payload: events.append((name, payload)))
    producer.produce(b"after", topic="t")
    with pytest.raises(BufferOverflow):
        producer.produce(b"refused", topic="t")
    assert events == [
        ("enqueue_message", {"topic": "t", "queue_size": 2, "max_queue_size": 2}),
        ("buffer_overflow", {"topic": "t", "limit": "max queue size (2 messages) reached"}),
    ]
    producer.shutdown(timeout=0.5)


def test_a_subclass_that_overrides_produce_has_its_override_called() -> None:
    # `__init__` puts the binding's `produce` on the instance for speed; never over an override.
    class Counting(AsyncProducer):
        calls = 0

        def produce(self, *args: Any, **kwargs: Any) -> None:
            type(self).calls += 1
            super().produce(*args, **kwargs)

    producer = Counting(NOWHERE)
    producer.produce(b"counted", topic="t")
    assert Counting.calls == 1
    producer.shutdown(timeout=0.5)
