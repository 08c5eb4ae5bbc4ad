"""Shared pytest fixtures: the real Kafka broker, unique topics, an admin helper, and Spark.

The broker is a real Apache Kafka process started by ``scripts/kafka.sh`` on a test port (so a
demo broker on 9092 is left alone), or the one named by ``KAFKA_BOOTSTRAP``.
"""

from __future__ import annotations

import faulthandler
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import ferrokafka
from ferrokafka.scheduling import create_topics, schedule_message

if TYPE_CHECKING:
    from confluent_kafka import Message as ConfluentMessage
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parent.parent
KAFKA_SCRIPT = ROOT / "scripts" / "kafka.sh"
TopicFactory = Callable[..., str]
# Short group timeouts, so that a killed daemon's or process's partitions move within seconds.
GROUP_SETTINGS: dict[str, str | int | float | bool] = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
}


# How long past its pytest-timeout a test may run before the whole run ends (below).
DEADLOCK_GRACE_SECONDS = 60
# A copy of the terminal's stderr (not pytest's capture file) for the deadlock watchdog.
WATCHDOG_STDERR = pytest.StashKey[int]()


def pytest_sessionstart(session: pytest.Session) -> None:
    capture = session.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=False)
    try:
        session.config.stash[WATCHDOG_STDERR] = os.dup(2)
    finally:
        if capture is not None:
            capture.resume_global_capture()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    """Ends the run, with every thread's Python stack on stderr, when a test outlives its
    timeout by a minute.

    pytest-timeout interrupts a test with SIGALRM, whose Python handler runs only when the main
    thread gets back to the interpreter; a main thread blocked in native code with the GIL held
    (a deadlock) never does, and the suite would hang until CI kills it without a word. The
    faulthandler watchdog is a C thread that needs no GIL: it prints the stacks and exits."""
    marker = item.get_closest_marker("timeout")
    timeout = marker.args[0] if marker and marker.args else item.config.getini("timeout")
    faulthandler.dump_traceback_later(
        float(timeout) + DEADLOCK_GRACE_SECONDS,
        exit=True,
        file=item.config.stash[WATCHDOG_STDERR],
    )
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1
) -> None:
    """Poll ``condition`` every ``interval`` seconds until it holds; fail naming ``what`` after
    ``timeout`` (for states that no event announces, such as a topic's contents)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets, read with confluent-kafka as an outside observer."""
    from confluent_kafka import Consumer as ConfluentConsumer
    from confluent_kafka import TopicPartition as ConfluentPartition

    observer = ConfluentConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = observer.committed(
            [ConfluentPartition(topic, p) for p in range(partitions)], timeout=10
        )
        return {tp.partition: tp.offset for tp in found if tp.offset >= 0}
    finally:
        observer.close()


def write_transactions(bootstrap: str, topic: str, aborted: tuple[bool, ...]) -> int:
    """Writes one transaction of three records to partition 0 of ``topic`` per entry of
    ``aborted`` (aborted where true), with confluent-kafka as Java or Karafka would: each ends
    with a marker. Returns the partition's end offset."""
    from confluent_kafka import Producer as ConfluentProducer

    writer = ConfluentProducer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"t-{uuid.uuid4().hex}"}
    )
    writer.init_transactions(30)
    for n, abort in enumerate(aborted):
        writer.begin_transaction()
        for i in range(3):
            # Keyed: a compacted topic (a schedules topic) refuses keyless records.
            writer.produce(topic, f"{n}-{i}".encode(), key=f"{n}-{i}", partition=0)
        writer.flush(10)
        (writer.abort_transaction if abort else writer.commit_transaction)(30)
    return len(aborted) * (3 + 1)  # three records and a marker each


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A live broker's address: KAFKA_BOOTSTRAP if set, else one started for this session."""
    existing = os.environ.get("KAFKA_BOOTSTRAP")
    if existing:
        yield existing
        return
    env = {**os.environ, "KAFKA_PORT": os.environ.get("FERROKAFKA_TEST_KAFKA_PORT", "19092")}
    with session_broker(env, "the Kafka broker") as lines:
        yield lines[-1]


@contextmanager
def session_broker(env: dict[str, str], what: str) -> Iterator[list[str]]:
    """kafka.sh's broker for ``env`` (its output lines); stopped afterwards only when this
    session started it: a broker that was already running on the port is someone else's."""
    kafka = ["bash", str(KAFKA_SCRIPT)]
    ours = subprocess.run([*kafka, "status"], env=env, capture_output=True).returncode != 0
    started = subprocess.run([*kafka, "start"], env=env, capture_output=True, text=True)
    if started.returncode != 0:
        pytest.fail(f"could not start {what}:\n{started.stderr}", pytrace=False)
    try:
        yield started.stdout.strip().splitlines()
    finally:
        if ours:
            subprocess.run([*kafka, "stop"], env=env, check=False)


