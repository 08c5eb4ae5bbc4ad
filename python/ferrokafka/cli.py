"""The ``ferrokafka`` command line (also ``python -m ferrokafka``).

Example:
    $ ferrokafka --help
    $ ferrokafka topics list --bootstrap-servers 127.0.0.1:9092
    $ ferrokafka redelivery --queue-topic jobs --markers-topic jobs-markers
    $ ferrokafka demo --bootstrap-servers 127.0.0.1:9092
    $ ferrokafka status --bootstrap-servers 127.0.0.1:9092 --watch
    $ ferrokafka dashboard --bootstrap-servers 127.0.0.1:9092 --port 8080
    $ ferrokafka spark-demo --bootstrap-servers 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib.util
import json
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn, Protocol

from ferrokafka import __version__
from ferrokafka._extras import install_hint
from ferrokafka._native import Client, NewTopic, check_topic_name, redact_secrets
from ferrokafka.exceptions import KafkaError
from ferrokafka.tracking import DEFAULT_ERRORS_TOPIC, DEFAULT_REPORTS_TOPIC, Reporter

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

    from ferrokafka.status import StatusReader

log = logging.getLogger("ferrokafka.cli")


class _Parser(argparse.ArgumentParser):
    """A parser whose usage errors show no secret: they quote the arguments, and a
    ``sasl.password=...`` after a misspelled option (``--confg``) or a forgotten ``--config``
    is among them."""

    def error(self, message: str) -> NoReturn:
        if sys.stderr is None:  # started with stderr closed (`2>&-`): a usage error all the same
            self.exit(2)
        super().error(redact_secrets(message))

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse drops what it cannot write (and a closed stream, None, silently), so
        # `--help > /dev/full` ended with status 0: main() says it instead.
        if message:
            if file is None:
                raise OSError(errno.EBADF, "standard output is closed")
            file.write(message)


class _UsageError(Exception):
    """Arguments that parsed but cannot work together (or a missing extra): shown as the
    command's usage error, exit status 2, before anything starts."""


def _client(args: argparse.Namespace) -> Client:
    return Client({"bootstrap.servers": args.bootstrap_servers, **dict(args.client_config)})


def _topics_list(args: argparse.Namespace) -> int:
    metadata = _client(args).list_topics(timeout=args.timeout)
    for name, topic in sorted(metadata.topics.items()):
        if name.startswith("__") and not args.all:
            continue
        print(f"{name}\t{len(topic.partitions)} partitions")
    return 0


def _topics_create(args: argparse.Namespace) -> int:
    config = dict(args.config)
    topic = NewTopic(args.name, args.partitions, args.replication_factor, config)
    try:
        created = _client(args).create_topics([topic], timeout=args.timeout, exist_ok=args.exist_ok)
    except KafkaError as err:
        if err.name != "INVALID_CONFIG" or not config:
            raise
        # The broker's reply names the setting, but librdkafka's Rust binding drops that text:
        # name the keys given (there is often one), not their values.
        raise _UsageError(
            "argument --config: the broker refused a topic setting (an unknown key or a bad "
            f"value) among: {', '.join(sorted(config))}"
        ) from None
    print(f"created {args.name}" if created else f"{args.name} already exists")
    return 0


class _Daemon(Protocol):
    def request_stop(self) -> None: ...
    def run(self) -> None: ...
    def stop(self, timeout: float = ...) -> bool: ...


def _daemon_config(args: argparse.Namespace) -> dict[str, str | int | float | bool]:
    config: dict[str, str | int | float | bool] = {"bootstrap.servers": args.bootstrap_servers}
    config.update(args.config)
    return config


class _StoppedWhileStarting(BaseException):
    """A signal came while the daemon was starting (a transactional producer waits up to 30 s
    for an unreachable broker there): raised from the signal handler, it ends the start. An
    interrupt, as ``KeyboardInterrupt`` is, so that no ``except Exception`` on the way (a
    reporter logging a failed send) takes it for an error and starts on."""


