"""Redelivery (KMQ pattern): throughput with markers vs a plain consume+commit loop, and lateness.

Usage:
    KAFKA_BOOTSTRAP=127.0.0.1:19792 .venv/bin/python benches/redelivery_bench.py \\
        [--messages 20000] [--size 100] [--batch 500] [--samples 3] [--late 300] [--timeout 2.0]

Needs a running broker (KAFKA_BOOTSTRAP, default 127.0.0.1:9092). In one run, on the same data:
1. throughput: N messages of S bytes on a 3-partition queue topic, read from the start by a new
   group per sample (a new share group, reset to earliest, for the share cases). The peer is
   confluent-kafka's ``consume(batch)`` + synchronous ``commit()`` per batch, with librdkafka's
   defaults and with ``fetch.queue.backoff.ms=10`` (ferrokafka's consumers' default: with
   librdkafka's 1 s, a loop faster than the fetch waits out whole seconds once more than
   ``queued.min.messages`` are on the topic); ferrokafka is ``QueueConsumer`` (START markers
   written and acknowledged, then a synchronous commit, per batch; the next batch prepared while
   this one is acked) plus
   ``ack_many`` (END markers) per batch and a final ``flush``; and the README's loop,
   ``for job in queue: queue.ack(job)``, one ``ack`` per message. Beside them, on a KIP-932 share
   group: confluent-kafka's ``ShareConsumer`` (explicit mode, ``acknowledge`` per record, one
   ``commit_sync`` at the end) and ``QueueConsumer(backend="share")`` (``consume`` +
   ``ack_many``, ``flush`` at the end). The cases run interleaved,
   forwards then backwards (A-B-B-A ...), ``--samples`` each; the table shows each case's
   median, and the CPU time of the bench process per message over each sample (all its
   threads, client start-up and close included: a figure other work on the machine moves less
   than the rates; the broker's CPU is not in it). Afterwards the markers on the markers topic
   are counted (a START and an END per message and sample). The load average is printed before
   and after.
2. lateness: L messages fetched and never acked (automatic keepalive off) with
   ``redelivery_timeout`` T while a tracker runs; lateness = the redelivered record's create time
   minus the START marker's deadline (decoded from the markers topic), p50 / p99 / max. Share
   group: on a 1-partition topic one member acquires up to L records and never acknowledges
   them; a second member polls; lateness = when it receives each of them (delivery count 2)
   minus (when the holder's poll returned + T). The holder's poll returns after the broker
   acquired the records, so this errs on the low side by at most that poll's return trip.
3. ack latency: how long a caller waits for one handled message's acknowledgement to be
   durable, ``--acks`` rounds A-B then B-A, one message each: ``QueueConsumer.ack`` then
   ``flush()`` (its END marker acknowledged by the markers topic) against confluent-kafka's
   synchronous ``commit`` of the message; median and 90th percentile.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from _common import add_smoke_option, load_average, median_p90, records_on
from confluent_kafka import Consumer, Producer, ShareConsumer

from ferrokafka import Client, NewTopic
from ferrokafka.codecs import decode_marker
from ferrokafka.redelivery import QueueConsumer, RedeliveryTracker, redelivery_count
from ferrokafka.share_queue import configure_share_group


def wait_until(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not reached")
        time.sleep(0.05)


def fresh_topics(client: Client, name: str) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    queue, markers = f"bench-{name}-{suffix}", f"bench-{name}-markers-{suffix}"
    client.create_topics([NewTopic(queue, 3), NewTopic(markers, 3)])
    return queue, markers


def fill(bootstrap: str, topic: str, count: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    pad = b"x" * max(size - 8, 0)
    for n in range(count):
        while True:
            try:
                producer.produce(topic, f"{n:08d}".encode() + pad, key=str(n))
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)


def batch_rate(
    count: int,
    take: Callable[[], list[Any]],
    handle: Callable[[list[Any]], int],
    finish: Callable[[], object] = lambda: None,
) -> float:
    """Messages per second of a consume loop: ``take`` a batch, ``handle`` it (returns how many
    of its messages count) until ``count`` are handled, then ``finish``; timed from the first
    non-empty batch to the end of ``finish``."""
    seen = 0
    started = None
    while seen < count:
        messages = take()
        if not messages:
            continue
        started = started or time.perf_counter()
        seen += handle(messages)
    finish()
    return count / (time.perf_counter() - (started or time.perf_counter()))


# librdkafka stops fetching a partition for fetch.queue.backoff.ms (1 s by default) once its
# prefetch queue holds queued.min.messages (100,000) records: past that many, a loop faster than
# the fetch waits out whole seconds. ferrokafka's consumers default to 10 ms; so does this peer.
PLAIN_TUNED = "confluent-kafka consume + sync commit, fetch.queue.backoff.ms=10"


def plain_consumer(bootstrap: str, topic: str, **tuning: Any) -> Consumer:
    """The peer: a confluent-kafka consumer of a new group subscribed to ``topic`` from its
    start, committing only when told."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-plain-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **tuning,
        }
    )
    consumer.subscribe([topic])
    return consumer


