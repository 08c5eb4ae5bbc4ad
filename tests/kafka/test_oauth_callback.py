"""``oauth_cb``, confluent-kafka's OAUTHBEARER token callback (how AWS MSK IAM is reached from
Python), for every client of every component, against the SASL_SSL listener of the session's
``secure_broker``, whose unsecured validator accepts unsigned JWTs.

The callback here makes such a JWT (header ``{"alg": "none"}``, claims ``sub``/``iat``/``exp``,
empty signature); what arrived is counted over PLAINTEXT by an independent confluent-kafka
consumer.
"""

from __future__ import annotations

import base64
import gc
import json
import logging
import math
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from ferrokafka import AsyncProducer, Client, Consumer, KafkaError
from ferrokafka._native import wait_for_background_closes
from ferrokafka.redelivery import QueueConsumer, RedeliveryTracker
from ferrokafka.scheduling import Scheduler
from ferrokafka.tracking import Reporter
from tests.conftest import ROOT, SecureBroker, wait_until
from tests.kafka.test_security import WAIT, dispatch_one_schedule, new_topic, take, values_on

pytestmark = pytest.mark.kafka

PROMPT = 5.0


def unsecured_jwt(subject: str, lifetime: float) -> tuple[str, float]:
    """An unsigned JWT for ``subject`` that expires ``lifetime`` seconds from now, and when."""
    issued = int(time.time())
    expires = math.ceil(time.time() + lifetime)

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    claims = {"sub": subject, "iat": issued, "exp": expires}
    return f"{part({'alg': 'none'})}.{part(claims)}.", float(expires)


class TokenCallback:
    """An ``oauth_cb`` that counts its calls and what it was given."""

    def __init__(self, lifetime: float = 3600.0, fails: Exception | None = None) -> None:
        self.lifetime = lifetime
        self.fails = fails
        self.configs: list[str | None] = []
        self.expiries: list[float] = []
        self.lock = threading.Lock()

    @property
    def calls(self) -> int:
        with self.lock:
            return len(self.configs)

    def __call__(self, config: str | None) -> tuple[str, float, str, dict[str, str]]:
        with self.lock:
            self.configs.append(config)
        if self.fails is not None:
            raise self.fails
        token, expires = unsecured_jwt("ferrokafka-oauth-cb", self.lifetime)
        with self.lock:
            self.expiries.append(expires)
        return token, expires, "ferrokafka-oauth-cb", {}


def oauth_config(broker: SecureBroker, callback: Callable[[str | None], Any]) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.sasl_ssl,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": broker.ca,
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.config": "scope=kafka",
        "oauth_cb": callback,
    }


def test_every_component_signs_in_with_the_callbacks_tokens(secure_broker: SecureBroker) -> None:
    callback = TokenCallback()
    config = oauth_config(secure_broker, callback)
    client = Client(config)
    topic = new_topic(config, partitions=1)
    client.produce(topic, b"from the client")
    assert [m.value() for m in client.read_topic(topic, timeout=WAIT)] == [b"from the client"]

    producer = AsyncProducer(config)
    producer.produce(b"from the producer", topic)
    assert producer.shutdown(timeout=WAIT) == []

    received: list[bytes] = []
    group = {**config, "group.id": f"g-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"}
    with Consumer(group, [topic], lambda batch: received.extend(m.value() or b"" for m in batch)):
        wait_until(lambda: len(received) >= 2, WAIT, "both records consumed")

    target = dispatch_one_schedule(config, client)

    queue_topic, markers = new_topic(config), new_topic(config)
    client.produce(queue_topic, b"queued", key="q", partition=0)
    with (
        RedeliveryTracker(config, queue_topic, markers, group_id=f"t-{uuid.uuid4().hex}"),
        QueueConsumer(config, queue_topic, markers, group_id=f"q-{uuid.uuid4().hex}") as queue,
    ):
        (message,) = take(queue, 1)
        queue.ack(message)

    reports, errors = new_topic(config, 1), new_topic(config, 1)
    reporter = Reporter(config, reports_topic=reports, errors_topic=errors)
    try:
        assert reporter.report(force=True)
    finally:
        reporter.close()

    observer = secure_broker.bootstrap
    assert sorted(values_on(observer, topic, 2)) == [b"from the client", b"from the producer"]
    assert values_on(observer, target, 1) == [b"due"]
    assert values_on(observer, reports, 1)  # the report and the final one of close()
    # One token per client: the components above create well over a dozen, and every one
    # asked the callback, with the sasl.oauthbearer.config string.
    assert callback.calls >= 12
    assert set(callback.configs) == {"scope=kafka"}


