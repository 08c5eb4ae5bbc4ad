"""The Client's argument and configuration checks, and its error mapping, without a broker."""

from __future__ import annotations

import copy
import gc
import logging
import os
import pickle
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest

import ferrokafka
from ferrokafka import (
    AsyncProducer,
    Client,
    ConfigError,
    FerrokafkaError,
    KafkaError,
    KafkaFatalError,
    KafkaTimeoutError,
    MarkerRefusedError,
    NewTopic,
)
from ferrokafka.tracking import Reporter
from tests.conftest import wait_until
from tests.unit.forked import outcome_in_child

UNREACHABLE = {"bootstrap.servers": "127.0.0.1:1"}


def test_every_exception_derives_from_the_root() -> None:
    for name in ferrokafka.exceptions.__all__:
        assert issubclass(getattr(ferrokafka, name), FerrokafkaError)
    assert issubclass(KafkaTimeoutError, TimeoutError)
    assert issubclass(ConfigError, ValueError)


def test_kafka_error_keeps_its_attributes_through_pickle() -> None:
    err = KafkaError("create_topics failed", 36, "TOPIC_ALREADY_EXISTS", False, False)
    copy = pickle.loads(pickle.dumps(err))
    assert (str(copy), copy.code, copy.name, copy.retriable, copy.fatal) == (
        "create_topics failed",
        36,
        "TOPIC_ALREADY_EXISTS",
        False,
        False,
    )


def test_unknown_config_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"no\.such\.property"):
        Client({"bootstrap.servers": "127.0.0.1:9092", "no.such.property": "x"})


def test_bad_config_value_is_named() -> None:
    with pytest.raises(ConfigError, match=r"linger\.ms"):
        Client({"bootstrap.servers": "127.0.0.1:9092", "linger.ms": "soon"})


def test_a_nul_byte_in_a_config_key_or_value_is_named() -> None:
    with pytest.raises(ConfigError, match=r'key "client\\0.id" contains a NUL byte'):
        Client({"bootstrap.servers": "127.0.0.1:9092", "client\0.id": "x"})
    with pytest.raises(ConfigError, match=r'the value of "client.id" contains a NUL byte'):
        Client({"bootstrap.servers": "127.0.0.1:9092", "client.id": "x\0y"})


def test_config_value_of_wrong_type_is_named() -> None:
    with pytest.raises(ConfigError, match=r"error_cb.*function"):
        Client({"bootstrap.servers": "127.0.0.1:9092", "error_cb": print})  # type: ignore[dict-item]


def test_oauth_cb_must_be_a_callable_and_the_only_token_maker() -> None:
    def oauth_cb(config: str | None) -> tuple[str, float]:
        return "token", 0.0

    base = {"bootstrap.servers": "127.0.0.1:9092", "sasl.mechanism": "OAUTHBEARER"}
    for make in (Client, ferrokafka.AsyncProducer):
        with pytest.raises(ConfigError, match=r"oauth_cb must be a callable.*got str"):
            make({**base, "oauth_cb": "get_token"})
        for own_maker in (
            {"sasl.oauthbearer.method": "oidc"},
            {"enable.sasl.oauthbearer.unsecure.jwt": True},
        ):
            with pytest.raises(ConfigError, match=r"oauth_cb and .* give one of them"):
                make({**base, **own_maker, "oauth_cb": oauth_cb})


def test_missing_bootstrap_servers_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
        Client({"client.id": "x"})


def test_text_without_a_utf8_form_is_refused_as_such_never_replaced() -> None:
    # What os.fsdecode makes of bytes that are not UTF-8: a path in a config value turned into
    # another path (U+FFFD), and a topic was refused as "must be a str, got str".
    undecodable = os.fsdecode(b"/etc/ssl/ca-\xff.pem")
    with pytest.raises(
        ConfigError, match=r'config value for "ssl\.ca\.location" is not valid UTF-8'
    ):
        Client({**UNREACHABLE, "ssl.ca.location": undecodable})
    with pytest.raises(ConfigError, match="a config key is not valid UTF-8"):
        Client({**UNREACHABLE, undecodable: "x"})
    with pytest.raises(
        ValueError, match="topic is not valid UTF-8 text: it holds a lone surrogate"
    ):
        Client(UNREACHABLE).produce(os.fsdecode(b"orders-\xff"), b"v", timeout=0.5)


def test_config_accepts_ints_floats_and_bools() -> None:
    Client({**UNREACHABLE, "socket.timeout.ms": 1000, "enable.idempotence": True})


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_a_config_number_that_is_not_finite_is_refused(number: float) -> None:
    # librdkafka parses "nan" as a double that every range check lets through.
    with pytest.raises(ConfigError, match=r'"linger\.ms" must be a finite number, got float'):
        Client({**UNREACHABLE, "linger.ms": number})


def test_unreachable_broker_raises_a_timeout_naming_the_servers() -> None:
    client = Client(UNREACHABLE)
    with pytest.raises(KafkaTimeoutError, match=r"127\.0\.0\.1:1") as caught:
        client.list_topics(timeout=0.5)
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.name == "_TIMED_OUT"
    assert caught.value.retriable


