"""Two builds of ferrokafka, each installed in its own venv, on the hot paths of every engine, in
one run: what a build choice (abi3 or not) or a refactor costs.

Usage:
    .venv/bin/python benches/builds_bench.py --builds before=VENV_A/bin/python \\
        after=VENV_B/bin/python
        [--messages 300000] [--schedules 50000] [--queued 50000] [--rounds 2]
    .venv/bin/python benches/builds_bench.py --smoke   # seconds: both "builds" are this Python

Starts a broker with scripts/kafka.sh on port 19592 unless KAFKA_BOOTSTRAP is set. One sample of
a build is a fresh process of its Python that measures, in turn:
- ``AsyncProducer.produce_many``: N records of 100 bytes in batches of 10,000 to a new
  3-partition topic, timed until flushed (as producer_bench.py);
- a ``Consumer`` reading N records from a 6-partition topic filled once, timed from its first
  record to its last, touching every value (consumer_bench.py's ``ferrokafka_rate``);
- the ``Scheduler`` dispatching S schedules all due at once, at-least-once, from the first
  target's create time until it counts them all dispatched (scheduler_bench.py's burst);
- a ``QueueConsumer`` (markers backend) reading Q records of a 3-partition topic filled once, in
  batches of 500 with ``ack_many`` and a final ``flush`` (redelivery_bench.py's loop);
- one codec call, ``codecs.encode_process_report`` of a 10 KB report (best of 20; core_bench.py);
- one ``Batch.to_arrow()`` of a 300-record batch of that topic inside a ``Consumer``'s handler
  (best of 5 runs of 2,000 calls).
Samples run A-B-B-A, then B-A-A-B, ... (``--rounds``); the table gives each build's medians and
B/A; the load average is printed before and after. Each sample counts the records afterwards:
every produced record on its topic (confluent-kafka's watermarks), every schedule's target on
its topic.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import timeit
import uuid
from pathlib import Path

from _common import load_average, records_on, start_broker, stop_broker

BENCHES = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHES))

BATCH = 10_000
QUEUE_BATCH = 500
METRICS = {
    "produce_many msgs/s": "produce",
    "Consumer msgs/s": "consume",
    "Scheduler burst dispatches/s": "dispatch",
    "QueueConsumer + ack_many msgs/s": "redeliver",
    "encode_process_report µs (10 KB)": "codec_us",
    "Batch.to_arrow µs (300 records)": "to_arrow_us",
}
ARROW_BATCH = 300


def produce_rate(bootstrap: str, count: int) -> float:
    from ferrokafka import AsyncProducer, Client, NewTopic

    target = f"bench-builds-{uuid.uuid4().hex[:8]}"
    Client({"bootstrap.servers": bootstrap}).create_topics([NewTopic(target, num_partitions=3)])
    values = [b"x" * 100] * count
    producer = AsyncProducer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5},
        max_queue_size=max(count, BATCH),
        max_queue_bytes=2**31,
        delivery_threshold=min(count, BATCH),
    )
    started = time.perf_counter()
    for start in range(0, count, BATCH):
        producer.produce_many(values[start : start + BATCH], topic=target)
    producer.flush(timeout=300)
    rate = count / (time.perf_counter() - started)
    assert producer.stats()["delivered"] == count
    producer.shutdown()
    assert records_on(bootstrap, target, 3) == count
    return rate


def dispatch_rate(bootstrap: str, count: int) -> float:
    from scheduler_bench import fresh_topics, produce_schedules, wait_until

    from ferrokafka import Client
    from ferrokafka.scheduling import Scheduler

    client = Client({"bootstrap.servers": bootstrap})
    topic, target = fresh_topics(client)
    produce_schedules(bootstrap, topic, target, [int(time.time())] * count, b"x" * 100)
    config = {"bootstrap.servers": bootstrap}
    with Scheduler(config, [topic], group_id=f"bench-{uuid.uuid4().hex}") as daemon:
        confirmed = wait_until(
            lambda: sum(s["dispatched"] for s in daemon.status()) >= count, 600, 0.005
        )
    stamps = [m.timestamp()[1] for m in client.read_topic(target, max_messages=count)]
    assert len(stamps) == count, f"{len(stamps)} dispatched, not {count}"
    return count / max(confirmed - min(stamps) / 1000, 0.001)


def redeliver_rate(bootstrap: str, queue_topic: str, count: int) -> float:
    from redelivery_bench import queue_loop

    from ferrokafka import Client

    markers = f"bench-builds-markers-{uuid.uuid4().hex[:8]}"
    Client({"bootstrap.servers": bootstrap}).create_topics([markers])
    return queue_loop(bootstrap, queue_topic, markers, count, QUEUE_BATCH, "markers")


def to_arrow_us(bootstrap: str, topic: str, calls: int) -> float:
    """Best time of one ``Batch.to_arrow()`` on a batch of 300 records, over 5 runs of
    ``calls`` calls, inside a Consumer's handler."""
    import threading

    from consumer_bench import group_config

    from ferrokafka import Batch, Consumer

    timed: list[float] = []
    done = threading.Event()

    def handle(batch: Batch) -> None:
        if done.is_set() or len(batch) < min(ARROW_BATCH, calls):
            return
        timed.append(min(timeit.repeat(batch.to_arrow, number=calls, repeat=5)) / calls)
        done.set()

    with Consumer(group_config(bootstrap), [topic], handle, max_batch_size=ARROW_BATCH):
        if not done.wait(120):
            raise TimeoutError("no batch of 300 records came")
    return timed[0] * 1e6


