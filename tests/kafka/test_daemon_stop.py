"""The daemons' stop with a broker that does not answer: SIGINT or SIGTERM ends the command
within 10 s, with exit status 0, and a WARNING names what could not be sent; ``stop()`` ends a
daemon within the same bound while it waits for the broker to take or acknowledge its records.
A broker is away (stopped: connections are refused) or hung (its process stopped with SIGSTOP:
connections are accepted and nothing answers, so only the client's own limits end a wait).

The command tests run the real command line in a child process and stop it with a real signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from ferrokafka import (
    AsyncConsumer,
    AsyncProducer,
    Batch,
    Client,
    Consumer,
    KafkaTimeoutError,
    NewTopic,
)
from ferrokafka.redelivery import QueueConsumer, RedeliveryTracker
from ferrokafka.scheduling import Scheduler, create_topics, schedule_message
from ferrokafka.status import StatusReader
from ferrokafka.tracking import Reporter
from tests.conftest import Broker, hung, outage, read_all, wait_until

pytestmark = pytest.mark.kafka

UNREACHABLE = "127.0.0.1:1"
STOP_BOUND = 10.0
# A client call's timeout against a hung broker.
TIMEOUT = 1.5


class RunningCommand:
    """A ``ferrokafka`` command in a child process whose stderr is collected line by line, so a
    test can wait for a line and then stop the command with a signal."""

    def __init__(self, *argv: str) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ferrokafka", *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for_line(self, text: str, timeout: float = 30.0) -> None:
        with self._changed:
            found = self._changed.wait_for(
                lambda: any(text in line for line in self.lines), timeout
            )
        assert found, f"no line with {text!r} within {timeout} s:\n{self.stderr}"

    def stop_with(self, signum: signal.Signals, wait: float) -> float:
        """Sends ``signum``; returns the seconds until the process ended (killed after
        ``wait``)."""
        sent = time.monotonic()
        self.process.send_signal(signum)
        try:
            self.process.wait(wait)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return time.monotonic() - sent

    def stop_within(self, signum: signal.Signals, bound: float = STOP_BOUND) -> None:
        """Sends ``signum`` and reads all of stderr; the command must have ended within
        ``bound`` seconds, with status 0 and no traceback."""
        took = self.stop_with(signum, wait=2 * STOP_BOUND)
        self.close()
        assert took < bound, f"stopped {took:.1f} s after {signum.name}:\n{self.stderr}"
        assert self.process.returncode == 0, self.stderr
        assert "Traceback" not in self.stderr, self.stderr

    def close(self) -> None:
        """Kills the process if it still runs, and closes its pipe."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(10)
        assert self.process.stderr is not None
        self.process.stderr.close()

    @property
    def stderr(self) -> str:
        with self._changed:
            return "".join(self.lines)


def reporting_daemon(*argv: str, bootstrap: str) -> RunningCommand:
    """The daemon command ``argv`` against ``bootstrap``, sending process reports."""
    return RunningCommand(
        *argv, "--bootstrap-servers", bootstrap, "--report", "--reports-topic", "reports-x"
    )


@pytest.fixture
def commands() -> Iterator[list[RunningCommand]]:
    started: list[RunningCommand] = []
    yield started
    for command in started:
        command.close()


@pytest.mark.parametrize(
    ("argv", "signum"),
    [
        (["scheduler", "--schedules-topic", "schedules"], signal.SIGINT),
        (
            ["redelivery", "--queue-topic", "jobs", "--markers-topic", "jobs-markers"],
            signal.SIGTERM,
        ),
    ],
    ids=["scheduler-SIGINT", "redelivery-SIGTERM"],
)
def test_a_reporting_daemon_stops_within_its_bound_when_the_broker_is_unreachable(
    commands: list[RunningCommand], argv: list[str], signum: signal.Signals
) -> None:
    daemon = reporting_daemon(*argv, bootstrap=UNREACHABLE)
    commands.append(daemon)
    # Started (a signal before ends the start instead: see the transactional test below).
    daemon.wait_for_line("running until SIGINT or SIGTERM")
    daemon.stop_within(signum)
    warnings = [line for line in daemon.lines if " WARNING " in line and "not sent" in line]
    assert any("final report" in line and "reports-x" in line for line in warnings), daemon.stderr


