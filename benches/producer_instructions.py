"""Producer client cost in CPU instructions per message (valgrind callgrind), ferrokafka against
confluent-kafka, on the local broker: a figure other work on the machine does not move.

Usage:
    .venv/bin/python benches/producer_instructions.py [--messages 100000] [--samples 3]
    .venv/bin/python benches/producer_instructions.py --smoke     # checks the bench works (its
                                                                  # figures include start-up)

Each case runs in a child Python process under `valgrind --tool=callgrind`, once producing N
messages of 100 bytes to a 3-partition topic of its own (flushed until acknowledged) and once
producing 10; the difference of the two instruction totals over N - 10 is the cost per message
of every thread of the client process (Python, the binding, librdkafka), without start-up and
imports. Cases run interleaved, forwards then backwards (A-B-B-A); the table gives medians, the
ratio to the plain confluent-kafka loop, and how many times fewer instructions a case needs than
the confluent loop with a delivery callback each (the peer when every message has a callback or
future). The callback and future cases wait until every callback ran and every future is done.
Records on each topic are counted afterwards. Starts a broker with scripts/kafka.sh on port 19592
unless KAFKA_BOOTSTRAP is set.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import uuid

from _common import load_average, records_on, start_broker, stop_broker

PARTITIONS = 3
BASELINE = 10
BATCH = 10_000
CASES = {
    "confluent": "confluent-kafka produce+poll(0), no callbacks",
    "confluent_callbacks": "confluent-kafka produce+poll(0), a delivery callback each",
    "produce_many": "ferrokafka AsyncProducer.produce_many (batches of 10k)",
    "produce_many_reports": "ferrokafka produce_many + a DeliveryReport per batch",
    "produce": "ferrokafka AsyncProducer.produce",
    "produce_callbacks": "ferrokafka AsyncProducer.produce with an on_delivery callback each",
    "produce_future": "ferrokafka AsyncProducer.produce_future each",
}


def child(case: str, bootstrap: str, topic: str, n: int) -> None:
    """Produces `n` messages with `case`'s client and waits until all are acknowledged."""
    value = b"x" * 100
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if case.startswith("confluent"):
        from confluent_kafka import Producer

        producer = Producer({**config, "queue.buffering.max.messages": 1_000_000})
        delivered = [0]

        def on_delivery(error: object, _message: object) -> None:
            delivered[0] += error is None

        callback = on_delivery if case == "confluent_callbacks" else None
        produce, poll = producer.produce, producer.poll
        for _ in range(n):
            produce(topic, value, on_delivery=callback)
            poll(0)
        if producer.flush(300):
            raise SystemExit("confluent-kafka did not deliver everything")
        return
    from ferrokafka import AsyncProducer, DeliveryReport

    with AsyncProducer(
        config, max_queue_size=max(n, BATCH), max_queue_bytes=2**31, delivery_threshold=BATCH
    ) as ferro:
        reports: list[DeliveryReport] = []
        if case.startswith("produce_many"):
            values = [value] * n
            on_batch = reports.append if case == "produce_many_reports" else None
            for start in range(0, n, BATCH):
                ferro.produce_many(values[start : start + BATCH], topic, on_delivery=on_batch)
        elif case == "produce_callbacks":
            acknowledged = [0]

            def on_delivery(error: object, _message: object) -> None:
                acknowledged[0] += error is None

            for _ in range(n):
                ferro.produce(value, topic, on_delivery=on_delivery)
        elif case == "produce_future":
            futures = [ferro.produce_future(value, topic) for _ in range(n)]
        else:
            for _ in range(n):
                ferro.produce(value, topic)
        ferro.flush(timeout=300)  # returns once every callback ran and every future is done
        if case == "produce_many_reports" and sum(r.delivered for r in reports) != n:
            raise SystemExit("the batch reports do not cover every record")
        if case == "produce_callbacks" and acknowledged[0] != n:
            raise SystemExit(f"{acknowledged[0]} of {n} callbacks reported success")
        if case == "produce_future" and not all(
            f.done() and f.exception() is None for f in futures
        ):
            raise SystemExit("a future is not done or failed")


def instructions(case: str, bootstrap: str, n: int) -> tuple[int, str]:
    """Instructions of one child run of `case` producing `n` messages, and its topic."""
    from ferrokafka import Client, NewTopic

    topic = f"bench-ir-{uuid.uuid4().hex[:8]}"
    Client({"bootstrap.servers": bootstrap}).create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS)]
    )
    run = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--child",
            case,
            bootstrap,
            topic,
            str(n),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"Collected : (\d+)", run.stderr)
    if run.returncode != 0 or not found:
        raise SystemExit(f"{case} under callgrind failed:\n{run.stderr[-3000:]}")
    return int(found.group(1)), topic


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=3, help="samples per case (median)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the bench works")
    parser.add_argument("--child", nargs=4, metavar=("CASE", "BOOTSTRAP", "TOPIC", "N"))
    args = parser.parse_args()
    if args.child:
        case, bootstrap, topic, n = args.child
        child(case, bootstrap, topic, int(n))
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is needed (Debian package valgrind)")
    if args.smoke:
        args.messages, args.samples = 2_000, 1
    n = args.messages
    bootstrap = start_broker()
    load_before = load_average()
    per_message: dict[str, list[float]] = {case: [] for case in CASES}
    for sample in range(args.samples):
        order = list(CASES) if sample % 2 == 0 else list(CASES)[::-1]
        for case in order:
            full, topic = instructions(case, bootstrap, n)
            runs = [(topic, n)]
            base = 0
            if not args.smoke:  # the smoke run only checks that every case works
                base, base_topic = instructions(case, bootstrap, BASELINE)
                runs.append((base_topic, BASELINE))
            for name, expected in runs:
                counted = records_on(bootstrap, name, PARTITIONS)
                if counted != expected:
                    raise SystemExit(f"{case}: {counted} records on {name}, expected {expected}")
            per_message[case].append((full - base) / (n - BASELINE))
    stop_broker()
    peer = statistics.median(per_message["confluent"])
    callback_peer = statistics.median(per_message["confluent_callbacks"])
    load_after = load_average()
    print(
        f"{n:,} messages of 100 bytes, 3 partitions, linger.ms=5; median of {args.samples} "
        f"interleaved sample(s) per case; load average before {load_before}, after "
        f"{load_after} (instruction counts do not depend on it)\n"
    )
    print(
        "| case | instructions/msg | vs confluent no callbacks | confluent with callbacks / case |"
        "\n|---|---:|---:|---:|"
    )
    for case, name in CASES.items():
        median = statistics.median(per_message[case])
        print(f"| {name} | {median:,.0f} | {median / peer:.2f}x | {callback_peer / median:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
