"""The end of a process's life: what a script that ends, or drops a component, leaves behind.

Each test runs a real script in a child interpreter (the exit path is the interpreter's own) and
counts what reached the topic with confluent-kafka.
"""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ferrokafka import AsyncProducer, Client
from ferrokafka.scheduling import create_topics
from tests.conftest import TopicFactory, committed_offsets, read_all

pytestmark = pytest.mark.kafka

UNREACHABLE = "127.0.0.1:1"

# Produces one record with produce() and 500 with produce_many() to each topic, then ends
# without shutdown(); prints the wall-clock time at which the script's own code ended.
_PRODUCE_AND_END = """
import sys, time
from ferrokafka import AsyncProducer

bootstrap, exit_timeout, *topics = sys.argv[1:]
producer = AsyncProducer(
    {"bootstrap.servers": bootstrap, "message.timeout.ms": 60000},
    max_queue_size=5000,
    delivery_interval=5.0,
    exit_timeout=float(exit_timeout),
)
for topic in topics:
    producer.produce(b"one", topic=topic)
    producer.produce_many([b"many-%d" % i for i in range(500)], topic=topic)
print(time.time(), flush=True)
"""


def run_script(script: str, *args: str, timeout: float = 60.0) -> tuple[float, str]:
    """Runs ``script``; returns how long the interpreter took to exit after the script's own
    code ended (its last printed line), and its stderr."""
    run = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    ended = time.time()
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    return ended - float(run.stdout.split()[-1]), run.stderr


def test_a_script_that_ends_delivers_what_its_producer_buffered(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=3)
    exit_took, stderr = run_script(_PRODUCE_AND_END, kafka_bootstrap, "5", topic)
    values = sorted(value for _, value in read_all(kafka_bootstrap, topic))
    assert values == sorted([b"one"] + [b"many-%d" % i for i in range(500)])
    assert exit_took < 5.0 + 1.0, f"exit took {exit_took:.1f} s"
    assert "could not be delivered" not in stderr, stderr