@pytest.mark.parametrize("kind", ["scheduler", "tracker"])
def test_stop_with_a_reporter_keeps_its_timeout_when_the_broker_is_unreachable(kind: str) -> None:
    # The reporter's final report is part of the stop: it gets what the stop left of its
    # timeout, not its own exit_timeout (5 s) on top.
    config = {"bootstrap.servers": UNREACHABLE}
    reporter = Reporter(config, interval=1.0, reports_topic="reports-x", exit_timeout=5.0)
    daemon: Scheduler | RedeliveryTracker
    if kind == "scheduler":
        daemon = Scheduler(config, ["schedules"], reporter=reporter)
    else:
        daemon = RedeliveryTracker(config, "jobs", "jobs-markers", reporter=reporter).start()
    started = time.monotonic()
    daemon.stop(timeout=2.0)
    took = time.monotonic() - started
    assert took < 3.0, f"stop(timeout=2.0) took {took:.1f} s"


def test_a_transactional_scheduler_starting_with_the_broker_unreachable_stops_at_once(
    commands: list[RunningCommand],
) -> None:
    """A transactional scheduler's start waits for the broker in ``init_transactions`` (up to
    30 s): a signal ends the start. Before, the signal was handled only once that wait timed
    out, and the command then failed with its timeout (status 1)."""
    daemon = RunningCommand(
        "scheduler",
        "--schedules-topic",
        "schedules",
        "--bootstrap-servers",
        UNREACHABLE,
        "--config",
        "transactional.id=tx-stop",
    )
    commands.append(daemon)
    daemon.wait_for_line("Connection refused")
    daemon.stop_within(signal.SIGINT, bound=2.0)
    assert "stopped while starting" in daemon.stderr, daemon.stderr


def test_ctrl_c_interrupts_a_transactional_producer_waiting_for_an_unreachable_broker() -> None:
    """Ctrl-C during ``AsyncProducer(...)`` with a ``transactional.id`` and no broker raises
    KeyboardInterrupt at once, not after ``init_transactions``' 30 s."""
    script = (
        "import sys\n"
        "from ferrokafka import AsyncProducer\n"
        "try:\n"
        f"    AsyncProducer({{'bootstrap.servers': {UNREACHABLE!r}, 'transactional.id': 'tx-c'}})\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # Inside the constructor once librdkafka logs the refused connection (through
        # logging's last-resort handler, on stderr).
        assert child.stderr is not None
        for line in child.stderr:
            if "Connection refused" in line:
                break
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=2 * STOP_BOUND)
        took = time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert "interrupted" in out, err
    assert took < 2.0, f"interrupted {took:.1f} s after SIGINT:\n{err}"


def test_a_scheduler_stops_within_its_bound_when_the_broker_goes_away(
    commands: list[RunningCommand], outage_broker: Broker
) -> None:
    """The broker goes away while the scheduler holds a loaded partition: neither its final
    state report nor its process reports can be sent."""
    bootstrap, env = outage_broker
    schedules = f"stop-schedules-{uuid.uuid4().hex[:8]}"
    create_topics(Client({"bootstrap.servers": bootstrap}), schedules, num_partitions=1)
    daemon = reporting_daemon(
        "scheduler",
        "--schedules-topic",
        schedules,
        "--group-id",
        f"g-{schedules}",
        bootstrap=bootstrap,
    )
    commands.append(daemon)
    daemon.wait_for_line(f"loaded {schedules}-0")
    with outage(env):
        daemon.wait_for_line("Connection refused")
        daemon.stop_within(signal.SIGTERM)
    warnings = [line for line in daemon.lines if " WARNING " in line]
    assert any("final state report(s) not acknowledged" in line for line in warnings), daemon.stderr
    assert any("final report" in line and "reports-x" in line for line in warnings), daemon.stderr


