"""Valid tracking documents for the status reader's tests, and a helper that sends them like a
reporter does (zlib JSON from the Rust codecs, header ``zlib`` = "true", key = process id)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ferrokafka import Client, codecs

ZLIB_HEADER = [("zlib", b"true")]


def process_report(
    process_id: str,
    *,
    dispatched_at: float,
    lags: Mapping[int, int] | None = None,
    status: str = "running",
    group: str = "billing",
    topic: str = "orders",
    messages: int = 50,
) -> dict[str, Any]:
    """A Karafka-Web-shaped process report; ``lags`` maps partition -> lag (default {0: 3})."""
    lags = {0: 3} if lags is None else lags
    partitions = {
        str(partition): {
            "id": partition,
            "lag": lag,
            "lag_stored": lag,
            "committed_offset": 100,
            "stored_offset": 100,
            "hi_offset": 100 + lag,
            "lo_offset": 0,
            "fetch_state": "active",
            "poll_state": "active",
        }
        for partition, lag in lags.items()
    }
    return {
        "schema_version": "1.0.0",
        "type": "consumer",
        "dispatched_at": dispatched_at,
        "process": {
            "id": process_id,
            "status": status,
            "started_at": dispatched_at - 60,
            "memory_usage": 120_000,
            "memory_total_usage": 8_000_000,
            "memory_size": 16_000_000,
            "cpus": 2,
            "threads": 9,
            "cpu_usage": [0.5, 0.4, 0.3],
            "tags": ["test"],
        },
        "stats": {
            "busy": 1,
            "enqueued": 0,
            "utilization": 12.5,
            "total": {"batches": 5, "messages": messages, "errors": 1, "retries": 0, "dead": 0},
            "lag": sum(lags.values()),
            "lag_stored": sum(lags.values()),
        },
        "consumer_groups": {
            group: {"id": group, "topics": {topic: {"name": topic, "partitions": partitions}}}
        },
        "jobs": [],
    }


def error_report(
    error_id: str, *, occurred_at: float, process_id: str, message: str = "boom"
) -> dict[str, Any]:
    """An error report as a reporter sends it to the errors topic."""
    return {
        "schema_version": "1.0.0",
        "id": error_id,
        "type": "consumer.consume.error",
        "error_class": "ValueError",
        "error_message": message,
        "backtrace": "Traceback (most recent call last): ...",
        "details": {"topic": "orders", "partition": 0},
        "occurred_at": occurred_at,
        "process": {"id": process_id, "tags": []},
    }


def state_report(
    *, dispatched_at: float, state: str = "loaded", daily: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """A scheduler state report as the scheduler daemon sends it to ``<topic>_states``."""
    return {
        "schema_version": "1.0.0",
        "dispatched_at": dispatched_at,
        "state": state,
        "offsets": {"low": 0, "high": 41},
        "daily": dict(daily if daily is not None else {"2030-01-01": 3, "2030-01-02": 4}),
        "started_at": int(dispatched_at) - 60,
        "reloads": 0,
        "skipped_records": 0,
        "dispatched": 7,
    }


Encoder = Callable[[Mapping[str, Any]], bytes]


def send(
    client: Client, topic: str, document: Mapping[str, Any], encode: Encoder, key: str
) -> None:
    """Send one document the way the reporter does."""
    client.produce(topic, encode(document), key=key, headers=ZLIB_HEADER)


def send_process_report(client: Client, topic: str, report: Mapping[str, Any]) -> None:
    """Send a process report keyed by its process id."""
    send(client, topic, report, codecs.encode_process_report, report["process"]["id"])


def send_error_report(client: Client, topic: str, report: Mapping[str, Any]) -> None:
    """Send an error report keyed by its process id."""
    send(client, topic, report, codecs.encode_error_report, report["process"]["id"])


def send_state_report(
    client: Client, topic: str, report: Mapping[str, Any], partition: int
) -> None:
    """Send a state report to a states topic partition, keyed ``<state>_state``."""
    client.produce(
        topic,
        codecs.encode_state_report(report),
        key=f"{report['state']}_state",
        partition=partition,
        headers=ZLIB_HEADER,
    )
