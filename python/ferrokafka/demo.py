"""The end-to-end demo behind ``ferrokafka demo``: each component shows itself on a live broker.

Example:
    >>> from ferrokafka.demo import run_demo
    >>> run_demo("127.0.0.1:9092")
    produced  Lisbon   -> partition 0 offset 0
    produced  Nairobi  -> partition 2 offset 0
    produced  Osaka    -> partition 0 offset 1
    read back 'hello from Lisbon' from partition 0 @ 0
    read back 'hello from Osaka' from partition 0 @ 1
    read back 'hello from Nairobi' from partition 2 @ 0
    producer: queued 2500 messages, ... still buffered
    producer: delivered 2500 in ... background rounds (... messages per round)
    producer: messages per partition {0: 1071, 1: 715, 2: 714}
    scheduler: scheduled ferrokafka-demo-reminders-... for ...
    scheduler: dispatched b'time to call back' to ferrokafka-demo-reminders-... ms after its epoch
    redelivery: received b'resize photo 42', crashing before ack
    redelivery: received b'resize photo 42' again, redelivery count 1
    tracking: ... alive, lag ...
    tracking: ... is stopped (status stopped)
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from ferrokafka._native import Client, Message, NewTopic
from ferrokafka.consumer import Consumer
from ferrokafka.producer import AsyncProducer
from ferrokafka.redelivery import QueueConsumer, RedeliveryTracker, redelivery_count
from ferrokafka.scheduling import Scheduler, create_topics, schedule_message
from ferrokafka.status import StatusReader
from ferrokafka.tracking import Reporter

log = logging.getLogger("ferrokafka.demo")


def run_demo(bootstrap_servers: str, timeout: float = 30.0) -> None:
    """Show each component on a live broker: the client, then the background producer."""
    client = Client({"bootstrap.servers": bootstrap_servers, "client.id": "ferrokafka-demo"})
    metadata = client.list_topics(timeout=timeout)
    log.info("connected to %d broker(s) at %s", len(metadata.brokers), bootstrap_servers)

    topic = f"ferrokafka-demo-{uuid.uuid4().hex[:8]}"
    client.create_topics([NewTopic(topic, num_partitions=3)], timeout=timeout)
    log.info("created topic %s with 3 partitions", topic)

    for n, city in enumerate(["Lisbon", "Nairobi", "Osaka"]):
        delivered = client.produce(
            topic,
            value=f"hello from {city}",
            key=city,
            headers={"sequence": str(n)},
            timeout=timeout,
        )
        print(
            f"produced  {city:8} -> partition {delivered.partition()} offset {delivered.offset()}"
        )

    for message in client.read_topic(topic, timeout=timeout):
        value = (message.value() or b"").decode()
        print(f"read back {value!r} from partition {message.partition()} @ {message.offset()}")
    client.delete_topics([topic], timeout=timeout)
    log.info("deleted topic %s", topic)
    _producer_demo(client, bootstrap_servers, timeout)
    _scheduler_demo(client, bootstrap_servers, timeout)
    _redelivery_demo(client, bootstrap_servers, timeout)
    _tracking_demo(client, bootstrap_servers, timeout)
    log.info("demo finished")


def _producer_demo(client: Client, bootstrap_servers: str, timeout: float) -> None:
    """AsyncProducer: queue messages, deliver them in the background on a threshold."""
    topic = f"ferrokafka-demo-producer-{uuid.uuid4().hex[:8]}"
    client.create_topics([NewTopic(topic, num_partitions=3)], timeout=timeout)
    rounds: list[dict[str, Any]] = []

    def record_round(event: str, payload: dict[str, Any]) -> None:
        if event == "deliver_messages":
            rounds.append(payload)

    with AsyncProducer(
        {"bootstrap.servers": bootstrap_servers, "enable.idempotence": True},
        max_queue_size=10_000,
        delivery_threshold=1_000,
    ) as producer:
        producer.subscribe(record_round)
        producer.produce_many(
            [{"value": f"order {n}", "partition_key": f"customer-{n % 7}"} for n in range(2_500)],
            topic=topic,
        )
        print(f"producer: queued 2500 messages, {producer.stats()['queue_size']} still buffered")
        producer.flush(timeout=timeout)
        stats = producer.stats()
    print(
        f"producer: delivered {stats['delivered']} in {len(rounds)} background rounds "
        f"({[r['message_count'] for r in rounds]} messages per round)"
    )
    per_partition: dict[int, int] = {}
    for message in client.read_topic(topic, timeout=timeout):
        per_partition[message.partition()] = per_partition.get(message.partition(), 0) + 1
    print(f"producer: messages per partition {dict(sorted(per_partition.items()))}")
    client.delete_topics([topic], timeout=timeout)


def _scheduler_demo(client: Client, bootstrap_servers: str, timeout: float) -> None:
    """Scheduled messages: a message scheduled 2 s ahead is dispatched by the daemon."""
    suffix = uuid.uuid4().hex[:8]
    schedules, target = f"ferrokafka-demo-schedules-{suffix}", f"ferrokafka-demo-reminders-{suffix}"
    create_topics(client, schedules, num_partitions=1, timeout=timeout)
    client.create_topics([NewTopic(target, num_partitions=1)], timeout=timeout)
    epoch = int(time.time()) + 2
    proxy = schedule_message(
        client,
        {"topic": target, "payload": b"time to call back", "key": "user-7"},
        epoch,
        {"topic": schedules},
    )
    due = datetime.fromtimestamp(epoch, timezone.utc).isoformat()
    print(f"scheduler: scheduled {proxy.key} for {due}")
    with Scheduler(
        {"bootstrap.servers": bootstrap_servers},
        [schedules],
        group_id=f"ferrokafka-demo-{suffix}",
        state_interval=1.0,
    ):
        deadline = time.monotonic() + timeout
        dispatched: list[Message] = []
        while not dispatched and time.monotonic() < deadline:
            dispatched = client.read_topic(target, timeout=timeout)
            time.sleep(0.2)
    for message in dispatched:
        late_ms = message.timestamp()[1] - epoch * 1000
        print(f"scheduler: dispatched {message.value()!r} to {target} {late_ms} ms after its epoch")
    client.delete_topics([schedules, f"{schedules}_states", target], timeout=timeout)


def _redelivery_demo(client: Client, bootstrap_servers: str, timeout: float) -> None:
    """Redelivery: a consumer "crashes" without acking; the tracker redelivers after 2 s."""
    suffix = uuid.uuid4().hex[:8]
    jobs, markers = f"ferrokafka-demo-jobs-{suffix}", f"ferrokafka-demo-jobs-markers-{suffix}"
    client.create_topics([NewTopic(jobs, 1), NewTopic(markers, 1)], timeout=timeout)
    client.produce(jobs, b"resize photo 42", key="job-42", timeout=timeout)
    config: dict[str, str | int | float | bool] = {"bootstrap.servers": bootstrap_servers}
    group = f"ferrokafka-demo-{suffix}"
    with RedeliveryTracker(config, jobs, markers, group_id=f"{group}-tracker"):
        with QueueConsumer(config, jobs, markers, 2.0, group_id=group) as queue:
            first = queue.poll(timeout=timeout)
            if first is None:
                raise TimeoutError(f"no job arrived within {timeout} s")
            print(f"redelivery: received {first.value()!r}, crashing before ack")
        with QueueConsumer(config, jobs, markers, 2.0, group_id=group) as queue:
            again = queue.poll(timeout=timeout)
            if again is None:
                raise TimeoutError(f"the job was not redelivered within {timeout} s")
            queue.ack(again)
    print(
        f"redelivery: received {again.value()!r} again, redelivery count {redelivery_count(again)}"
    )
    client.delete_topics([jobs, markers], timeout=timeout)


def _tracking_demo(client: Client, bootstrap_servers: str, timeout: float) -> None:
    """Tracking: a consumer with a reporter; the status reader shows its lag, then its stop."""
    suffix = uuid.uuid4().hex[:8]
    orders = f"ferrokafka-demo-orders-{suffix}"
    reports, errors = f"ferrokafka-demo-reports-{suffix}", f"ferrokafka-demo-errors-{suffix}"
    client.create_topics([NewTopic(name, 1) for name in (orders, reports, errors)], timeout=timeout)
    config: dict[str, str | int | float | bool] = {"bootstrap.servers": bootstrap_servers}
    with AsyncProducer(config) as producer:
        producer.produce_many([{"value": f"order {n}"} for n in range(500)], topic=orders)
        producer.flush(timeout)
    reporter = Reporter(config, reports_topic=reports, errors_topic=errors, interval=0.5)
    consumer = Consumer(
        {**config, "group.id": f"ferrokafka-demo-{suffix}", "auto.offset.reset": "earliest"},
        [orders],
        lambda batch: time.sleep(0.01 * len(batch)),  # a slow handler: 500 orders take ~5 s
        max_batch_size=50,
        reporter=reporter,
    )
    reader = StatusReader(config, reports_topic=reports, errors_topic=errors, states_topics=[])
    with reader, consumer:
        deadline = time.monotonic() + timeout
        lags: list[int] = []
        while time.monotonic() < deadline and (not lags or lags[-1] > 0):
            processes = reader.snapshot().processes
            if processes and processes[0].partitions and processes[0].lag not in lags:
                lags.append(processes[0].lag)
                print(f"tracking: {processes[0].id} {processes[0].health}, lag {lags[-1]}")
            time.sleep(0.5)
    reader_after = StatusReader(
        config, reports_topic=reports, errors_topic=errors, states_topics=[]
    )
    with reader_after:
        reader_after.wait_caught_up(timeout)
        for process in reader_after.snapshot().processes:
            print(f"tracking: {process.id} is {process.health} (status {process.status})")
    client.delete_topics([orders, reports, errors], timeout=timeout)
