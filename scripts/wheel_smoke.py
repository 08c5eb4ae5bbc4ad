"""Smoke test of one installed ferrokafka artefact (a wheel or the sdist's build), run by the
Python it was installed into: imports every public module, then round-trips messages with the
broker at argv[1] through Client.produce/read_topic, AsyncProducer and a Consumer batch.

Usage: python wheel_smoke.py BOOTSTRAP TOPIC           # by the Python under test
       .venv/bin/python scripts/wheel_smoke.py --count BOOTSTRAP TOPIC   # then, from the repo

TOPIC must not exist yet; it is created with one partition and left holding the 5 records this
script wrote; ``--count`` reads them back with confluent-kafka (an independent client, from the
development venv) and fails unless they are exactly those. A module may refuse to import only
for want of an optional extra's package (pyspark, pyarrow, confluent_kafka, ...), and the refusal
must name it. Prints the interpreter, the machine, the extension's file and every such refusal
on success; exits non-zero with a traceback otherwise.
Only the standard library and ferrokafka: it runs on any Python the wheel installs on.
"""

from __future__ import annotations

import importlib
import pkgutil
import platform
import sys
import threading
from pathlib import Path

import ferrokafka
from ferrokafka import AsyncProducer, Batch, Client, Consumer, NewTopic

WAIT = 30.0
VALUES = [b"v0", b"v1", b"v2", b"v3", b"v4"]
# The packages of pyproject's optional extras: a module may refuse to import without them (and
# must then say which), never for any other reason.
EXTRAS_PACKAGES = ("pyspark", "pyarrow", "pandas", "starlette", "uvicorn", "confluent_kafka")


def import_every_module() -> tuple[list[str], list[str]]:
    """(modules imported, modules that need an extra not installed here)."""
    names = [
        info.name
        for info in pkgutil.walk_packages(ferrokafka.__path__, "ferrokafka.")
        if not info.name.rpartition(".")[2].startswith("_") or info.name == "ferrokafka._native"
    ]
    imported, need_extra = [], []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as error:
            if not any(package in str(error) for package in EXTRAS_PACKAGES):
                raise
            need_extra.append(f"{name} ({error})")
        else:
            imported.append(name)
    return imported, need_extra


def round_trip(bootstrap: str, topic: str) -> None:
    config = {"bootstrap.servers": bootstrap}
    client = Client(config)
    client.create_topics([NewTopic(topic, num_partitions=1)])
    delivered = client.produce(topic, b"v0", key=b"k0")
    assert (delivered.partition(), delivered.offset()) == (0, 0), delivered

    with AsyncProducer(config) as producer:
        producer.produce_many([b"v1", b"v2", b"v3"], topic=topic)
        producer.produce(b"v4", topic)
        producer.flush(WAIT)

    values = [m.value() for m in client.read_topic(topic, timeout=WAIT)]
    assert values == VALUES, values

    seen: list[bytes | None] = []
    all_seen = threading.Event()

    def handle(batch: Batch) -> None:
        seen.extend(m.value() for m in batch)
        if len(seen) >= len(values):
            all_seen.set()

    group = {**config, "group.id": f"{topic}-smoke", "auto.offset.reset": "earliest"}
    with Consumer(group, [topic], handle):
        assert all_seen.wait(WAIT), f"the consumer saw {seen} of {values}"
    assert seen == values, seen


def count(bootstrap: str, topic: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.conftest import read_messages

    values = [m.value() for m in read_messages(bootstrap, topic, partitions=1)]
    assert values == VALUES, values
    print(f"ok: confluent-kafka read the {len(values)} records of {topic}")


def main() -> int:
    if sys.argv[1] == "--count":
        count(*sys.argv[2:4])
        return 0
    bootstrap, topic = sys.argv[1:3]
    imported, need_extra = import_every_module()
    round_trip(bootstrap, topic)
    print(
        f"ok: Python {platform.python_version()} on {platform.machine()}, "
        f"librdkafka {ferrokafka._native.librdkafka_version}, {len(imported)} modules imported, "
        f"{ferrokafka._native.__file__}"
    )
    for refusal in need_extra:
        print(f"needs an extra: {refusal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
