"""The end-to-end demo behind ``ferrokafka demo``: each component shows itself on a live broker.

Example:
    >>> from ferrokafka.demo import run_demo
    >>> run_demo("127.0.0.1:9092")  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import uuid

from ferrokafka._native import Client, NewTopic

log = logging.getLogger("ferrokafka.demo")


def run_demo(bootstrap_servers: str, timeout: float = 30.0) -> None:
    """Create a topic, produce a few records through the Rust client and read them back."""
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
    log.info("deleted topic %s; demo finished", topic)
