"""Consumer throughput: ferrokafka's Consumer against confluent-kafka's consume(1000) loop and
Kafka's own Java ConsumerPerformance, and the speed-up from partition concurrency, in one run.

Usage:
    .venv/bin/python benches/consumer_bench.py [--messages 1000000] [--size 100] [--io 20000]
        [--samples 3] [--no-java] [--smoke]

Starts a broker with scripts/kafka.sh on port 19592 unless KAFKA_BOOTSTRAP is set. The records
are produced once to a 6-partition topic and counted there (watermarks) before any case runs;
every sample reads all of them with its own consumer group from the earliest offset, timed from
its first record to its last, so group joins do not count. Cases run interleaved (A-B-...-B-A,
``--samples`` rounds) and each reports the median of its samples; the load average is printed,
because the figures mean little on a busy machine. Each in-process case also reports the CPU its
process used per million records over the same span (``time.process_time()``, every thread,
librdkafka's included): on a shared machine the records/s of a fetch-bound case move with the
other jobs, the CPU it spends per record much less. Every handler touches every value:

- ferrokafka, ``sum(len(v) for v in batch.values())``, default bounds and 200k-record bounds;
- ferrokafka, ``batch.to_arrow()`` and the summed value lengths computed by pyarrow;
- ferrokafka's ``AsyncConsumer`` with a coroutine handler doing the same sum, default bounds
  (printed also as a ratio to the thread-based ``Consumer``);
- confluent-kafka, ``consume(num_messages=1000)`` and ``sum(len(m.value()))``, with librdkafka's
  defaults and with ``fetch.queue.backoff.ms=0`` (see ``CONFLUENT_TUNED``);
- Java ``ConsumerPerformance`` (its fetch-only rate, from the jars scripts/kafka.sh fetched).

Then ``--io`` records with a handler that sleeps 1 ms per batch of 10: six partitions against
one, and on one partition with 1,000 keys ``ordering="key"`` (``max_concurrency=8``) against
``ordering="partition"``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow.compute as pc
from _common import add_smoke_option, load_average, records_on, start_broker, stop_broker
from confluent_kafka import Consumer as ConfluentConsumer

from ferrokafka import AsyncConsumer, AsyncProducer, Batch, Client, Consumer, NewTopic

KAFKA_HOME = Path(os.environ.get("FERROKAFKA_CACHE", Path.home() / ".cache" / "ferrokafka"))
LIMIT = 300.0
CONFLUENT = "confluent-kafka consume(1000), len(m.value())"
# librdkafka's defaults stop fetching a partition for fetch.queue.backoff.ms (1 s) once its
# prefetch holds queued.min.messages (100,000); a loop slower than the broker then idles for most
# of each second on topics that large. The tuned peer turns that pause off.
CONFLUENT_TUNED = "confluent-kafka consume(1000), len(m.value()), fetch.queue.backoff.ms=0"
SYNC = "ferrokafka values(), default bounds"
ASYNC = "ferrokafka AsyncConsumer, async handler, values(), default bounds"
ROOMY: dict[str, Any] = {"max_queue_records": 200_000, "max_queue_bytes": 256 * 1024 * 1024}


class Sample(NamedTuple):
    """One case's records/s and process CPU seconds per million records (None when the case
    runs in another process), both over the span from its first record to its last."""

    rate: float
    cpu: float | None


def measured(count: int, elapsed: float, cpu: float) -> Sample:
    return Sample(count / elapsed, cpu / count * 1_000_000)


def fill(
    client: Client, bootstrap: str, partitions: int, count: int, size: int, keys: int = 0
) -> str:
    """A new topic holding ``count`` records; keys cycle through ``keys`` values (0: unique)."""
    topic = f"bench-consumer-{uuid.uuid4().hex[:8]}"
    client.create_topics([NewTopic(topic, num_partitions=partitions)])
    payload = b"x" * size
    with AsyncProducer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20}, max_queue_size=100_000
    ) as producer:
        for start in range(0, count, 50_000):
            numbers = range(start, min(count, start + 50_000))
            batch = [(payload, f"k{n % keys if keys else n}") for n in numbers]
            producer.produce_many(batch, topic=topic)
            producer.flush(60.0)
    stored = records_on(bootstrap, topic, partitions)
    if stored != count:
        raise RuntimeError(f"{topic} holds {stored} records, expected {count}")
    return topic


def group_config(bootstrap: str) -> dict[str, str | int | float | bool]:
    return {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}"}


def ferrokafka_rate(
    bootstrap: str, topic: str, count: int, work: Callable[[Batch], object], **options: Any
) -> Sample:
    done, lock = threading.Event(), threading.Lock()
    seen, first, first_cpu = 0, 0.0, 0.0

    def handle(batch: Batch) -> None:
        nonlocal seen, first, first_cpu
        work(batch)
        with lock:
            if not seen:
                first, first_cpu = time.perf_counter(), time.process_time()
            seen += len(batch)
            if seen >= count:
                done.set()

    with Consumer(group_config(bootstrap), [topic], handle, **options):
        if not done.wait(LIMIT):
            raise TimeoutError(f"ferrokafka consumer saw {seen} of {count}")
        elapsed, cpu = time.perf_counter() - first, time.process_time() - first_cpu
    return measured(count, elapsed, cpu)


def async_rate(bootstrap: str, topic: str, count: int, work: Callable[[Batch], object]) -> Sample:
    """ferrokafka_rate for an AsyncConsumer whose coroutine handler does ``work``."""

    async def measure() -> Sample:
        done = asyncio.Event()
        seen, first, first_cpu = 0, 0.0, 0.0

        async def handle(batch: Batch) -> None:
            nonlocal seen, first, first_cpu
            work(batch)
            if not seen:
                first, first_cpu = time.perf_counter(), time.process_time()
            seen += len(batch)
            if seen >= count:
                done.set()

        async with AsyncConsumer(group_config(bootstrap), [topic], handle):
            try:
                await asyncio.wait_for(done.wait(), LIMIT)
            except TimeoutError:
                raise TimeoutError(f"ferrokafka AsyncConsumer saw {seen} of {count}") from None
            elapsed, cpu = time.perf_counter() - first, time.process_time() - first_cpu
        return measured(count, elapsed, cpu)

    return asyncio.run(measure())


def confluent_rate(bootstrap: str, topic: str, count: int, **tuning: str | int) -> Sample:
    config = {**group_config(bootstrap), "auto.offset.reset": "earliest", **tuning}
    consumer = ConfluentConsumer(config)
    consumer.subscribe([topic])
    seen, first, first_cpu, touched, deadline = 0, 0.0, 0.0, 0, time.monotonic() + LIMIT
    try:
        while seen < count and time.monotonic() < deadline:
            messages = consumer.consume(num_messages=1000, timeout=1.0)
            good = [m for m in messages if m.error() is None]
            touched += sum(len(m.value() or b"") for m in good)
            if good and not seen:
                first, first_cpu = time.perf_counter(), time.process_time()
            seen += len(good)
        elapsed, cpu = time.perf_counter() - first, time.process_time() - first_cpu
    finally:
        consumer.close()
    if seen < count:
        raise TimeoutError(f"confluent consumer saw {seen} of {count}")
    return measured(count, elapsed, cpu)


def java_rate(bootstrap: str, topic: str, count: int) -> Sample:
    """Kafka's ConsumerPerformance: its fetch.nMsg.sec (rebalance time excluded)."""
    libs = next(KAFKA_HOME.glob("kafka-*/libs"))
    log_config = libs.parent / "log4j2.xml"
    command = [
        "java",
        "-Xmx512m",
        f"-Dlog4j2.configurationFile={log_config}",
        "-cp",
        f"{libs}/*",
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--num-records",
        str(count),
        "--group",
        f"bench-java-{uuid.uuid4().hex[:8]}",
        "--timeout",
        str(int(LIMIT * 1000)),
    ]
    run = subprocess.run(command, check=False, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"ConsumerPerformance failed: {run.stderr.strip()[-2000:]}")
    # The broker's log4j configuration also logs the client to stdout: find the result rows.
    lines = run.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
    header = lines[at]
    values = next(line for line in lines[at + 1 :] if line.count(",") == header.count(","))
    row = dict(zip([h.strip() for h in header.split(",")], values.split(","), strict=True))
    if int(row["data.consumed.in.nMsg"]) < count:
        raise TimeoutError(f"ConsumerPerformance saw {row['data.consumed.in.nMsg']} of {count}")
    return Sample(float(row["fetch.nMsg.sec"]), None)


