"""ferrokafka.arrow: the batch codecs against Python's zlib/json and the one-message builders."""

from __future__ import annotations

import json
import time
import zlib
from typing import Any

import pyarrow as pa
import pytest

from ferrokafka import CodecError, ScheduleError, arrow, codecs
from tests.reports import flat_partitions, process_report
from tests.tracking_samples import karafka_fixture


def packed_rows() -> list[bytes | None]:
    rows: list[bytes | None] = []
    for n in range(500):
        text = f"héllo ✓ {n} " * (n % 7)
        if n % 11 == 0:
            rows.append(None)
        elif n % 13 == 0:
            rows.append(b"\x78\x9c corrupt")
        else:
            rows.append(zlib.compress(text.encode()))
    return rows


def reference_inflate(row: bytes | None) -> bytes | None:
    if row is None:
        return None
    try:
        return zlib.decompress(row)
    except zlib.error:
        return None


@pytest.mark.parametrize("arrow_type", [pa.binary(), pa.large_binary()])
def test_inflate_matches_zlib_on_plain_sliced_and_chunked_arrays(arrow_type: pa.DataType) -> None:
    rows = packed_rows()
    array = pa.array(rows, arrow_type)
    expected = [reference_inflate(row) for row in rows]
    result = arrow.inflate(array)
    assert result.type == arrow_type
    assert result.to_pylist() == expected
    assert arrow.inflate(array.slice(37, 100)).to_pylist() == expected[37:137]
    chunked = pa.chunked_array([array.slice(0, 10), array.slice(10)])
    assert arrow.inflate(chunked).to_pylist() == expected


def test_error_modes() -> None:
    rows = packed_rows()
    with_errors = arrow.inflate(pa.array(rows), errors="struct").to_pylist()
    for row, result in zip(rows, with_errors, strict=True):
        bad = row is not None and reference_inflate(row) is None
        assert (result["error"] is not None) == bad
        assert result["value"] == reference_inflate(row)
    with pytest.raises(CodecError, match=r"^row 13: corrupt zlib stream"):
        arrow.inflate(pa.array(rows), errors="raise")
    assert arrow.inflate(pa.array([zlib.compress(b"x" * 100)]), max_output=99).to_pylist() == [None]
    with pytest.raises(ValueError, match="errors must be"):
        arrow.inflate(pa.array(rows), errors="ignore")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="binary or string array"):
        arrow.inflate(pa.array([1, 2]))
    with pytest.raises(ValueError, match="level"):
        arrow.deflate(pa.array([b"x"]), level=10)


def test_deflate_round_trips_text_and_binary() -> None:
    texts = ["", None, "unicode ✓ ü 日本", '{"a": 1}' * 50]
    packed = arrow.deflate(pa.array(texts, pa.large_string()))
    assert packed.type == pa.large_binary()
    assert [None if p is None else zlib.decompress(p).decode() for p in packed.to_pylist()] == texts
    assert arrow.inflate(arrow.deflate(pa.array([b"\x00\xff"]))).to_pylist() == [b"\x00\xff"]


def with_stored_lags(report: dict[str, Any], n: int) -> dict[str, Any]:
    """``report`` with each partition's lag to the stored offset apart from its lag to the
    committed one (behind it, or unknown: -1, on every third report)."""
    for group in report["consumer_groups"].values():
        for subscription in group["subscription_groups"].values():
            for topic in subscription["topics"].values():
                for partition in topic["partitions"].values():
                    partition["lag_stored"] = -1 if n % 3 == 2 else partition["lag"] // 2
    return report