def plain_loop(bootstrap: str, topic: str, count: int, batch: int, **tuning: Any) -> float:
    consumer = plain_consumer(bootstrap, topic, **tuning)

    def commit(messages: list[Any]) -> int:
        consumer.commit(asynchronous=False)
        return sum(1 for m in messages if m.error() is None)

    rate = batch_rate(count, lambda: consumer.consume(batch, timeout=1.0), commit)
    consumer.close()
    return rate


def queue_loop(
    bootstrap: str, topic: str, markers: str, count: int, batch: int, backend: str
) -> float:
    """ferrokafka's QueueConsumer on one backend: consume + ack_many, flush at the end."""
    queue = QueueConsumer(
        {"bootstrap.servers": bootstrap},
        topic,
        markers,
        60.0,
        group_id=f"bench-{backend}-{uuid.uuid4().hex}",
        max_batch_size=batch,
        backend="share" if backend == "share" else "markers",
    )

    def ack(messages: list[Any]) -> int:
        queue.ack_many(messages)
        return len(messages)

    rate = batch_rate(
        count, lambda: queue.consume(batch, timeout=1.0), ack, lambda: queue.flush(60)
    )
    queue.close()
    return rate


def queue_each_loop(bootstrap: str, topic: str, markers: str, count: int, batch: int) -> float:
    """The README's loop on ferrokafka's QueueConsumer (markers backend): ``for job in queue``
    and ``queue.ack(job)`` per message, flush at the end."""
    queue = QueueConsumer(
        {"bootstrap.servers": bootstrap},
        topic,
        markers,
        60.0,
        group_id=f"bench-each-{uuid.uuid4().hex}",
        max_batch_size=batch,
    )
    started = None
    for seen, job in enumerate(queue, start=1):
        started = started or time.perf_counter()
        queue.ack(job)
        if seen == count:
            break
    queue.flush(60)
    elapsed = time.perf_counter() - (started or time.perf_counter())
    queue.close()
    return count / elapsed


def share_peer_loop(bootstrap: str, topic: str, count: int) -> float:
    """confluent-kafka's own ShareConsumer (explicit mode): acknowledge every record, commit
    at the end."""
    config: dict[str, str | int | float | bool] = {"bootstrap.servers": bootstrap}
    group = f"bench-share-peer-{uuid.uuid4().hex}"
    configure_share_group(config, group, 60.0, 3)
    consumer = ShareConsumer(
        {**config, "group.id": group, "share.acknowledgement.mode": "explicit"}
    )
    consumer.subscribe([topic])

    def acknowledge(messages: list[Any]) -> int:
        good = [m for m in messages if m.error() is None]
        for message in good:
            consumer.acknowledge(message)
        return len(good)

    rate = batch_rate(
        count, lambda: consumer.poll(1.0), acknowledge, lambda: consumer.commit_sync(60)
    )
    consumer.close()
    return rate


