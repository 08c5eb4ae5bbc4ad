"""The ``ferrokafka`` command line (also ``python -m ferrokafka``).

Example:
    $ ferrokafka --help
    $ ferrokafka topics list --bootstrap-servers 127.0.0.1:9092
    $ ferrokafka redelivery --queue-topic jobs --markers-topic jobs-markers
    $ ferrokafka demo --bootstrap-servers 127.0.0.1:9092
    $ ferrokafka spark-demo --bootstrap-servers 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Protocol

from ferrokafka import __version__
from ferrokafka._native import Client, NewTopic
from ferrokafka.exceptions import FerrokafkaError

log = logging.getLogger("ferrokafka.cli")


def _client(args: argparse.Namespace) -> Client:
    return Client({"bootstrap.servers": args.bootstrap_servers})


def _topics_list(args: argparse.Namespace) -> int:
    metadata = _client(args).list_topics(timeout=args.timeout)
    for name, topic in sorted(metadata.topics.items()):
        if name.startswith("__") and not args.all:
            continue
        print(f"{name}\t{len(topic.partitions)} partitions")
    return 0


def _topics_create(args: argparse.Namespace) -> int:
    config = dict(_key_value(item) for item in args.config)
    topic = NewTopic(args.name, args.partitions, args.replication_factor, config)
    created = _client(args).create_topics([topic], timeout=args.timeout, exist_ok=args.exist_ok)
    print(f"created {args.name}" if created else f"{args.name} already exists")
    return 0


class _Daemon(Protocol):
    def request_stop(self) -> None: ...
    def run(self) -> None: ...
    def stop(self, timeout: float = ...) -> bool: ...


def _daemon_config(args: argparse.Namespace) -> dict[str, str | int | float | bool]:
    config: dict[str, str | int | float | bool] = {"bootstrap.servers": args.bootstrap_servers}
    config.update(_key_value(item) for item in args.config)
    return config


def _run_until_signalled(daemon: _Daemon) -> int:
    """Run a daemon until SIGTERM or SIGINT, then stop it cleanly."""

    def stop(signum: int, _frame: object) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        daemon.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    daemon.run()
    daemon.stop()
    return 0


def _scheduler(args: argparse.Namespace) -> int:
    from ferrokafka.scheduling import Scheduler

    scheduler = Scheduler(
        _daemon_config(args),
        args.schedules_topic,
        group_id=args.group_id,
        flush_batch_size=args.flush_batch_size,
        state_interval=args.interval_ms / 1000,
    )
    return _run_until_signalled(scheduler)


def _redelivery(args: argparse.Namespace) -> int:
    from ferrokafka.redelivery import RedeliveryTracker

    tracker = RedeliveryTracker(
        _daemon_config(args),
        args.queue_topic,
        args.markers_topic,
        max_redeliveries=args.max_redeliveries,
        dead_letter_topic=args.dead_letter_topic,
        group_id=args.group_id,
        commit_interval=args.commit_interval_ms / 1000,
    ).start()
    return _run_until_signalled(tracker)


def _demo(args: argparse.Namespace) -> int:
    from ferrokafka.demo import run_demo

    run_demo(args.bootstrap_servers, timeout=args.timeout)
    return 0


def _spark_demo(args: argparse.Namespace) -> int:
    from ferrokafka.spark_demo import run_spark_demo

    run_spark_demo(args.bootstrap_servers, rows=args.rows, timeout=args.timeout)
    return 0


def _key_value(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {item!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``ferrokafka`` command."""
    parser = argparse.ArgumentParser(
        prog="ferrokafka",
        description="Kafka patterns for Python and Spark, on a Rust core.",
    )
    parser.add_argument("--version", action="version", version=f"ferrokafka {__version__}")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default: INFO)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument(
            "--bootstrap-servers",
            default="127.0.0.1:9092",
            metavar="HOST:PORT",
            help="Kafka bootstrap servers (default: 127.0.0.1:9092)",
        )
        sub.add_argument(
            "--timeout", type=float, default=30.0, help="seconds to wait for Kafka (default: 30)"
        )
        return sub

    scheduler = command(
        "scheduler",
        "Run the scheduled-messages daemon until SIGTERM/SIGINT (Karafka-compatible topics).",
    )
    scheduler.add_argument(
        "--schedules-topic",
        action="append",
        required=True,
        metavar="NAME",
        help="a schedules topic to serve (repeat for several)",
    )
    scheduler.add_argument("--group-id", default="ferrokafka-scheduler")
    scheduler.add_argument(
        "--flush-batch-size", type=int, default=1000, help="messages per synchronous flush"
    )
    scheduler.add_argument(
        "--interval-ms",
        type=int,
        default=10_000,
        help="least milliseconds between periodic state reports (default: 10000)",
    )
    scheduler.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka setting, e.g. transactional.id=scheduler-1 (repeatable)",
    )
    scheduler.set_defaults(run=_scheduler)

    redelivery = command(
        "redelivery",
        "Run the redelivery tracker (KMQ pattern) until SIGTERM/SIGINT: redeliver queue "
        "messages whose markers were not acknowledged in time.",
    )
    redelivery.add_argument("--queue-topic", required=True, metavar="NAME")
    redelivery.add_argument("--markers-topic", required=True, metavar="NAME")
    redelivery.add_argument(
        "--max-redeliveries",
        type=int,
        default=3,
        help="redeliveries before a message is dead-lettered (default: 3)",
    )
    redelivery.add_argument(
        "--dead-letter-topic",
        default=None,
        metavar="NAME",
        help="where messages go after --max-redeliveries (default: none; logged and dropped)",
    )
    redelivery.add_argument(
        "--group-id", default=None, help="default: ferrokafka-redelivery-<markers topic>"
    )
    redelivery.add_argument(
        "--commit-interval-ms",
        type=int,
        default=5_000,
        help="most milliseconds between markers offset commits (default: 5000)",
    )
    redelivery.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka setting, e.g. session.timeout.ms=6000 (repeatable)",
    )
    redelivery.set_defaults(run=_redelivery)

    demo = command("demo", "Run the end-to-end demo against a broker.")
    demo.set_defaults(run=_demo)

    spark_demo = command(
        "spark-demo",
        "Run a small Spark job (local[2]) against a broker: UDFs, scheduling, reports.",
    )
    spark_demo.add_argument(
        "--rows", type=int, default=1000, help="rows to schedule (default: 1000)"
    )
    spark_demo.set_defaults(run=_spark_demo)

    topics = commands.add_parser("topics", help="List or create topics.")
    topic_commands = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    listing = topic_commands.add_parser("list", help="List topics with their partition counts.")
    listing.add_argument("--all", action="store_true", help="include internal topics")
    listing.add_argument("--bootstrap-servers", default="127.0.0.1:9092", metavar="HOST:PORT")
    listing.add_argument("--timeout", type=float, default=30.0)
    listing.set_defaults(run=_topics_list)
    create = topic_commands.add_parser("create", help="Create a topic.")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=-1)
    create.add_argument("--replication-factor", type=int, default=-1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    create.add_argument("--exist-ok", action="store_true")
    create.add_argument("--bootstrap-servers", default="127.0.0.1:9092", metavar="HOST:PORT")
    create.add_argument("--timeout", type=float, default=30.0)
    create.set_defaults(run=_topics_create)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ferrokafka`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        status: int = args.run(args)
    except FerrokafkaError as err:
        log.error("%s: %s", type(err).__name__, err)
        return 1
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
