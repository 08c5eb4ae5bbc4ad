"""The partition_key rule without a broker: the partitions it gives for ASCII, Polish,
Cyrillic, CJK and emoji keys, and what it refuses."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from ferrokafka import AsyncProducer, Client
from ferrokafka.arrow import partition_key_partitions
from ferrokafka.scheduling import Scheduler

NOWHERE = {"bootstrap.servers": "127.0.0.1:1"}
KEYS = ["customer-7", "zamówienie-3", "Zażółć gęślą jaźń", "заказ-42", "注文-12", "🎉-order"]


@pytest.mark.parametrize("partitions", [1, 2, 5, 12, 1000])
def test_keys_hash_as_many_leading_bytes_as_they_have_characters_unless_told_every_byte(
    partitions: int,
) -> None:
    # Computed independently: zlib's CRC32 over what karafka-rdkafka hands librdkafka.
    waterdrop = [zlib.crc32(key.encode()[: len(key)]) % partitions for key in KEYS]
    every_byte = [zlib.crc32(key.encode()) % partitions for key in KEYS]
    column = pa.array([*KEYS, None])
    assert partition_key_partitions(column, partitions).to_pylist() == [*waterdrop, None]
    hashed_whole = partition_key_partitions(column, partitions, partition_key_hashing="bytes")
    assert hashed_whole.to_pylist() == [*every_byte, None]
    as_bytes = pa.array([key.encode() for key in KEYS], pa.binary())
    assert partition_key_partitions(as_bytes, partitions).to_pylist() == waterdrop


def test_the_rules_differ_exactly_for_non_ascii_keys() -> None:
    waterdrop = partition_key_partitions(pa.array(KEYS), 1 << 30).to_pylist()
    every_byte = partition_key_partitions(pa.array(KEYS), 1 << 30, partition_key_hashing="bytes")
    assert [a != b for a, b in zip(waterdrop, every_byte.to_pylist(), strict=True)] == [
        not key.isascii() for key in KEYS
    ]


REFUSALS: list[Callable[[], Any]] = [
    lambda: Client(NOWHERE, partition_key_hashing="utf8"),  # type: ignore[arg-type]
    lambda: AsyncProducer(NOWHERE, partition_key_hashing="utf8"),  # type: ignore[arg-type]
    lambda: Scheduler(NOWHERE, ["s"], partition_key_hashing="utf8"),  # type: ignore[arg-type]
    lambda: partition_key_partitions(pa.array(["k"]), 3, partition_key_hashing="utf8"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("refused", REFUSALS, ids=["Client", "AsyncProducer", "Scheduler", "arrow"])
def test_an_unknown_hashing_is_refused_by_name(refused: Callable[[], Any]) -> None:
    with pytest.raises(ValueError, match=r'partition_key_hashing must be "waterdrop".*"utf8"'):
        refused()


@pytest.mark.parametrize("count", [0, -1, 2**31])
def test_a_partition_count_out_of_range_names_itself(count: int) -> None:
    # -1 was PyO3's OverflowError ("can't convert negative int to unsigned").
    with pytest.raises(
        ValueError, match=f"partition_count must be an int from 1 to 2147483647, got {count}"
    ):
        partition_key_partitions(pa.array(["k"]), count)


def test_an_empty_partition_key_is_refused_as_waterdrop_refuses_it() -> None:
    client = Client(NOWHERE)
    for empty in ("", b""):
        with pytest.raises(ValueError, match="partition_key must not be empty"):
            client.produce("t", b"v", partition_key=empty, timeout=1.0)
    producer = AsyncProducer(NOWHERE)
    try:
        with pytest.raises(ValueError, match="partition_key must not be empty"):
            producer.produce(b"v", "t", partition_key="")
        with pytest.raises(ValueError, match="partition_key must not be empty"):
            producer.produce_many([{"value": b"v", "partition_key": ""}], topic="t")
    finally:
        assert producer.shutdown(timeout=1.0) == []