def _run_until_signalled(start: Callable[[], _Daemon]) -> int:
    """Start a daemon and run it until SIGTERM or SIGINT, then stop it cleanly. The handlers
    are installed first, so a signal that arrives while the daemon starts ends the start."""
    daemon: _Daemon | None = None
    signalled = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal signalled
        log.info("received %s, stopping", signal.Signals(signum).name)
        signalled = True
        if daemon is None:
            raise _StoppedWhileStarting
        daemon.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        daemon = start()
    except _StoppedWhileStarting:
        # The daemon, if its engine was made before the signal came, is dropped, which stops it.
        log.info("stopped while starting")
        return 0
    log.info("running until SIGINT or SIGTERM")
    if signalled:  # a start that caught the interrupt and went on anyway
        daemon.request_stop()
    daemon.run()
    daemon.stop()
    return 0


def _add_settings_option(
    parser: argparse.ArgumentParser, flag: str, help_text: str, dest: str | None = None
) -> None:
    """A repeatable ``flag KEY=VALUE`` option: librdkafka or topic settings, as a list of pairs."""
    parser.add_argument(
        flag,
        dest=dest,
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help=help_text,
    )


def _add_extra_config_option(parser: argparse.ArgumentParser, example: str) -> None:
    """A command's ``--config``: librdkafka settings added to the ones it builds itself."""
    _add_settings_option(
        parser,
        "--config",
        f"extra librdkafka setting, e.g. {example} (repeatable; see 'ferrokafka --help')",
    )


def _add_topic_option(
    parser: argparse._ActionsContainer,
    flag: str,
    help_text: str | None = None,
    *,
    default: str | None = None,
    required: bool = False,
    repeatable: bool = False,
) -> None:
    """A ``flag NAME`` option naming a topic, checked by :func:`_topic`; a repeatable one
    collects a list."""
    parser.add_argument(
        flag,
        action="append" if repeatable else "store",
        type=_topic,
        default=default,
        required=required,
        metavar="NAME",
        help=help_text,
    )


def _add_reporter_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tracking reports (for `ferrokafka status` / dashboard)")
    group.add_argument(
        "--report", action="store_true", help="send process reports and errors to Kafka"
    )
    _add_topic_option(group, "--reports-topic", default=DEFAULT_REPORTS_TOPIC)
    _add_topic_option(group, "--errors-topic", default=DEFAULT_ERRORS_TOPIC)
    group.add_argument(
        "--report-interval",
        type=_positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="least seconds between periodic reports (default: 5)",
    )


# A daemon ends within 10 s of SIGINT/SIGTERM whatever the broker does: its own shutdown waits
# for the broker at most 3 s (the engines' SHUTDOWN_BUDGET), its reporter's final report at most
# this long.
_REPORTER_EXIT_TIMEOUT = 3.0


def _reporter(args: argparse.Namespace) -> Reporter | None:
    if not args.report:
        return None
    return Reporter(
        _daemon_config(args),
        reports_topic=args.reports_topic,
        errors_topic=args.errors_topic,
        interval=args.report_interval,
        tags=[args.command],
        exit_timeout=_REPORTER_EXIT_TIMEOUT,
    )


def _scheduler(args: argparse.Namespace) -> int:
    from ferrokafka.scheduling import Scheduler

    return _run_until_signalled(
        lambda: Scheduler(
            _daemon_config(args),
            args.schedules_topic,
            group_id=args.group_id,
            flush_batch_size=args.flush_batch_size,
            state_interval=args.interval_ms / 1000,
            dead_letter_topic=args.dead_letter_topic,
            partition_key_hashing=args.partition_key_hashing,
            instance_id=args.instance_id,
            reporter=_reporter(args),
        )
    )


def _redelivery(args: argparse.Namespace) -> int:
    from ferrokafka.redelivery import RedeliveryTracker

    if args.markers_topic == args.queue_topic:
        # QueueConsumer refuses one topic for both; a tracker on it would redeliver its markers.
        raise _UsageError("argument --markers-topic: must differ from --queue-topic")

    return _run_until_signalled(
        lambda: RedeliveryTracker(
            _daemon_config(args),
            args.queue_topic,
            args.markers_topic,
            max_redeliveries=args.max_redeliveries,
            dead_letter_topic=args.dead_letter_topic,
            group_id=args.group_id,
            commit_interval=args.commit_interval_ms / 1000,
            reporter=_reporter(args),
        ).start()
    )


