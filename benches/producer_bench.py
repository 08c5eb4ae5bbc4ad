"""Producer throughput: ferrokafka's AsyncProducer against confluent-kafka and Kafka's own
ProducerPerformance tool, in one run, on the local broker.

Usage:
    .venv/bin/python benches/producer_bench.py [--messages 1000000] [--size 100] [--samples 3]
        [--no-java]
    .venv/bin/python benches/producer_bench.py --smoke     # seconds: checks the bench works

Starts a broker with scripts/kafka.sh on port 19592 unless KAFKA_BOOTSTRAP is set. Each sample
writes N messages of S bytes to a 3-partition topic of its own and is timed until the broker
acknowledged all of them (closing the client comes after, untimed, for every case); then the
records on the topic are counted (high watermarks). The cases run
interleaved, forwards then backwards (A-B-B-A), so a drift of the machine hits every case alike;
the table shows each case's median of the samples: messages/s, client CPU per message (user+sys
of this process, all threads, librdkafka's included) and the ratios to the two confluent-kafka
loops. Kafka's Java ProducerPerformance (the broker's own jars; ``acks=all``, idempotence,
``linger.ms=5`` and ``batch.size=262144`` as the Java producer's tuning advice has it) runs in the
same interleaving, first in forward rounds and last in backward ones; its figure is the rate it
reports itself (its JVM's start left out), and its records are counted on its topic too. The
load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from _common import add_smoke_option, load_average, records_on, start_broker, stop_broker
from confluent_kafka import Producer

from ferrokafka import AsyncProducer, Client, DeliveryReport, Message, NewTopic

BATCH = 10_000
PARTITIONS = 3


@dataclass
class Case:
    name: str
    run: Callable[[str], Callable[[], object]]  # returns how to close the client, untimed
    rates: list[float] = field(default_factory=list)
    cpu_per_message: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpu_per_message)


# Kafka's own producer as the limit, tuned for throughput as the Java producer's documentation
# advises (bigger batches, a few ms of linger), with acks=all and idempotence as ours default to.
JAVA_PROPS = ["acks=all", "enable.idempotence=true", "linger.ms=5", "batch.size=262144"]


def java_rate(bootstrap: str, topic: str, count: int, size: int) -> float:
    """Kafka's ProducerPerformance (the jars scripts/kafka.sh fetched): its own records/s,
    which leaves the JVM's start out."""
    tools_cp = Path(os.environ.get("FERROKAFKA_CACHE", Path.home() / ".cache" / "ferrokafka"))
    perf = subprocess.run(
        [
            "java",
            "-Xmx512m",
            "-cp",
            f"{tools_cp}/kafka-4.3.1/libs/*",
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic",
            topic,
            "--num-records",
            str(count),
            "--record-size",
            str(size),
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={bootstrap}",
            *JAVA_PROPS,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    summary = perf.stdout.strip().splitlines()[-1]
    on_topic = records_on(bootstrap, topic, PARTITIONS)
    assert on_topic == count, f"ProducerPerformance: {on_topic} records on the topic, not {count}"
    return float(re.search(r"([\d.]+) records/sec", summary).group(1))  # type: ignore[union-attr]


def cpu_now() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--samples", type=int, default=3, help="samples per case (median)")
    parser.add_argument("--no-java", action="store_true", help="skip ProducerPerformance")
    add_smoke_option(parser)
    args = parser.parse_args()
    if args.smoke:
        args.messages, args.samples = 2 * BATCH, 1
    java = not args.no_java and shutil.which("java") is not None
    n, payload = args.messages, b"x" * args.size
    values = [payload] * n

    bootstrap = start_broker()
    client = Client({"bootstrap.servers": bootstrap})
    base = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "queue.buffering.max.messages": 1_000_000,
    }

    def new_topic() -> str:
        name = f"bench-{uuid.uuid4().hex[:8]}"
        client.create_topics([NewTopic(name, num_partitions=PARTITIONS)])
        return name

    def ferrokafka_many(
        max_queue_size: int, overflow: str, with_reports: bool = False
    ) -> Callable[[str], Callable[[], object]]:
        def run(topic: str) -> Callable[[], object]:
            producer = AsyncProducer(
                base,
                max_queue_size=max_queue_size,
                max_queue_bytes=2**31,
                overflow=overflow,  # type: ignore[arg-type]
                delivery_threshold=min(BATCH, max_queue_size),
            )
            reports: list[DeliveryReport] = []
            on_delivery = reports.append if with_reports else None
            for start in range(0, n, BATCH):
                chunk = values[start : start + BATCH]
                producer.produce_many(chunk, topic=topic, on_delivery=on_delivery)
            producer.flush(timeout=300)
            assert producer.stats()["delivered"] == n
            # What a caller reads from its reports (as the confluent callback counts successes).
            assert sum(report.delivered for report in reports) == (n if with_reports else 0)

            def check_and_close() -> object:  # untimed: every record's own partition and offset
                positions = {
                    position
                    for report in reports
                    for position in zip(report.partitions(), report.offsets(), strict=True)
                }
                assert len(positions) == (n if with_reports else 0)
                assert all(offset >= 0 for _, offset in positions)
                return producer.shutdown()

            return check_and_close

        return run

    def ferrokafka_single(with_futures: bool) -> Callable[[str], Callable[[], object]]:
        def run(topic: str) -> Callable[[], object]:
            producer = AsyncProducer(
                base, max_queue_size=n, max_queue_bytes=2**31, delivery_threshold=BATCH
            )
            if with_futures:
                produce_future = producer.produce_future
                futures: list[Future[Message]] = [produce_future(v, topic) for v in values]
                producer.flush(timeout=300)
                assert all(f.result(0).offset() >= 0 for f in futures)
            else:
                produce = producer.produce
                for value in values:
                    produce(value, topic)
                producer.flush(timeout=300)
            assert producer.stats()["delivered"] == n
            return producer.shutdown

        return run

    def confluent(with_callbacks: bool) -> Callable[[str], Callable[[], object]]:
        def run(topic: str) -> Callable[[], object]:
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
            return lambda: producer  # destroyed when the reference goes

        return run

    cases = [
        Case("confluent-kafka produce+poll(0), with delivery callbacks", confluent(True)),
        Case("confluent-kafka produce+poll(0), no callbacks", confluent(False)),
        Case("ferrokafka AsyncProducer.produce_many (batches of 10k)", ferrokafka_many(n, "raise")),
        Case("ferrokafka AsyncProducer.produce", ferrokafka_single(with_futures=False)),
        Case("ferrokafka AsyncProducer.produce_future (a future each)", ferrokafka_single(True)),
        Case("ferrokafka produce_many, queue of 1000, block", ferrokafka_many(1000, "block")),
        Case(
            "ferrokafka produce_many + a DeliveryReport per batch (every record's offset)",
            ferrokafka_many(n, "raise", with_reports=True),
        ),
    ]
    java_rates: list[float] = []
    print(f"load average before: {load_average()}", file=sys.stderr)
    for sample in range(args.samples):
        # A-B-B-A, Java first in forward rounds and last in backward ones.
        if sample % 2 == 0 and java:
            java_rates.append(java_rate(bootstrap, new_topic(), n, args.size))
        order = cases if sample % 2 == 0 else cases[::-1]
        for case in order:
            topic = new_topic()
            cpu, start = cpu_now(), time.perf_counter()
            close = case.run(topic)
            seconds, cpu_used = time.perf_counter() - start, cpu_now() - cpu
            close()
            del close
            on_topic = records_on(bootstrap, topic, PARTITIONS)
            assert on_topic == n, f"{case.name}: {on_topic} records on the topic, not {n}"
            case.rates.append(n / seconds)
            case.cpu_per_message.append(cpu_used / n)
            print(f"sample {sample + 1}: {case.name}: {n / seconds:,.0f} msg/s", file=sys.stderr)
        if sample % 2 == 1 and java:
            java_rates.append(java_rate(bootstrap, new_topic(), n, args.size))

    after = load_average()

    stop_broker()

    with_cb, without_cb = cases[0], cases[1]
    print(
        f"\n{n:,} messages of {args.size} bytes, {PARTITIONS} partitions, local broker, "
        f"linger.ms=5; median of {args.samples} interleaved sample(s) per case; "
        f"load average after: {after}\n"
    )
    print(
        "| case | msgs/s | client CPU µs/msg | vs confluent with callbacks | "
        "vs confluent no callbacks | CPU vs confluent no callbacks |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for case in cases:
        print(
            f"| {case.name} | {case.rate:,.0f} | {case.cpu * 1e6:.2f} | "
            f"{case.rate / with_cb.rate:.2f}x | {case.rate / without_cb.rate:.2f}x | "
            f"{case.cpu / without_cb.cpu:.2f}x |"
        )
    if java_rates:
        java = statistics.median(java_rates)
        print(
            f"| Kafka ProducerPerformance (Java, {' '.join(JAVA_PROPS)}; its own rate) | "
            f"{java:,.0f} | n/a | {java / with_cb.rate:.2f}x | {java / without_cb.rate:.2f}x "
            "| n/a |"
        )
        print(f"\nproduce_many / Java ProducerPerformance: {cases[2].rate / java:.2f}x")
    unbounded, saturated = cases[2].rate, cases[5].rate
    print(f"\nsaturated bounded queue keeps {saturated / unbounded:.2f}x of unbounded throughput")
    return 0


if __name__ == "__main__":
    sys.exit(main())