@pytest.fixture(scope="session")
def kafka_client(kafka_bootstrap: str) -> ferrokafka.Client:
    """A ferrokafka admin client connected to the session broker."""
    return ferrokafka.Client({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def topic_factory(
    request: pytest.FixtureRequest, kafka_client: ferrokafka.Client
) -> Iterator[TopicFactory]:
    """Creates topics named after the test, unique per call; deletes them afterwards."""
    created: list[str] = []
    base = re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:60]

    def make(partitions: int = 3, config: dict[str, str] | None = None) -> str:
        name = f"test-{base}-{uuid.uuid4().hex[:8]}"
        kafka_client.create_topics(
            [ferrokafka.NewTopic(name, num_partitions=partitions, config=config)], timeout=30.0
        )
        created.append(name)
        return name

    yield make
    if created:
        kafka_client.delete_topics(created, timeout=30.0)


class LateTopic:
    """A topic named but not created: the test creates it when it chooses; deleted afterwards
    if it was."""

    def __init__(self, client: ferrokafka.Client, name: str) -> None:
        self.client, self.name, self.created = client, name, False

    def create(self, partitions: int) -> None:
        self.client.create_topics(
            [ferrokafka.NewTopic(self.name, num_partitions=partitions)], timeout=30.0
        )
        self.created = True


@pytest.fixture
def late_topic(
    request: pytest.FixtureRequest, kafka_client: ferrokafka.Client
) -> Iterator[LateTopic]:
    base = re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:60]
    late = LateTopic(kafka_client, f"test-late-{base}-{uuid.uuid4().hex[:8]}")
    yield late
    if late.created:
        kafka_client.delete_topics([late.name], timeout=30.0)


@pytest.fixture
def topic(topic_factory: TopicFactory) -> str:
    """A topic of one partition, named after the test; deleted afterwards."""
    return topic_factory(partitions=1)


@pytest.fixture
def schedules_topic_factory(kafka_client: ferrokafka.Client) -> Iterator[Callable[[int], str]]:
    """Creates schedules topics of the given number of partitions, unique per call; deletes
    them afterwards with the states topics of the Schedulers that read them."""
    created: list[str] = []

    def make(partitions: int) -> str:
        name = f"test-schedules-{uuid.uuid4().hex[:8]}"
        create_topics(kafka_client, name, num_partitions=partitions)
        created.append(name)
        return name

    yield make
    if created:
        kafka_client.delete_topics([t for name in created for t in (name, f"{name}_states")])


@pytest.fixture
def schedules_topic(schedules_topic_factory: Callable[[int], str]) -> str:
    """A schedules topic of two partitions; deleted afterwards with the states topic of the
    Scheduler that read it."""
    return schedules_topic_factory(2)


def schedule_later(client: ferrokafka.Client, schedules_topic: str, count: int) -> int:
    """Schedules ``count`` messages an hour ahead on partition 1 of ``schedules_topic`` (keys
    ``later-N``, so none is due during a test); returns their epoch."""
    future = int(time.time()) + 3600
    for n in range(count):
        schedule_message(
            client,
            {"topic": "anywhere", "payload": b"x"},
            future,
            {"topic": schedules_topic, "key": f"later-{n}", "partition": 1},
        )
    return future