def _demo(args: argparse.Namespace) -> int:
    from ferrokafka.demo import run_demo

    run_demo(args.bootstrap_servers, timeout=args.timeout)
    return 0


def _status_reader(args: argparse.Namespace) -> StatusReader:
    """A started status reader over the topics the options name, caught up (or timed out):
    starting and catching up share the one ``--timeout``."""
    from ferrokafka.status import StatusReader

    deadline = time.monotonic() + args.timeout
    reader = StatusReader(
        _daemon_config(args),
        reports_topic=args.reports_topic,
        errors_topic=args.errors_topic,
        states_topics=args.states_topic,
        ttl=args.ttl,
        max_errors=args.max_errors,
    ).start(timeout=args.timeout)
    if not reader.wait_caught_up(max(0.0, deadline - time.monotonic())):
        log.warning("not every tracking partition was read to its end within %gs", args.timeout)
    return reader


def _status(args: argparse.Namespace) -> int:
    from ferrokafka.status import render_text

    reader = _status_reader(args)
    if args.reports_topic in reader.missing_topics:
        reader.stop()
        log.error("the reports topic %r does not exist (see --reports-topic)", args.reports_topic)
        return 2
    if missing := ", ".join(map(repr, reader.missing_topics)):
        log.warning("topic %s does not exist (yet)", missing)
    try:
        while True:
            snapshot = reader.snapshot()
            if args.json:
                print(json.dumps(snapshot.to_dict(), indent=None if args.watch else 2))
            else:
                if args.watch and sys.stdout.isatty():
                    print("\033[H\033[2J", end="")  # clear the terminal between refreshes
                print(render_text(snapshot, max_errors=args.show_errors))
                if args.watch:
                    print()
            sys.stdout.flush()
            if args.watch is None:
                return 0
            time.sleep(args.watch)
    finally:
        reader.stop()


def _dashboard(args: argparse.Namespace) -> int:
    _require("dashboard", "starlette", "uvicorn")
    from ferrokafka.dashboard import listen, serve

    def stopped(signum: int, _frame: object) -> None:
        log.info("received %s, stopped", signal.Signals(signum).name)

    # Bound before the topics are read and the URL announced: a port in use is a usage error.
    try:
        listening = listen(args.host, args.port)
    except OSError as err:
        raise _UsageError(
            f"argument --port: cannot listen on {args.host}:{args.port}: {err.strerror or err}"
        ) from None
    # Ctrl-C ends the dashboard with status 0, as SIGTERM does: while the topics are read, and
    # while it serves (uvicorn stops, then raises SIGINT again as KeyboardInterrupt).
    with listening, contextlib.suppress(KeyboardInterrupt):
        reader = _status_reader(args)
        if absent := ", ".join(map(repr, reader.missing_topics)):
            log.warning("topic %s does not exist (yet): shown once it appears", absent)
        # uvicorn stops on SIGTERM and then raises it again under the handler it found: with
        # this one the process gets to stop the reader and exit with status 0.
        signal.signal(signal.SIGTERM, stopped)
        try:
            serve(
                reader,
                host=args.host,
                port=args.port,
                refresh_seconds=args.refresh,
                listening=listening,
            )
        finally:
            reader.stop()
    return 0