@pytest.mark.parametrize(
    ("servers", "cause"),
    [
        ("127.0.0.1:1", "Connect to ipv4#127.0.0.1:1 failed: Connection refused"),
        ("no-such-host.invalid:9092", "Failed to resolve 'no-such-host.invalid:9092'"),
    ],
    ids=["nothing-listening", "unknown-host"],
)
def test_a_timeout_names_why_the_broker_could_not_be_reached(servers: str, cause: str) -> None:
    # What tells a broker that is away from a wrong address: librdkafka's last word on it.
    config = {"bootstrap.servers": servers}
    with pytest.raises(
        KafkaTimeoutError, match=re.escape(f"last broker error: {servers}/bootstrap")
    ) as caught:
        Client(config).list_topics(timeout=1.0)
    assert cause in str(caught.value)
    producer = AsyncProducer(config)
    producer.produce(b"never", "never")
    with pytest.raises(KafkaTimeoutError, match=re.escape(cause)) as caught:
        producer.flush(timeout=1.0)
    assert "1 in flight" in str(caught.value)
    assert [m.value() for m in producer.shutdown(timeout=0.2)] == [b"never"]


def test_a_timeout_raised_in_python_carries_librdkafkas_timeout_code() -> None:
    # One spelling of the code, the engines': Python-raised timeouts (the share backend's, the
    # reporter's) report it as the engines' do.
    raised = KafkaTimeoutError("no time left")
    assert (raised.code, raised.name, raised.retriable) == (-185, "_TIMED_OUT", True)
    assert (ferrokafka._native.TIMED_OUT_CODE, ferrokafka._native.TIMED_OUT_NAME) == (
        -185,
        "_TIMED_OUT",
    )
    client = Client(UNREACHABLE)
    with pytest.raises(KafkaTimeoutError) as caught:
        client.list_topics(timeout=0.2)
    assert (caught.value.code, caught.value.name) == (raised.code, raised.name)


def test_waiting_releases_the_gil() -> None:
    client = Client(UNREACHABLE)
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    counter = threading.Thread(target=count)
    counter.start()
    try:
        with pytest.raises(KafkaTimeoutError):
            client.list_topics(timeout=0.5)
    finally:
        stop.set()
        counter.join()
    # Had the wait held the GIL, the counting thread could not have run during it.
    assert ticks > 1000