def sample(bootstrap: str, topics: dict[str, str], sizes: dict[str, int]) -> dict[str, float]:
    """One sample of the installed build (run in that build's venv)."""
    from consumer_bench import ferrokafka_rate, touch_values
    from core_bench import process_report

    from ferrokafka import codecs

    produce = produce_rate(bootstrap, sizes["messages"])
    consume = ferrokafka_rate(bootstrap, topics["consume"], sizes["messages"], touch_values).rate
    dispatch = dispatch_rate(bootstrap, sizes["schedules"])
    redeliver = redeliver_rate(bootstrap, topics["queue"], sizes["queued"])
    report = process_report(10_000)
    codec = min(timeit.repeat(lambda: codecs.encode_process_report(report), number=1, repeat=20))
    arrow = to_arrow_us(bootstrap, topics["consume"], 2_000 if sizes["messages"] >= 100_000 else 20)
    return {
        "produce": produce,
        "consume": consume,
        "dispatch": dispatch,
        "redeliver": redeliver,
        "codec_us": codec * 1e6,
        "to_arrow_us": arrow,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--builds", nargs=2, metavar="NAME=PYTHON")
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--schedules", type=int, default=50_000)
    parser.add_argument("--queued", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2, help="A-B-B-A rounds")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the bench works")
    parser.add_argument(
        "--sample", nargs=3, metavar=("BOOTSTRAP", "TOPICS", "SIZES"), help="internal"
    )
    args = parser.parse_args()
    if args.sample:
        bootstrap, topics, sizes = args.sample
        print(json.dumps(sample(bootstrap, json.loads(topics), json.loads(sizes))))
        return 0
    if args.smoke:
        args.builds = [f"a={sys.executable}", f"b={sys.executable}"]
        args.messages, args.schedules, args.queued, args.rounds = 2_000, 1_000, 1_000, 1
    builds = dict(build.split("=", 1) for build in args.builds)
    sizes = {"messages": args.messages, "schedules": args.schedules, "queued": args.queued}

    from consumer_bench import fill
    from redelivery_bench import fill as fill_queue

    from ferrokafka import Client, NewTopic

    bootstrap = start_broker()
    try:
        client = Client({"bootstrap.servers": bootstrap})
        queue_topic = f"bench-builds-queue-{uuid.uuid4().hex[:8]}"
        client.create_topics([NewTopic(queue_topic, 3)])
        fill_queue(bootstrap, queue_topic, args.queued, 100)
        topics = {
            "consume": fill(client, bootstrap, 6, args.messages, 100),
            "queue": queue_topic,
        }
        load_before = load_average()
        results: dict[str, list[dict[str, float]]] = {name: [] for name in builds}
        names = list(builds)
        for round_number in range(args.rounds):
            for name in names + names[::-1] if round_number % 2 == 0 else names[::-1] + names:
                run = subprocess.run(
                    [
                        builds[name],
                        __file__,
                        "--sample",
                        bootstrap,
                        json.dumps(topics),
                        json.dumps(sizes),
                    ],
                    check=True,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                results[name].append(json.loads(run.stdout.splitlines()[-1]))
        a, b = names
        print(f"load average before: {load_before}, after: {load_average()}")
        print(f"| metric | {a} | {b} | {b} / {a} |")
        print("|---|---:|---:|---:|")
        for label, key in METRICS.items():
            median = {name: statistics.median(s[key] for s in results[name]) for name in names}
            print(
                f"| {label} | {median[a]:,.1f} | {median[b]:,.1f} | {median[b] / median[a]:.3f} |"
            )
        for name in names:
            print(f"{name} samples: " + json.dumps(results[name]))
    finally:
        stop_broker()
    return 0


if __name__ == "__main__":
    sys.exit(main())