# A worker process keeps its producer in a global (the usual per-process client) and returns
# without shutdown(); multiprocessing ends such a process with os._exit(), after its own
# finalizers, so with the fork start method the atexit hook never runs there.
_PRODUCE_IN_WORKERS = """
import multiprocessing, sys
from ferrokafka import AsyncProducer

producer = None

def work(bootstrap, topic):
    global producer
    producer = AsyncProducer({"bootstrap.servers": bootstrap}, delivery_interval=5.0)
    producer.produce_many([b"%s-%d" % (topic.encode(), i) for i in range(100)], topic=topic)

if __name__ == "__main__":
    bootstrap, method, process_topic, pool_topic = sys.argv[1:]
    context = multiprocessing.get_context(method)
    worker = context.Process(target=work, args=(bootstrap, process_topic))
    worker.start()
    worker.join(30)
    print("Process exit code", worker.exitcode, flush=True)
    with context.Pool(1) as pool:
        pool.apply(work, (bootstrap, pool_topic))
        pool.close()
        pool.join()
"""


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_workers_that_end_deliver_what_their_producer_buffered(
    kafka_bootstrap: str, topic_factory: TopicFactory, method: str, tmp_path: Path
) -> None:
    topics = [topic_factory(partitions=1) for _ in range(2)]
    # A file, not `-c`: a spawned worker imports the main module to find `work`.
    script = tmp_path / "workers.py"
    script.write_text(_PRODUCE_IN_WORKERS)
    run = subprocess.run(
        [sys.executable, str(script), kafka_bootstrap, method, *topics],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    stderr = run.stderr
    assert run.returncode == 0, stderr
    assert "Process exit code 0" in run.stdout, stderr
    assert "Traceback" not in stderr, stderr
    for topic in topics:
        values = sorted(value for _, value in read_all(kafka_bootstrap, topic, partitions=1))
        assert values == sorted(b"%s-%d" % (topic.encode(), i) for i in range(100)), stderr
    assert "could not be delivered" not in stderr, stderr


def test_an_exit_with_the_broker_unreachable_keeps_its_bound_and_says_what_was_lost() -> None:
    exit_took, stderr = run_script(_PRODUCE_AND_END, UNREACHABLE, "1.5", "orders", "audit")
    # the bound: exit_timeout, plus librdkafka's purge of what it holds (milliseconds)
    assert exit_took < 1.5 + 1.0, f"exit took {exit_took:.1f} s"
    warnings = [line for line in stderr.splitlines() if "could not be delivered" in line]
    assert len(warnings) == 1, stderr  # one line names them all
    warning = warnings[0]
    assert "at interpreter exit: 1002 message(s)" in warning, warning
    assert "audit (501), orders (501)" in warning, warning


def test_ctrl_c_during_the_exit_wait_ends_it_and_still_says_what_was_lost() -> None:
    # exit_timeout=30 against an unreachable broker: only the Ctrl-C ends the wait early.
    script = "import logging; logging.basicConfig(level=logging.INFO)\n" + _PRODUCE_AND_END
    child = subprocess.Popen(
        [sys.executable, "-c", script, UNREACHABLE, "30", "orders"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stderr is not None
    # The producer says it waits: the signal lands in the wait, not in the interpreter's own
    # end before the hook (where its KeyboardInterrupt is the interpreter's to print).
    with child:  # ended and its pipes closed should the test fail: none left to the next test
        try:
            before_the_wait = []
            for line in child.stderr:
                before_the_wait.append(line)
                if "delivering 501 message(s) still held" in line:
                    break
            else:
                pytest.fail("the producer never said it waits:\n" + "".join(before_the_wait))
            started = time.monotonic()
            child.send_signal(signal.SIGINT)
            _, stderr = child.communicate(timeout=20)
        finally:
            child.kill()
    assert time.monotonic() - started < 5, stderr
    lost = [line for line in stderr.splitlines() if "are lost" in line]
    assert len(lost) == 1, stderr
    assert "at interpreter exit: 501 message(s) are lost: Ctrl-C ended the wait" in lost[0], stderr
    assert "orders (501)" in lost[0], stderr
    assert "Traceback" not in stderr, stderr


# A component that the Ctrl-C reaches while it begins its close, before any wait.
_CTRL_C_WHILE_BEGINNING = """
from ferrokafka import _exit

class CtrlCWhileBeginning:
    exit_timeout = 1.0

    def begin_exit(self):
        raise KeyboardInterrupt

    def finish_exit(self, timeout):
        pass

beginning = CtrlCWhileBeginning()
_exit.register(beginning)
"""


def test_ctrl_c_before_the_exit_wait_began_ends_it_as_well() -> None:
    # The other test's Ctrl-C may land a moment before the wait: it must not be a traceback
    # and a full exit_timeout then.
    exit_took, stderr = run_script(
        _PRODUCE_AND_END + _CTRL_C_WHILE_BEGINNING, UNREACHABLE, "30", "orders"
    )
    assert exit_took < 5, stderr
    lost = [line for line in stderr.splitlines() if "are lost" in line]
    assert len(lost) == 1, stderr
    assert "at interpreter exit: 501 message(s) are lost: Ctrl-C ended the wait" in lost[0], stderr


# Three messages too large for their topic (the broker refuses them) fail before the end (flush
# waits for that); nobody takes them back with take_failed(). One message to another topic is
# delivered at the exit.
_FAIL_THEN_END = """
import sys, time
from ferrokafka import AsyncProducer

bootstrap, strict, topic = sys.argv[1:]
producer = AsyncProducer({"bootstrap.servers": bootstrap}, exit_timeout=5.0)
producer.produce_many([b"x" * 2000] * 3, topic=strict)
producer.flush(20)
producer.produce(b"kept", topic=topic)
print(time.time(), flush=True)
"""


def test_messages_that_failed_before_the_exit_are_said_lost_as_such(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    strict = topic_factory(partitions=1, config={"max.message.bytes": "1000"})
    topic = topic_factory(partitions=1)
    _, stderr = run_script(_FAIL_THEN_END, kafka_bootstrap, strict, topic)
    assert [value for _, value in read_all(kafka_bootstrap, topic, 1)] == [b"kept"]
    assert read_all(kafka_bootstrap, strict, 1) == []
    lost = [line for line in stderr.splitlines() if "are lost" in line]
    assert len(lost) == 1, stderr
    assert "3 message(s) that failed before it were never taken back" in lost[0], lost[0]
    assert f"{strict} (3)" in lost[0], lost[0]
    assert "could not be delivered within exit_timeout" not in stderr, stderr


def test_a_producer_dropped_by_its_owner_delivers_before_it_goes(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=1)
    # The default 5 s bound ran out once on a machine under load: what is tested here is that
    # the drop delivers (the bound is, below).
    producer = AsyncProducer(
        {"bootstrap.servers": kafka_bootstrap}, delivery_interval=5.0, exit_timeout=60.0
    )
    producer.produce_many([b"kept-%d" % i for i in range(100)], topic=topic)
    del producer
    gc.collect()  # the producer's own thread does not keep it alive
    assert [value for _, value in read_all(kafka_bootstrap, topic, 1)] == [
        b"kept-%d" % i for i in range(100)
    ]


def test_a_dropped_producer_that_cannot_deliver_logs_its_loss_within_its_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    producer = AsyncProducer({"bootstrap.servers": UNREACHABLE}, exit_timeout=1.0)
    producer.produce_many([b"x"] * 7, topic="nowhere")
    started = time.monotonic()
    with caplog.at_level("WARNING", logger="ferrokafka.producer"):
        del producer
        gc.collect()
    assert time.monotonic() - started < 1.0 + 1.0
    assert "collected without shutdown(): 7 message(s)" in caplog.text
    assert "nowhere (7)" in caplog.text


# Consumes the topic's records with a long commit interval, then ends without stop().
_CONSUME_AND_END = """
import sys, threading, time
from ferrokafka import Consumer

bootstrap, group, topic, count = sys.argv[1:]
handled, done = [], threading.Event()

def handle(batch):
    handled.extend(batch.offsets())
    if len(handled) >= int(count):
        done.set()

Consumer(
    {"bootstrap.servers": bootstrap, "group.id": group}, [topic], handle, commit_interval=60.0
).start()
assert done.wait(30), f"handled {len(handled)}"
print(time.time(), flush=True)
"""


def consume_100_in_a_script_that_ends(script: str, bootstrap: str, group: str, topic: str) -> None:
    """Produces 100 records to ``topic`` (one partition), runs ``script`` to consume them in
    ``group`` and asserts that it ended within 10 s having committed all 100."""
    with AsyncProducer({"bootstrap.servers": bootstrap}) as producer:
        producer.produce_many([b"r-%d" % i for i in range(100)], topic=topic)
    exit_took, _ = run_script(script, bootstrap, group, topic, "100")
    assert committed_offsets(bootstrap, group, topic, 1) == {0: 100}
    assert exit_took < 10.0, f"exit took {exit_took:.1f} s"


def test_a_consumer_script_that_ends_commits_what_it_handled(
    kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=1)
    # without a stop at exit nothing would be committed for a minute: all 100 read again
    consume_100_in_a_script_that_ends(_CONSUME_AND_END, kafka_bootstrap, f"exit-{topic}", topic)


# Runs a scheduler until its partition is loaded, then ends without stop().
_SCHEDULE_AND_END = """
import sys, time
from ferrokafka.scheduling import Scheduler

bootstrap, group, topic = sys.argv[1:]
scheduler = Scheduler({"bootstrap.servers": bootstrap}, [topic], group_id=group)
deadline = time.monotonic() + 30
while [row["state"] for row in scheduler.status()] != ["loaded"]:
    assert time.monotonic() < deadline, scheduler.status()
    time.sleep(0.05)
print(time.time(), flush=True)
"""


def test_a_scheduler_script_that_ends_leaves_its_group_at_once(
    kafka_bootstrap: str, kafka_client: Client, confluent_admin: Any
) -> None:
    topic = f"exit-schedules-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_client, topic, num_partitions=1)
    group = f"exit-{topic}"
    try:
        exit_took, _ = run_script(_SCHEDULE_AND_END, kafka_bootstrap, group, topic)
        assert exit_took < 10.0, f"exit took {exit_took:.1f} s"
        # a daemon that left its group hands its partitions over now, not after
        # session.timeout.ms
        (described,) = confluent_admin.describe_consumer_groups([group]).values()
        assert described.result().members == []
    finally:
        kafka_client.delete_topics([topic, f"{topic}_states"])


# Consumes with an AsyncConsumer started without `async with`, and lets asyncio.run() end.
_CONSUME_ASYNC_AND_END = """
import asyncio, sys, time
from ferrokafka import AsyncConsumer

bootstrap, group, topic, count = sys.argv[1:]

async def main():
    handled, done = [], asyncio.Event()

    async def handle(batch):
        handled.extend(batch.offsets())
        if len(handled) >= int(count):
            done.set()

    consumer = AsyncConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group}, [topic], handle, commit_interval=60.0
    )
    await consumer.start()
    await asyncio.wait_for(done.wait(), 30)

asyncio.run(main())
print(time.time(), flush=True)
"""


def test_an_asyncio_script_that_ends_commits_what_it_handled_and_leaves_its_group(
    kafka_bootstrap: str, topic_factory: TopicFactory, confluent_admin: Any
) -> None:
    topic = topic_factory(partitions=1)
    group = f"exit-async-{topic}"
    consume_100_in_a_script_that_ends(_CONSUME_ASYNC_AND_END, kafka_bootstrap, group, topic)
    (described,) = confluent_admin.describe_consumer_groups([group]).values()
    assert described.result().members == []