def stop_while_due_in_an_outage(
    env: dict[str, str], daemon: Scheduler | RedeliveryTracker, due: float, what: str
) -> None:
    """Takes the broker away before ``due`` (Unix seconds), when the daemon's ``what`` come
    due; 2 s after, while the daemon waits for the broker, stops it: within the bound."""
    with outage(env):
        assert time.time() < due, f"the broker stopped after the {what} came due"
        wait_until(lambda: time.time() > due + 2.0, 15, f"the {what} due")
        sent = time.monotonic()
        stopped = daemon.stop(timeout=2 * STOP_BOUND)
        took = time.monotonic() - sent
    assert stopped, f"{type(daemon).__name__} did not stop"
    assert took < STOP_BOUND, f"stopped {took:.1f} s after stop()"


@pytest.mark.parametrize(
    ("transactional", "queue_size"),
    [(False, 5), (True, 100_000)],
    ids=["at-least-once-full-queue", "transactional"],
)
def test_a_scheduler_stops_within_its_bound_while_its_dispatch_waits_for_the_broker(
    outage_broker: Broker, transactional: bool, queue_size: int
) -> None:
    """Schedules come due while the broker is away. At-least-once, with room for 5 records in
    librdkafka's queue, the dispatch waits for room; in a transaction, for the acknowledgements
    its commit needs. The stop ends either wait. Before, the first lasted until librdkafka
    timed the queued records out (the 30 s dispatch timeout, once per 5 records), the second
    the transaction's 30 s deadline, and the stop with them. No schedule is lost: a scheduler
    started afterwards dispatches them."""
    bootstrap, env = outage_broker
    client = Client({"bootstrap.servers": bootstrap})
    schedules = f"full-schedules-{uuid.uuid4().hex[:8]}"
    target = f"full-target-{uuid.uuid4().hex[:8]}"
    create_topics(client, schedules, num_partitions=1)
    client.create_topics([NewTopic(target, num_partitions=1)])
    group, count = f"g-{schedules}", 30
    config: dict[str, str | int] = {
        "bootstrap.servers": bootstrap,
        "queue.buffering.max.messages": queue_size,
        # No rebalance while the broker is away: the partition stays loaded and due.
        "session.timeout.ms": 30000,
        "heartbeat.interval.ms": 500,
    }
    if transactional:
        config["transactional.id"] = f"tx-{schedules}"
    scheduler = Scheduler(config, [schedules], group_id=group, state_interval=0.2)
    try:
        wait_until(lambda: [s["state"] for s in scheduler.status()] == ["loaded"], 30, "load")
        epoch = int(time.time()) + 6
        for n in range(count):
            message = {"topic": target, "payload": str(n).encode()}
            schedule_message(client, message, epoch, {"topic": schedules, "key": f"s-{n}"})
        wait_until(lambda: scheduler.status()[0]["pending"] == count, 10, "schedules applied")
        stop_while_due_in_an_outage(env, scheduler, epoch, "schedules")
    finally:
        scheduler.stop()
    # A group of its own, which reads the schedules from the start: the stopped scheduler could
    # not leave its group, which waits out its session before handing the partition on.
    with Scheduler({"bootstrap.servers": bootstrap}, [schedules], group_id=f"{group}-next"):
        expected = {str(n).encode() for n in range(count)}
        wait_until(
            lambda: {value for _, value in read_all(bootstrap, target, 1)} >= expected,
            60,
            "every schedule dispatched",
            interval=0.5,
        )