def test_a_token_that_expires_is_refreshed_before_it_does(secure_broker: SecureBroker) -> None:
    # librdkafka asks again at 80 % of a token's life, and the broker re-authenticates the
    # connection (KIP-368) before the token it signed in with expires. Shorter tokens than
    # 10 s leave those steps margins (0.3 s for 3 s tokens) that a loaded machine misses: the
    # token is expired by the time the broker reads it, and librdkafka fails the message.
    callback = TokenCallback(lifetime=10.0)
    config = oauth_config(secure_broker, callback)
    topic = new_topic(oauth_config(secure_broker, TokenCallback()), partitions=1)
    producer = AsyncProducer(config)
    producer.produce(b"first token", topic)
    producer.flush(timeout=WAIT)
    first = callback.calls
    first_expires = max(callback.expiries)
    wait_until(lambda: callback.calls > first, 15.0, "a refresh of the token")
    wait_until(lambda: time.time() > first_expires + 0.5, 15.0, "the first token to expire")
    producer.produce(b"after the refresh", topic)
    assert producer.shutdown(timeout=WAIT) == []
    values = values_on(secure_broker.bootstrap, topic, 2)
    assert sorted(values) == [b"after the refresh", b"first token"]


def test_a_callback_that_raises_is_an_authentication_failure_naming_it(
    secure_broker: SecureBroker, caplog: pytest.LogCaptureFixture
) -> None:
    callback = TokenCallback(fails=RuntimeError("no credentials in this region"))
    config = oauth_config(secure_broker, callback)
    caplog.set_level(logging.ERROR, logger="ferrokafka.oauth")
    for call in (
        lambda: Client(config).list_topics(timeout=20.0),
        lambda: Client(config).produce("never", b"v", timeout=20.0),
    ):
        started = time.monotonic()
        with pytest.raises(KafkaError, match="no credentials in this region") as refused:
            call()
        assert time.monotonic() - started < PROMPT
        assert "Failed to acquire SASL OAUTHBEARER token" in str(refused.value)
        assert "RuntimeError" in str(refused.value)
    scheduler = Scheduler(config, [f"never-{uuid.uuid4().hex}"], group_id=f"g-{uuid.uuid4().hex}")
    started = time.monotonic()
    with pytest.raises(KafkaError, match="no credentials in this region"):
        scheduler.run()
    assert time.monotonic() - started < PROMPT
    assert scheduler.stop(timeout=PROMPT)
    # Logged with the callback's traceback.
    logged = [r for r in caplog.records if r.name == "ferrokafka.oauth"]
    assert logged
    assert logged[0].exc_info is not None
    assert "in __call__" in caplog.text
    assert "raise self.fails" in caplog.text


def test_a_callback_of_the_wrong_shape_is_an_authentication_failure_naming_the_shape(
    secure_broker: SecureBroker,
) -> None:
    config = {**oauth_config(secure_broker, TokenCallback()), "oauth_cb": lambda config: "token"}
    with pytest.raises(KafkaError, match=r"oauth_cb must return \(token, expiry"):
        Client(config).list_topics(timeout=20.0)


