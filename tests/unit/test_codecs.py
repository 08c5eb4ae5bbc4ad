"""ferrokafka.codecs: bounded zlib, reports, markers and the Karafka schedule envelope."""

from __future__ import annotations

import json
import os
import re
import time
import zlib
from typing import Any

import pytest

from ferrokafka import CodecError, ScheduleError, codecs
from ferrokafka.codecs import Marker
from tests import reports, tracking_samples

SIZES = [0, 1, 1000, 70_000, 300_000]  # 70 KB and up also take the detached path


def sample(size: int) -> bytes:
    words = [b"offset", b"lag", b"partition", b"%d" % size, os.urandom(3)]
    out = b" ".join(words[i % len(words)] for i in range(size // 4 + 1))
    return out[:size]


@pytest.mark.parametrize("size", SIZES)
def test_deflate_and_inflate_interoperate_with_zlib(size: int) -> None:
    data = sample(size)
    for level in (0, 1, 6, 9):
        assert zlib.decompress(codecs.deflate(data, level)) == data
    assert zlib.decompress(codecs.deflate(data)) == data
    assert codecs.inflate(zlib.compress(data)) == data
    assert codecs.inflate(zlib.compress(data), max_output=size) == data


@pytest.mark.parametrize("level", [10, -5, 2**70])
def test_bad_level_is_a_value_error_naming_the_range(level: int) -> None:
    # A negative or huge level was PyO3's OverflowError, naming neither argument nor range.
    with pytest.raises(ValueError, match=f"level must be an int from 0 to 9, got {level}") as e:
        codecs.deflate(b"x", level)
    assert not isinstance(e.value, CodecError)
    with pytest.raises(ValueError, match="level must be an int from 0 to 9"):
        codecs.encode_state_report({}, level=level)


@pytest.mark.parametrize("size", [-1, 2**64])
def test_a_size_limit_out_of_range_names_itself(size: int) -> None:
    packed = zlib.compress(b"x")
    with pytest.raises(ValueError, match=f"max_output must be an int from 0 to .*, got {size}"):
        codecs.inflate(packed, max_output=size)
    with pytest.raises(ValueError, match=f"max_inflated must be an int from 0 to .*, got {size}"):
        codecs.decode_state_report(packed, max_inflated=size)


def test_corrupt_truncated_and_trailing_input_raise_codec_error() -> None:
    packed = zlib.compress(b"hello " * 100)
    for bad in (b"", b"not zlib at all", packed[:-3], packed + b"\0", packed[:2] + b"\xff" * 8):
        with pytest.raises(CodecError, match="corrupt"):
            codecs.inflate(bad)


def test_zip_bomb_stops_at_the_limit_and_names_it() -> None:
    bomb = zlib.compress(bytes(10 << 20), 9)
    assert len(bomb) < 20_000
    with pytest.raises(CodecError, match=r"exceeds the limit of 1048576"):
        codecs.inflate(bomb, max_output=1 << 20)
    assert len(codecs.inflate(bomb)) == 10 << 20


# ---- schedule envelope ----------------------------------------------------------------------


def test_schedule_proxy_headers_are_karafkas_byte_for_byte() -> None:
    epoch = int(time.time()) + 3600
    proxy = codecs.schedule_proxy(
        {
            "topic": "orders",
            "payload": b'{"id":1}',
            "key": "order-1",
            "partition": 2,
            "partition_key": "customer-9",
            "headers": {"trace": "abc"},
        },
        epoch,
        {"topic": "schedules", "key": "order-1-reminder", "partition": 0},
    )
    assert (proxy.topic, proxy.key, proxy.partition, proxy.partition_key) == (
        "schedules",
        "order-1-reminder",
        0,
        None,
    )
    assert proxy.value == b'{"id":1}'
    assert proxy.headers == [
        ("trace", b"abc"),
        ("schedule_schema_version", b"1.0.0"),
        ("schedule_target_epoch", str(epoch).encode()),
        ("schedule_source_type", b"schedule"),
        ("schedule_target_topic", b"orders"),
        ("schedule_target_partition", b"2"),
        ("schedule_target_key", b"order-1"),
        ("schedule_target_partition_key", b"customer-9"),
    ]
    record = codecs.parse_proxy_headers(proxy.headers)
    assert (record.kind, record.epoch, record.target_topic, record.target_partition) == (
        "schedule",
        epoch,
        "orders",
        2,
    )
    assert (record.target_key, record.target_partition_key) == ("order-1", "customer-9")


def test_optional_target_headers_are_left_out_and_the_default_key_is_a_uuid4() -> None:
    proxy = codecs.schedule_proxy({"topic": "orders"}, int(time.time()), {"topic": "schedules"})
    assert [name for name, _ in proxy.headers] == [
        "schedule_schema_version",
        "schedule_target_epoch",
        "schedule_source_type",
        "schedule_target_topic",
    ]
    assert proxy.value is None
    uuid4 = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
    assert re.fullmatch(f"orders-{uuid4}", proxy.key)
    other = codecs.schedule_proxy({"topic": "orders"}, int(time.time()), {"topic": "schedules"})
    assert other.key != proxy.key


def test_epoch_validation() -> None:
    now = int(time.time())

    def build(epoch: int) -> codecs.ProxyMessage:
        return codecs.schedule_proxy({"topic": "orders"}, epoch, {"topic": "schedules"})

    build(now - 9)
    with pytest.raises(ScheduleError, match="in the past"):
        build(now - 11)
    with pytest.raises(ScheduleError, match="not milliseconds"):
        build(now * 1000)
    build(float(now))  # type: ignore[arg-type]  # integral floats pass, as in Karafka
    with pytest.raises(ScheduleError, match="whole Unix seconds"):
        build(now + 0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        build("now")  # type: ignore[arg-type]


def test_invalid_messages_and_envelopes_are_schedule_errors() -> None:
    epoch = int(time.time()) + 60
    with pytest.raises(ScheduleError, match="key must not be empty"):
        codecs.schedule_proxy({"topic": "orders"}, epoch, {"topic": "schedules", "key": ""})
    with pytest.raises(ScheduleError, match="target topic must not be empty"):
        codecs.schedule_proxy({"topic": ""}, epoch, {"topic": "schedules"})
    with pytest.raises(ScheduleError, match='target topic "schedules" is the schedules topic'):
        codecs.schedule_proxy({"topic": "schedules"}, epoch, {"topic": "schedules"})
    with pytest.raises(ScheduleError, match="unknown message field 'value'"):
        codecs.schedule_proxy({"topic": "o", "value": b"x"}, epoch, {"topic": "s"})  # type: ignore[typeddict-unknown-key]
    with pytest.raises(ScheduleError, match='envelope needs a "topic"'):
        codecs.schedule_proxy({"topic": "o"}, epoch, {})  # type: ignore[typeddict-item]
    with pytest.raises(TypeError, match=r"message\[\"partition\"\]"):
        codecs.schedule_proxy({"topic": "o", "partition": "2"}, epoch, {"topic": "s"})  # type: ignore[typeddict-item]
    with pytest.raises(ScheduleError, match="proxy key must not be empty"):
        codecs.cancel_proxy("", {"topic": "schedules"})


def test_cancel_and_tombstone_records() -> None:
    cancel = codecs.cancel_proxy("order-1-reminder", {"topic": "schedules", "partition": 1})
    assert (cancel.key, cancel.partition, cancel.value) == ("order-1-reminder", 1, None)
    assert cancel.headers == [
        ("schedule_schema_version", b"1.0.0"),
        ("schedule_source_type", b"cancel"),
    ]
    assert codecs.parse_proxy_headers(cancel.headers).kind == "cancel"
    tombstone = codecs.parse_proxy_headers(
        {
            "schedule_schema_version": "1.0.0",
            "schedule_source_type": "tombstone",
            "schedule_source_offset": "41",
        }
    )
    assert (tombstone.kind, tombstone.source_offset, tombstone.epoch) == ("tombstone", 41, None)


def test_header_parse_errors_name_the_header() -> None:
    base = [
        ("schedule_schema_version", b"1.0.0"),
        ("schedule_source_type", b"schedule"),
        ("schedule_target_epoch", b"1700000000"),
        ("schedule_target_topic", b"orders"),
    ]
    assert codecs.parse_proxy_headers(base).epoch == 1_700_000_000
    with pytest.raises(CodecError, match=r"unsupported schedule schema version 1\.1\.0"):
        codecs.parse_proxy_headers([*base, ("schedule_schema_version", b"1.1.0")])
    with pytest.raises(CodecError, match="missing header schedule_target_topic"):
        codecs.parse_proxy_headers(base[:3])
    with pytest.raises(CodecError, match="missing header schedule_target_topic"):
        codecs.parse_proxy_headers([*base[:3], ("schedule_target_topic", None)])
    with pytest.raises(CodecError, match="invalid header schedule_target_epoch"):
        codecs.parse_proxy_headers([*base, ("schedule_target_epoch", b"17e8")])


# ---- markers --------------------------------------------------------------------------------


def test_markers_round_trip() -> None:
    markers = [
        Marker.start(3, 1 << 40, 1_700_000_060_000, key=b"k", value="v", headers=[("a", None)]),
        Marker.start(0, 0, 0),
        Marker.keepalive(1, 2, 2**64 - 1),
        Marker.end(0, 5),
    ]
    for marker in markers:
        assert codecs.decode_marker(codecs.encode_marker(marker)) == marker
    start = markers[0]
    assert (start.kind, start.partition, start.offset, start.deadline) == (
        "start",
        3,
        1 << 40,
        1_700_000_060_000,
    )
    assert (start.key, start.value, start.headers) == (b"k", b"v", [("a", None)])
    end = markers[3]
    assert (end.kind, end.deadline, end.key, end.headers) == ("end", None, None, [])
    assert codecs.encode_marker(end) == b"\x01\x03\x00\x05"
    assert markers[0] != markers[1]


def test_marker_version_and_corruption_errors() -> None:
    data = codecs.encode_marker(Marker.start(3, 4, 5, value=b"hello"))
    with pytest.raises(CodecError, match="unsupported marker format version 2"):
        codecs.decode_marker(b"\x02" + data[1:])
    with pytest.raises(CodecError, match="truncated"):
        codecs.decode_marker(data[:-1])
    with pytest.raises(CodecError, match="trailing"):
        codecs.decode_marker(data + b"\0")
    with pytest.raises(CodecError, match="unknown kind 9"):
        codecs.decode_marker(b"\x01\x09\x00\x00")


# ---- reports --------------------------------------------------------------------------------


def state_report(**changes: Any) -> dict[str, Any]:
    report = {
        "schema_version": "1.0.0",
        "dispatched_at": 1_700_000_000.25,
        "state": "loaded",
        "offsets": {"low": 0, "high": 41},
        "daily": {"2023-11-14": 3},
        "started_at": 1_699_999_000,
        "reloads": 0,
        "skipped_records": 1,
        "dispatched": 7,
        "failed": 2,
    }
    report.update(changes)
    return report


def test_state_report_round_trips_and_is_plain_zlib_json() -> None:
    encoded = codecs.encode_state_report(state_report())
    assert json.loads(zlib.decompress(encoded)) == state_report()
    assert codecs.decode_state_report(encoded) == state_report()


def test_state_report_written_by_ruby_decodes_with_defaults() -> None:
    additions = ("skipped_records", "dispatched", "failed")
    ruby = {k: v for k, v in state_report().items() if k not in additions}
    decoded = codecs.decode_state_report(zlib.compress(json.dumps(ruby).encode()))
    assert decoded == {**ruby, "skipped_records": 0, "dispatched": 0, "failed": 0}


def test_invalid_state_reports_are_refused() -> None:
    with pytest.raises(CodecError, match=r"daily\.2023-02-30"):
        codecs.encode_state_report(state_report(daily={"2023-02-30": 1}))
    with pytest.raises(CodecError, match=r"unsupported state report schema version 2\.0\.0"):
        codecs.encode_state_report(state_report(schema_version="2.0.0"))
    with pytest.raises(CodecError, match="missing field `daily`"):
        codecs.encode_state_report({k: v for k, v in state_report().items() if k != "daily"})
    # Karafka's older trackers sent no offsets (nor reloads): none seen.
    old = {k: v for k, v in state_report().items() if k not in ("offsets", "reloads")}
    decoded = codecs.decode_state_report(zlib.compress(json.dumps(old).encode()))
    assert (decoded["offsets"], decoded["reloads"]) == ({"low": -1, "high": -1}, 0)
    newer = zlib.compress(json.dumps(state_report(schema_version="1.1.0")).encode())
    with pytest.raises(CodecError, match="unsupported"):
        codecs.decode_state_report(newer)
    with pytest.raises(CodecError, match="JSON"):
        codecs.decode_state_report(zlib.compress(b"{not json"))
    big = codecs.encode_state_report(state_report())
    with pytest.raises(CodecError, match="limit of 10"):
        codecs.decode_state_report(big, max_inflated=10)


def test_non_json_values_are_named_by_their_path() -> None:
    with pytest.raises(ValueError, match=r"state report\.offsets\.low: nan is not valid JSON"):
        codecs.encode_state_report(state_report(offsets={"low": float("nan"), "high": 1}))
    with pytest.raises(TypeError, match=r"state report\.daily\[1\]: bytes is not a JSON type"):
        codecs.encode_state_report(state_report(daily=[1, b"x"]))
    with pytest.raises(TypeError, match="dict keys must be str or int"):
        codecs.encode_state_report(state_report(daily={(1, 2): 1}))


def process_report(partitions: int = 2) -> dict[str, Any]:
    return reports.process_report(
        "host-1:4242:ab12cd", {("billing", "orders", p): 3 for p in range(partitions)}, 1.7e9
    )


def test_process_report_round_trips_with_int_partition_keys() -> None:
    report = process_report(3000)  # large enough to encode and decode detached
    decoded = codecs.decode_process_report(codecs.encode_process_report(report))
    assert decoded == report
    by_int = process_report()
    subscription = by_int["consumer_groups"]["billing"]["subscription_groups"]["billing_0"]
    topic = subscription["topics"]["orders"]
    topic["partitions"] = {int(k): v for k, v in topic["partitions"].items()}
    assert codecs.decode_process_report(codecs.encode_process_report(by_int)) == process_report()


def _changed(report: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``report`` with the dotted ``path`` set to ``value`` (or removed when
    ``value`` is ``DELETE``)."""
    copy: dict[str, Any] = json.loads(json.dumps(report))
    *parents, last = path.split(".")
    target = copy
    for key in parents:
        target = target[key]
    if value is DELETE:
        del target[last]
    else:
        target[last] = value
    return copy


DELETE = object()
SUBSCRIPTION = "consumer_groups.billing.subscription_groups.billing_0"


@pytest.mark.parametrize(
    ("path", "value", "refusal"),
    [
        ("process.memory_usage", DELETE, r"process\.memory_usage: required Integer >= 0"),
        (f"{SUBSCRIPTION}.instance_id", True, r"billing_0\.instance_id: required false or String"),
        ("process", ["a"], r"process: required Hash"),
        ("process.memory_usgae", 5, r"process\.memory_usgae: not a field of this schema"),
        ("process.bytes_sent", None, r"process\.bytes_sent: null is not valid here"),
        ("stats.utilization", "12", r"stats\.utilization: required Numeric >= 0"),
        ("jobs", {}, r"jobs: required Array"),
    ],
)
def test_an_invalid_process_report_is_refused_naming_the_field_never_repaired(
    path: str, value: Any, refusal: str
) -> None:
    with pytest.raises(CodecError, match=refusal):
        codecs.encode_process_report(_changed(process_report(), path, value))


def test_a_process_report_is_written_exactly_as_given() -> None:
    report = process_report()
    assert json.loads(zlib.decompress(codecs.encode_process_report(report))) == report


def test_an_invalid_error_or_state_report_is_refused_never_repaired() -> None:
    error = tracking_samples.error_report("e-1", occurred_at=1.7e9, process_id="h:1:a")
    with pytest.raises(CodecError, match="error_class: required non-empty String"):
        codecs.encode_error_report(_changed(error, "error_class", DELETE))
    with pytest.raises(CodecError, match="process: required Hash"):
        codecs.encode_error_report(_changed(error, "process", ["h:1:a", []]))
    with pytest.raises(CodecError, match="detail: not a field of this schema"):
        codecs.encode_error_report({**error, "detail": {"offset": 1}})
    # Karafka Web's error contract makes the process's tags optional: written as [].
    untagged = _changed(error, "process.tags", DELETE)
    written = json.loads(zlib.decompress(codecs.encode_error_report(untagged)))
    assert written == {**untagged, "process": {**untagged["process"], "tags": []}}
    with pytest.raises(CodecError, match="offsets: required field missing"):
        codecs.encode_state_report(_changed(state_report(), "offsets", DELETE))
    # ferrokafka's own counters are the encoder's to fill (Karafka's tracker has none).
    karafka = {k: v for k, v in state_report().items() if k not in ("dispatched", "failed")}
    written = json.loads(zlib.decompress(codecs.encode_state_report(karafka)))
    assert written == {**karafka, "dispatched": 0, "failed": 0}


def test_invalid_process_and_error_reports_never_encode() -> None:
    report = process_report()
    report["process"]["id"] = "no-pid"
    with pytest.raises(CodecError, match=r"process\.id: required String with at least two ':'"):
        codecs.encode_process_report(report)
    error = {
        **tracking_samples.error_report(
            "0f6c1d2e-4b3a-4c5d-8e9f-001122334455",
            occurred_at=1_700_000_000.0,
            process_id="host-1:4242:ab12cd",
        ),
        "backtrace": "line 1",
        "details": {"partition": 0, "nested": {"offsets": [1, 2]}},
    }
    assert codecs.decode_error_report(codecs.encode_error_report(error)) == error
    with pytest.raises(CodecError, match="error_message: longer than 10000 characters"):
        codecs.encode_error_report({**error, "error_message": "x" * 10_001})
    with pytest.raises(CodecError, match="id: required non-empty String"):
        codecs.encode_error_report({**error, "id": ""})
