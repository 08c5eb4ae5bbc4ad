"""The examples in the docstrings run: every ``>>>`` of the installed package's modules and of
``_native.pyi`` (the native module's documentation source, which Python never imports, so
``--doctest-modules`` cannot see it; pydantic-core's tests/test_docstrings.py is the model).

The examples' addresses and names are the reader's: ``127.0.0.1:9092`` becomes the test broker,
and every quoted topic and group name of ``NAMES`` gets a prefix of its docstring's own (in the
expected output too), so each docstring starts on empty topics, whatever ran before; the topics
with that prefix are deleted afterwards.

What a reader would have and a method's example leaves out is the prelude (``prelude``):

- everywhere, ``client``: a :class:`ferrokafka.Client` of the broker;
- ``ferrokafka.status*`` and ``ferrokafka.dashboard``: ``config`` (the broker) and ``topics``
  (``reports_topic``, ``errors_topic``, ``states_topics``) of a reports, an errors and a states
  topic holding two alive processes' reports (``host-1:4242:ab12cd`` with lag 100 and 30 on
  partitions 0 and 1 of ``orders``, ``host-2:4243:cd34ef`` with none), one ``ValueError`` and
  one ``loaded`` scheduler partition; ``reader``: a :class:`StatusReader` of them, started and
  caught up; ``snapshot``: its snapshot; ``view``: an empty :class:`StatusView` of those topic
  names; ``error``: an error report;
- ``ferrokafka.redelivery.QueueConsumer*`` and ``RedeliveryTracker``: the topics ``jobs`` and
  ``jobs-markers`` (3 partitions each), ``jobs`` holding ``job-0`` to ``job-2``; the methods'
  also ``queue``, a :class:`QueueConsumer` of them, and ``nack``'s ``message``, one it handed
  out;
- ``_native.encode_process_report`` and ``encode_error_report``: ``report`` (a consumer report
  of process ``host-1:4242:ab12cd``) and ``error`` (a ``ValueError`` report);
- ``ferrokafka.spark*``: ``spark``, the suite's local Spark session; ``report`` (as above);
  ``orders`` (``order_id`` o-1 and o-2, ``remind_at`` an hour ahead, ``payload``) to schedule
  and ``cancelled`` (o-1) to cancel, with a ``schedules`` topic of 2 partitions; for the
  examples that read them, ``karafka_consumers_reports`` and ``schedules_states`` (a name of
  theirs too) filled as the status examples' topics are.

Examples marked ``# doctest: +SKIP`` are shown, not run: each serves until it is killed.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import pkgutil
import re
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

import ferrokafka
import ferrokafka._native
from ferrokafka import Client, NewTopic
from ferrokafka.redelivery import QueueConsumer
from ferrokafka.status import StatusReader, StatusView
from tests.tracking_samples import (
    error_report,
    process_report,
    send_error_report,
    send_process_report,
    send_state_report,
    state_report,
)

pytestmark = pytest.mark.kafka

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
STUBS = Path(ferrokafka.__file__).with_name("_native.pyi")
# Modules whose import needs an extra this suite may not have, or that start a program.
NOT_IMPORTED = {"ferrokafka.__main__"}
# The topic and group names the examples give; each docstring gets them with its own prefix.
NAMES = [
    "orders",
    "payments",
    "greetings",
    "billing",
    "jobs",
    "jobs-markers",
    "jobs-dlq",
    "schedules",
    "schedules_states",
    "reminders",
]
# The Spark examples read a reports topic by its default name: it is theirs too.
SPARK_NAMES = [*NAMES, "karafka_consumers_reports"]
STATUS_MODULES = ("ferrokafka.status", "ferrokafka.dashboard")
QUEUE_DOCSTRINGS = (
    "ferrokafka.redelivery.QueueConsumer",
    "ferrokafka.redelivery.RedeliveryTracker",
)
QUEUE_METHODS_WITH_QUEUE = ("consume", "poll", "ack_many", "nack")
STATUS_PRELUDE = {"config", "topics", "reader", "snapshot", "view", "error"}
WAIT = 30.0


def module_tests() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests: list[doctest.DocTest] = []
    names = ["ferrokafka"] + [
        info.name
        for info in pkgutil.walk_packages(ferrokafka.__path__, "ferrokafka.")
        if info.name not in NOT_IMPORTED
    ]
    for name in names:
        tests.extend(t for t in finder.find(importlib.import_module(name)) if t.examples)
    return tests


def stub_tests() -> list[doctest.DocTest]:
    """One test per documented class, method and function of the stubs, run against the native
    module's namespace."""
    parser = doctest.DocTestParser()
    tree = ast.parse(STUBS.read_text())
    tests: list[doctest.DocTest] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                docstring = ast.get_docstring(child, clean=True)
                if docstring and ">>>" in docstring:
                    test = parser.get_doctest(
                        docstring,
                        dict(vars(ferrokafka._native)),
                        f"_native.{name}",
                        str(STUBS),
                        child.lineno,
                    )
                    tests.append(test)
                visit(child, f"{name}.")

    visit(tree, "")
    return tests


