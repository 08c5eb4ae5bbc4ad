"""Scheduler daemon: load time and memory, dispatch throughput, and lateness, on the local broker.

Usage:
    .venv/bin/python benches/scheduler_bench.py [--load 1000000] [--burst 100000] [--rate 10000]
        [--seconds 30] [--backlog 10000] [--samples 3]
(--load 0 leaves the load measurement out, --burst 0 the bursts, --backlog 0 the backlog.)

Starts a broker with scripts/kafka.sh on port 19592 unless KAFKA_BOOTSTRAP is set. Each sample
runs the measurements below once (in alternating order); the table gives medians and the load
average before and after. Every dispatched message is counted on its target topic.
1. load: N far-future schedules (beyond the 1 h payload horizon) on a 4-partition schedules topic;
   time from start until every partition is `loaded`, and RSS growth of this process per schedule.
2. burst: M schedules all due at once; dispatches per second once loaded (at-least-once and
   transactional), from the first target's create time until the daemon counts all M dispatched
   (targets and tombstones acknowledged, or transactions committed); and this process's CPU time
   (all threads: loading the M schedules, dispatching them, reading back the tombstones) per
   dispatch, from the daemon's start until that moment. The transactional rate is also given
   against the at-least-once one of the same sample (median of the per-sample ratios).
3. lateness: schedules at R per second for S seconds (1 s with --smoke) while the daemon runs,
   at-least-once and transactional; lateness = the dispatched message's create time minus its
   epoch (epochs are whole seconds, as in Karafka), p50 / p99; and per epoch second (medians
   over the seconds) the lateness of its first target and the rate its targets were handed over.
4. backlog: B schedules already due when the daemon starts (a restart after an outage), on a
   4-partition schedules topic; time from the daemon's start until it counts all B dispatched:
   loading and dispatching together, what a restarted daemon's backlog waits.
The at-least-once and transactional cases alternate A-B, B-A between samples. Prints a markdown
table with every sample's figure after the median.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
import uuid
from collections.abc import Callable

from _common import add_smoke_option, load_average, start_broker, stop_broker

from ferrokafka import AsyncProducer, Client
from ferrokafka.scheduling import Scheduler, create_topics, schedule


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def wait_until(condition: Callable[[], bool], timeout: float, poll: float = 0.05) -> float:
    """Waits for `condition`; returns the wall-clock time (s) at which it was seen true."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not reached")
        time.sleep(poll)
    return time.time()