@pytest.fixture(scope="session")
def confluent_admin(kafka_bootstrap: str) -> Any:
    """confluent-kafka's AdminClient, the peer most Python users have today."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local[2] SparkSession with the spark-sql-kafka connector matching pyspark's version."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import pyspark
    from pyspark.sql import SparkSession

    cache = Path(os.environ.get("FERROKAFKA_CACHE", Path.home() / ".cache" / "ferrokafka"))
    session = (
        SparkSession.builder.master("local[2]")
        .appName("ferrokafka-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config(
            "spark.jars.packages",
            f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}",
        )
        .config("spark.jars.ivy", str(cache / "ivy"))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@dataclass(frozen=True)
class SecureBroker:
    """A broker started with ``KAFKA_SECURITY=1``: its listeners, CA files and SCRAM user."""

    bootstrap: str
    ssl: str
    sasl_ssl: str
    ca: str
    untrusted_ca: str
    user: str
    password: str

    def ssl_config(self) -> dict[str, str]:
        """Settings for the SSL listener, verifying the broker against the throwaway CA."""
        return {
            "bootstrap.servers": self.ssl,
            "security.protocol": "SSL",
            "ssl.ca.location": self.ca,
        }

    def scram_config(self, password: str | None = None) -> dict[str, str]:
        """Settings for the SASL_SSL listener as the SCRAM-SHA-512 user."""
        return {
            "bootstrap.servers": self.sasl_ssl,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": self.ca,
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": self.user,
            "sasl.password": self.password if password is None else password,
        }

    def oauthbearer_config(self, token: dict[str, str]) -> dict[str, str]:
        """Settings for the SASL_SSL listener with the OAUTHBEARER mechanism, plus the ``token``
        settings that say where its token comes from."""
        return {
            "bootstrap.servers": self.sasl_ssl,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": self.ca,
            "sasl.mechanism": "OAUTHBEARER",
            **token,
        }


@pytest.fixture(scope="session")
def secure_broker() -> Iterator[SecureBroker]:
    """A broker of its own with SSL and SASL_SSL listeners (``kafka.sh`` with KAFKA_SECURITY=1),
    on FERROKAFKA_SECURITY_KAFKA_PORT (default: the test port + 20; it also takes the 3 after)."""
    port = os.environ.get(
        "FERROKAFKA_SECURITY_KAFKA_PORT",
        str(int(os.environ.get("FERROKAFKA_TEST_KAFKA_PORT", "19092")) + 20),
    )
    env = {**os.environ, "KAFKA_PORT": port, "KAFKA_SECURITY": "1"}
    with session_broker(env, "the secured Kafka broker") as lines:
        *settings, bootstrap = lines
        fields = dict(line.split("=", 1) for line in settings)
        yield SecureBroker(bootstrap=bootstrap, **fields)


Broker = tuple[str, dict[str, str]]


@contextmanager
def module_broker(**settings: str) -> Iterator[Broker]:
    """A broker of one test module's own on FERROKAFKA_OUTAGE_KAFKA_PORT (default 19292; modules
    run one after another, so they share the port), started with kafka.sh's ``settings``."""
    port = os.environ.get("FERROKAFKA_OUTAGE_KAFKA_PORT", "19292")
    env = {**os.environ, "KAFKA_PORT": port, **settings}
    started = subprocess.run(
        ["bash", str(KAFKA_SCRIPT), "start"], env=env, capture_output=True, text=True, check=True
    )
    try:
        yield started.stdout.strip().splitlines()[-1], env
    finally:
        subprocess.run(["bash", str(KAFKA_SCRIPT), "stop"], env=env, check=False)


@pytest.fixture(scope="module")
def outage_broker() -> Iterator[Broker]:
    """A broker of the module's own, which its tests pause (an outage) and resume."""
    with module_broker() as broker:
        yield broker


@contextmanager
def _broker_between(env: dict[str, str], before: str, after: str) -> Iterator[None]:
    """Runs ``kafka.sh before``, the block, and ``kafka.sh after`` whatever happens."""
    subprocess.run(["bash", str(KAFKA_SCRIPT), before], env=env, check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["bash", str(KAFKA_SCRIPT), after], env=env, check=True, capture_output=True)


def outage(env: dict[str, str]) -> AbstractContextManager[None]:
    """The broker is down inside the block and back (answering) after it, whatever happens."""
    return _broker_between(env, "pause", "resume")


def hung(env: dict[str, str]) -> AbstractContextManager[None]:
    """The broker hangs inside the block (its process stopped: connections are accepted and
    nothing answers) and answers again after it, whatever happens."""
    return _broker_between(env, "freeze", "thaw")


def read_all(bootstrap: str, topic: str, partitions: int = 3) -> list[tuple[bytes, bytes]]:
    """Every committed record of ``topic`` as (key, value); see :func:`read_messages`."""
    return [
        (message.key() or b"", message.value() or b"")
        for message in read_messages(bootstrap, topic, partitions)
    ]


def read_messages(bootstrap: str, topic: str, partitions: int = 3) -> list[ConfluentMessage]:
    """Every committed record of ``topic``, per partition in offset order, read by
    confluent-kafka (read_committed) up to the end of each partition."""
    from confluent_kafka import Consumer as ConfluentConsumer
    from confluent_kafka import KafkaError as ConfluentError
    from confluent_kafka import TopicPartition as ConfluentPartition

    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"counter-{time.monotonic_ns()}",
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([ConfluentPartition(topic, p, 0) for p in range(partitions)])
    records: list[ConfluentMessage] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60.0
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == ConfluentError._PARTITION_EOF, error
                at_end.add(message.partition() or 0)
                continue
            at_end.discard(message.partition() or 0)
            records.append(message)
    finally:
        consumer.close()
    return records