def test_a_redelivery_tracker_stops_within_its_bound_while_a_redelivery_waits_for_the_broker(
    outage_broker: Broker,
) -> None:
    """Messages come due for redelivery while the broker is away (the tracker's clock falls
    back to the wall clock after 1 s without markers here), so the tracker's write waits for
    acknowledgements that cannot come: the stop ends that wait. Before, it lasted the write's
    30 s deadline, and the stop with it. No message is lost: a tracker started afterwards
    redelivers them."""
    bootstrap, env = outage_broker
    client = Client({"bootstrap.servers": bootstrap})
    suffix = uuid.uuid4().hex[:8]
    queue_topic, markers = f"stop-queue-{suffix}", f"stop-markers-{suffix}"
    client.create_topics([NewTopic(name, num_partitions=1) for name in (queue_topic, markers)])
    values = {f"m{n}" for n in range(3)}
    for value in values:
        client.produce(queue_topic, value)
    config: dict[str, str | int] = {
        "bootstrap.servers": bootstrap,
        "auto.offset.reset": "earliest",
        # No rebalance while the broker is away.
        "session.timeout.ms": 30000,
        "heartbeat.interval.ms": 500,
    }
    group = f"t-{suffix}"
    tracker = RedeliveryTracker(
        config, queue_topic, markers, group_id=group, use_now_if_no_marker_seen=1.0
    ).start()
    try:
        wait_until(lambda: [s["caught_up"] for s in tracker.status()] == [True], 30, "catch-up")
        taken_at = time.time()
        queue = QueueConsumer(config, queue_topic, markers, 6.0, group_id=f"q-{suffix}")
        taken = [queue.poll(30.0) for _ in values]
        assert {(m.value() or b"").decode() for m in taken if m is not None} == values
        queue.close()  # nothing acknowledged: each message is due 6 s after it was taken
        wait_until(lambda: tracker.status()[0]["open"] == len(values), 10, "the STARTs read")
        stop_while_due_in_an_outage(env, tracker, taken_at + 6.0, "messages")
    finally:
        tracker.stop()
    # A group of its own, which reads the markers from the start (see the scheduler's test).
    with RedeliveryTracker(config, queue_topic, markers, group_id=f"{group}-next"):
        wait_until(
            lambda: (
                Counter(value.decode() for _, value in read_all(bootstrap, queue_topic, 1))
                >= Counter(dict.fromkeys(values, 2))
            ),
            60,
            "every message redelivered",
            interval=0.5,
        )


def timed_on_a_thread(call: Callable[[], object], limit: float) -> float:
    """Seconds ``call`` took on a thread of its own; fails the test, instead of hanging it,
    when it is still running after ``limit``."""
    thread = threading.Thread(target=call, daemon=True)
    sent = time.monotonic()
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"still waiting {limit:.0f} s later"
    return time.monotonic() - sent


def topic_with_one_record(bootstrap: str) -> str:
    """A new one-partition topic holding one record."""
    topic = f"stop-hung-{uuid.uuid4().hex[:8]}"
    Client({"bootstrap.servers": bootstrap}).create_topics([NewTopic(topic, num_partitions=1)])
    producer = AsyncProducer({"bootstrap.servers": bootstrap})
    producer.produce(b"one", topic=topic)
    producer.flush(30.0)
    assert producer.shutdown(5.0) == []
    return topic


def test_a_consumer_stops_within_its_bound_when_the_broker_hangs(outage_broker: Broker) -> None:
    """The consumer's final commit and its leaving the group get no answer from a hung broker:
    librdkafka waits for them without a limit (a stop that never returned), the consumer
    waits at most ``CONSUMER_CLOSE_SECONDS`` after the drain."""
    bootstrap, env = outage_broker
    topic, handled = topic_with_one_record(bootstrap), threading.Event()
    config = {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}"}
    consumer = Consumer(config, [topic], lambda batch: handled.set())
    consumer.start()
    assert handled.wait(30.0), "the record was not handled"
    with hung(env):
        took = timed_on_a_thread(consumer.stop, 2 * consumer.exit_timeout)
    assert took < consumer.exit_timeout, f"stopped {took:.1f} s after stop()"


def test_an_async_consumer_leaves_its_block_within_its_bound_when_the_broker_hangs(
    outage_broker: Broker,
) -> None:
    """As above, for an ``AsyncConsumer`` leaving its ``async with`` block."""
    bootstrap, env = outage_broker
    topic, handled = topic_with_one_record(bootstrap), threading.Event()
    config = {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}"}

    async def handle(batch: Batch) -> None:
        handled.set()

    async def consume_then_leave() -> tuple[float, float]:
        with contextlib.ExitStack() as broker_hangs:
            async with AsyncConsumer(config, [topic], handle) as consumer:
                loop = asyncio.get_running_loop()
                assert await loop.run_in_executor(None, handled.wait, 30.0), "not handled"
                broker_hangs.enter_context(hung(env))
                sent = time.monotonic()
            return time.monotonic() - sent, consumer.exit_timeout

    outcome: list[tuple[float, float]] = []
    timed_on_a_thread(lambda: outcome.append(asyncio.run(consume_then_leave())), 60.0)
    took, bound = outcome[0]
    assert took < bound, f"left the block {took:.1f} s after the broker hung"