@pytest.mark.parametrize("timeout", [0.0, -1.0, float("nan"), float("inf")])
def test_timeouts_must_be_positive_and_finite(timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        Client(UNREACHABLE).list_topics(timeout=timeout)


@pytest.mark.parametrize(
    "call",
    [
        lambda: Client(UNREACHABLE).list_topics(timeout=True),
        lambda: Client(UNREACHABLE).create_topics(["t"], timeout=True),
        lambda: Client(UNREACHABLE).delete_topics(["t"], timeout=True),
        lambda: Client(UNREACHABLE).produce("t", b"v", timeout=True),
        lambda: Client(UNREACHABLE).read_topic("t", timeout=True),
        lambda: AsyncProducer(UNREACHABLE).flush(timeout=True),
        lambda: AsyncProducer(UNREACHABLE).shutdown(timeout=True),
    ],
    ids=[
        "list_topics",
        "create_topics",
        "delete_topics",
        "produce",
        "read_topic",
        "flush",
        "shutdown",
    ],
)
def test_a_bool_is_no_timeout(call: Callable[[], object]) -> None:
    # Python counts True as 1: taken as one second, a flag passed in the wrong place waited.
    with pytest.raises(TypeError, match="timeout must be a number of seconds, got bool"):
        call()


@pytest.mark.parametrize(
    ("servers", "failure"),
    [("127.0.0.1:1", "Connection refused"), ("no-such-host.invalid:9092", "Failed to resolve")],
    ids=["nothing-listening", "unknown-host"],
)
def test_a_broker_failure_is_logged_once_not_again_as_a_global_error(
    caplog: pytest.LogCaptureFixture, servers: str, failure: str
) -> None:
    """librdkafka logs a refused connection or an unknown host (its FAIL line) and hands the
    same text to the error callback; only librdkafka's line reaches the log."""
    client = Client({"bootstrap.servers": servers})
    with pytest.raises(KafkaTimeoutError):
        client.list_topics(timeout=0.5)

    def logged() -> list[logging.LogRecord]:
        return [
            r for r in caplog.records if r.levelno >= logging.WARNING and failure in r.getMessage()
        ]

    wait_until(lambda: bool(logged()), 5.0, "the failure in the log")
    assert {r.name for r in logged()} == {"librdkafka"}
    assert not [r for r in logged() if "Global error" in r.getMessage()]


def test_produce_checks_arguments_before_sending() -> None:
    client = Client(UNREACHABLE)
    with pytest.raises(TypeError, match="topic must be a str"):
        client.produce(b"orders", b"v")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="topic must not be empty"):
        client.produce("", b"v")
    with pytest.raises(ValueError, match=r'topic "orders now" is not a legal topic name'):
        client.produce("orders now", b"v")
    with pytest.raises(TypeError, match=r"value must be bytes, str or None, got int"):
        client.produce("orders", 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="header names must be str"):
        client.produce("orders", b"v", headers=[(1, b"x")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r'header name "trace\\0id" contains a NUL byte'):
        client.produce("orders", b"v", headers=[("trace\0id", b"x")])
    with pytest.raises(TypeError, match="headers must be a dict or a list"):
        client.produce("orders", b"v", headers=5)  # type: ignore[arg-type]
    # Each int names its argument and range (PyO3's OverflowError named neither).
    with pytest.raises(ValueError, match="partition must be an int from 0 to 2147483647, got -2"):
        client.produce("orders", b"v", partition=-2)
    with pytest.raises(ValueError, match="partition must be an int from 0 to 2147483647, got 2"):
        client.produce("orders", b"v", partition=2**31)
    with pytest.raises(ValueError, match="timestamp must be an int from 0 to 9223372036854775807"):
        client.produce("orders", b"v", timestamp=2**63)
    with pytest.raises(TypeError, match="partition must be an int, got bool"):
        client.produce("orders", b"v", partition=True)
    with pytest.raises(ValueError, match="max_messages must be an int from 0 to"):
        client.read_topic("orders", max_messages=-1, timeout=0.5)


def test_new_topic_validates_counts() -> None:
    assert NewTopic("t", 3).num_partitions == 3
    with pytest.raises(ValueError, match="num_partitions"):
        NewTopic("t", 0)
    with pytest.raises(ValueError, match="replication_factor"):
        NewTopic("t", 1, -5)
    with pytest.raises(TypeError, match="num_partitions must be an int, got bool"):
        NewTopic("t", True)
    with pytest.raises(ValueError, match="num_partitions must be an int from -1 to 2147483647"):
        NewTopic("t", 2**40)
    with pytest.raises(ValueError, match="replication_factor must be an int from -1 to 32767"):
        NewTopic("t", 1, 2**15)
    with pytest.raises(ValueError, match="empty"):
        NewTopic("")


def test_a_topic_config_takes_numbers_and_bools_as_a_client_config_does() -> None:
    topic = NewTopic("t", config={"retention.ms": 60000, "preallocate": True, "x": "y"})
    assert topic.config == {"retention.ms": "60000", "preallocate": "true", "x": "y"}
    with pytest.raises(ConfigError, match=r'config value for "retention\.ms" must be str, int'):
        NewTopic("t", config={"retention.ms": [1]})  # type: ignore[dict-item]


def test_topic_lists_refuse_a_single_name() -> None:
    client = Client(UNREACHABLE)
    for call in (client.create_topics, client.delete_topics):
        with pytest.raises(TypeError, match=r"topics must be a list, e\.g\. \['orders'\]"):
            call("orders", timeout=0.5)  # a str is a Sequence[str] to a type checker
    with pytest.raises(TypeError, match="topics must be a list of topic names, got int"):
        client.delete_topics(5, timeout=0.5)  # type: ignore[arg-type]


def test_client_refuses_use_after_fork() -> None:
    client = Client(UNREACHABLE)
    reported = outcome_in_child(lambda: client.list_topics(timeout=0.5))
    assert "cannot be used after fork" in reported


def test_a_marker_refused_error_keeps_the_message_it_hands_back_through_pickle() -> None:
    err = MarkerRefusedError("the markers topic refused", 10, "MSG_SIZE_TOO_LARGE")
    err.message = ("queue", 0, 5)  # the raiser sets the Message handed back
    copy = pickle.loads(pickle.dumps(err))
    assert (type(copy), str(copy), copy.name, copy.message) == (
        MarkerRefusedError,
        "the markers topic refused",
        "MSG_SIZE_TOO_LARGE",
        ("queue", 0, 5),
    )


def test_a_fatal_kafka_error_is_its_own_class_and_survives_pickle() -> None:
    err = KafkaFatalError("flush failed", 47, "INVALID_PRODUCER_EPOCH", False, True)
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is KafkaFatalError
    assert isinstance(copy, KafkaError)
    assert (copy.code, copy.name, copy.fatal) == (47, "INVALID_PRODUCER_EPOCH", True)


@pytest.mark.parametrize("copy_it", [copy.copy, copy.deepcopy, pickle.dumps])
def test_a_producer_or_reporter_cannot_be_copied_under_its_owner(
    copy_it: Callable[[Any], Any],
) -> None:
    # A copy shared the clients, and its collection shut them down under the original.
    producer = AsyncProducer(UNREACHABLE)
    reporter = Reporter(UNREACHABLE, exit_timeout=0.1)
    for component in (producer, reporter):
        with pytest.raises(TypeError, match=f"cannot copy or pickle a {type(component).__name__}"):
            copy_it(component)
    gc.collect()
    producer.produce(b"still open", "orders")
    assert producer.shutdown(timeout=0.2)[0].value() == b"still open"
    reporter.close()