def as_run_here(text: str, bootstrap: str, prefix: str, names: list[str]) -> str:
    """``text`` (an example's source or expected output) with the reader's broker and
    ``names`` made this docstring's."""
    alternatives = "|".join(re.escape(name) for name in names)
    quoted = re.compile(rf"""(["'])({alternatives})\1""")
    text = text.replace("127.0.0.1:9092", bootstrap)
    return quoted.sub(lambda m: f"{m[1]}{prefix}{m[2]}{m[1]}", text)


def module_of(test: doctest.DocTest) -> str:
    return str(test.globs.get("__name__", "_native"))


def status_topics(prefix: str) -> dict[str, Any]:
    """The status examples' ``topics``: StatusReader's keyword arguments."""
    return {
        "reports_topic": f"{prefix}karafka_consumers_reports",
        "errors_topic": f"{prefix}karafka_errors",
        "states_topics": [f"{prefix}schedules_states"],
    }


def fill_tracking_topics(
    client: Client, reports: str, errors: str | None, states: str, prefix: str, now: float
) -> None:
    """Creates a reports, an errors (unless None) and a states topic of one partition and
    fills them: two alive processes of group ``billing`` on ``orders`` (names with
    ``prefix``), one error report and a ``loaded`` state."""
    client.create_topics(
        [NewTopic(name, 1) for name in (reports, errors, states) if name is not None], timeout=WAIT
    )
    group, topic = f"{prefix}billing", f"{prefix}orders"
    for process_id, lags in [("host-1:4242:ab12cd", {0: 100, 1: 30}), ("host-2:4243:cd34ef", {})]:
        report = process_report(process_id, dispatched_at=now, lags=lags, group=group, topic=topic)
        send_process_report(client, reports, report)
    if errors is not None:
        failure = error_report(
            "err-1", occurred_at=now, process_id="host-1:4242:ab12cd", message="bad order"
        )
        send_error_report(client, errors, failure)
    send_state_report(client, states, state_report(dispatched_at=now), partition=0)


def status_prelude(
    stack: ExitStack, used: set[str], bootstrap: str, client: Client, prefix: str
) -> dict[str, Any]:
    config = {"bootstrap.servers": bootstrap}
    topics = status_topics(prefix)
    reports, errors, (states,) = topics.values()
    fill_tracking_topics(client, reports, errors, states, prefix, time.time())
    globs: dict[str, Any] = {
        "config": config,
        "topics": topics,
        "view": StatusView(
            reports_topic=topics["reports_topic"], errors_topic=topics["errors_topic"]
        ),
        "error": error_report(
            "err-2", occurred_at=time.time(), process_id="host-1:4242:ab12cd", message="bad order"
        ),
    }
    if used & {"reader", "snapshot"}:
        reader = StatusReader(config, **topics).start()
        stack.callback(reader.stop)
        assert reader.wait_caught_up(timeout=WAIT), "the prelude's reader did not catch up"
        globs.update(reader=reader, snapshot=reader.snapshot())
    return globs


def queue_prelude(
    stack: ExitStack, name: str, bootstrap: str, client: Client, prefix: str
) -> dict[str, Any]:
    jobs, markers = f"{prefix}jobs", f"{prefix}jobs-markers"
    client.create_topics([NewTopic(jobs, 3), NewTopic(markers, 3)], timeout=WAIT)
    for n in range(3):
        client.produce(jobs, f"job-{n}", partition=n)
    if name.rsplit(".", 1)[-1] not in QUEUE_METHODS_WITH_QUEUE:
        return {}
    queue = QueueConsumer({"bootstrap.servers": bootstrap}, jobs, markers, 30.0)
    stack.callback(queue.close)
    globs: dict[str, Any] = {"queue": queue}
    if name.endswith(".nack"):
        globs["message"] = queue.poll(timeout=WAIT)
        assert globs["message"] is not None, "the prelude's queue handed out nothing"
    return globs


