"""No secret config value in any exception text or log line; the key is named instead
(issue 13, defect 6)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

import ferrokafka
from ferrokafka.cli import main
from ferrokafka.status import StatusReader
from ferrokafka.tracking import Reporter

SECRET = "hunter2"
BOOTSTRAP = {"bootstrap.servers": "127.0.0.1:1"}


def _consumer(config: Any) -> object:
    if isinstance(config, dict):
        config = {**config, "group.id": "g"}
    consumer = ferrokafka.Consumer(config, ["orders"], lambda batch: None)
    consumer.start()
    return consumer


def _status_reader(config: Any) -> object:
    return StatusReader(config, states_topics=[]).start()


MAKERS: dict[str, Callable[[Any], object]] = {
    "Client": ferrokafka.Client,
    "AsyncProducer": ferrokafka.AsyncProducer,
    "Consumer": _consumer,
    "StatusReader": _status_reader,
}

# (config, the key the error must name): a misspelt secret key librdkafka does not know, a
# sensitive value librdkafka refuses (a private key that is not PEM), a sensitive key with a
# value of the wrong type.
BAD_CONFIGS = [
    ({**BOOTSTRAP, "sasl.passwrd": SECRET}, "sasl.passwrd"),
    ({**BOOTSTRAP, "security.protocol": "SSL", "ssl.key.pem": SECRET}, "ssl.key.pem"),
    ({**BOOTSTRAP, "ssl.key.password": [SECRET]}, "ssl.key.password"),
]


@pytest.mark.parametrize("make", MAKERS.values(), ids=MAKERS.keys())
@pytest.mark.parametrize(("config", "key"), BAD_CONFIGS, ids=lambda v: str(v)[-40:])
def test_refused_config_names_the_key_but_never_shows_the_secret(
    make: Callable[[Any], object],
    config: dict[str, Any],
    key: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ferrokafka.ConfigError) as refused:
        make(config)
    assert key in str(refused.value)
    assert SECRET not in str(refused.value)
    assert SECRET not in repr(refused.value)
    assert SECRET not in caplog.text


@pytest.mark.parametrize("make", [*MAKERS.values(), Reporter], ids=[*MAKERS.keys(), "Reporter"])
def test_a_config_that_is_not_a_dict_is_not_echoed(
    make: Callable[[Any], object], caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises((TypeError, ValueError)) as refused:
        make(f"sasl.password={SECRET}")
    assert SECRET not in str(refused.value)
    assert SECRET not in caplog.text


def test_cli_logs_the_refused_key_but_not_its_secret(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        [
            "status",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--timeout",
            "0.5",
            "--config",
            f"sasl.passwrd={SECRET}",
        ]
    )
    shown = capsys.readouterr()
    assert status == 1
    assert "ConfigError" in caplog.text
    assert "sasl.passwrd" in caplog.text
    assert SECRET not in caplog.text + shown.out + shown.err


def test_cli_does_not_echo_a_malformed_config_argument(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["status", "--config", SECRET])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--config" in err
    assert SECRET not in err
