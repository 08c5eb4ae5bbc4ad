"""The README's Python blocks run as written, in order, in one interpreter: what a reader pasting
the tour into a session gets, against the test broker and the local Spark session.

What a reader would have and the README leaves out is the prelude below: a ``handle`` function
(their handler, which the security block names), the two secrets the security block reads from
the environment, and for the Spark block a ``spark`` session, a parquet directory ``events/`` and
the DataFrames ``orders`` and ``cancelled``. The blocks' addresses, files and names are the
reader's: ``127.0.0.1:9092`` becomes the test broker, ``events/`` a directory of this run, every
quoted topic and group name gets this run's suffix (so the tour starts on empty topics whatever
ran before), and ``/etc/kafka/ca.pem`` becomes the system's CA bundle (the security block only
builds clients for brokers that do not exist here). A block that waits until it is stopped
(``consumer.run()``, ``for job in queue``) is stopped from outside, as the README says it can be,
once it handled a message.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ferrokafka import Consumer
from ferrokafka.exceptions import ClosedError
from ferrokafka.redelivery import QueueConsumer

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
# The names the tour gives its topics and groups.
NAMES = ["orders", "jobs", "jobs-markers", "jobs-dlq", "schedules", "reminders", "billing"]
SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"
WAIT = 60.0

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def readme_blocks() -> list[str]:
    return BLOCK.findall(README.read_text())


def as_run_here(block: str, bootstrap: str, suffix: str, workdir: Path) -> str:
    """``block`` with the reader's addresses, files and names made this run's."""
    block = block.replace("127.0.0.1:9092", bootstrap).replace("/etc/kafka/ca.pem", SYSTEM_CA)
    block = block.replace('"events/"', f'"{workdir / "events"}"')
    for name in NAMES:
        block = block.replace(f'"{name}"', f'"{name}-{suffix}"')
    return block


def handle(batch: Any) -> None:
    """The reader's handler, which the security block names before the consumer block defines
    one of its own."""


def stop_when_handled(
    namespace: dict[str, Any], stopped: dict[int, str], done: threading.Event
) -> None:
    """Stops what a block waits in, from another thread as the README says it can be: a
        Consumer's ``run()`` once it handled a message (``stop()``), a loop over a QueueConsumer
        once it acknowledged one (``close()``). ``stopped``: the class of what was stopped (or found
    closed), by id, in any block."""
    while not done.wait(0.1):
        for value in list(namespace.values()):
            if id(value) in stopped:
                continue
            if isinstance(value, Consumer) and value.stats().get("handled", 0) >= 1:
                stopped[id(value)] = "Consumer"
                value.stop()
            elif isinstance(value, QueueConsumer) and value.backend == "markers":
                try:
                    acked = value.stats()["acked"]
                except ClosedError:  # the block closed it itself
                    stopped[id(value)] = "closed"
                    continue
                if acked >= 1:
                    stopped[id(value)] = "QueueConsumer"
                    value.close()


def spark_prelude(spark: Any, workdir: Path) -> dict[str, Any]:
    """The Spark block's inputs: ``events/`` (json string, packed zlib binary), ``orders``
    to schedule and ``cancelled`` to cancel."""
    import zlib

    from pyspark.sql import Row

    spark.createDataFrame(
        [Row(json='{"n": 1}', packed=bytearray(zlib.compress(b'{"n": 1}')))]
    ).write.parquet(str(workdir / "events"))
    due = int(time.time()) + 3600
    orders = spark.createDataFrame(
        [Row(order_id="o-1", customer_id="c-1", remind_at=due, payload=b"call back")]
    )
    cancelled = spark.createDataFrame([Row(order_id="o-1")])
    return {"spark": spark, "orders": orders, "cancelled": cancelled}


def test_every_python_block_of_the_readme_runs_as_written(
    kafka_bootstrap: str, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = readme_blocks()
    assert len(blocks) >= 10, "the README's python blocks were not found"
    monkeypatch.setenv("KAFKA_PASSWORD", "a-password")
    monkeypatch.setenv("KAFKA_CLIENT_SECRET", "a-client-secret")
    namespace: dict[str, Any] = {"__name__": "__readme__", "handle": handle}
    suffix = uuid.uuid4().hex[:8]
    stopped: dict[int, str] = {}
    for number, block in enumerate(blocks, 1):
        if "spark" in block and "spark" not in namespace:
            namespace.update(spark_prelude(spark, tmp_path))
        done = threading.Event()
        stopper = threading.Thread(target=stop_when_handled, args=(namespace, stopped, done))
        stopper.start()
        started = time.monotonic()
        try:
            code = compile(
                as_run_here(block, kafka_bootstrap, suffix, tmp_path),
                f"README block {number}",
                "exec",
            )
            exec(code, namespace)
        except Exception as e:
            pytest.fail(f"README block {number} failed: {type(e).__name__}: {e}\n{block}")
        finally:
            done.set()
            stopper.join()
        took = time.monotonic() - started
        assert took < WAIT, f"README block {number} took {took:.0f} s"
    # The consumer block handled the tour's orders and the redelivery block acknowledged its job.
    assert {"Consumer", "QueueConsumer"} <= set(stopped.values())