def _require(extra: str, *modules: str) -> None:
    """A usage error unless ``modules`` can be imported (they come with ``extra``)."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise _UsageError(install_hint(extra, *missing))


def _add_status_options(sub: argparse.ArgumentParser) -> None:
    """The options ``status`` and ``dashboard`` share: topics, TTL, extra librdkafka settings."""
    from ferrokafka.tracking import DEFAULT_ERRORS_TOPIC, DEFAULT_REPORTS_TOPIC, REPORT_TTL

    _add_topic_option(
        sub,
        "--reports-topic",
        f"process reports topic (default: {DEFAULT_REPORTS_TOPIC})",
        default=DEFAULT_REPORTS_TOPIC,
    )
    _add_topic_option(
        sub,
        "--errors-topic",
        f"error reports topic (default: {DEFAULT_ERRORS_TOPIC})",
        default=DEFAULT_ERRORS_TOPIC,
    )
    _add_topic_option(
        sub,
        "--states-topic",
        "scheduler states topic to read (repeatable; default: every topic ending in _states)",
        repeatable=True,
    )
    sub.add_argument(
        "--ttl",
        type=_positive_seconds,
        default=REPORT_TTL,
        metavar="SECONDS",
        help=f"a process whose last report is older is stale (default: {REPORT_TTL:g})",
    )
    sub.add_argument(
        "--max-errors",
        type=_count_kept,
        default=100,
        metavar="N",
        help="newest errors kept (default: 100)",
    )
    _add_extra_config_option(sub, "security.protocol=SASL_SSL")


def _spark_demo(args: argparse.Namespace) -> int:
    _require("spark", "pyspark", "pyarrow", "pandas")
    from ferrokafka.spark_demo import run_spark_demo

    run_spark_demo(args.bootstrap_servers, rows=args.rows, timeout=args.timeout, master=args.master)
    return 0


# Argument types: argparse turns their ArgumentTypeError into a usage error (exit status 2)
# that names the argument.
def _key_value(item: str) -> tuple[str, str]:
    """A ``KEY=VALUE`` librdkafka setting. The text is not echoed: it may hold a password."""
    key, sep, value = item.partition("=")
    if not sep:
        # NAME, not KEY: the redaction of secrets takes "KEY=VALUE," for a key's value.
        raise argparse.ArgumentTypeError("expected NAME=VALUE, found no '='")
    if not key.strip():
        raise argparse.ArgumentTypeError("expected NAME=VALUE, found an empty NAME")
    return key, value


def _int_from(
    least: int, *, most: int | None = None, also: int | None = None
) -> Callable[[str], int]:
    """An int type accepting ``least`` to ``most`` (inclusive), and the special value ``also``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value == also or (value >= least and (most is None or value <= most)):
            return value
        bound = f">= {least}" if most is None else f"from {least} to {most}"
        special = "" if also is None else f" (or {also})"
        raise argparse.ArgumentTypeError(f"expected an integer {bound}{special}, got {value}")

    return parse


# The longest wait any option takes: a day. Beyond it a timer overflows (1e308 s stopped the
# reporter thread) while no deployment means it.
_MOST_SECONDS = 86_400.0


def _positive_seconds(text: str) -> float:
    """A number of seconds ``> 0`` and at most a day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (0 < value <= _MOST_SECONDS):
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds > 0 and <= {_MOST_SECONDS:g}, got {text}"
        )
    return value


MIN_REFRESH_SECONDS = 0.5
"""The shortest refresh of ``status --watch`` and ``dashboard --refresh``: a faster one only
burns CPU (``--watch 1e-9`` printed 674k lines in 15 s); reports come every few seconds."""

MAX_REFRESH_SECONDS = _MOST_SECONDS


def _refresh_seconds(text: str) -> float:
    """Seconds between refreshes, from :data:`MIN_REFRESH_SECONDS` to a day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not MIN_REFRESH_SECONDS <= value <= MAX_REFRESH_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected {MIN_REFRESH_SECONDS:g} to {MAX_REFRESH_SECONDS:g} seconds, got {text}"
        )
    return value


def _topic(text: str) -> str:
    """A name Kafka accepts for a topic (the engines' one rule, ``check_topic_name``)."""
    try:
        check_topic_name(text)
    except ValueError as refused:
        raise argparse.ArgumentTypeError(str(refused)) from None
    return text


