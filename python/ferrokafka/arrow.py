"""ferrokafka's codecs over whole pyarrow arrays: one call into Rust per array, not per row.

These are the functions behind the Spark UDFs of :mod:`ferrokafka.spark`; they work on any
pyarrow ``binary``/``string`` array (or their ``large_`` forms, sliced or not) outside Spark too.
Each row is handled on its own: a corrupt row never fails the batch unless you ask for it.

``errors`` chooses what a row that cannot be processed gives:

- ``"null"``: a null value (zlib functions' default);
- ``"struct"``: ``struct<value, error: string>`` instead of the value, ``error`` null when fine;
- ``"field"``: (decoders' default) the decoded struct's own ``error`` field says why; its other
  fields are null;
- ``"raise"``: :class:`ferrokafka.CodecError` (:class:`ferrokafka.ScheduleError` for
  :func:`schedule_headers`) naming the first bad row.

A null input row always gives a null output row, never an error.

Example:
    >>> import zlib
    >>> import pyarrow as pa
    >>> from ferrokafka import arrow
    >>> arrow.inflate(pa.array([zlib.compress(b"hi"), None, b"junk"])).to_pylist()
    [b'hi', None, None]
    >>> arrow.inflate(pa.array([b"junk"]), errors="struct").to_pylist()[0]["error"]
    'corrupt zlib stream: ...'
"""

from __future__ import annotations

from typing import Any, Literal

from ferrokafka import _native
from ferrokafka._extras import missing_extra

try:
    import pyarrow as pa
    import pyarrow.compute as pc
except ModuleNotFoundError as e:
    raise missing_extra("ferrokafka.arrow", "spark", e) from e

from ferrokafka.exceptions import CodecError, ScheduleError

__all__ = [
    "decode_marker",
    "decode_report",
    "decode_state",
    "deflate",
    "inflate",
    "partition_key_partitions",
    "schedule_headers",
]

DEFAULT_MAX_INFLATED: int = _native.DEFAULT_MAX_INFLATED
"""Largest inflated row accepted by default (64 MiB); larger rows fail as too large."""

ValueErrors = Literal["null", "struct", "raise"]
PartitionKeyHashing = Literal["waterdrop", "bytes"]
"""How a partition key is hashed: as WaterDrop does, or every byte (see ferrokafka.Client)."""
StructErrors = Literal["field", "raise"]

_LARGE = (pa.large_binary(), pa.large_string())
_BINARY = (pa.binary(), pa.string(), *_LARGE)

# (validity, offsets or values, data, offset, length, large): what the Rust batch functions take.
_Parts = tuple[Any, Any, Any, int, int, bool]


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    if not isinstance(values, pa.Array):
        raise TypeError(f"expected a pyarrow Array, got {type(values).__name__}")
    return values


def _binary_parts(name: str, values: pa.Array | pa.ChunkedArray) -> _Parts:
    array = _array(values)
    if array.type == pa.null():
        array = array.cast(pa.binary())
    if array.type not in _BINARY:
        raise TypeError(f"{name} must be a binary or string array, got {array.type}")
    validity, offsets, data = array.buffers()
    return validity, offsets, data, array.offset, len(array), array.type in _LARGE


def _int64_parts(name: str, values: pa.Array | pa.ChunkedArray) -> _Parts:
    array = _array(values)
    if not (pa.types.is_integer(array.type) or pa.types.is_null(array.type)):
        raise TypeError(f"{name} must be an integer array, got {array.type}")
    array = pc.cast(array, pa.int64())
    validity, data = array.buffers()
    return validity, data, None, array.offset, len(array), False


def _to_arrow(capsules: tuple[Any, Any]) -> pa.Array:
    """A column the Rust side returned as Arrow C data interface capsules (schema, array),
    imported without a copy."""
    return pa.Array._import_from_c_capsule(*capsules)


# How Batch.to_arrow takes the record batch it built in Rust (the Arrow C data interface's
# PyCapsules), looked up by the binding once.
_import_record_batch = pa.RecordBatch._import_from_c_capsule


def _first_error(errors: pa.Array) -> tuple[int, str] | None:
    if errors.null_count == len(errors):
        return None
    row = pc.index(pc.is_valid(errors), True).as_py()
    return row, errors[row].as_py()


def _finish(
    output: tuple[Any, ...], errors: tuple[Any, ...], mode: str, exception: type[Exception]
) -> pa.Array:
    values, messages = _to_arrow(output), _to_arrow(errors)
    if mode == "raise":
        failed = _first_error(messages)
        if failed is not None:
            raise exception(f"row {failed[0]}: {failed[1]}")
        return values
    if mode == "struct":
        return pa.StructArray.from_arrays([values, messages], names=["value", "error"])
    if mode == "null":
        return values
    raise ValueError(f"errors must be 'null', 'struct' or 'raise', got {mode!r}")


def _finish_struct(decoded: tuple[Any, ...], mode: str) -> pa.Array:
    values = _to_arrow(decoded)
    if mode == "raise":
        failed = _first_error(values.field("error"))
        if failed is not None:
            raise CodecError(f"row {failed[0]}: {failed[1]}")
    elif mode != "field":
        raise ValueError(f"errors must be 'field' or 'raise', got {mode!r}")
    return values