def test_decoders_match_json_reference() -> None:
    reports = [
        with_stored_lags(
            process_report(f"host:{n}:abc", {("g", "t", p): n + p for p in range(4)}, 1.5 * n + 1),
            n,
        )
        for n in range(50)
    ]
    blobs: list[bytes | None] = [codecs.encode_process_report(r) for r in reports]
    blobs += [None, zlib.compress(b"{}"), b"junk"]
    decoded = arrow.decode_report(pa.array(blobs)).to_pylist()
    for blob, row in zip(blobs[:50], decoded, strict=False):
        reference = json.loads(zlib.decompress(blob or b""))
        assert row["error"] is None
        assert row["process"]["id"] == reference["process"]["id"]
        assert row["process"]["cpu_usage"] == reference["process"]["cpu_usage"]
        partitions = flat_partitions(reference)
        # Karafka Web's sums: the hybrid lag (stored where known, else committed) and the lag
        # to the stored offsets, unknown lags counting 0.
        hybrid = [p["lag"] if p["lag_stored"] < 0 else p["lag_stored"] for p in partitions]
        assert row["stats"]["lag"] == sum(max(lag, 0) for lag in hybrid)
        assert row["stats"]["lag_stored"] == sum(max(p["lag_stored"], 0) for p in partitions)
        assert row["stats"]["total"] == {
            k: v for k, v in reference["stats"]["total"].items() if k != "jobs"
        }
        assert row["partitions"] == partitions
    assert decoded[50] is None
    assert "consumer report JSON" in decoded[51]["error"]
    assert decoded[51]["process"] is None
    assert "zlib" in decoded[52]["error"]
    with pytest.raises(CodecError, match=r"^row 51: "):
        arrow.decode_report(pa.array(blobs), errors="raise")

    marker = codecs.Marker.start(2, 7, 1234, key=b"k", value=None, headers=[("h", b"v")])
    markers = arrow.decode_marker(pa.array([codecs.encode_marker(marker), b""])).to_pylist()
    assert markers[0] == {
        "kind": "start",
        "partition": 2,
        "offset": 7,
        "deadline": 1234,
        "key": b"k",
        "value": None,
        "headers": [{"key": "h", "value": b"v"}],
        "error": None,
    }
    assert markers[1]["error"] is not None


def test_schedule_headers_equal_the_single_proxy_builder() -> None:
    epoch = int(time.time()) + 60
    topics = ["orders", "orders", "billing"]
    keys = ["k0", None, "ü-2"]
    partitions = [None, 1, 2]
    partition_keys = [None, None, "customer-9"]
    batch = arrow.schedule_headers(
        pa.array(topics),
        pa.array([epoch, epoch + 1, epoch + 2], pa.int32()),
        pa.array(keys),
        pa.array(partitions, pa.int16()),
        pa.array(partition_keys),
    ).to_pylist()
    for n in range(3):
        message: dict[str, object] = {"topic": topics[n], "payload": b"x"}
        optional = {"key": keys[n], "partition": partitions[n], "partition_key": partition_keys[n]}
        message.update({k: v for k, v in optional.items() if v is not None})
        proxy = codecs.schedule_proxy(message, epoch + n, {"topic": "schedules"})  # type: ignore[arg-type]
        assert [(h["key"], h["value"]) for h in batch[n]] == proxy.headers
    with pytest.raises(ScheduleError, match=r"^row 1: invalid argument: epoch"):
        arrow.schedule_headers(pa.array(["t", "t"]), pa.array([epoch, 5]))
    failed = arrow.schedule_headers(pa.array([None, "t"]), pa.array([epoch, None]), errors="null")
    assert failed.to_pylist() == [None, None]


def test_schedule_headers_refuse_payloads_over_max_payload_size() -> None:
    epoch = int(time.time()) + 60
    sizes = pa.array([1_000_012, None, 1_000_013])
    rows = arrow.schedule_headers(
        pa.array(["t"] * 3), pa.array([epoch] * 3), payload_size=sizes, errors="struct"
    )
    assert [row["error"] for row in rows.to_pylist()] == [
        None,
        None,
        "scheduled payload (bytes, max_payload_size) exceeds the limit of 1000012",
    ]
    with pytest.raises(ScheduleError, match=r"^row 0: .*limit of 10$"):
        arrow.schedule_headers(
            pa.array(["t"]), pa.array([epoch]), payload_size=pa.array([11]), max_payload_size=10
        )


def test_report_decoder_reads_karafka_reports_of_every_schema() -> None:
    """``ferrokafka.spark.read_reports`` shows Karafka processes: the same decoder over
    Karafka Web's consumer reports 1.2.1 to 1.7.0."""
    versions = ["1.2.1", "1.4.1", "1.6.0", "1.7.0"]
    blobs = [
        zlib.compress(json.dumps(karafka_fixture(f"consumer_report_{v}")).encode())
        for v in versions
    ]
    rows = arrow.decode_report(pa.array(blobs)).to_pylist()
    assert [row["schema_version"] for row in rows] == versions
    for row in rows:
        assert (row["error"], row["process"]["id"]) == (None, "ruby-host:4242:a1b2c3d4e5f6")
        assert row["stats"]["lag"] == 12  # Karafka Web's lag: stored where known (3+0+2), else 7
        assert [(p["consumer_group"], p["topic"], p["partition"]) for p in row["partitions"]] == [
            ("audit_app", "audit", 0),
            ("orders_app", "orders", 0),
            ("orders_app", "orders", 2),
            ("orders_app", "payments", 1),
        ]
