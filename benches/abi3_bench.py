"""What the stable ABI (abi3) costs: the hot paths of two builds of ferrokafka, each installed in
its own venv, measured in one run.

Usage:
    .venv/bin/python benches/abi3_bench.py --builds abi3=VENV_A/bin/python cp311=VENV_B/bin/python
        [--messages 300000] [--rounds 2]
    .venv/bin/python benches/abi3_bench.py --smoke   # seconds: both "builds" are this Python

Starts a broker with scripts/kafka.sh on port 19592 unless KAFKA_BOOTSTRAP is set. One sample of
a build is a fresh process of its Python that measures, in turn: ``AsyncProducer.produce_many``
(N records of 100 bytes in batches of 10,000 to a new 3-partition topic, timed until flushed;
as producer_bench.py), a ``Consumer`` reading N records from a 6-partition topic filled once
(timed from its first record to its last, touching every value; consumer_bench.py's
``ferrokafka_rate``) and one codec call, ``codecs.encode_process_report`` of a 10 KB report (best
time of 20 runs; core_bench.py's report). Samples run A-B-B-A, then B-A-A-B, ... (``--rounds``);
the table gives each build's medians and B/A; the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import timeit
import uuid
from pathlib import Path

from _common import start_broker, stop_broker

BENCHES = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHES))

BATCH = 10_000
METRICS = {
    "produce_many msgs/s": "produce",
    "Consumer msgs/s": "consume",
    "encode_process_report µs (10 KB)": "codec_us",
}


def sample(bootstrap: str, topic: str, count: int) -> dict[str, float]:
    """One sample of the installed build (run in that build's venv)."""
    from consumer_bench import ferrokafka_rate, touch_values
    from core_bench import process_report

    from ferrokafka import AsyncProducer, Client, NewTopic, codecs

    target = f"bench-abi3-{uuid.uuid4().hex[:8]}"
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
    produce = count / (time.perf_counter() - started)
    assert producer.stats()["delivered"] == count
    producer.shutdown()

    consume = ferrokafka_rate(bootstrap, topic, count, touch_values)
    report = process_report(10_000)
    codec = min(timeit.repeat(lambda: codecs.encode_process_report(report), number=1, repeat=20))
    return {"produce": produce, "consume": consume, "codec_us": codec * 1e6}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--builds", nargs=2, metavar="NAME=PYTHON")
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=2, help="A-B-B-A rounds")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the bench works")
    parser.add_argument("--sample", nargs=3, metavar=("BOOTSTRAP", "TOPIC", "N"), help="internal")
    args = parser.parse_args()
    if args.sample:
        bootstrap, topic, count = args.sample
        print(json.dumps(sample(bootstrap, topic, int(count))))
        return 0
    if args.smoke:
        args.builds = [f"a={sys.executable}", f"b={sys.executable}"]
        args.messages, args.rounds = 2_000, 1
    builds = dict(build.split("=", 1) for build in args.builds)

    from consumer_bench import fill

    from ferrokafka import Client

    bootstrap = start_broker()
    try:
        topic = fill(Client({"bootstrap.servers": bootstrap}), bootstrap, 6, args.messages, 100)
        load_before = load()
        results: dict[str, list[dict[str, float]]] = {name: [] for name in builds}
        names = list(builds)
        for round_number in range(args.rounds):
            for name in names + names[::-1] if round_number % 2 == 0 else names[::-1] + names:
                run = subprocess.run(
                    [builds[name], __file__, "--sample", bootstrap, topic, str(args.messages)],
                    check=True,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                results[name].append(json.loads(run.stdout.splitlines()[-1]))
        a, b = names
        print(f"load average before: {load_before}, after: {load()}")
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