def inflate(
    values: pa.Array | pa.ChunkedArray,
    *,
    max_output: int = DEFAULT_MAX_INFLATED,
    errors: ValueErrors = "null",
) -> pa.Array:
    """Inflate every zlib row (at most ``max_output`` bytes each) into a binary array of the
    input's offset width.

    Example:
        >>> import zlib
        >>> inflate(pa.array([zlib.compress(b"a")])).to_pylist()
        [b'a']
    """
    parts = _binary_parts("values", values)
    output, messages = _native.inflate_batch(parts, max_output, parts[5])
    return _finish(output, messages, errors, CodecError)


def deflate(
    values: pa.Array | pa.ChunkedArray, *, level: int = 6, errors: ValueErrors = "null"
) -> pa.Array:
    """Deflate every row (strings as UTF-8) into zlib streams, at ``level`` 0..9.

    Example:
        >>> import zlib
        >>> zlib.decompress(deflate(pa.array(["hé"]))[0].as_py())
        b'h\\xc3\\xa9'
    """
    parts = _binary_parts("values", values)
    output, messages = _native.deflate_batch(parts, level, parts[5])
    return _finish(output, messages, errors, CodecError)


def decode_report(
    values: pa.Array | pa.ChunkedArray,
    *,
    max_inflated: int = DEFAULT_MAX_INFLATED,
    errors: StructErrors = "field",
) -> pa.StructArray:
    """Decode zlib JSON process reports (the reports topic) into struct rows.

    Fields: ``schema_version``, ``dispatched_at``, ``process`` {``id``, ``status``, ...},
    ``stats`` {..., ``lag``}, ``partitions`` (one struct per assigned partition, with
    ``consumer_group``, ``topic``, ``partition``, ``lag``, offsets), ``jobs`` and ``error``.

    Example:
        >>> decode_report(pa.array([b"junk"]))[0]["error"].as_py()
        'corrupt zlib stream: ...'
    """
    parts = _binary_parts("values", values)
    return _finish_struct(_native.decode_report_batch(parts, max_inflated), errors)


def decode_state(
    values: pa.Array | pa.ChunkedArray,
    *,
    max_inflated: int = DEFAULT_MAX_INFLATED,
    errors: StructErrors = "field",
) -> pa.StructArray:
    """Decode zlib JSON scheduler state reports (the ``<schedules>_states`` topic).

    Fields: ``schema_version``, ``dispatched_at``, ``state``, ``offsets`` {``low``, ``high``},
    ``daily`` (``day``, ``count`` structs), ``started_at``, ``reloads``, ``skipped_records``,
    ``dispatched``, ``failed`` and ``error``.
    """
    parts = _binary_parts("values", values)
    return _finish_struct(_native.decode_state_batch(parts, max_inflated), errors)


def decode_marker(
    values: pa.Array | pa.ChunkedArray, *, errors: StructErrors = "field"
) -> pa.StructArray:
    """Decode redelivery markers: ``kind``, ``partition``, ``offset``, ``deadline``, ``key``,
    ``value``, ``headers`` and ``error``."""
    parts = _binary_parts("values", values)
    return _finish_struct(_native.decode_marker_batch(parts), errors)


def schedule_headers(
    target_topic: pa.Array | pa.ChunkedArray,
    epoch: pa.Array | pa.ChunkedArray,
    key: pa.Array | pa.ChunkedArray | None = None,
    partition: pa.Array | pa.ChunkedArray | None = None,
    partition_key: pa.Array | pa.ChunkedArray | None = None,
    payload_size: pa.Array | pa.ChunkedArray | None = None,
    *,
    max_payload_size: int = _native.WATERDROP_MAX_PAYLOAD_SIZE,
    errors: ValueErrors = "raise",
) -> pa.Array:
    """The Karafka proxy headers (``list<struct<key: string, value: binary>>``) that schedule
    each row's message to ``target_topic`` at ``epoch`` (Unix seconds), with the optional
    target ``key``, ``partition`` and ``partition_key``; validated like
    :func:`ferrokafka.scheduling.schedule` (an epoch more than 10 s past fails the row, so does
    a ``payload_size`` over ``max_payload_size`` bytes, WaterDrop's 1,000,012 by default).

    Example:
        >>> import time
        >>> headers = schedule_headers(pa.array(["reminders"]), pa.array([int(time.time()) + 60]))
        >>> [header["key"] for header in headers[0].as_py()]
        ['schedule_schema_version', 'schedule_target_epoch', 'schedule_source_type',
         'schedule_target_topic']
    """
    output, messages = _native.schedule_headers_batch(
        _binary_parts("target_topic", target_topic),
        _int64_parts("epoch", epoch),
        None if key is None else _binary_parts("key", key),
        None if partition is None else _int64_parts("partition", partition),
        None if partition_key is None else _binary_parts("partition_key", partition_key),
        None if payload_size is None else _int64_parts("payload_size", payload_size),
        max_payload_size,
    )
    return _finish(output, messages, errors, ScheduleError)


def partition_key_partitions(
    partition_keys: pa.Array | pa.ChunkedArray,
    partition_count: int,
    *,
    partition_key_hashing: PartitionKeyHashing = "waterdrop",
) -> pa.Array:
    """The partition (``int64``) each row's partition key chooses among ``partition_count``
    partitions, exactly as :meth:`ferrokafka.Client.produce` and WaterDrop choose it (null for
    a null or empty key); ``partition_key_hashing="bytes"`` hashes every byte instead.

    Example:
        >>> partition_key_partitions(pa.array(["zamówienie-3"]), 5).to_pylist()
        [0]
    """
    output, messages = _native.partition_key_batch(
        _binary_parts("partition_keys", partition_keys), partition_count, partition_key_hashing
    )
    return _finish(output, messages, "raise", CodecError)
