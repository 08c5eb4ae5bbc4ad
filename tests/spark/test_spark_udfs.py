"""ferrokafka.spark UDFs on a real local[2] SparkSession, checked row by row against Python's
zlib and json on 10,000 rows with empty, null, unicode and corrupt values."""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from ferrokafka import codecs
from ferrokafka import spark as fks
from tests.reports import flat_partitions, process_report

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

ROWS = 10_000


def text_of(n: int) -> str | None:
    if n % 17 == 0:
        return None
    if n % 5 == 0:
        return ""
    if n % 3 == 0:
        return f"unicode ✓ ü 日本 {n} " * (n % 9)
    return json.dumps({"id": n, "name": f"row-{n}", "tags": ["a"] * (n % 4)})


def packed_of(n: int, text: str | None) -> bytes | None:
    if n % 19 == 0:
        return b"\x78\x9c not zlib " + str(n).encode()
    if n % 23 == 0:
        return zlib.compress(b"x" * 10)[:-3]  # truncated
    return None if text is None else zlib.compress(text.encode())


def reference_inflate(packed: bytes | None) -> tuple[bytes | None, bool]:
    """(value, failed) as Python's zlib sees the row."""
    if packed is None:
        return None, False
    try:
        return zlib.decompress(packed), False
    except zlib.error:
        return None, True


@pytest.fixture
def small_batches(spark: SparkSession) -> Iterator[None]:
    """Arrow batches of 1,000 rows, so every partition is several UDF calls."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    previous = spark.conf.get(key) or "10000"
    spark.conf.set(key, "1000")
    yield
    spark.conf.set(key, previous)


def test_zlib_udfs_equal_python_zlib_on_10k_rows(spark: SparkSession, small_batches: None) -> None:
    rows = []
    for n in range(ROWS):
        text = text_of(n)
        rows.append((n, text, packed_of(n, text)))
    frame = spark.createDataFrame(rows, "id long, text string, packed binary").repartition(3)
    result = frame.select(
        "id",
        "packed",
        fks.inflate("packed").alias("inflated"),
        fks.inflate("packed", errors="struct").alias("checked"),
        fks.deflate("text").alias("deflated"),
        fks.inflate(fks.deflate("text", level=1)).cast("string").alias("round_trip"),
    ).collect()
    assert len(result) == ROWS
    failures = 0
    for row in result:
        expected, failed = reference_inflate(row.packed)
        failures += failed
        assert (bytes(row.inflated) if row.inflated is not None else None) == expected, row.id
        assert (row.checked.error is not None) == failed, row.id
        text = text_of(row.id)
        if text is None:
            assert row.deflated is None
        else:
            assert zlib.decompress(bytes(row.deflated)) == text.encode()
        assert row.round_trip == text
    assert failures > 500  # the corrupt rows really were exercised


def test_zlib_udf_can_raise_instead(spark: SparkSession) -> None:
    frame = spark.createDataFrame([(zlib.compress(b"ok"),), (b"junk",)], "packed binary")
    # The row number counts within the Arrow batch the task was handling.
    with pytest.raises(Exception, match=r"CodecError: row \d+: corrupt zlib stream"):
        frame.select(fks.inflate("packed", errors="raise")).coalesce(1).collect()


def test_decode_udfs_equal_json_reference_on_10k_rows(
    spark: SparkSession, small_batches: None
) -> None:
    blobs: list[tuple[int, bytes | None]] = []
    for n in range(ROWS):
        if n % 29 == 0:
            blob: bytes | None = None
        elif n % 31 == 0:
            blob = zlib.compress(b'{"schema_version": "9.0.0"}')
        elif n % 37 == 0:
            blob = b"corrupt"
        else:
            lags = {("group-ü", f"topic-{n % 3}", p): (n * 7 + p) % 1000 for p in range(n % 4)}
            report = process_report(f"host-{n}:{n}:r", lags, float(n), tags=[f"t{n}", "✓"])
            blob = codecs.encode_process_report(report)
        blobs.append((n, blob))
    frame = spark.createDataFrame(blobs, "id long, value binary")
    decoded = frame.select("id", "value", fks.decode_report("value").alias("r")).collect()
    assert len(decoded) == ROWS
    for row in decoded:
        if row.value is None:
            assert row.r is None
            continue
        try:
            reference = json.loads(zlib.decompress(bytes(row.value)))
            valid = reference.get("schema_version") == "1.7.0"
        except zlib.error:
            valid = False
        if not valid:
            assert row.r.error is not None, row.id
            assert row.r.process is None, row.id
            continue
        assert row.r.error is None
        assert row.r.process.id == reference["process"]["id"]
        assert row.r.process.tags == reference["process"]["tags"]
        assert row.r.dispatched_at == reference["dispatched_at"]
        partitions = flat_partitions(reference)
        assert row.r.stats.lag == sum(p["lag_stored"] for p in partitions)
        assert [p.asDict() for p in row.r.partitions] == partitions


def test_state_and_marker_udfs(spark: SparkSession) -> None:
    state = {
        "schema_version": "1.0.0",
        "dispatched_at": 1.5,
        "state": "loaded",
        "offsets": {"low": 0, "high": 9},
        "daily": {"2030-01-02": 3, "2030-01-03": 1},
        "started_at": 1,
        "reloads": 2,
        "failed": 4,
    }
    marker = codecs.Marker.start(1, 42, 99, key=b"k", value=b"v", headers=[("h", None)])
    frame = spark.createDataFrame(
        [
            (codecs.encode_state_report(state), codecs.encode_marker(marker)),
            (None, codecs.encode_marker(codecs.Marker.keepalive(0, 1, 5))),
            (b"junk", b"junk"),
        ],
        "state binary, marker binary",
    )
    rows = frame.select(
        fks.decode_state("state").alias("s"), fks.decode_marker("marker").alias("m")
    ).collect()
    first = rows[0]
    s = first.s
    assert (s.state, s.offsets.high, s.reloads, s.dispatched, s.failed) == ("loaded", 9, 2, 0, 4)
    assert [(d.day, d["count"]) for d in first.s.daily] == [("2030-01-02", 3), ("2030-01-03", 1)]
    assert (first.m.kind, first.m.partition, first.m.offset, first.m.deadline) == (
        "start",
        1,
        42,
        99,
    )
    assert (bytes(first.m.key), first.m.headers[0].key, first.m.headers[0].value) == (
        b"k",
        "h",
        None,
    )
    assert rows[1].s is None
    assert rows[1].m.kind == "keepalive"
    assert rows[2].s.error is not None
    assert rows[2].m.error is not None


def test_schedule_headers_udf_builds_karafka_headers(spark: SparkSession) -> None:
    epoch = int(time.time()) + 120
    frame = spark.createDataFrame(
        [("orders", epoch, "user-1", 2), ("orders", epoch + 1, None, None)],
        "topic string, epoch long, key string, partition int",
    )
    rows = frame.select(
        fks.schedule_headers("topic", "epoch", key="key", partition="partition").alias("h")
    ).collect()
    expected = codecs.schedule_proxy(
        {"topic": "orders", "key": "user-1", "partition": 2}, epoch, {"topic": "s"}
    ).headers
    assert [(h.key, bytes(h.value)) for h in rows[0].h] == expected
    second = dict((h.key, bytes(h.value)) for h in rows[1].h)
    assert second["schedule_target_epoch"] == str(epoch + 1).encode()
    assert "schedule_target_key" not in second
