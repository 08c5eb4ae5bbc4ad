"""What the benches in this folder share: the --smoke switch tests/test_benches.py runs them with,
the broker they measure against, an independent count of the records on a topic, the load average
and the summary of a latency case.

Not a bench itself (tests/test_benches.py runs every other script here); the benches import it as
``_common``, their own folder being first on ``sys.path`` when run as scripts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
from pathlib import Path

KAFKA = Path(__file__).resolve().parent.parent / "scripts" / "kafka.sh"
# The port of the broker a bench starts itself, apart from the test suite's.
BENCH_KAFKA_ENV = {**os.environ, "KAFKA_PORT": "19592"}


def add_smoke_option(parser: argparse.ArgumentParser, skipped: str = "") -> None:
    """Adds --smoke (tiny sizes; `skipped` names what a smoke run leaves out, as ", no Java")."""
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"tiny sizes that run in seconds{skipped}: checks the bench works",
    )


def start_broker() -> str:
    """The bootstrap address: KAFKA_BOOTSTRAP when set, else a broker scripts/kafka.sh starts."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if bootstrap:
        return bootstrap
    started = subprocess.run(
        ["bash", str(KAFKA), "start"],
        env=BENCH_KAFKA_ENV,
        check=True,
        capture_output=True,
        text=True,
    )
    return started.stdout.split()[-1]


def stop_broker() -> None:
    """Stops the broker start_broker started (none when KAFKA_BOOTSTRAP is set)."""
    if not os.environ.get("KAFKA_BOOTSTRAP"):
        subprocess.run(["bash", str(KAFKA), "stop"], env=BENCH_KAFKA_ENV, check=True)


def records_on(bootstrap: str, topic: str, partitions: int) -> int:
    """Records in the topic, from its watermarks (confluent-kafka as an outside observer)."""
    # Imported here: producer_instructions.py's children import this module under callgrind,
    # where a second librdkafka would count against ferrokafka's cases.
    from confluent_kafka import Consumer, TopicPartition

    observer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-counter"})
    try:
        total = 0
        for partition in range(partitions):
            low, high = observer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=10.0
            )
            total += high - low
        return total
    finally:
        observer.close()


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as the benches print them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def median_p90(samples: list[float]) -> tuple[float, float]:
    """The median and 90th percentile of a latency case (one sample: that sample twice)."""
    median = statistics.median(samples)
    return median, statistics.quantiles(samples, n=10)[-1] if len(samples) > 1 else median
