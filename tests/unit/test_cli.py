"""The command line's help and argument handling."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ferrokafka.cli import build_parser, main


def test_python_m_ferrokafka_help_lists_the_commands() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "ferrokafka", "--help"], capture_output=True, text=True, check=True
    )
    assert "demo" in shown.stdout
    assert "topics" in shown.stdout


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["frobnicate"])
    assert exited.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_kafka_errors_become_exit_status_1(caplog: pytest.LogCaptureFixture) -> None:
    status = main(["topics", "list", "--bootstrap-servers", "127.0.0.1:1", "--timeout", "0.5"])
    assert status == 1
    assert "KafkaTimeoutError" in caplog.text


@pytest.mark.parametrize(
    ("argv", "argument"),
    [
        (["status", "--config", "novalue"], "--config"),
        (["status", "--config", "=value"], "--config"),
        (["topics", "create", "t", "--config", "novalue"], "--config"),
        (["scheduler", "--schedules-topic", "s", "--flush-batch-size", "0"], "--flush-batch-size"),
        (["scheduler", "--schedules-topic", "s", "--interval-ms", "-5"], "--interval-ms"),
        (["scheduler", "--schedules-topic", "s", "--report-interval", "nan"], "--report-interval"),
        (
            [
                "redelivery",
                "--queue-topic",
                "q",
                "--markers-topic",
                "m",
                "--max-redeliveries",
                "-1",
            ],
            "--max-redeliveries",
        ),
        (
            [
                "redelivery",
                "--queue-topic",
                "q",
                "--markers-topic",
                "m",
                "--commit-interval-ms",
                "0",
            ],
            "--commit-interval-ms",
        ),
        (["dashboard", "--port", "99999"], "--port"),
        (["dashboard", "--port", "0"], "--port"),
        (["dashboard", "--refresh", "0"], "--refresh"),
        (["status", "--timeout", "-1"], "--timeout"),
        (["status", "--timeout", "inf"], "--timeout"),
        (["status", "--watch", "0"], "--watch"),
        (["status", "--ttl", "-3"], "--ttl"),
        (["status", "--max-errors", "0"], "--max-errors"),
        (["status", "--show-errors", "-1"], "--show-errors"),
        (["demo", "--timeout", "abc"], "--timeout"),
        (["spark-demo", "--rows", "0"], "--rows"),
        (["topics", "list", "--timeout", "0"], "--timeout"),
        (["topics", "create", "t", "--partitions", "0"], "--partitions"),
        (["topics", "create", "t", "--replication-factor", "-2"], "--replication-factor"),
    ],
)
def test_bad_arguments_are_usage_errors_naming_the_argument(
    argv: list[str], argument: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argument}" in err
    assert "Traceback" not in err


def test_good_arguments_are_parsed_into_their_types() -> None:
    args = build_parser().parse_args(
        ["topics", "create", "t", "--partitions", "-1", "--config", "a=b=c", "--timeout", "1.5"]
    )
    assert (args.partitions, args.config, args.timeout) == (-1, [("a", "b=c")], 1.5)
    args = build_parser().parse_args(["dashboard", "--port", "65535", "--max-errors", "1"])
    assert (args.port, args.max_errors) == (65535, 1)