def interleaved(cases: dict[str, Callable[[], Sample]], samples: int) -> dict[str, Sample]:
    """Runs the cases forward, then backward, ... (A-B-B-A), and returns each one's medians."""
    results: dict[str, list[Sample]] = {name: [] for name in cases}
    names = list(cases)
    for round_number in range(samples):
        for name in names if round_number % 2 == 0 else reversed(names):
            sample = cases[name]()
            results[name].append(sample)
            # Progress, and each sample for judging the spread behind a median (on stderr).
            print(f"  round {round_number + 1}: {name}: {sample.rate:,.0f}/s", file=sys.stderr)
    medians = {}
    for name, runs in results.items():
        cpus = [run.cpu for run in runs if run.cpu is not None]
        medians[name] = Sample(
            statistics.median(run.rate for run in runs), statistics.median(cpus) if cpus else None
        )
    return medians


def touch_values(batch: Batch) -> int:
    return sum(len(v or b"") for v in batch.values())


def touch_arrow(batch: Batch) -> int:
    values = batch.to_arrow().column("value")
    return int(pc.sum(pc.binary_length(values)).as_py() or 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--io", type=int, default=20_000, help="records for the 1 ms handler")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--no-java", action="store_true", help="skip ConsumerPerformance")
    add_smoke_option(parser, ", no Java")
    args = parser.parse_args()
    if args.smoke:
        args.messages, args.io, args.samples, args.no_java = 2_000, 200, 1, True
    java = not args.no_java and shutil.which("java") is not None

    bootstrap = start_broker()
    try:
        client = Client({"bootstrap.servers": bootstrap})
        n, m = args.messages, args.io
        topic = fill(client, bootstrap, 6, n, args.size)
        io_six = fill(client, bootstrap, 6, m, args.size)
        io_one = fill(client, bootstrap, 1, m, args.size)
        io_keys = fill(client, bootstrap, 1, m, args.size, keys=1000)
        load_before = load_average()
        cases: dict[str, Callable[[], Sample]] = {
            SYNC: lambda: ferrokafka_rate(bootstrap, topic, n, touch_values),
            "ferrokafka values(), bounds 200k rec / 256 MiB": lambda: ferrokafka_rate(
                bootstrap, topic, n, touch_values, **ROOMY
            ),
            "ferrokafka to_arrow(), default bounds": lambda: ferrokafka_rate(
                bootstrap, topic, n, touch_arrow
            ),
            ASYNC: lambda: async_rate(bootstrap, topic, n, touch_values),
            CONFLUENT: lambda: confluent_rate(bootstrap, topic, n),
            CONFLUENT_TUNED: lambda: confluent_rate(
                bootstrap, topic, n, **{"fetch.queue.backoff.ms": 0}
            ),
        }
        if java:
            cases["Java ConsumerPerformance (fetch rate)"] = lambda: java_rate(bootstrap, topic, n)
        rates = interleaved(cases, args.samples)

        def io(batch: Batch) -> None:
            touch_values(batch)
            time.sleep(0.001)

        io_rates = interleaved(
            {
                "6 partitions, six workers": lambda: ferrokafka_rate(
                    bootstrap, io_six, m, io, max_batch_size=10
                ),
                "1 partition, one worker": lambda: ferrokafka_rate(
                    bootstrap, io_one, m, io, max_batch_size=10
                ),
                '1 partition, 1,000 keys, ordering="key", max_concurrency=8': lambda: (
                    ferrokafka_rate(bootstrap, io_keys, m, io, max_batch_size=10, ordering="key")
                ),
            },
            args.samples,
        )
        load_after = load_average()
    finally:
        stop_broker()

    print(f"load average (1/5/15 min): before {load_before}, after {load_after}\n")
    print(f"{n:,} records of {args.size} B, 6 partitions, median of {args.samples} interleaved\n")
    consume, tuned = rates[CONFLUENT].rate, rates[CONFLUENT_TUNED].rate
    java_sample = rates.get("Java ConsumerPerformance (fetch rate)")
    print(
        "| case | records/s | vs consume(1000) | vs consume(1000), no backoff | vs Java "
        "| CPU s per 1M |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, (rate, cpu) in rates.items():
        versus_java = f"{rate / java_sample.rate:.2f}x" if java_sample else "-"
        cpu_figure = "-" if cpu is None else f"{cpu:.2f}"
        print(
            f"| {name} | {rate:,.0f} | {rate / consume:.2f}x | {rate / tuned:.2f}x "
            f"| {versus_java} | {cpu_figure} |"
        )
    sync, asynchronous = rates[SYNC], rates[ASYNC]
    cpu_ratio = (
        f", {asynchronous.cpu / sync.cpu:.2f}x the CPU per record"
        if asynchronous.cpu and sync.cpu
        else ""
    )
    print(
        "\nAsyncConsumer / Consumer (same handler work): "
        f"{asynchronous.rate / sync.rate:.2f}x the records/s{cpu_ratio}"
    )
    print(f"\n{m:,} records, handler sleeps 1 ms per batch, max_batch_size=10\n")
    print("| case | records/s | speed-up |")
    print("|---|---:|---:|")
    one = io_rates["1 partition, one worker"].rate
    for name, (rate, _) in io_rates.items():
        print(f"| {name} | {rate:,.0f} | {rate / one:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
