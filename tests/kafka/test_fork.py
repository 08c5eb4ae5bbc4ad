"""Objects inherited across ``os.fork()``: refused in the child, and the child still exits cleanly
without touching the parent's librdkafka handles (issue 13, defect 5)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Callable

# Creates and uses every kind of native handle, forks, and in the child tries each one, then
# leaves through normal interpreter finalisation (SystemExit), which collects the inherited
# objects. The parent reports the child's exit status and then uses its own handles again.
_SCRIPT = textwrap.dedent(
    """
    import os
    import sys
    import time

    import ferrokafka
    from ferrokafka.redelivery import QueueConsumer, RedeliveryTracker

    bootstrap, topic, markers = sys.argv[1], sys.argv[2], sys.argv[3]
    config = {"bootstrap.servers": bootstrap}
    client = ferrokafka.Client(config)
    client.produce(topic, b"before fork")
    producer = ferrokafka.AsyncProducer(config)
    producer.produce(b"before fork", topic)
    producer.flush(timeout=10)
    consumer = ferrokafka.Consumer(
        {**config, "group.id": topic, "auto.offset.reset": "earliest"},
        [topic],
        lambda batch: None,
        commit_interval=0.2,
    )
    consumer.start()
    tracker = RedeliveryTracker(config, topic, markers, group_id=topic + "-t").start()
    queue = QueueConsumer(config, topic, markers, group_id=topic + "-q")
    # Both records come in one fetch: one handed out, the other left in the buffer, which the
    # child must not hand out again (the parent does).
    print(f"parent polled {queue.poll(timeout=20).value()!r}", flush=True)

    pid = os.fork()
    if pid == 0:
        uses = {
            "Client": lambda: client.list_topics(timeout=5),
            "AsyncProducer": lambda: producer.produce(b"in child", topic),
            "Consumer": consumer.stop,
            "redelivery.RedeliveryTracker": tracker.request_stop,
            "redelivery.QueueConsumer": lambda: queue.consume(1, timeout=1),
        }
        for name, use in uses.items():
            try:
                use()
            except ferrokafka.FerrokafkaError as err:
                print(f"child: {name} refused: {err}", flush=True)
        # Counters would be the parent's, frozen at the fork.
        looks = {"Consumer.stats": consumer.stats, "tracker.status": tracker.status}
        for name, look in looks.items():
            try:
                look()
            except ferrokafka.FerrokafkaError as err:
                print(f"child: {name} refused: {err}", flush=True)
        # The parent's producer, shut down or dropped here: refused at once, then left alone
        # (its records are the parent's to deliver).
        try:
            producer.shutdown(timeout=2)
        except ferrokafka.FerrokafkaError as err:
            print(f"child: shutdown refused: {err}", flush=True)
        started = time.monotonic()
        del producer
        print(f"child: dropped the producer in {time.monotonic() - started:.2f} s", flush=True)
        sys.exit(0)

    _, status = os.waitpid(pid, 0)
    print(f"child exit code {os.waitstatus_to_exitcode(status)}", flush=True)
    client.produce(topic, b"after fork")
    producer.shutdown(timeout=10)
    consumer.stop()
    tracker.stop()
    queue.close()
    """
)


def _run_forking(
    script: str, kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> tuple[subprocess.CompletedProcess[str], str]:
    """Runs ``script`` (which forks) on a fresh topic and markers topic; checks that it and its
    child exited 0 and returns the run with a report of its output for assertions."""
    topic, markers = topic_factory(partitions=1), topic_factory(partitions=1)
    run = subprocess.run(
        [sys.executable, "-c", script, kafka_bootstrap, topic, markers],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    report = f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.returncode == 0, report
    assert "child exit code 0" in run.stdout, report
    return run, report


def test_forked_child_refuses_inherited_handles_and_exits_cleanly(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    run, report = _run_forking(_SCRIPT, kafka_bootstrap, topic_factory)
    for name in (
        "Client",
        "AsyncProducer",
        "Consumer",
        "redelivery.RedeliveryTracker",
        "redelivery.QueueConsumer",
    ):
        assert f"child: {name} refused: ferrokafka.{name} was created in process" in run.stdout, (
            report
        )
        assert "cannot be used after fork" in run.stdout, report
    assert "child: Consumer.stats refused: ferrokafka.Consumer was created in process" in (
        run.stdout
    ), report
    assert "child: tracker.status refused: ferrokafka.redelivery.RedeliveryTracker was created" in (
        run.stdout
    ), report
    assert "child: shutdown refused: ferrokafka.AsyncProducer was created in process" in (
        run.stdout
    ), report
    dropped = re.search(r"child: dropped the producer in ([0-9.]+) s", run.stdout)
    assert dropped, report
    assert float(dropped.group(1)) < 1.0, report
    assert "Exception ignored" not in run.stderr, report
    assert "parent polled b'before fork'" in run.stdout, report
    assert "panicked" not in run.stderr, report
    assert "Traceback" not in run.stderr, report


# The share backend (confluent-kafka's ShareConsumer) buffers the rest of a poll: a forked child
# handed those records out a second time (the parent handles them too) through the parent's
# librdkafka handle, which the child cannot use.
_SHARE_SCRIPT = textwrap.dedent(
    """
    import os
    import sys

    import ferrokafka
    from ferrokafka.redelivery import QueueConsumer

    bootstrap, topic, markers = sys.argv[1], sys.argv[2], sys.argv[3]
    config = {"bootstrap.servers": bootstrap}
    client = ferrokafka.Client(config)
    for n in range(2):
        client.produce(topic, f"job-{n}".encode(), partition=0)
    queue = QueueConsumer(config, topic, markers, 30.0, backend="share")
    taken = []
    while not taken:
        taken = queue.consume(1, timeout=1.0)
    print(f"parent took {taken[0].value()!r}", flush=True)

    pid = os.fork()
    if pid == 0:
        for name, use in {
            "consume": lambda: queue.consume(1, timeout=1.0),
            "ack_many": lambda: queue.ack_many(taken),
            "stats": queue.stats,
            "close": queue.close,
        }.items():
            try:
                print(f"child: {name} gave {use()!r}", flush=True)
            except ferrokafka.FerrokafkaError as err:
                print(f"child: {name} refused: {err}", flush=True)
        sys.exit(0)

    _, status = os.waitpid(pid, 0)
    print(f"child exit code {os.waitstatus_to_exitcode(status)}", flush=True)
    queue.ack_many(taken)
    rest = []
    while not rest:
        rest = queue.consume(1, timeout=1.0)
    print(f"parent took {rest[0].value()!r}", flush=True)
    queue.ack_many(rest)
    queue.close()
    """
)


def test_forked_child_refuses_the_share_backends_buffered_records(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    run, report = _run_forking(_SHARE_SCRIPT, kafka_bootstrap, topic_factory)
    for name in ("consume", "ack_many", "stats", "close"):
        assert (
            f"child: {name} refused: ferrokafka.redelivery.QueueConsumer was created in process"
            in run.stdout
        ), report
    assert "parent took b'job-0'" in run.stdout, report
    assert "parent took b'job-1'" in run.stdout, report
    assert "Traceback" not in run.stderr, report
