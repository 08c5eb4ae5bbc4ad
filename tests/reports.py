"""Process reports for tests: valid documents in the reporter's schema (schema 1.0.0)."""

from __future__ import annotations

from typing import Any


def process_report(
    process_id: str,
    lags: dict[tuple[str, str, int], int],
    dispatched_at: float,
    *,
    status: str = "running",
    tags: list[str] | None = None,
) -> dict[str, Any]:
    """A process report whose partitions (group, topic, partition) have the given lags."""
    groups: dict[str, Any] = {}
    for (group, topic, partition), lag in sorted(lags.items()):
        topics = groups.setdefault(group, {"id": group, "topics": {}})["topics"]
        partitions = topics.setdefault(topic, {"name": topic, "partitions": {}})["partitions"]
        partitions[str(partition)] = {
            "id": partition,
            "lag": lag,
            "lag_stored": max(lag - 1, 0),
            "committed_offset": 100,
            "stored_offset": 101,
            "hi_offset": 100 + lag,
            "lo_offset": 0,
            "fetch_state": "active",
            "poll_state": "active",
        }
    return {
        "schema_version": "1.0.0",
        "type": "consumer",
        "dispatched_at": dispatched_at,
        "process": {
            "id": process_id,
            "status": status,
            "started_at": 1_700_000_000.0,
            "memory_usage": 1000,
            "memory_total_usage": 5000,
            "memory_size": 9000,
            "cpus": 2,
            "threads": 7,
            "cpu_usage": [0.5, 0.25, 0.125],
            "tags": tags if tags is not None else ["spark"],
        },
        "stats": {
            "busy": 1,
            "enqueued": 0,
            "utilization": 12.5,
            "total": {"batches": 3, "messages": 30, "errors": 1, "retries": 0, "dead": 0},
            "lag": sum(lags.values()),
            "lag_stored": sum(max(lag - 1, 0) for lag in lags.values()),
        },
        "consumer_groups": groups,
        "jobs": [],
    }


def flat_partitions(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The reference flattening of a report's consumer_groups/topics/partitions maps."""
    rows = []
    for group_id, group in sorted(report["consumer_groups"].items()):
        for topic_name, topic in sorted(group["topics"].items()):
            for partition in sorted(topic["partitions"].values(), key=lambda p: p["id"]):
                rows.append(
                    {
                        "consumer_group": group_id,
                        "topic": topic_name,
                        "partition": partition["id"],
                        **{k: v for k, v in partition.items() if k != "id"},
                    }
                )
    return rows