def cpu_seconds() -> float:
    """CPU time of this process, all threads (the daemon runs on Rust threads in it)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def all_loaded(daemon: Scheduler, partitions: int = 4) -> bool:
    status = daemon.status()
    return len(status) == partitions and all(s["state"] == "loaded" for s in status)


def produce_schedules(
    bootstrap: str, topic: str, target: str, epochs: list[int], payload: bytes
) -> None:
    with AsyncProducer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20},
        max_queue_size=50_000,
        overflow="block",
        delivery_threshold=10_000,
    ) as producer:
        batch = []
        for n, epoch in enumerate(epochs):
            proxy = schedule(
                {"topic": target, "payload": payload}, epoch, {"topic": topic, "key": f"s{n}"}
            )
            batch.append({"value": proxy.value, "key": proxy.key, "headers": proxy.headers})
            if len(batch) == 10_000:
                producer.produce_many(batch, topic=topic)
                batch = []
        producer.produce_many(batch, topic=topic)


def fresh_topics(client: Client) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    topic, target = f"bench-schedules-{suffix}", f"bench-target-{suffix}"
    create_topics(client, topic, num_partitions=4)
    client.create_topics([target])
    return topic, target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=1_000_000)
    parser.add_argument("--burst", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=int, default=30, help="lateness run length")
    parser.add_argument("--backlog", type=int, default=10_000, help="schedules due at start")
    parser.add_argument("--samples", type=int, default=3, help="runs per measurement (median)")
    add_smoke_option(parser)
    args = parser.parse_args()
    # Lateness is measured over `seconds` of epochs that start `lead` seconds after producing.
    lead = 10
    if args.smoke:
        args.load, args.burst, args.rate, args.seconds, args.samples = 1_000, 1_000, 200, 1, 1
        args.backlog = min(args.backlog, 1_000)
        lead = 3
    bootstrap = start_broker()
    client = Client({"bootstrap.servers": bootstrap})
    config = {"bootstrap.servers": bootstrap}
    load_before = load_average()

    def load() -> tuple[float, float]:
        """Seconds until N far-future schedules are loaded, and RSS growth per schedule."""
        topic, target = fresh_topics(client)
        future = int(time.time()) + 2 * 3600
        produce_schedules(
            bootstrap, topic, target, [future + n % 3600 for n in range(args.load)], b"x" * 100
        )
        before = rss_bytes()
        started = time.perf_counter()
        with Scheduler(config, [topic], group_id=f"bench-{uuid.uuid4().hex}") as daemon:
            wait_until(lambda: all_loaded(daemon), 600)
            seconds = time.perf_counter() - started
            grown = rss_bytes() - before
        return seconds, grown / args.load

    def backlog() -> float:
        """Seconds from the daemon's start until B schedules due before it started are all
        dispatched (their targets and tombstones acknowledged)."""
        topic, target = fresh_topics(client)
        produce_schedules(bootstrap, topic, target, [int(time.time())] * args.backlog, b"x" * 100)
        started = time.time()
        with Scheduler(config, [topic], group_id=f"bench-{uuid.uuid4().hex}") as daemon:
            confirmed = wait_until(
                lambda: sum(s["dispatched"] for s in daemon.status()) >= args.backlog, 600, 0.005
            )
        dispatched = client.read_topic(target, max_messages=args.backlog)
        assert len(dispatched) == args.backlog, f"{len(dispatched)} dispatched, not {args.backlog}"
        return confirmed - started

    def burst(transactional: bool) -> tuple[float, float]:
        """Dispatches per second for M schedules all due at once, and CPU µs per dispatch."""
        topic, target = fresh_topics(client)
        # Due `lead` seconds from now, not now: producing M proxies can take longer than the
        # 10 s in the past that `schedule` accepts when the machine is busy. The rate is timed
        # from the first dispatch, so the wait for the epoch is not counted.
        due = int(time.time()) + lead
        produce_schedules(bootstrap, topic, target, [due] * args.burst, b"x" * 100)
        settings = dict(config)
        if transactional:
            settings["transactional.id"] = f"bench-{uuid.uuid4().hex}"
        cpu_before = cpu_seconds()
        with Scheduler(settings, [topic], group_id=f"bench-{uuid.uuid4().hex}") as daemon:
            confirmed = wait_until(
                lambda: sum(s["dispatched"] for s in daemon.status()) >= args.burst, 600, 0.005
            )
            cpu = cpu_seconds() - cpu_before
        # From the first target's create time to the daemon counting the last schedule
        # dispatched (its target and tombstone acknowledged, or the transaction committed).
        stamps = [m.timestamp()[1] for m in client.read_topic(target, max_messages=args.burst)]
        assert len(stamps) == args.burst, f"{len(stamps)} dispatched, not {args.burst}"
        return args.burst / max(confirmed - min(stamps) / 1000, 0.001), cpu / args.burst * 1e6

    def lateness(transactional: bool) -> tuple[float, float, float, float]:
        """p50 and p99 of dispatch time minus epoch at R schedules/s; and, per epoch second
        (medians over the seconds), the lateness of its first target and the rate its targets
        were handed to the producer after it (p99 is about the one plus 99 % of R at the other).
        """
        topic, target = fresh_topics(client)
        settings = dict(config)
        if transactional:
            settings["transactional.id"] = f"bench-{uuid.uuid4().hex}"
        with Scheduler(settings, [topic], group_id=f"bench-{uuid.uuid4().hex}") as daemon:
            wait_until(lambda: all_loaded(daemon), 120)
            # Lead time so that every proxy is on the topic before its epoch: lateness is the
            # daemon's alone, not the benchmark's producing.
            first = int(time.time()) + lead
            epochs = [first + n // args.rate for n in range(args.rate * args.seconds)]
            produce_schedules(bootstrap, topic, target, epochs, b"x" * 100)
            wait_until(lambda: sum(s["dispatched"] for s in daemon.status()) >= len(epochs), 300)
        per_second: dict[int, list[int]] = {}
        for m in client.read_topic(target, max_messages=len(epochs), timeout=120):
            epoch = int(dict(m.headers() or [])["schedule_target_epoch"])
            per_second.setdefault(epoch, []).append(m.timestamp()[1] - epoch * 1000)
        late = sorted(x for second in per_second.values() for x in second)
        assert len(late) == len(epochs), f"{len(late)} dispatched, not {len(epochs)}"
        first = statistics.median(min(second) for second in per_second.values())
        handover = statistics.median(
            len(second) / max(max(second) - min(second), 1) * 1000 for second in per_second.values()
        )
        return statistics.median(late), late[int(len(late) * 0.99) - 1], first, handover

    loads: list[tuple[float, float]] = []
    bursts: list[tuple[float, float]] = []
    txn_bursts: list[tuple[float, float]] = []
    lates: list[tuple[float, float, float, float]] = []
    txn_lates: list[tuple[float, float, float, float]] = []
    backlogs: list[float] = []
    sample_loads: list[float] = []
    for sample in range(args.samples):
        # Interleaved: every sample runs each measurement once, in alternating order.
        steps = [
            lambda: loads.append(load()) if args.load else None,
            lambda: bursts.append(burst(False)) if args.burst else None,
            lambda: txn_bursts.append(burst(True)) if args.burst else None,
            lambda: lates.append(lateness(False)),
            lambda: txn_lates.append(lateness(True)),
            lambda: backlogs.append(backlog()) if args.backlog else None,
        ]
        for step in steps if sample % 2 == 0 else steps[::-1]:
            step()
        sample_loads.append(os.getloadavg()[0])

    stop_broker()
    median = statistics.median

    def each(values: list[float], form: str) -> str:
        """The median, then every sample's figure in run order."""
        return f"{median(values):{form}} ({', '.join(f'{v:{form}}' for v in values)})"

    rows = []
    if loads:
        load_s = median(x for x, _ in loads)
        rows += [
            (
                f"load {args.load:,} future schedules (4 partitions)",
                f"{load_s:.1f} s, {args.load / load_s:,.0f} records/s",
            ),
            (
                "RSS growth per future schedule (payload 100 B, beyond horizon)",
                f"{median(y for _, y in loads):.0f} bytes",
            ),
        ]
    if bursts:
        rows += [
            (
                f"dispatch {args.burst:,} due at once",
                f"{each([r for r, _ in bursts], ',.0f')} dispatches/s, "
                f"client CPU {each([c for _, c in bursts], '.1f')} µs per dispatch",
            ),
            (
                f"dispatch {args.burst:,} due at once, transactional",
                f"{each([r for r, _ in txn_bursts], ',.0f')} dispatches/s, "
                f"client CPU {each([c for _, c in txn_bursts], '.1f')} µs per dispatch",
            ),
            (
                "transactional / at-least-once dispatch rate, same sample",
                f"{each([t / a for (t, _), (a, _) in zip(txn_bursts, bursts, strict=True)], '.2f')}"
                "x",
            ),
        ]
    if backlogs:
        rows.append(
            (
                f"backlog: {args.backlog:,} schedules due before the start (4 partitions)",
                f"all dispatched {each(backlogs, '.2f')} s after the start",
            )
        )
    rows += [
        (
            f"lateness at {args.rate:,} schedules/s for {args.seconds} s",
            f"p50 {each([p for p, *_ in lates], '.0f')} ms, "
            f"p99 {each([q for _, q, *_ in lates], '.0f')} ms",
        ),
        (
            f"lateness at {args.rate:,} schedules/s for {args.seconds} s, transactional",
            f"p50 {each([p for p, *_ in txn_lates], '.0f')} ms, "
            f"p99 {each([q for _, q, *_ in txn_lates], '.0f')} ms",
        ),
    ]
    for mode, runs in (("at-least-once", lates), ("transactional", txn_lates)):
        rows.append(
            (
                f"lateness {mode}: a second's first target late by; its targets handed over at",
                f"{each([f for *_, f, _ in runs], '.0f')} ms, "
                f"{each([h for *_, h in runs], ',.0f')} per s",
            )
        )
    load_after = load_average()
    print(
        f"median of {args.samples} interleaved run(s) each; "
        f"load average before {load_before}, after {load_after}; "
        f"1-minute load average after each sample: {', '.join(f'{x:.2f}' for x in sample_loads)}\n"
    )
    print("| measurement | result |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
