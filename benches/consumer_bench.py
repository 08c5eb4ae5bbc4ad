"""Consumer throughput: ferrokafka's Consumer against confluent-kafka's consume() and poll()
loops, and the speed-up from partition concurrency with an I/O-bound handler, in one run.

Usage:
    .venv/bin/python benches/consumer_bench.py [--messages 1000000] [--size 100] [--io 50000]

Starts a broker with scripts/kafka.sh on port 19592 unless KAFKA_BOOTSTRAP is set. The records
are produced once to a 6-partition topic; every case reads all of them with its own consumer
group from the earliest offset. A case is timed from its first record to its last, so group
joins do not count. Prints a markdown table of records/s and the ratios to the peers.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer as ConfluentConsumer

from ferrokafka import AsyncProducer, Batch, Client, Consumer, NewTopic

ROOT = Path(__file__).resolve().parent.parent
KAFKA = ROOT / "scripts" / "kafka.sh"
LIMIT = 300.0
# Bounds large enough that load control never pauses a partition in these runs (see
# RESULTS-consumer.md: a librdkafka resume can wait up to 1 s for an idle broker thread).
ROOMY: dict[str, Any] = {"max_queue_records": 200_000, "max_queue_bytes": 256 * 1024 * 1024}


def fill(client: Client, bootstrap: str, partitions: int, count: int, size: int) -> str:
    topic = f"bench-consumer-{uuid.uuid4().hex[:8]}"
    client.create_topics([NewTopic(topic, num_partitions=partitions)])
    payload = b"x" * size
    with AsyncProducer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20}, max_queue_size=100_000
    ) as producer:
        for start in range(0, count, 50_000):
            batch = [(payload, f"k{n}") for n in range(start, min(count, start + 50_000))]
            producer.produce_many(batch, topic=topic)
            producer.flush(60.0)
    return topic


def group_config(bootstrap: str) -> dict[str, str | int | float | bool]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
    }


def ferrokafka_rate(
    bootstrap: str,
    topic: str,
    count: int,
    work: Callable[[Batch], None],
    **options: Any,
) -> float:
    done, lock = threading.Event(), threading.Lock()
    seen, first = 0, 0.0

    def handle(batch: Batch) -> None:
        nonlocal seen, first
        work(batch)
        with lock:
            if not seen:
                first = time.perf_counter()
            seen += len(batch)
            if seen >= count:
                done.set()

    with Consumer(group_config(bootstrap), [topic], handle, **options):
        if not done.wait(LIMIT):
            raise TimeoutError(f"ferrokafka consumer saw {seen} of {count}")
        elapsed = time.perf_counter() - first
    return count / elapsed


def confluent_rate(bootstrap: str, topic: str, count: int, batch: bool) -> float:
    consumer = ConfluentConsumer(group_config(bootstrap))
    consumer.subscribe([topic])
    seen, first, deadline = 0, 0.0, time.monotonic() + LIMIT
    try:
        while seen < count and time.monotonic() < deadline:
            if batch:
                messages = consumer.consume(num_messages=1000, timeout=1.0)
            else:
                message = consumer.poll(1.0)
                messages = [] if message is None else [message]
            good = sum(1 for m in messages if m.error() is None)
            if good and not seen:
                first = time.perf_counter()
            seen += good
        elapsed = time.perf_counter() - first
    finally:
        consumer.close()
    if seen < count:
        raise TimeoutError(f"confluent consumer saw {seen} of {count}")
    return count / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--io", type=int, default=50_000, help="records for the 1 ms handler")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes that run in seconds: checks the bench works",
    )
    args = parser.parse_args()
    if args.smoke:
        args.messages, args.io = 2_000, 200

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    env = {**os.environ, "KAFKA_PORT": "19592"}
    started = not bootstrap
    if not bootstrap:
        bootstrap = subprocess.run(
            ["bash", str(KAFKA), "start"], env=env, check=True, capture_output=True, text=True
        ).stdout.split()[-1]
    try:
        client = Client({"bootstrap.servers": bootstrap})
        n = args.messages
        topic = fill(client, bootstrap, 6, n, args.size)

        def noop(batch: Batch) -> None:
            del batch

        def io(batch: Batch) -> None:
            del batch
            time.sleep(0.001)

        ours = ferrokafka_rate(bootstrap, topic, n, noop)
        roomy = ferrokafka_rate(bootstrap, topic, n, noop, **ROOMY)
        consume = confluent_rate(bootstrap, topic, n, batch=True)
        poll = confluent_rate(bootstrap, topic, n, batch=False)

        m = args.io
        io_six = fill(client, bootstrap, 6, m, args.size)
        io_one = fill(client, bootstrap, 1, m, args.size)
        six = ferrokafka_rate(bootstrap, io_six, m, io, max_batch_size=10, **ROOMY)
        one = ferrokafka_rate(bootstrap, io_one, m, io, max_batch_size=10, **ROOMY)
        six_default = ferrokafka_rate(bootstrap, io_six, m, io, max_batch_size=10)
    finally:
        if started:
            subprocess.run(["bash", str(KAFKA), "stop"], env=env, check=False)

    print(f"{n:,} records of {args.size} B, 6 partitions, one run\n")
    print("| case | records/s | vs consume(1000) | vs poll() |")
    print("|---|---:|---:|---:|")
    for name, rate in [
        ("ferrokafka Consumer, no-op batch handler, default bounds (1000 rec / 1 MiB)", ours),
        ("ferrokafka Consumer, no-op batch handler, bounds 200k rec / 256 MiB", roomy),
        ("confluent-kafka consume(num_messages=1000) loop", consume),
        ("confluent-kafka poll() loop", poll),
    ]:
        print(f"| {name} | {rate:,.0f} | {rate / consume:.2f}x | {rate / poll:.2f}x |")
    print(f"\n{m:,} records, handler sleeps 1 ms per batch, max_batch_size=10\n")
    print("| case | records/s | speed-up |")
    print("|---|---:|---:|")
    print(f"| 1 partition, one worker, bounds 200k rec | {one:,.0f} | 1.00x |")
    print(f"| 6 partitions, six workers, bounds 200k rec | {six:,.0f} | {six / one:.2f}x |")
    speed_up = six_default / one
    print(f"| 6 partitions, six workers, default bounds | {six_default:,.0f} | {speed_up:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
