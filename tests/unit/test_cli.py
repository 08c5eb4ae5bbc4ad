"""The command line's help and argument handling."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import ferrokafka
from ferrokafka.cli import build_parser, main


def test_python_m_ferrokafka_help_lists_the_commands() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "ferrokafka", "--help"], capture_output=True, text=True, check=True
    )
    assert "demo" in shown.stdout
    assert "topics" in shown.stdout


@pytest.mark.parametrize("asked", ["--help", "status --help", "--version"])
@pytest.mark.parametrize(
    ("redirect", "said"),
    [(">&-", "standard output is closed"), ("> /dev/full", "No space left on device")],
    ids=["closed", "full"],
)
def test_help_that_cannot_be_written_is_an_error_not_status_0(
    asked: str, redirect: str, said: str
) -> None:
    # argparse drops a failed write: the help vanished with status 0.
    run = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m ferrokafka {asked} {redirect}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.returncode == 1, run.stderr
    assert run.stderr == f"ferrokafka: error: cannot write the output: {said}\n"


def test_a_usage_error_with_stderr_closed_is_still_status_2() -> None:
    run = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m ferrokafka frobnicate 2>&-"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.returncode == 2, run.stdout


def test_a_setting_without_equals_is_named_without_a_redaction(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["topics", "list", "--config", "noequals"])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert "expected NAME=VALUE, found no '='" in said, said
    assert "[redacted]" not in said, said


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["frobnicate"])
    assert exited.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--confg", "sasl.password=hunter2"],  # a misspelled option
        ["status", "sasl.password=hunter2"],  # a forgotten --config
        ["--config", "sasl.password=hunter2", "status"],  # an option before the command
        ["status", "--confg", "sasl.oauthbearer.client.secret=hunter2"],
    ],
)
def test_a_usage_error_quoting_a_secret_does_not_show_it(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        main(argv)
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert "=[redacted]" in err
    assert "hunter2" not in err


def test_kafka_errors_become_exit_status_1(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["topics", "list", "--bootstrap-servers", "127.0.0.1:1", "--timeout", "0.5"])
    assert status == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1
    assert errors[0].startswith("ferrokafka: error: KafkaTimeoutError: list_topics timed out")


def test_an_unexpected_error_is_one_line_without_a_traceback(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # A setting librdkafka refuses only once the client is made: an error while running.
    status = main(["topics", "list", "--config", "socket.timeout.ms=-5", "--timeout", "0.5"])
    assert status == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("ferrokafka: error: ConfigError: ")
    assert "Traceback" not in err + caplog.text


def _ferrokafka(
    *argv: str, env: dict[str, str] | None = None, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferrokafka", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def _assert_usage_error(shown: subprocess.CompletedProcess[str], naming: str) -> None:
    """Exit status 2 and argparse's own shape: the usage, then one error line naming
    ``naming``; no traceback."""
    assert "Traceback" not in shown.stderr
    assert shown.returncode == 2, shown.stderr
    lines = shown.stderr.splitlines()
    errors = [line for line in lines if ": error: " in line]
    assert len(errors) == 1, shown.stderr
    assert errors[0] == lines[-1]
    assert errors[0].startswith("ferrokafka")
    assert naming in errors[0]
    assert lines[0].startswith("usage: ferrokafka")
    assert all(line.startswith(" ") for line in lines[1:-1]), shown.stderr  # the usage's lines


HUGE = "99999999999999999999999"
# The redelivery command with its required arguments, for the cases that add a bad one.
REDELIVERY = ["redelivery", "--queue-topic", "q", "--markers-topic", "m"]


@pytest.mark.parametrize(
    ("argv", "naming"),
    [
        (["scheduler", "--schedules-topic", ""], "argument --schedules-topic"),
        (["scheduler", "--schedules-topic", "s", "--instance-id", ""], "argument --instance-id"),
        (["scheduler", "--schedules-topic", "s", "--group-id", ""], "argument --group-id"),
        (["scheduler", "--schedules-topic", "s", "--dead-letter-topic", ""], "--dead-letter-topic"),
        (["scheduler", "--schedules-topic", "s", "--flush-batch-size", HUGE], "--flush-batch-size"),
        (["scheduler", "--schedules-topic", "s", "--flush-batch-size", "1"], "--flush-batch-size"),
        (["scheduler", "--schedules-topic", "s", "--interval-ms", HUGE], "--interval-ms"),
        (
            ["scheduler", "--schedules-topic", "s", "--report-interval", "1e308"],
            "--report-interval",
        ),
        (["scheduler", "--schedules-topic", "s", "--reports-topic", ""], "--reports-topic"),
        (["redelivery", "--queue-topic", "", "--markers-topic", "m"], "argument --queue-topic"),
        (["redelivery", "--queue-topic", "q", "--markers-topic", "a b"], "--markers-topic"),
        ([*REDELIVERY, "--dead-letter-topic", ""], "argument --dead-letter-topic"),
        ([*REDELIVERY, "--max-redeliveries", HUGE], "argument --max-redeliveries"),
        ([*REDELIVERY, "--group-id", ""], "argument --group-id"),
        (
            ["redelivery", "--queue-topic", "jobs", "--markers-topic", "jobs"],
            "argument --markers-topic: must differ from --queue-topic",
        ),
        (["status", "--reports-topic", ""], "argument --reports-topic"),
        (["status", "--errors-topic", "."], "argument --errors-topic"),
        (["status", "--states-topic", ""], "argument --states-topic"),
        (["status", "--timeout", "1e308"], "argument --timeout"),
        (["status", "--max-errors", HUGE], "argument --max-errors"),
        (["status", "--show-errors", HUGE], "argument --show-errors"),
        (["status", "--bootstrap-servers", ""], "argument --bootstrap-servers"),
        (["dashboard", "--host", ""], "argument --host"),
        (["topics", "create", "--", ""], "argument name"),
        (["topics", "create", "x", "--", ""], "unrecognized arguments: ''"),
        (["topics", "create", "x" * 250], "argument name"),
        (["topics", "create", "x", "--partitions", "99999999999"], "argument --partitions"),
        (["topics", "create", "x", "--replication-factor", "10001"], "--replication-factor"),
        (["spark-demo", "--rows", HUGE], "argument --rows"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["status", "--bogus"], "unrecognized arguments: --bogus"),
        (["topics", "--bogus"], "unrecognized arguments: --bogus"),
        ([], "the following arguments are required: COMMAND"),
        (["topics"], "the following arguments are required: ACTION"),
    ],
)
def test_bad_arguments_end_in_one_usage_error_line(argv: list[str], naming: str) -> None:
    # Nothing may start: a daemon started anyway shows as the timeout.
    _assert_usage_error(_ferrokafka(*argv, timeout=20), naming)


def test_a_missing_extra_is_a_usage_error(tmp_path: Path) -> None:
    # An installation of ferrokafka alone: its package, without the site-packages that hold
    # pyspark, pyarrow, pandas, starlette and uvicorn.
    (tmp_path / "ferrokafka").symlink_to(Path(ferrokafka.__file__).parent)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    for command, extra in [("spark-demo", "spark"), ("dashboard", "dashboard")]:
        shown = subprocess.run(
            [sys.executable, "-S", "-m", "ferrokafka", command],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=False,
        )
        _assert_usage_error(shown, f"pip install 'ferrokafka[{extra}]'")


def test_a_dashboard_port_in_use_fails_before_announcing_its_url() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        shown = _ferrokafka("dashboard", "--port", str(port), "--bootstrap-servers", "127.0.0.1:1")
    _assert_usage_error(shown, f"argument --port: cannot listen on 127.0.0.1:{port}")
    assert "dashboard on http" not in shown.stderr


# Commands (with their required arguments), each with options and the values they refuse.
REFUSED_VALUES: dict[tuple[str, ...], dict[str, list[str]]] = {
    ("status",): {
        "--config": ["novalue", "=value"],
        "--timeout": ["-1", "inf"],
        "--watch": ["0"],
        "--ttl": ["-3"],
        "--max-errors": ["0"],
        "--show-errors": ["-1"],
    },
    ("topics", "create", "t"): {
        "--config": ["novalue"],
        "--partitions": ["0"],
        "--replication-factor": ["-2"],
    },
    ("topics", "list"): {"--timeout": ["0"]},
    ("scheduler", "--schedules-topic", "s"): {
        "--flush-batch-size": ["0"],
        "--interval-ms": ["-5"],
        "--report-interval": ["nan"],
    },
    tuple(REDELIVERY): {"--max-redeliveries": ["-1"], "--commit-interval-ms": ["0"]},
    ("dashboard",): {"--port": ["99999", "0"], "--refresh": ["0"]},
    ("demo",): {"--timeout": ["abc"]},
    ("spark-demo",): {"--rows": ["0"], "--master": [""]},
}


@pytest.mark.parametrize(
    ("argv", "argument"),
    [
        ([*command, option, value], option)
        for command, options in REFUSED_VALUES.items()
        for option, values in options.items()
        for value in values
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
    assert build_parser().parse_args(["spark-demo"]).master == "local[2]"
    args = build_parser().parse_args(["spark-demo", "--master", "spark://10.0.0.5:7077"])
    assert args.master == "spark://10.0.0.5:7077"