def _non_empty(text: str) -> str:
    """Any text but the empty one (a group id, an instance id, an address)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a non-empty value")
    return text


_port = _int_from(1, most=65535)
_milliseconds = _int_from(1, most=int(_MOST_SECONDS * 1000))
# librdkafka's bounds for a new topic (RD_KAFKAP_PARTITIONS_MAX, RD_KAFKAP_BROKERS_MAX).
_partition_count = _int_from(1, most=100_000, also=-1)
_replication_factor = _int_from(1, most=10_000, also=-1)
# A dispatched chunk holds a target and its tombstone, and fits librdkafka's default producer
# queue (queue.buffering.max.messages, 100,000).
_flush_batch_size = _int_from(2, most=100_000)
_redeliveries = _int_from(0, most=2**32 - 1)  # the tracker counts them in 32 bits
_count_shown = _int_from(0, most=100_000)
_count_kept = _int_from(1, most=100_000)
_demo_rows = _int_from(1, most=1_000_000)


SECURED_CLUSTER_HELP = """\
secured clusters: give librdkafka's settings with --config KEY=VALUE (repeatable), e.g.
  ferrokafka status --bootstrap-servers broker:9093 --config security.protocol=SASL_SSL \\
    --config sasl.mechanism=SCRAM-SHA-512 --config sasl.username=app \\
    --config sasl.password=... --config ssl.ca.location=/etc/kafka/ca.pem