def test_a_status_reader_stops_at_once_while_a_look_up_waits_for_a_hung_broker(
    outage_broker: Broker,
) -> None:
    """A look-up for new topics (the discovery thread's, or a caller's ``refresh()``) waits
    for a hung broker up to ``discover_interval`` + 10 s; ``stop()`` (Ctrl-C in ``ferrokafka
    status --watch``) does not wait for it, and the look-up, once answered, reads nothing."""
    bootstrap, env = outage_broker
    suffix = uuid.uuid4().hex[:8]
    reports, errors = f"reports-{suffix}", f"errors-{suffix}"
    Client({"bootstrap.servers": bootstrap}).create_topics(
        [NewTopic(name, num_partitions=1) for name in (reports, errors)]
    )
    reader = StatusReader(
        {"bootstrap.servers": bootstrap}, reports_topic=reports, errors_topic=errors
    ).start(timeout=30.0)
    changed: list[bool] = []
    with hung(env):
        looking = threading.Thread(target=lambda: changed.append(reader.refresh()), daemon=True)
        looking.start()
        looking.join(1.0)
        assert looking.is_alive(), "the look-up did not wait for the hung broker"
        took = timed_on_a_thread(reader.stop, 20.0)
    assert took < 2.0, f"stopped {took:.1f} s after stop()"
    looking.join(20.0)
    assert changed == [False], "a look-up answered after stop() changed what is read"


