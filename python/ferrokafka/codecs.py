"""ferrokafka's wire formats, run by the Rust core: bounded zlib, scheduler state reports,
process and error reports, redelivery markers and the Karafka scheduled-message envelope.

Every decoder is bounded and strict: corrupt, oversized or newer-version data raises
:class:`ferrokafka.CodecError`. The functions are documented in ``ferrokafka/_native.pyi``.

Example:
    >>> import zlib
    >>> from ferrokafka import codecs
    >>> codecs.inflate(zlib.compress(b"hello"))
    b'hello'
    >>> codecs.decode_marker(codecs.encode_marker(codecs.Marker.end(0, 5)))
    Marker.end(partition=0, offset=5)
"""

from __future__ import annotations

from ferrokafka._native import (
    Marker,
    ProxyMessage,
    ProxyRecord,
    cancel_proxy,
    consumer_report_violations_of,
    decode_error_report,
    decode_marker,
    decode_process_report,
    decode_state_report,
    deflate,
    encode_error_report,
    encode_marker,
    encode_process_report,
    encode_state_report,
    error_report_violations_of,
    inflate,
    parse_proxy_headers,
    schedule_proxy,
)

__all__ = [
    "Marker",
    "ProxyMessage",
    "ProxyRecord",
    "cancel_proxy",
    "consumer_report_violations_of",
    "decode_error_report",
    "decode_marker",
    "decode_process_report",
    "decode_state_report",
    "deflate",
    "encode_error_report",
    "encode_marker",
    "encode_process_report",
    "encode_state_report",
    "error_report_violations_of",
    "inflate",
    "parse_proxy_headers",
    "schedule_proxy",
]
