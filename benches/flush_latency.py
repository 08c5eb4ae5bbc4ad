"""How long a caller waits for a few records to be acknowledged: N records then ``flush()``; and
how long closing a producer takes once its records are.

Usage:
    .venv/bin/python benches/flush_latency.py [--rounds 50] [--sizes 1,1000]

Starts a broker with scripts/kafka.sh on port 19592 unless KAFKA_BOOTSTRAP is set. The cases,
each with ``linger.ms=5`` (librdkafka's default) against one 3-partition topic, with producers
made and warmed up once:
- ferrokafka ``AsyncProducer``: ``produce_many`` of N records of 100 bytes, then ``flush()``;
- confluent-kafka ``Producer``: N ``produce`` calls, then ``flush()``;
- ferrokafka ``Client.produce`` of one record (it waits for the acknowledgement) against
  confluent's ``produce`` of one record then ``flush()``;
- closes, each round with fresh producers that sent one acknowledged record (not timed):
  ``AsyncProducer.shutdown()`` then dropping it (its librdkafka producer is destroyed then), and
  dropping a ``Client`` after ``produce`` (how every CLI command ends), each against confluent's
  ``flush()`` then dropping its ``Producer``.
Rounds alternate A-B then B-A; the table gives each case's median and 90th percentile in
milliseconds and the ratio of the medians, with the load average before and after. The records
are counted on the topic afterwards.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable

from _common import (
    add_smoke_option,
    load_average,
    median_p90,
    records_on,
    start_broker,
    stop_broker,
)
from confluent_kafka import Producer

from ferrokafka import AsyncProducer, Client, NewTopic

PARTITIONS = 3
VALUE = b"x" * 100


def milliseconds(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50, help="samples per case")
    parser.add_argument("--sizes", default="1,1000", help="records per flush, comma-separated")
    add_smoke_option(parser)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.smoke:
        args.rounds, sizes = 2, [1]

    bootstrap = start_broker()
    client = Client({"bootstrap.servers": bootstrap})
    topic = f"bench-flush-{uuid.uuid4().hex[:8]}"
    client.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    ours, theirs = AsyncProducer(config, max_queue_size=100_000), Producer(config)
    sent = 0

    # Each case's sides make the call to time, once a round: the same call for the flushes, a
    # fresh producer's close for the closes (the producer held only by the close, so that
    # dropping the close's list destroys it inside the timing).
    def ferrokafka_flush(size: int) -> Callable[[], Callable[[], object]]:
        def run() -> None:
            ours.produce_many([VALUE] * size, topic=topic)
            ours.flush(timeout=30.0)

        return lambda: run

    def confluent_flush(size: int) -> Callable[[], Callable[[], object]]:
        def run() -> None:
            for _ in range(size):
                theirs.produce(topic, VALUE)
            theirs.poll(0)
            assert theirs.flush(30.0) == 0

        return lambda: run

    def async_producer_close() -> Callable[[], object]:
        held = [AsyncProducer(config)]
        held[0].produce(VALUE, topic=topic)
        held[0].flush(timeout=30.0)

        def close() -> None:
            held[0].shutdown(timeout=30.0)
            held.clear()

        return close

    def client_close() -> Callable[[], object]:
        held = [Client(config)]
        held[0].produce(topic, VALUE)
        return held.clear

    def confluent_close() -> Callable[[], object]:
        held = [Producer(config)]
        held[0].produce(topic, VALUE)
        assert held[0].flush(30.0) == 0

        def close() -> None:
            assert held[0].flush(30.0) == 0
            held.clear()

        return close

    cases: list[
        tuple[str, str, Callable[[], Callable[[], object]], Callable[[], Callable[[], object]], int]
    ] = [
        (
            f"{size} record(s) then flush()",
            "AsyncProducer.produce_many + flush / confluent produce + flush",
            ferrokafka_flush(size),
            confluent_flush(size),
            size,
        )
        for size in sizes
    ]
    cases.append(
        (
            "1 record, acknowledged",
            "Client.produce / confluent produce + flush",
            lambda: lambda: client.produce(topic, VALUE),
            confluent_flush(1),
            1,
        )
    )
    cases += [
        (
            "close after 1 acknowledged record",
            "AsyncProducer.shutdown + drop / confluent flush + drop",
            async_producer_close,
            confluent_close,
            1,
        ),
        (
            "close after 1 acknowledged record",
            "Client.produce, drop / confluent flush + drop",
            client_close,
            confluent_close,
            1,
        ),
    ]
    print(f"load average before: {load_average()}", file=sys.stderr)
    rows = []
    for title, pair, a, b, size in cases:
        for warm_up in (a, b):  # metadata, producer ids, connections
            warm_up()()
        sent += 2 * size
        samples: dict[str, list[float]] = {"a": [], "b": []}
        for round_ in range(args.rounds):
            order = (("a", a), ("b", b)) if round_ % 2 == 0 else (("b", b), ("a", a))
            for name, make in order:
                samples[name].append(milliseconds(make()))
        sent += 2 * size * args.rounds
        (a_median, a_p90), (b_median, b_p90) = median_p90(samples["a"]), median_p90(samples["b"])
        rows.append((title, pair, a_median, a_p90, b_median, b_p90))
    ours.shutdown()
    theirs.flush(10.0)
    on_topic = records_on(bootstrap, topic, PARTITIONS)
    assert on_topic == sent, f"{on_topic} records on the topic, {sent} sent"
    stop_broker()

    print(
        f"\n{args.rounds} rounds per case, A-B then B-A; linger.ms=5; "
        f"{on_topic} records counted on the topic; load average after: {load_average()}\n"
    )
    print(
        "| case | ferrokafka vs confluent | ferrokafka ms (median, p90) | confluent ms "
        "(median, p90) | confluent / ferrokafka, medians |"
    )
    print("|---|---|---:|---:|---:|")
    for title, pair, a_median, a_p90, b_median, b_p90 in rows:
        print(
            f"| {title} | {pair} | {a_median:.2f}, {a_p90:.2f} | {b_median:.2f}, {b_p90:.2f} "
            f"| {b_median / a_median:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