def process_cpu() -> float:
    """CPU seconds of every thread of this process (the clients' librdkafka threads too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def lateness(bootstrap: str, client: Client, count: int, timeout: float) -> list[float]:
    queue_topic, markers = fresh_topics(client, "late")
    fill(bootstrap, queue_topic, count, 100)
    config: dict[str, str | int | float | bool] = {"bootstrap.servers": bootstrap}

    def redelivered() -> dict[bytes, int]:
        """Value -> create time (ms) of each redelivered message."""
        return {
            m.value() or b"": m.timestamp()[1]
            for m in client.read_topic(queue_topic, max_messages=10 * count, timeout=30)
            if redelivery_count(m) == 1
        }

    with RedeliveryTracker(config, queue_topic, markers, group_id=f"bench-{uuid.uuid4().hex}"):
        queue = QueueConsumer(
            config,
            queue_topic,
            markers,
            timeout,
            group_id=f"bench-{uuid.uuid4().hex}",
            auto_keepalive=False,
        )
        taken = 0
        while taken < count:
            taken += len(queue.consume(count - taken, timeout=1.0))
        queue.close()
        wait_until(lambda: len(redelivered()) >= count, 120)
    created = redelivered()
    deadlines: dict[bytes, int] = {}
    for record in client.read_topic(markers, max_messages=10 * count, timeout=30):
        marker = decode_marker(record.value() or b"")
        if marker.kind == "start" and marker.deadline is not None and marker.value is not None:
            deadlines[marker.value] = marker.deadline
    client.delete_topics([queue_topic, markers])
    return [float(at - deadlines[value]) for value, at in created.items()]


def share_lateness(bootstrap: str, client: Client, count: int, timeout: float) -> list[float]:
    """Share group: a holder acquires records and never acknowledges them; a second member
    (one partition, so both share it) receives them once their lock of ``timeout`` expires."""
    topic = f"bench-share-late-{uuid.uuid4().hex[:8]}"
    client.create_topics([NewTopic(topic, 1)])
    fill(bootstrap, topic, count, 100)
    config: dict[str, str | int | float | bool] = {"bootstrap.servers": bootstrap}
    group = f"bench-share-late-{uuid.uuid4().hex}"
    configure_share_group(config, group, timeout, 3)
    settings = {**config, "group.id": group, "share.acknowledgement.mode": "explicit"}
    holder = ShareConsumer(settings)
    holder.subscribe([topic])
    acquired: dict[bytes, float] = {}  # value -> wall ms when the poll that acquired it returned
    while not acquired:
        batch = holder.poll(1.0)
        at = time.time() * 1000
        acquired = {m.value() or b"": at for m in batch if m.error() is None}
    taker = ShareConsumer(settings)
    taker.subscribe([topic])
    late: list[float] = []
    deadline = time.monotonic() + 60 + timeout
    while len(late) < len(acquired) and time.monotonic() < deadline:
        for message in taker.poll(0.1):
            if message.error() is not None:
                continue
            at = time.time() * 1000
            value = message.value() or b""
            if value in acquired and message.delivery_count() == 2:
                late.append(at - (acquired[value] + timeout * 1000))
            taker.acknowledge(message)
    taker.commit_sync(30)
    taker.close()
    holder.close()
    client.delete_topics([topic])
    if len(late) < len(acquired):
        raise TimeoutError(f"{len(late)} of {len(acquired)} held records came back")
    return late


def ack_latency(bootstrap: str, client: Client, rounds: int) -> tuple[list[float], list[float]]:
    """Milliseconds from a handled message to its acknowledgement being durable, per round:
    ferrokafka's ``ack`` + ``flush()``, then confluent's synchronous ``commit`` (order swapped
    every round); each side takes its message untimed, from a 1-partition topic of its own."""
    queue_topic, markers = f"bench-ack-{uuid.uuid4().hex[:8]}", f"bench-ack-m-{uuid.uuid4().hex}"
    client.create_topics([NewTopic(queue_topic, 1), NewTopic(markers, 1)])
    fill(bootstrap, queue_topic, rounds + 1, 100)
    queue = QueueConsumer(
        {"bootstrap.servers": bootstrap},
        queue_topic,
        markers,
        60.0,
        group_id=f"bench-ack-{uuid.uuid4().hex}",
        max_batch_size=1,
    )
    plain = plain_consumer(bootstrap, queue_topic)

    def ours() -> float:
        [job] = queue.consume(1, timeout=30.0)
        started = time.perf_counter()
        queue.ack(job)
        queue.flush(30.0)
        return (time.perf_counter() - started) * 1000.0

    def theirs() -> float:
        message = None
        while message is None or message.error() is not None:
            message = plain.poll(30.0)
        started = time.perf_counter()
        plain.commit(message=message, asynchronous=False)
        return (time.perf_counter() - started) * 1000.0

    ours(), theirs()  # group joins, connections, producer ids
    mine: list[float] = []
    peer: list[float] = []
    for round_ in range(rounds):
        sides = ((mine, ours), (peer, theirs))
        for samples, side in sides if round_ % 2 == 0 else sides[::-1]:
            samples.append(side())
    queue.close()
    plain.close()
    ends = sum(decode_marker(r.value() or b"").kind == "end" for r in client.read_topic(markers))
    assert ends == rounds + 1, f"{ends} END markers on the topic, expected {rounds + 1}"
    client.delete_topics([queue_topic, markers])
    return mine, peer


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--samples", type=int, default=3, help="samples per case (median)")
    parser.add_argument("--late", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--acks", type=int, default=50, help="rounds of the ack latency")
    add_smoke_option(parser)
    args = parser.parse_args()
    if args.smoke:
        args.messages, args.samples, args.late, args.timeout, args.acks = 1_000, 1, 20, 1.0, 3
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    client = Client({"bootstrap.servers": bootstrap})
    print(f"load average before: {load_average()}")

    queue_topic, markers = fresh_topics(client, "throughput")
    fill(bootstrap, queue_topic, args.messages, args.size)
    cases: dict[str, Callable[[], float]] = {
        "confluent-kafka consume + sync commit": lambda: plain_loop(
            bootstrap, queue_topic, args.messages, args.batch
        ),
        PLAIN_TUNED: lambda: plain_loop(
            bootstrap, queue_topic, args.messages, args.batch, **{"fetch.queue.backoff.ms": 10}
        ),
        "ferrokafka QueueConsumer (START + commit + ack_many)": lambda: queue_loop(
            bootstrap, queue_topic, markers, args.messages, args.batch, "markers"
        ),
        "ferrokafka QueueConsumer, README loop (for job in queue: ack(job))": lambda: (
            queue_each_loop(bootstrap, queue_topic, markers, args.messages, args.batch)
        ),
        "confluent-kafka ShareConsumer (acknowledge each, commit at end)": lambda: share_peer_loop(
            bootstrap, queue_topic, args.messages
        ),
        'ferrokafka QueueConsumer(backend="share") (consume + ack_many)': lambda: queue_loop(
            bootstrap, queue_topic, markers, args.messages, args.batch, "share"
        ),
    }
    rates: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for sample in range(args.samples):
        order = list(cases) if sample % 2 == 0 else list(reversed(cases))
        for name in order:
            before = process_cpu()
            rates[name].append(cases[name]())
            cpu[name].append((process_cpu() - before) / args.messages * 1e6)
    marked = records_on(bootstrap, markers, 3)
    # A START and an END per message, sample and markers-backend case (batched and per message).
    expected = 2 * 2 * args.messages * args.samples
    assert marked == expected, f"{marked} markers on the topic, expected {expected}"
    client.delete_topics([queue_topic, markers])
    late = lateness(bootstrap, client, args.late, args.timeout)
    share_late = share_lateness(bootstrap, client, args.late, args.timeout)
    acked, committed = ack_latency(bootstrap, client, args.acks)

    medians = {name: statistics.median(values) for name, values in rates.items()}
    plain, tuned, ours, ours_each, share_peer, share_ours = medians.values()
    print(
        f"| measure ({args.messages} msgs of {args.size} B, batch {args.batch}, "
        f"median of {args.samples}) | value |"
    )
    print("|---|---|")
    for name, rate in medians.items():
        samples = ", ".join(f"{r:,.0f}" for r in rates[name])
        print(
            f"| {name} | {rate:,.0f} msgs/s (samples {samples}); client CPU "
            f"{statistics.median(cpu[name]):.2f} µs/msg |"
        )
    for peer, rate in (("confluent consume + commit", plain), ("the tuned loop", tuned)):
        print(f"| ratio markers QueueConsumer / {peer} | {ours / rate:.2f}x |")
        print(f"| ratio README loop (ack per message) / {peer} | {ours_each / rate:.2f}x |")
    print(
        f"| ratio share QueueConsumer / confluent ShareConsumer | {share_ours / share_peer:.2f}x |"
    )
    print(f"| ratio share QueueConsumer / markers QueueConsumer | {share_ours / ours:.2f}x |")
    for name, values in (("markers", late), ("share group", share_late)):
        print(
            f"| redelivery lateness past deadline, {name} ({len(values)} msgs, timeout "
            f"{args.timeout} s) p50 / p99 / max | {statistics.median(values):.0f} / "
            f"{percentile(values, 0.99):.0f} / {max(values):.0f} ms |"
        )
    (ack_median, ack_p90), (commit_median, commit_p90) = median_p90(acked), median_p90(committed)
    print(
        f"| one message acknowledged ({args.acks} rounds), median / p90: `ack` + `flush()` | "
        f"{ack_median:.2f} / {ack_p90:.2f} ms; confluent synchronous commit {commit_median:.2f} / "
        f"{commit_p90:.2f} ms |"
    )
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
