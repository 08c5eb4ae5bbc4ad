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
from tests.conftest import wait_until

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
# value of the wrong type, a secret with a NUL byte (which librdkafka's C strings cannot hold).
BAD_CONFIGS = [
    ({**BOOTSTRAP, "sasl.passwrd": SECRET}, "sasl.passwrd"),
    ({**BOOTSTRAP, "security.protocol": "SSL", "ssl.key.pem": SECRET}, "ssl.key.pem"),
    ({**BOOTSTRAP, "ssl.key.password": [SECRET]}, "ssl.key.password"),
    ({**BOOTSTRAP, "sasl.password": f"{SECRET}\0"}, "sasl.password"),
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


def test_cli_names_the_refused_key_but_not_its_secret(
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
    assert "ferrokafka: error: ConfigError" in shown.err
    assert "sasl.passwrd" in shown.err
    assert SECRET not in caplog.text + shown.out + shown.err


def test_cli_does_not_echo_a_malformed_config_argument(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["status", "--config", SECRET])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--config" in err
    assert SECRET not in err


# An OIDC token endpoint with credentials in its URL (userinfo and a secret query parameter) and a
# client secret: librdkafka prints the URL whenever fetching a token fails, and its debug contexts
# dump the configuration. The endpoint (127.0.0.1:1) refuses every connection.
OIDC_FAILURE = "Failed to retrieve OIDC token from"
OIDC_SHOWN = 'from "https://[redacted]@127.0.0.1:1/token?client_secret=[redacted]"'
OIDC_SECRETS = ("hunter2secret", "s3cr3tvalue", "oidc-client-secret")
OIDC = {
    "bootstrap.servers": "127.0.0.1:1",
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "OAUTHBEARER",
    "sasl.oauthbearer.method": "oidc",
    "sasl.oauthbearer.client.id": "ferrokafka-test",
    "sasl.oauthbearer.client.secret": "oidc-client-secret",
    "sasl.oauthbearer.token.endpoint.url": (
        "https://user:hunter2secret@127.0.0.1:1/token?client_secret=s3cr3tvalue"
    ),
}


@pytest.mark.parametrize("debug", [None, "security,broker", "all"])
def test_oidc_endpoint_credentials_never_reach_a_log_line(
    debug: str | None, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    config = OIDC if debug is None else {**OIDC, "debug": debug}
    producer = ferrokafka.AsyncProducer(config)
    try:
        # librdkafka logs the failed token request, naming the endpoint, when it gives up on it.
        wait_until(
            lambda: any(OIDC_FAILURE in r.getMessage() for r in caplog.records),
            10.0,
            "librdkafka's log line about the failed OIDC token request",
        )
    finally:
        producer.shutdown(timeout=1.0)
    shown = caplog.text + "".join(capfd.readouterr())
    assert OIDC_SHOWN in shown
    for secret in OIDC_SECRETS:
        assert secret not in shown


def test_a_secret_value_librdkafka_echoes_is_cut_from_its_log_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # librdkafka quotes an unsecured-JWT config it cannot parse from the word it stopped at.
    caplog.set_level(logging.DEBUG)
    producer = ferrokafka.AsyncProducer(
        {
            **BOOTSTRAP,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": f"principal=admin bogus={SECRET}-jwt x",
        }
    )
    try:
        wait_until(
            lambda: "Unrecognized sasl.oauthbearer.config" in caplog.text,
            10.0,
            "librdkafka's report of the unparsable sasl.oauthbearer.config",
        )
    finally:
        producer.shutdown(timeout=1.0)
    echoes = [line for line in caplog.text.splitlines() if "Unrecognized sasl.oauthbearer" in line]
    assert all("[redacted]" in line for line in echoes), echoes
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    ("address", "shown"),
    [
        (f"https://user:{SECRET}@127.0.0.1:1", "https://[redacted]@127.0.0.1:1"),
        (f"SASL_SSL://user:{SECRET}@127.0.0.1:1", "SASL_SSL://[redacted]@127.0.0.1:1"),
        # Without a scheme no URL rule sees it: the address check itself cuts it.
        (f"user:{SECRET}@127.0.0.1:1", "[redacted]@127.0.0.1:1"),
        (f"127.0.0.1:2,user:{SECRET}@127.0.0.1:1", "[redacted]@127.0.0.1:1"),
    ],
)
def test_credentials_in_a_broker_address_never_reach_an_exception(address: str, shown: str) -> None:
    # Refused at creation or when no broker answers: either way the exception quotes the value.
    config = {"bootstrap.servers": address}
    with pytest.raises(ferrokafka.FerrokafkaError) as refused:
        ferrokafka.Client(config).list_topics(timeout=0.5)
    assert shown in str(refused.value)
    assert SECRET not in str(refused.value)


def test_the_share_backends_librdkafka_log_lines_hide_oidc_credentials(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The logger the share backend gives confluent-kafka's clients, with a client of its own.
    from confluent_kafka import Producer as ConfluentProducer

    from ferrokafka import share_queue

    caplog.set_level(logging.DEBUG)
    producer = ConfluentProducer({**OIDC, "logger": share_queue.log})

    def logged_the_failed_token_request() -> bool:
        producer.poll(0.1)  # confluent-kafka forwards librdkafka's lines when polled
        return any(OIDC_FAILURE in r.getMessage() for r in caplog.records)

    wait_until(logged_the_failed_token_request, 10.0, "the failed OIDC token request")
    producer.flush(0)
    assert OIDC_SHOWN in caplog.text
    for secret in OIDC_SECRETS:
        assert secret not in caplog.text