def test_a_redelivery_tracker_gives_its_final_commit_up_at_its_deadline_when_the_broker_hangs(
    outage_broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    """The tracker's final commit gets no answer from a hung broker: it is given up, and said,
    at the shutdown deadline (a synchronous commit waited for as long as the broker hung, on a
    closing thread the stop left behind), and the stop keeps its bound."""
    bootstrap, env = outage_broker
    suffix = uuid.uuid4().hex[:8]
    queue_topic, markers = f"hung-queue-{suffix}", f"hung-markers-{suffix}"
    client = Client({"bootstrap.servers": bootstrap})
    client.create_topics([NewTopic(name, num_partitions=1) for name in (queue_topic, markers)])
    client.produce(queue_topic, b"job")
    config = {"bootstrap.servers": bootstrap, "group.id": f"q-{suffix}"}
    with QueueConsumer(config, queue_topic, markers) as queue:
        [job] = queue.consume(1, timeout=30.0)
        queue.ack(job)  # a START and an END: markers the tracker's final commit moves past
    # No commit on schedule before the stop: the final commit is the one that meets the hung
    # broker (one due earlier would leave it nothing to commit).
    tracker = RedeliveryTracker(
        {"bootstrap.servers": bootstrap},
        queue_topic,
        markers,
        group_id=f"t-{suffix}",
        commit_interval=600.0,
    ).start()
    try:
        wait_until(
            lambda: [(s["caught_up"], s["applied"]) for s in tracker.status()] == [(True, 2)],
            30,
            "both markers read",
        )
        with caplog.at_level(logging.WARNING, logger="ferrokafka_kafka"), hung(env):
            took = timed_on_a_thread(tracker.stop, 2 * STOP_BOUND)
    finally:
        tracker.stop()
    assert took < STOP_BOUND, f"stopped {took:.1f} s after stop()"
    assert "markers offsets not committed" in caplog.text, caplog.text


@pytest.mark.parametrize("daemon_name", ["scheduler", "redelivery"])
def test_a_daemon_command_stops_within_its_bound_when_the_broker_hangs(
    commands: list[RunningCommand], outage_broker: Broker, daemon_name: str
) -> None:
    """The broker hangs (accepts connections, answers nothing) while the daemon holds a loaded
    partition: its final reports, offset commit and group leave get no answer, and SIGTERM
    still ends it within the bound, without a traceback."""
    bootstrap, env = outage_broker
    suffix = uuid.uuid4().hex[:8]
    topics = [f"hung-{daemon_name}-{suffix}", f"hung-{daemon_name}-{suffix}-markers"]
    Client({"bootstrap.servers": bootstrap}).create_topics(
        [NewTopic(name, num_partitions=1) for name in topics]
    )
    if daemon_name == "scheduler":
        argv, started = ["scheduler", "--schedules-topic", topics[0]], f"loaded {topics[0]}-0"
    else:
        argv = ["redelivery", "--queue-topic", topics[0], "--markers-topic", topics[1]]
        started = f"{topics[1]}-0 caught up"
    daemon = reporting_daemon(*argv, "--group-id", f"g-{suffix}", bootstrap=bootstrap)
    commands.append(daemon)
    daemon.wait_for_line(started)
    with hung(env):
        daemon.stop_within(signal.SIGTERM)
    assert "did not answer" in daemon.stderr, daemon.stderr


def test_client_calls_and_a_producer_keep_their_timeouts_when_the_broker_hangs(
    outage_broker: Broker,
) -> None:
    """Against a hung broker every wait ends at its own timeout with ``KafkaTimeoutError``
    (the broker named), for a client that knew the cluster and for one created meanwhile."""
    bootstrap, env = outage_broker
    topic = topic_with_one_record(bootstrap)
    config = {"bootstrap.servers": bootstrap}
    known = Client(config)
    known.list_topics(topic)
    producer = AsyncProducer(config)
    with hung(env):
        fresh = Client(config)
        producer.produce(b"late", topic=topic)
        calls: dict[str, Callable[[], object]] = {
            "list_topics": lambda: known.list_topics(timeout=TIMEOUT),
            "produce": lambda: known.produce(topic, b"x", timeout=TIMEOUT),
            "read_topic": lambda: known.read_topic(topic, timeout=TIMEOUT),
            "create_topics": lambda: known.create_topics([f"{topic}-2"], timeout=TIMEOUT),
            "a fresh client's list_topics": lambda: fresh.list_topics(timeout=TIMEOUT),
            "AsyncProducer.flush": lambda: producer.flush(TIMEOUT),
        }
        for name, call in calls.items():
            started = time.monotonic()
            with pytest.raises(KafkaTimeoutError, match=bootstrap):
                call()
            took = time.monotonic() - started
            assert TIMEOUT - 0.1 < took < TIMEOUT + 2.0, f"{name} took {took:.1f} s"
        started = time.monotonic()
        [handed_back] = producer.shutdown(TIMEOUT)
        assert handed_back.value() == b"late"
        assert time.monotonic() - started < TIMEOUT + 2.0


def test_a_queue_consumer_closes_within_its_timeout_when_the_broker_hangs(
    outage_broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    """A hung broker acknowledges neither the END marker of an ack nor the copies put back
    of the prefetched messages: ``close(timeout)`` still returns within its timeout plus about
    two seconds (as documented), and says what it could not write."""
    bootstrap, env = outage_broker
    suffix = uuid.uuid4().hex[:8]
    queue_topic, markers = f"hung-queue-{suffix}", f"hung-markers-{suffix}"
    client = Client({"bootstrap.servers": bootstrap})
    client.create_topics([NewTopic(name, num_partitions=1) for name in (queue_topic, markers)])
    for n in range(5):
        client.produce(queue_topic, f"job{n}")
    config = {"bootstrap.servers": bootstrap, "group.id": f"q-{suffix}"}
    queue = QueueConsumer(config, queue_topic, markers)
    try:
        [job] = queue.consume(1, timeout=30.0)
        with caplog.at_level(logging.WARNING, logger="ferrokafka_kafka"), hung(env):
            queue.ack(job)
            took = timed_on_a_thread(lambda: queue.close(TIMEOUT), 2 * STOP_BOUND)
    finally:
        queue.close(TIMEOUT)
    assert took < TIMEOUT + 2.5, f"closed {took:.1f} s after close({TIMEOUT})"
    assert "not written within" in caplog.text, caplog.text