def identifiers(test: doctest.DocTest) -> set[str]:
    """The names the examples that run use."""
    run = [e.source for e in test.examples if not e.options.get(doctest.SKIP)]
    return set(re.findall(r"[A-Za-z_]\w*", "".join(run)))


def prelude(
    test: doctest.DocTest,
    stack: ExitStack,
    bootstrap: str,
    client: Client,
    prefix: str,
    spark: Callable[[], Any],
) -> dict[str, Any]:
    """What the docstring's examples may use without defining it (see the module docstring)."""
    globs: dict[str, Any] = {"client": client}
    module, used = module_of(test), identifiers(test)
    if module.startswith(STATUS_MODULES) and used & STATUS_PRELUDE:
        globs.update(status_prelude(stack, used, bootstrap, client, prefix))
    if test.name.startswith(QUEUE_DOCSTRINGS):
        globs.update(queue_prelude(stack, test.name, bootstrap, client, prefix))
    if test.name in ("_native.encode_process_report", "_native.encode_error_report"):
        globs["report"] = process_report("host-1:4242:ab12cd", dispatched_at=time.time())
        globs["error"] = error_report(
            "err-1", occurred_at=time.time(), process_id="host-1:4242:ab12cd", message="bad"
        )
    if module.startswith("ferrokafka.spark"):
        globs.update(spark_prelude(spark(), used, client, prefix))
    return globs


def spark_prelude(spark: Any, used: set[str], client: Client, prefix: str) -> dict[str, Any]:
    from pyspark.sql import Row

    from ferrokafka.scheduling import create_topics

    now = time.time()
    if used & {"read_reports", "read_states", "stream_lag"}:
        reports, states = f"{prefix}karafka_consumers_reports", f"{prefix}schedules_states"
        fill_tracking_topics(client, reports, None, states, prefix, now)
    if used & {"schedule_dataframe", "cancel_dataframe"}:
        create_topics(client, f"{prefix}schedules", num_partitions=2, timeout=WAIT)
    due = int(now) + 3600
    orders = spark.createDataFrame(
        [
            Row(order_id="o-1", remind_at=due, payload=b"call back"),
            Row(order_id="o-2", remind_at=due, payload=b"ship"),
        ]
    )
    return {
        "spark": spark,
        "report": process_report("host-1:4242:ab12cd", dispatched_at=now),
        "orders": orders,
        "cancelled": spark.createDataFrame([Row(order_id="o-1")]),
    }


TESTS = module_tests() + stub_tests()


def marks(test: doctest.DocTest) -> list[pytest.MarkDecorator]:
    return [pytest.mark.spark] if module_of(test).startswith("ferrokafka.spark") else []


@pytest.mark.parametrize("test", [pytest.param(t, id=t.name, marks=marks(t)) for t in TESTS])
def test_docstring_examples_run(
    test: doctest.DocTest,
    kafka_bootstrap: str,
    kafka_client: Client,
    request: pytest.FixtureRequest,
) -> None:
    module = module_of(test)
    prefix = f"doc-{uuid.uuid4().hex[:8]}-"
    names = SPARK_NAMES if module.startswith("ferrokafka.spark") else NAMES
    examples = [
        doctest.Example(
            as_run_here(e.source, kafka_bootstrap, prefix, names),
            as_run_here(e.want, kafka_bootstrap, prefix, names),
            e.exc_msg,
            e.lineno,
            e.indent,
            e.options,
        )
        for e in test.examples
    ]
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    try:
        with ExitStack() as stack:
            globs: dict[str, Any] = dict(test.globs)
            spark = lambda: request.getfixturevalue("spark")  # noqa: E731
            globs.update(prelude(test, stack, kafka_bootstrap, kafka_client, prefix, spark))
            here = doctest.DocTest(
                examples, globs, test.name, test.filename, test.lineno, test.docstring
            )
            runner.run(here, out=report.append, clear_globs=True)
    finally:
        delete_topics(kafka_client, prefix)
    assert runner.failures == 0, "".join(report)


def delete_topics(client: Client, prefix: str) -> None:
    """Deletes the topics an example created or auto-created under its prefix."""
    made = [name for name in client.list_topics(timeout=WAIT).topics if name.startswith(prefix)]
    if made:
        client.delete_topics(made, timeout=WAIT)


def test_the_stubs_and_the_modules_have_examples() -> None:
    """Guards the collection itself: a parser change that found nothing would pass vacuously."""
    assert len(stub_tests()) >= 20
    assert len(module_tests()) >= 20
