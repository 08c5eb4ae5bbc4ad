"""Consumer reports for tests: valid documents of Karafka Web's consumer report schema 1.7.0
(the schema the Rust core writes), one subscription group per consumer group."""

from __future__ import annotations

from typing import Any

from ferrokafka import Client, codecs

_ROW_FIELDS = (
    "lag",
    "lag_stored",
    "committed_offset",
    "stored_offset",
    "hi_offset",
    "lo_offset",
    "fetch_state",
    "poll_state",
)


def process_report(
    process_id: str,
    lags: dict[tuple[str, str, int], int],
    dispatched_at: float,
    *,
    status: str = "running",
    tags: list[str] | None = None,
) -> dict[str, Any]:
    """A consumer report whose partitions (group, topic, partition) have the given lags to the
    stored offset, Karafka Web's lag. The committed offset trails the stored one by 2, so the
    lag to it is 2 more: a reader that takes one lag for the other shows the wrong figure."""
    groups: dict[str, Any] = {}
    for (group, topic, partition), lag in sorted(lags.items()):
        subscriptions = groups.setdefault(group, {"id": group, "subscription_groups": {}})
        subscription = subscriptions["subscription_groups"].setdefault(
            f"{group}_0",
            {
                "id": f"{group}_0",
                "instance_id": False,
                "state": {
                    "state": "up",
                    "join_state": "steady",
                    "stateage": 5000,
                    "rebalance_age": 4000,
                    "rebalance_cnt": 1,
                    "rebalance_reason": "initial",
                    "poll_age": 0.5,
                    "poll_interval": 300_000,
                },
                "topics": {},
            },
        )
        topics = subscription["topics"]
        entry = topics.setdefault(topic, {"name": topic, "partitions_cnt": 0, "partitions": {}})
        entry["partitions_cnt"] = max(entry["partitions_cnt"], partition + 1)
        entry["partitions"][str(partition)] = {
            "id": partition,
            "lag": lag + 2,
            "lag_d": 0,
            "lag_stored": lag,
            "lag_stored_d": 0,
            "committed_offset": 98,
            "committed_offset_fd": 0,
            "stored_offset": 100,
            "stored_offset_fd": 0,
            "fetch_state": "active",
            "poll_state": "active",
            "poll_state_ch": 0,
            "hi_offset": 100 + lag,
            "hi_offset_fd": 0,
            "lo_offset": 0,
            "eof_offset": 100 + lag,
            "ls_offset": 100 + lag,
            "ls_offset_d": 0,
            "ls_offset_fd": 0,
            "transactional": False,
        }
    return {
        "schema_version": "1.7.0",
        "type": "consumer",
        "dispatched_at": dispatched_at,
        "process": {
            "id": process_id,
            "status": status,
            "started_at": 1_700_000_000.0,
            "execution_mode": "embedded",
            "listeners": {"active": 1, "standby": 0},
            "workers": 1,
            "memory_usage": 1000,
            "memory_total_usage": 5000,
            "memory_size": 9000,
            "cpus": 2,
            "threads": 7,
            "cpu_usage": [0.5, 0.25, 0.125],
            "tags": tags if tags is not None else ["spark"],
        },
        "versions": {
            name: "1.0.0"
            for name in (
                "ruby",
                "karafka",
                "karafka_core",
                "karafka_web",
                "waterdrop",
                "rdkafka",
                "librdkafka",
            )
        },
        "stats": {
            "busy": 1,
            "enqueued": 0,
            "waiting": 0,
            "utilization": 12.5,
            "total": {
                "jobs": 3,
                "batches": 3,
                "messages": 30,
                "errors": 1,
                "retries": 0,
                "dead": 0,
            },
        },
        "consumer_groups": groups,
        "jobs": [],
    }


def flat_partitions(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The reference flattening of a report's groups/subscription groups/topics/partitions."""
    rows = []
    for group_id, group in sorted(report["consumer_groups"].items()):
        for _, subscription in sorted(group["subscription_groups"].items()):
            for topic_name, topic in sorted(subscription["topics"].items()):
                for partition in sorted(topic["partitions"].values(), key=lambda p: p["id"]):
                    rows.append(
                        {
                            "consumer_group": group_id,
                            "topic": topic_name,
                            "partition": partition["id"],
                            **{k: partition[k] for k in _ROW_FIELDS},
                        }
                    )
    return rows


def produce_report(client: Client, topic: str, report: dict[str, Any]) -> None:
    """Send ``report`` to ``topic`` as a Reporter sends one: zlib JSON keyed by process id."""
    client.produce(
        topic,
        codecs.encode_process_report(report),
        key=report["process"]["id"],
        headers={"zlib": "true"},
    )
