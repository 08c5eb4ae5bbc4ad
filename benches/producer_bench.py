"""Producer throughput: ferrokafka's AsyncProducer against confluent-kafka and Kafka's own
ProducerPerformance tool, in one run, on the local broker.

Usage:
    .venv/bin/python benches/producer_bench.py [--messages 1000000] [--size 100]

Starts a broker with scripts/kafka.sh on port 19592 unless KAFKA_BOOTSTRAP is set. Each case
writes N messages of S bytes to its own 3-partition topic and waits until the broker
acknowledged all of them. Prints a markdown table: messages/s, client CPU seconds (user+sys of
this process, all threads) and the ratio to the confluent-kafka loop measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from ferrokafka import AsyncProducer, Client, NewTopic

ROOT = Path(__file__).resolve().parent.parent
KAFKA = ROOT / "scripts" / "kafka.sh"
BATCH = 10_000


@dataclass
class Result:
    name: str
    seconds: float
    cpu_seconds: float
    messages: int

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def cpu_now() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(name: str, messages: int, run: Callable[[], None]) -> Result:
    cpu, start = cpu_now(), time.perf_counter()
    run()
    return Result(name, time.perf_counter() - start, cpu_now() - cpu, messages)


def new_topic(client: Client) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    client.create_topics([NewTopic(name, num_partitions=3)])
    return name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes that run in seconds: checks the bench works",
    )
    args = parser.parse_args()
    if args.smoke:
        args.messages = 2 * BATCH  # the single-produce case triggers deliveries every BATCH
    n, payload = args.messages, b"x" * args.size
    values = [payload] * n

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    env = {**os.environ, "KAFKA_PORT": "19592"}
    if not bootstrap:
        bootstrap = subprocess.run(
            ["bash", str(KAFKA), "start"], env=env, check=True, capture_output=True, text=True
        ).stdout.split()[-1]
    client = Client({"bootstrap.servers": bootstrap})
    base = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "queue.buffering.max.messages": 1_000_000,
    }
    results: list[Result] = []

    def ferrokafka_many(max_queue_size: int, overflow: str) -> Callable[[], None]:
        def run() -> None:
            topic = new_topic(client)
            producer = AsyncProducer(
                base,
                max_queue_size=max_queue_size,
                max_queue_bytes=2**31,
                overflow=overflow,  # type: ignore[arg-type]
                delivery_threshold=min(BATCH, max_queue_size),
            )
            for start in range(0, n, BATCH):
                producer.produce_many(values[start : start + BATCH], topic=topic)
            producer.flush(timeout=300)
            assert producer.stats()["delivered"] == n
            producer.shutdown()

        return run

    def ferrokafka_single() -> None:
        topic = new_topic(client)
        producer = AsyncProducer(
            base, max_queue_size=n, max_queue_bytes=2**31, delivery_threshold=BATCH
        )
        produce = producer.produce
        for value in values:
            produce(value, topic)
        producer.flush(timeout=300)
        assert producer.stats()["delivered"] == n
        producer.shutdown()

    def confluent(with_callbacks: bool) -> Callable[[], None]:
        def run() -> None:
            topic = new_topic(client)
            producer = Producer(base)
            delivered = 0

            def on_delivery(err: object, _msg: object) -> None:
                nonlocal delivered
                delivered += err is None

            produce, poll = producer.produce, producer.poll
            if with_callbacks:
                for value in values:
                    produce(topic, value, on_delivery=on_delivery)
                    poll(0)
            else:
                for value in values:
                    produce(topic, value)
                    poll(0)
            assert producer.flush(300) == 0
            assert delivered == n or not with_callbacks

        return run

    cases: list[tuple[str, Callable[[], None]]] = [
        ("confluent-kafka produce+poll(0), with delivery callbacks", confluent(True)),
        ("confluent-kafka produce+poll(0), no callbacks", confluent(False)),
        ("ferrokafka AsyncProducer.produce_many (batches of 10k)", ferrokafka_many(n, "raise")),
        ("ferrokafka AsyncProducer.produce", ferrokafka_single),
        ("ferrokafka produce_many, saturated queue (1000, block)", ferrokafka_many(1000, "block")),
    ]
    for name, run in cases:
        results.append(timed(name, n, run))
        print(f"{name}: {results[-1].rate:,.0f} msg/s", file=sys.stderr)

    tools_cp = Path(os.environ.get("FERROKAFKA_CACHE", Path.home() / ".cache" / "ferrokafka"))
    perf = subprocess.run(
        [
            "java",
            "-Xmx512m",
            "-cp",
            f"{tools_cp}/kafka-4.3.1/libs/*",
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic",
            new_topic(client),
            "--num-records",
            str(n),
            "--record-size",
            str(args.size),
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={bootstrap}",
            "linger.ms=5",
            "acks=all",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    summary = perf.stdout.strip().splitlines()[-1]
    java_rate = float(re.search(r"([\d.]+) records/sec", summary).group(1))  # type: ignore[union-attr]

    if not os.environ.get("KAFKA_BOOTSTRAP"):
        subprocess.run(["bash", str(KAFKA), "stop"], env=env, check=True, capture_output=True)

    with_cb, without_cb = results[0].rate, results[1].rate
    print(f"\n{n:,} messages of {args.size} bytes, 3 partitions, local broker, linger.ms=5\n")
    print(
        "| case | msgs/s | client CPU s | vs confluent with callbacks | vs confluent no callbacks |"
    )
    print("|---|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.name} | {r.rate:,.0f} | {r.cpu_seconds:.2f} | "
            f"{r.rate / with_cb:.2f}x | {r.rate / without_cb:.2f}x |"
        )
    print(
        f"| Kafka ProducerPerformance (Java, separate JVM) | {java_rate:,.0f} | n/a | "
        f"{java_rate / with_cb:.2f}x | {java_rate / without_cb:.2f}x |"
    )
    unbounded, saturated = results[2].rate, results[4].rate
    print(f"\nsaturated bounded queue keeps {saturated / unbounded:.2f}x of unbounded throughput")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