(`topics create` takes them as --client-config: its --config sets the topic's own settings).
Values are never echoed; a command line is visible to other local users (ps), so on a shared
host run the daemons from Python with the password read from a file."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``ferrokafka`` command."""
    parser = _Parser(
        prog="ferrokafka",
        description="Kafka patterns for Python and Spark, on a Rust core.",
        epilog=SECURED_CLUSTER_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ferrokafka {__version__}")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default: INFO)",
    )
    # Not required for argparse: main() names an unknown option before a missing command.
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.set_defaults(usage_error=parser.error, missing="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(usage_error=sub.error)
        sub.add_argument(
            "--bootstrap-servers",
            type=_non_empty,
            default="127.0.0.1:9092",
            metavar="HOST:PORT",
            help="Kafka bootstrap servers (default: 127.0.0.1:9092)",
        )
        sub.add_argument(
            "--timeout",
            type=_positive_seconds,
            default=30.0,
            help="seconds to wait for Kafka (default: 30)",
        )
        return sub

    scheduler = command(
        "scheduler",
        "Run the scheduled-messages daemon until SIGTERM/SIGINT (Karafka-compatible topics).",
    )
    _add_topic_option(
        scheduler,
        "--schedules-topic",
        "a schedules topic to serve (repeat for several)",
        required=True,
        repeatable=True,
    )
    scheduler.add_argument(
        "--group-id",
        type=_non_empty,
        default="karafka_scheduled_messages",
        help="consumer group (default: Karafka's, karafka_scheduled_messages)",
    )
    scheduler.add_argument(
        "--instance-id",
        type=_non_empty,
        metavar="ID",
        help="group.instance.id (static membership): a restart under the same id takes its "
        "partitions back at once instead of after the session timeout; unique per daemon",
    )
    _add_topic_option(
        scheduler,
        "--dead-letter-topic",
        "copy schedules whose target the broker refuses for good here (default: none; "
        "they are counted as failed and logged)",
    )
    scheduler.add_argument(
        "--partition-key-hashing",
        choices=["waterdrop", "bytes"],
        default="waterdrop",
        help="how a target's partition_key chooses its partition: as WaterDrop hashes it "
        "(default), or every byte",
    )
    scheduler.add_argument(
        "--flush-batch-size",
        type=_flush_batch_size,
        default=1000,
        help="messages (targets plus tombstones) per dispatched chunk, 2 to 100000 (default: 1000)",
    )
    scheduler.add_argument(
        "--interval-ms",
        type=_milliseconds,
        default=5000,
        help="least milliseconds between periodic state reports (default: 5000)",
    )
    _add_extra_config_option(
        scheduler, "transactional.id=scheduler-1 or security.protocol=SASL_SSL"
    )
    _add_reporter_options(scheduler)
    scheduler.set_defaults(run=_scheduler)

    redelivery = command(
        "redelivery",
        "Run the redelivery tracker (KMQ pattern) until SIGTERM/SIGINT: redeliver queue "
        "messages whose markers were not acknowledged in time.",
    )
    _add_topic_option(redelivery, "--queue-topic", required=True)
    _add_topic_option(redelivery, "--markers-topic", required=True)
    redelivery.add_argument(
        "--max-redeliveries",
        type=_redeliveries,
        default=3,
        help="redeliveries before a message is dead-lettered (default: 3)",
    )
    _add_topic_option(
        redelivery,
        "--dead-letter-topic",
        "where messages go after --max-redeliveries (default: none; logged and dropped)",
    )
    redelivery.add_argument(
        "--group-id",
        type=_non_empty,
        default=None,
        help="default: ferrokafka-redelivery-<markers topic>",
    )
    redelivery.add_argument(
        "--commit-interval-ms",
        type=_milliseconds,
        default=5_000,
        help="most milliseconds between markers offset commits (default: 5000)",
    )
    _add_extra_config_option(redelivery, "session.timeout.ms=6000 or security.protocol=SASL_SSL")
    _add_reporter_options(redelivery)
    redelivery.set_defaults(run=_redelivery)

    status = command(
        "status",
        "Show the processes that report to the tracking topics (alive or stale), their "
        "partitions with lag, recent errors and scheduler states. --timeout bounds the "
        "initial read of the topics.",
    )
    _add_status_options(status)
    status.add_argument(
        "--json", action="store_true", help="print one JSON document instead of tables"
    )
    status.add_argument(
        "--watch",
        nargs="?",
        type=_refresh_seconds,
        const=2.0,
        default=None,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2, at least 0.5) until Ctrl-C; with --json, one "
        "document a line",
    )
    status.add_argument(
        "--show-errors",
        type=_count_shown,
        default=10,
        metavar="N",
        help="errors shown in the table (default: 10)",
    )
    status.set_defaults(run=_status)

    dashboard = command(
        "dashboard",
        "Serve a live web dashboard of the tracking topics (processes, lag chart, errors, "
        "scheduler states; JSON at /api/status, Prometheus at /metrics) until Ctrl-C. "
        "Needs the 'dashboard' extra.",
    )
    _add_status_options(dashboard)
    dashboard.add_argument("--port", type=_port, default=8080, help="HTTP port (default: 8080)")
    dashboard.add_argument(
        "--host",
        type=_non_empty,
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1)",
    )
    dashboard.add_argument(
        "--refresh",
        type=_refresh_seconds,
        default=2.0,
        metavar="SECONDS",
        help="how often the page polls for new figures (default: 2, at least 0.5)",
    )
    dashboard.set_defaults(run=_dashboard)

    demo = command("demo", "Run the end-to-end demo against a broker.")
    demo.set_defaults(run=_demo)

    spark_demo = command(
        "spark-demo",
        "Run a small Spark job against a broker: UDFs, scheduling, reports.",
    )
    spark_demo.add_argument(
        "--master",
        type=_non_empty,
        default="local[2]",
        metavar="URL",
        help="Spark master URL, e.g. spark://host:7077 (default: local[2]); the executors run "
        "this Python (or PYSPARK_PYTHON), so it needs ferrokafka there",
    )
    spark_demo.add_argument(
        "--rows",
        type=_demo_rows,
        default=1000,
        help="rows to schedule, at most 1000000 (default: 1000)",
    )
    spark_demo.set_defaults(run=_spark_demo)

    topics = commands.add_parser("topics", help="List or create topics.")
    topics.set_defaults(usage_error=topics.error, missing="ACTION")
    topic_commands = topics.add_subparsers(dest="topics_command", metavar="ACTION")
    listing = topic_commands.add_parser("list", help="List topics with their partition counts.")
    listing.set_defaults(usage_error=listing.error)
    listing.add_argument("--all", action="store_true", help="include internal topics")
    listing.add_argument(
        "--bootstrap-servers", type=_non_empty, default="127.0.0.1:9092", metavar="HOST:PORT"
    )
    listing.add_argument("--timeout", type=_positive_seconds, default=30.0)
    _add_settings_option(
        listing,
        "--config",
        "librdkafka setting, e.g. security.protocol=SSL (repeatable)",
        dest="client_config",
    )
    listing.set_defaults(run=_topics_list)
    create = topic_commands.add_parser("create", help="Create a topic.")
    create.set_defaults(usage_error=create.error)
    create.add_argument("name", type=_topic)
    create.add_argument("--partitions", type=_partition_count, default=-1)
    create.add_argument("--replication-factor", type=_replication_factor, default=-1)
    _add_settings_option(
        create, "--config", "topic setting, e.g. cleanup.policy=compact (repeatable)"
    )
    _add_settings_option(
        create,
        "--client-config",
        "librdkafka setting of the client, e.g. security.protocol=SSL (repeatable)",
    )
    create.add_argument("--exist-ok", action="store_true")
    create.add_argument(
        "--bootstrap-servers", type=_non_empty, default="127.0.0.1:9092", metavar="HOST:PORT"
    )
    create.add_argument("--timeout", type=_positive_seconds, default=30.0)
    create.set_defaults(run=_topics_create)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ferrokafka`` console script; returns the exit status.

    Bad arguments are usage errors (status 2); an error while a command runs is one line
    ``ferrokafka: error: ...`` (status 1), its traceback logged at ``--log-level DEBUG``;
    Ctrl-C ends with status 130; a reader of the output that went away (``| head``) ends the
    command quietly with status 141, as SIGPIPE ends other Unix filters."""
    try:
        args, unknown = build_parser().parse_known_args(argv)
        # --help and --version end in SystemExit(0) once written.
    except BrokenPipeError:
        _stdout_to_devnull()
        return 128 + signal.SIGPIPE
    except OSError as err:
        _stdout_to_devnull()
        print(f"ferrokafka: error: cannot write the output: {err.strerror}", file=sys.stderr)
        return 1
    usage_error: Callable[[str], NoReturn] = args.usage_error
    if unknown:
        # Quoted as a shell would take them back: an empty argument shows as ''.
        usage_error(f"unrecognized arguments: {shlex.join(unknown)}")
    if not hasattr(args, "run"):
        usage_error(f"the following arguments are required: {args.missing}")
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        status: int = args.run(args)
        lost = _output_lost()
    except _UsageError as err:
        usage_error(str(err))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _stdout_to_devnull()
        return 128 + signal.SIGPIPE
    except Exception as err:
        lost = _output_lost() if isinstance(err, OSError) else None
        if lost is None and isinstance(err, OSError) and _is_output_error(err):
            # print() failed on a full or broken standard output, whose buffer is gone since.
            lost = err.strerror
        if lost is None:
            log.debug("%s failed", args.command, exc_info=True)
            print(f"ferrokafka: error: {_one_line(err)}", file=sys.stderr)
            return 1
    if lost is not None:
        # As `ls` says so: the output would otherwise be lost with status 0.
        print(f"ferrokafka: error: cannot write the output: {lost}", file=sys.stderr)
        return 1
    return status


def _output_lost() -> str | None:
    """Why what the command printed could not be written (standard output closed, a full
    disk), after writing out what is left; None when it was written."""
    if sys.stdout is None:  # started with stdout closed (`>&-`): print() wrote nothing
        return "standard output is closed"
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as err:
        _stdout_to_devnull()
        return err.strerror or str(err)
    return None


def _is_output_error(err: OSError) -> bool:
    """Whether ``err`` is a failed write of the command's output: an error of writing (a full
    disk, an I/O error, a closed descriptor) that names no file, as a print's does."""
    return err.filename is None and err.errno in (
        errno.ENOSPC,
        errno.EIO,
        errno.EBADF,
        errno.EFBIG,
        errno.EDQUOT,
    )


def _stdout_to_devnull() -> None:
    """Python flushes stdout again at exit: into the void, not into the closed pipe or the
    failing file, which would print a traceback and change the exit status."""
    if sys.stdout is None:  # started closed: nothing is flushed
        return
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _one_line(err: Exception) -> str:
    """``err`` as its type and message on one line (an engine's message may span several)."""
    return " ".join(f"{type(err).__name__}: {err}".split())


if __name__ == "__main__":
    sys.exit(main())
