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