@pytest.mark.parametrize(
    ("make", "closing_in_background"),
    # A Client's engine closes on a `ferrokafka-close` thread, counted for the exit to wait for;
    # an AsyncProducer is finished by Python on a thread of its own, which the exit joins.
    [(Client, 1), (AsyncProducer, 0)],
    ids=["Client", "AsyncProducer"],
)
def test_a_client_freed_on_its_own_thread_closes_without_waiting_for_itself(
    secure_broker: SecureBroker,
    make: Any,
    closing_in_background: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Python frees an object on whichever thread drops its last reference or collects it, and
    # a client's own polling thread runs Python code: the oauth_cb, and librdkafka's log lines
    # on their way to `logging`. Here the callback drops the last reference to its client, so
    # the close starts on the thread it would join (it panicked "Resource deadlock avoided"),
    # or, for the AsyncProducer, waited there for deliveries only that thread reports.
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    # Earlier tests' clients left in reference cycles are freed here, on this thread, so none is
    # collected on a client's thread during this test and counted among the closes below.
    gc.collect()
    assert wait_for_background_closes(WAIT) == 0
    threads_before = len(os.listdir("/proc/self/task"))
    held: list[object] = []
    holding = threading.Event()
    dropped = threading.Event()
    closing_meanwhile: list[int] = []
    tokens = TokenCallback()

    def drop_the_client(config: str | None) -> tuple[str, float, str, dict[str, str]]:
        if holding.wait(WAIT) and held:
            held.clear()  # the last reference: the client is freed here, on its thread
            # The close joins this thread, so it is still running while the callback is.
            closing_meanwhile.append(wait_for_background_closes(0.05))
            dropped.set()
        return tokens(config)

    held.append(make(oauth_config(secure_broker, drop_the_client)))
    holding.set()
    assert dropped.wait(WAIT), "the callback was never called"
    assert closing_meanwhile == [closing_in_background]
    assert wait_for_background_closes(WAIT) == 0
    wait_until(
        lambda: len(os.listdir("/proc/self/task")) <= threads_before,
        WAIT,
        "the client's threads all ended",
    )
    assert unraisable == []


def callback_held(script: str, broker: SecureBroker, *args: str) -> tuple[float, str]:
    """Runs ``script`` with the broker's SASL_SSL listener, its CA and ``args``, checks that it
    ended cleanly, and returns how long its oauth_cb was held (its ``CALLBACK_TOOK`` line) and
    its stderr."""
    ran = subprocess.run(
        [sys.executable, "-c", script, broker.sasl_ssl, broker.ca, *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        cwd=ROOT,
    )
    assert ran.returncode == 0, ran.stderr
    assert "Traceback" not in ran.stderr, ran.stderr
    return float(ran.stdout.split("CALLBACK_TOOK")[-1]), ran.stderr


# An AsyncProducer whose last reference goes in its own oauth_cb, before it could connect, with
# records buffered; the script ends right after. Prints how long the callback took.
_DROPPED_BY_ITS_CALLBACK = """
import sys, threading, time
from ferrokafka import AsyncProducer
from tests.kafka.test_oauth_callback import unsecured_jwt
bootstrap, ca, topic, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
held, holding, dropped, took = [], threading.Event(), threading.Event(), []
def drop_the_producer(config):
    if holding.wait(30) and held:
        started = time.monotonic()
        held.clear()
        took.append(time.monotonic() - started)
        dropped.set()
    return unsecured_jwt("ferrokafka-oauth-cb", 3600.0)
producer = AsyncProducer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
    "ssl.ca.location": ca, "sasl.mechanism": "OAUTHBEARER", "oauth_cb": drop_the_producer},
    exit_timeout=20.0)
producer.produce_many([b"kept-%d" % n for n in range(count)], topic=topic)
held.append(producer)
del producer
holding.set()
assert dropped.wait(60), "the callback never dropped the producer"
print("CALLBACK_TOOK", took[0], flush=True)
"""


def test_a_producer_collected_in_its_own_callback_delivers_before_the_script_ends(
    secure_broker: SecureBroker,
) -> None:
    # The collected producer delivers what it holds before it goes; on its own polling thread
    # that wait held up the token it needed to connect, and the deliveries it waited for, until
    # its exit_timeout passed and everything was lost.
    config = oauth_config(secure_broker, TokenCallback())
    topic = new_topic(config, partitions=1)
    took, stderr = callback_held(_DROPPED_BY_ITS_CALLBACK, secure_broker, topic, "1000")
    assert "lost" not in stderr, stderr
    assert took < PROMPT, f"the callback was held {took:.1f} s"
    kept = [b"kept-%d" % n for n in range(1000)]
    assert values_on(secure_broker.bootstrap, topic, 1000) == kept


# A Reporter whose broker is unreachable owes its final report; its last reference goes in the
# oauth_cb of another client. Prints how long the callback took.
_REPORTER_DROPPED_ON_A_CLIENTS_THREAD = """
import sys, time
from ferrokafka import Client
from ferrokafka.tracking import Reporter
from tests.kafka.test_oauth_callback import unsecured_jwt
bootstrap, ca = sys.argv[1], sys.argv[2]
reporter = Reporter({"bootstrap.servers": "127.0.0.1:1"}, send_timeout=3.0, exit_timeout=3.0)
assert not reporter.report(force=True)
held, took = [reporter], []
del reporter
def drop_the_reporter(config):
    if held:
        started = time.monotonic()
        held.clear()
        took.append(time.monotonic() - started)
    return unsecured_jwt("ferrokafka-oauth-cb", 3600.0)
Client({"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
    "sasl.mechanism": "OAUTHBEARER", "oauth_cb": drop_the_reporter}).list_topics(timeout=30)
print("CALLBACK_TOOK", took[0], flush=True)
"""


def test_a_reporter_collected_on_a_clients_thread_sends_its_last_report_off_that_thread(
    secure_broker: SecureBroker,
) -> None:
    # A collected Reporter sends its final report before it goes, waiting up to its
    # exit_timeout; collected on another client's thread (here in that client's oauth_cb) the
    # wait held that thread too, as long as the reporter's own broker took to answer.
    took, stderr = callback_held(_REPORTER_DROPPED_ON_A_CLIENTS_THREAD, secure_broker)
    assert took < 1.0, f"the callback was held {took:.1f} s"
    # The finish ran on a thread of its own, which the interpreter waited for at exit.
    assert "Reporter collected without close(): not sent within" in stderr, stderr


# The engines' log levels are cached per process on first use: librdkafka's debug lines are
# looked at in a fresh interpreter that asks for them from the start.
DEBUG_LOG = """
import logging, sys, time
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(name)s %(message)s")
from ferrokafka import Client
from tests.kafka.test_oauth_callback import unsecured_jwt
made = []
def remember(config):
    made.append(unsecured_jwt("ferrokafka-oauth-cb", 3600.0))
    return made[-1]
config = {{"bootstrap.servers": sys.argv[1], "security.protocol": "SASL_SSL",
    "ssl.ca.location": sys.argv[2], "sasl.mechanism": "OAUTHBEARER", "debug": "security", {extra}}}
client = Client(config)
client.produce(sys.argv[3], b"v", timeout=30)
deadline = time.monotonic() + {wait}
while time.monotonic() < deadline:
    time.sleep(0.1)
print("TOKENS=" + " ".join(token for token, _ in made))
"""


def debug_log(broker: SecureBroker, topic: str, extra: str, wait: float) -> str:
    """What a Client logs (librdkafka's security debug lines too) producing to ``topic`` and
    running ``wait`` seconds more, with the settings ``extra`` adds."""
    script = DEBUG_LOG.format(extra=extra, wait=wait)
    ran = subprocess.run(
        [sys.executable, "-c", script, broker.sasl_ssl, broker.ca, topic],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    )
    return ran.stdout + ran.stderr


def test_a_token_is_never_shown(secure_broker: SecureBroker) -> None:
    topic = new_topic(oauth_config(secure_broker, TokenCallback()), partitions=1)
    shown = debug_log(secure_broker, topic, '"oauth_cb": remember', 0.0)
    assert "SASL OAUTHBEARER authentication successful" in shown, shown
    tokens = shown.split("TOKENS=")[-1].split()
    assert tokens, shown
    for token in tokens:
        assert shown.count(token) == tokens.count(token), shown  # only where printed


def test_librdkafkas_unsecured_tokens_are_still_refreshed_without_a_callback(
    secure_broker: SecureBroker,
) -> None:
    # Contexts answer token refreshes for oauth_cb; librdkafka's built-in unsecured-JWT maker
    # must keep refreshing its own tokens (on its background thread), never failing for want
    # of a callback. The first token is made when a client starts, the next at 80 % of its life.
    topic = new_topic(oauth_config(secure_broker, TokenCallback()), partitions=1)
    extra = '"enable.sasl.oauthbearer.unsecure.jwt": "true", '
    extra += '"sasl.oauthbearer.config": "principal=ferrokafka-unsecured lifeSeconds=3"'
    shown = debug_log(secure_broker, topic, extra, 4.0)
    assert "[thrd:background]: Creating unsecured token" in shown, shown
    assert "Failed to acquire SASL OAUTHBEARER token" not in shown, shown
    assert values_on(secure_broker.bootstrap, topic, 1) == [b"v"]
