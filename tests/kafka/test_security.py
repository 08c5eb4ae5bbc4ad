"""Secured clusters: every client over TLS (verifying the broker against a CA) and over SASL_SSL
with SCRAM-SHA-512 and OAUTHBEARER, refusals that say why, and no secret in any message.

The broker is the session's ``secure_broker`` (``scripts/kafka.sh`` with KAFKA_SECURITY=1), whose
PLAINTEXT listener lets an independent confluent-kafka consumer count what arrived.
"""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
import logging
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, ClassVar

import pytest

from ferrokafka import (
    AsyncConsumer,
    AsyncProducer,
    Batch,
    Client,
    Consumer,
    KafkaError,
    KafkaTimeoutError,
    NewTopic,
)
from ferrokafka.cli import main
from ferrokafka.redelivery import QueueConsumer, QueueMessage, RedeliveryTracker, redelivery_count
from ferrokafka.scheduling import Scheduler, create_topics, schedule_message
from ferrokafka.tracking import Reporter
from tests.conftest import SecureBroker, wait_until
from tests.kafka.test_scheduler import confluent_messages

pytestmark = pytest.mark.kafka

WAIT = 30.0


@pytest.fixture
def wrong_password() -> str:
    """A password that is not the SCRAM user's, unique to the test: no message may show it."""
    return f"not-the-password-{uuid.uuid4().hex}"


def new_topic(config: dict[str, str], partitions: int = 2) -> str:
    """A fresh topic, created over the secured listener ``config`` names."""
    name = f"secure-{uuid.uuid4().hex[:10]}"
    Client(config).create_topics([NewTopic(name, num_partitions=partitions)], timeout=WAIT)
    return name


def values_on(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    """The values on ``topic``, read over PLAINTEXT by confluent-kafka as an outside observer."""
    return [m.value() or b"" for m in confluent_messages(bootstrap, topic, expected, WAIT)]


def produce_and_consume(broker: SecureBroker, config: dict[str, str], count: int = 20) -> None:
    """AsyncProducer then Consumer over ``config``; the observer counts the topic."""
    topic = new_topic(config)
    sent = [f"m{n}".encode() for n in range(count)]
    producer = AsyncProducer(config)
    for value in sent:
        producer.produce(value, topic, key=value)
    assert producer.shutdown(timeout=WAIT) == []
    assert sorted(values_on(broker.bootstrap, topic, count)) == sorted(sent)

    received: list[bytes] = []
    lock = threading.Lock()

    def handle(batch: Batch) -> None:
        with lock:
            received.extend(m.value() or b"" for m in batch)

    group = {**config, "group.id": f"g-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"}
    with Consumer(group, [topic], handle, drain=1.0):
        wait_until(lambda: len(received) >= count, WAIT, f"{count} records consumed")
    assert sorted(received) == sorted(sent)


def test_produce_and_consume_over_ssl_verifying_the_broker_against_the_ca(
    secure_broker: SecureBroker,
) -> None:
    produce_and_consume(secure_broker, secure_broker.ssl_config())


def test_a_broker_certificate_from_another_ca_is_refused_with_the_reason(
    secure_broker: SecureBroker,
) -> None:
    config = {**secure_broker.ssl_config(), "ssl.ca.location": secure_broker.untrusted_ca}
    with pytest.raises(KafkaError, match="certificate verify failed") as refused:
        Client(config).list_topics(timeout=3.0)
    assert "SSL handshake failed" in str(refused.value)


def test_produce_and_consume_over_sasl_ssl_with_scram_sha_512(
    secure_broker: SecureBroker,
) -> None:
    produce_and_consume(secure_broker, secure_broker.scram_config(), count=10)


def test_a_wrong_password_fails_with_the_reason_and_without_the_password(
    secure_broker: SecureBroker, wrong_password: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = secure_broker.scram_config(password=wrong_password)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(KafkaError, match="Authentication failed") as refused:
        Client(config).list_topics(timeout=3.0)
    shown = f"{refused.value} {refused.value!r}"
    assert "SCRAM-SHA-512" in shown
    assert wrong_password not in shown
    # The producer keeps retrying in the background and logs why; the log shows no password.
    producer = AsyncProducer({**config, "message.timeout.ms": 2000})
    producer.produce(b"never", new_topic(secure_broker.scram_config()))
    wait_until(lambda: "Authentication failed" in caplog.text, WAIT, "the refusal logged")
    assert len(producer.shutdown(timeout=5.0)) == 1
    assert wrong_password not in caplog.text
    # Said at ERROR by librdkafka's own FAIL line only, not again by each client's error
    # callback (at DEBUG there).
    again = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR
        and r.name != "librdkafka"
        and "Authentication failed" in r.getMessage()
    ]
    assert not again, again


def test_sasl_plain_and_oauthbearer_over_sasl_ssl(secure_broker: SecureBroker) -> None:
    scram = secure_broker.scram_config()
    plain = {**scram, "sasl.mechanism": "PLAIN"}
    # librdkafka's own unsigned token, which the broker's unsecured validator accepts: this shows
    # the OAUTHBEARER mechanism end to end without an identity provider.
    oauth = secure_broker.oauthbearer_config(
        {
            "enable.sasl.oauthbearer.unsecure.jwt": "true",
            "sasl.oauthbearer.config": "principal=ferrokafka-test",
        }
    )
    for config in (plain, oauth):
        topic = new_topic(config, partitions=1)
        client = Client(config)
        client.produce(topic, b"hello", key=config["sasl.mechanism"])
        assert [m.value() for m in client.read_topic(topic, timeout=WAIT)] == [b"hello"]


def dispatch_one_schedule(config: dict[str, Any], client: Client) -> str:
    """Runs a Scheduler over the secured listener ``config`` names until it dispatched one due
    schedule (payload ``b"due"``); returns the schedule's target topic."""
    schedules = f"secure-schedules-{uuid.uuid4().hex[:8]}"
    create_topics(client, schedules, num_partitions=1)
    target = new_topic(config, partitions=1)
    schedule_message(
        client,
        {"topic": target, "payload": b"due", "key": "k"},
        int(time.time()) - 1,
        {"topic": schedules, "key": "proxy-1"},
    )
    daemon = {**config, "session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}
    with Scheduler(daemon, [schedules], group_id=f"g-{uuid.uuid4().hex}", state_interval=0.2):
        wait_until(lambda: len(client.read_topic(target)) >= 1, WAIT, "the dispatch")
    return target


def test_scheduler_dispatches_over_sasl_ssl(secure_broker: SecureBroker) -> None:
    config = secure_broker.scram_config()
    client = Client(config)
    target = dispatch_one_schedule(config, client)
    assert [m.value() for m in client.read_topic(target)] == [b"due"]


def status_json(broker: SecureBroker, reports: str, errors: str) -> tuple[dict[str, Any], str]:
    """``ferrokafka status --json`` over SASL_SSL, with the settings given as --config."""
    config = broker.scram_config()
    settings = [
        arg
        for key, value in config.items()
        if key != "bootstrap.servers"
        for arg in ("--config", f"{key}={value}")
    ]
    command = [sys.executable, "-m", "ferrokafka", "status", "--json", "--timeout", "20"]
    command += ["--reports-topic", reports, "--errors-topic", errors]
    command += ["--states-topic", f"{reports}_states", "--bootstrap-servers", broker.sasl_ssl]
    shown = subprocess.run(
        command + settings,
        capture_output=True,
        text=True,
        check=True,
        timeout=WAIT * 2,
    )
    return json.loads(shown.stdout), shown.stdout + shown.stderr


def test_reporter_and_status_over_sasl_ssl_show_no_password(secure_broker: SecureBroker) -> None:
    config = secure_broker.scram_config()
    reports, errors = new_topic(config, 1), new_topic(config, 1)
    reporter = Reporter(config, reports_topic=reports, errors_topic=errors, tags=["secure"])
    try:
        assert reporter.report(force=True)
        reporter.report_error(RuntimeError("boom"), details={"where": "test"})
        assert reporter.report(force=True)
    finally:
        reporter.close()
    document, output = status_json(secure_broker, reports, errors)
    assert [p["id"] for p in document["processes"]] == [reporter.process_id]
    assert secure_broker.password not in output


def test_cli_topics_commands_take_the_client_settings(
    secure_broker: SecureBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    config = secure_broker.scram_config()
    settings = [f"{key}={value}" for key, value in config.items() if key != "bootstrap.servers"]
    name = f"secure-cli-{uuid.uuid4().hex[:8]}"
    where = ["--bootstrap-servers", secure_broker.sasl_ssl, "--timeout", "20"]
    created = ["topics", "create", name, "--partitions", "2", "--config", "retention.ms=60000"]
    assert main(created + where + [f"--client-config={s}" for s in settings]) == 0
    assert main(["topics", "list", *where] + [f"--config={s}" for s in settings]) == 0
    shown = capsys.readouterr()
    assert f"{name}\t2 partitions" in shown.out
    assert secure_broker.password not in shown.out + shown.err


class _TokenEndpoint(http.server.BaseHTTPRequestHandler):
    """An OAuth 2 token endpoint that hands out unsigned JWTs (``"alg": "none"``), which the
    test broker's unsecured validator accepts: the identity provider of the OIDC test."""

    requests: ClassVar[list[tuple[str, str]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        type(self).requests.append((self.headers.get("Authorization", ""), body))
        now = int(time.time())

        def part(claims: dict[str, Any]) -> str:
            return base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()

        claims = {"sub": "ferrokafka-oidc", "iat": now, "exp": now + 3600, "scope": "kafka"}
        token = f"{part({'alg': 'none'})}.{part(claims)}."
        answer = json.dumps({"access_token": token, "token_type": "bearer", "expires_in": 3600})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows failures, not every request."""


def test_oauthbearer_oidc_client_credentials_over_sasl_ssl(
    secure_broker: SecureBroker, caplog: pytest.LogCaptureFixture
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _TokenEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    secret = f"client-secret-{uuid.uuid4().hex}"
    config = secure_broker.oauthbearer_config(
        {
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": f"http://127.0.0.1:{server.server_port}/token",
            "sasl.oauthbearer.client.id": "ferrokafka-app",
            "sasl.oauthbearer.client.secret": secret,
            "sasl.oauthbearer.scope": "kafka",
        }
    )
    caplog.set_level(logging.DEBUG)
    try:
        topic = new_topic(config, partitions=1)
        producer = AsyncProducer(config)
        producer.produce(b"via oidc", topic)
        assert producer.shutdown(timeout=WAIT) == []
    finally:
        server.shutdown()
        server.server_close()
    assert values_on(secure_broker.bootstrap, topic, 1) == [b"via oidc"]
    # librdkafka fetched its tokens from this endpoint with the client's credentials.
    expected = base64.b64encode(f"ferrokafka-app:{secret}".encode()).decode()
    assert _TokenEndpoint.requests
    assert all(auth == f"Basic {expected}" for auth, _ in _TokenEndpoint.requests)
    assert "grant_type=client_credentials" in _TokenEndpoint.requests[0][1]
    assert secret not in caplog.text


def take(queue: QueueConsumer, count: int) -> list[QueueMessage]:
    """The next ``count`` messages of ``queue``, waiting up to WAIT seconds."""
    taken: list[QueueMessage] = []
    deadline = time.monotonic() + WAIT
    while len(taken) < count:
        assert time.monotonic() < deadline, f"only {len(taken)} of {count} messages came"
        taken.extend(queue.consume(count - len(taken), timeout=0.5))
    return taken


def test_redelivery_tracker_and_queue_consumer_over_sasl_ssl(secure_broker: SecureBroker) -> None:
    config = secure_broker.scram_config()
    queue_topic, markers = new_topic(config), new_topic(config)
    Client(config).produce(queue_topic, b"unacked", key="u", partition=0)
    Client(config).produce(queue_topic, b"acked", key="a", partition=1)
    group = f"g-{uuid.uuid4().hex}"
    with (
        RedeliveryTracker(config, queue_topic, markers, group_id=f"t-{group}", commit_interval=0.2),
        # No automatic keepalive: the unacknowledged message must time out and come back.
        QueueConsumer(
            config, queue_topic, markers, 2.0, group_id=group, auto_keepalive=False
        ) as queue,
    ):
        first = take(queue, 2)
        queue.ack(next(m for m in first if m.value() == b"acked"))
        again = take(queue, 1)
    assert [(m.value(), redelivery_count(m)) for m in again] == [(b"unacked", 1)]


def test_async_consumer_over_ssl(secure_broker: SecureBroker) -> None:
    config = secure_broker.ssl_config()
    topic = new_topic(config, partitions=1)
    Client(config).produce(topic, b"async", key="k")
    received: list[bytes] = []
    arrived = asyncio.Event()

    async def handle(batch: Batch) -> None:
        received.extend(m.value() or b"" for m in batch)
        arrived.set()

    async def consume() -> None:
        group = {**config, "group.id": f"g-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"}
        async with AsyncConsumer(group, [topic], handle, drain=1.0):
            await asyncio.wait_for(arrived.wait(), WAIT)

    asyncio.run(consume())
    assert received == [b"async"]


# A refusal is raised as soon as librdkafka reports it, well before the timeout.
LONG = 20.0
PROMPT = 5.0


def _refused_at_once(call: Any, cause: str) -> KafkaError:
    started = time.monotonic()
    with pytest.raises(KafkaError, match=cause) as refused:
        call()
    took = time.monotonic() - started
    assert took < PROMPT, f"{took:.1f} s"
    assert not isinstance(refused.value, TimeoutError)
    return refused.value


def test_a_wrong_password_is_raised_at_once_by_every_client_call(
    secure_broker: SecureBroker,
    wrong_password: str,
) -> None:
    config = secure_broker.scram_config(password=wrong_password)
    topic = new_topic(secure_broker.scram_config(), partitions=1)
    calls = {
        "produce": lambda: Client(config).produce(topic, b"never", timeout=LONG),
        "list_topics": lambda: Client(config).list_topics(timeout=LONG),
        "create_topics": lambda: Client(config).create_topics(["never"], timeout=LONG),
        "read_topic": lambda: Client(config).read_topic(topic, timeout=LONG),
    }
    for name, call in calls.items():
        refused = _refused_at_once(call, "Authentication failed")
        shown = f"{refused} {refused!r}"
        assert name in shown
        assert "SCRAM-SHA-512" in shown
        assert wrong_password not in shown
        assert refused.name == "_AUTHENTICATION"
    producer = AsyncProducer(config)
    producer.produce(b"never", topic)
    _refused_at_once(lambda: producer.flush(timeout=LONG), "Authentication failed")
    started = time.monotonic()
    undelivered = producer.shutdown(timeout=LONG) + producer.take_failed()
    assert time.monotonic() - started < PROMPT
    assert [m.value() for m in undelivered] == [b"never"]
    assert "Authentication failed" in str(undelivered[0].error())


def test_tls_aimed_at_a_plaintext_listener_is_raised_at_once(kafka_bootstrap: str) -> None:
    # librdkafka diagnoses it in its first handshake failure, then retries it for ever as a
    # transport error, which a broker being away would be too.
    config = {"bootstrap.servers": kafka_bootstrap, "security.protocol": "SSL"}
    for call in (
        lambda: Client(config).list_topics(timeout=LONG),
        lambda: Client(config).produce("never", b"v", timeout=LONG),
    ):
        refused = _refused_at_once(call, "connecting to a PLAINTEXT broker listener")
        assert refused.name == "_TRANSPORT"


def test_plaintext_aimed_at_a_tls_listener_times_out_naming_the_cause(
    secure_broker: SecureBroker,
) -> None:
    # Kafka's TLS listener hangs up on a plaintext client without a word: librdkafka logs it at
    # INFO only (no error event, no diagnosis), and a broker restarting would look the same, so
    # the call waits out its timeout, whose message says what happened and what to check.
    config = {"bootstrap.servers": secure_broker.ssl}
    producer = AsyncProducer(config)
    producer.produce(b"never", "never")
    for call in (
        lambda: Client(config).list_topics(timeout=2.0),
        lambda: Client(config).produce("never", b"v", timeout=2.0),
        lambda: producer.flush(timeout=2.0),
    ):
        with pytest.raises(KafkaTimeoutError, match=r"check security\.protocol") as timed_out:
            call()
        assert f"last broker error: {secure_broker.ssl}/bootstrap: Disconnected" in str(
            timed_out.value
        )
        assert "in state APIVERSION_QUERY" in str(timed_out.value)
    assert [m.value() for m in producer.shutdown(timeout=0.5)] == [b"never"]


def test_an_untrusted_ca_is_raised_at_once_by_produce(secure_broker: SecureBroker) -> None:
    config = {**secure_broker.ssl_config(), "ssl.ca.location": secure_broker.untrusted_ca}
    refused = _refused_at_once(
        lambda: Client(config).produce("never", b"v", timeout=LONG), "certificate verify failed"
    )
    assert refused.name == "_SSL"


def test_an_unreachable_token_endpoint_is_raised_at_once(secure_broker: SecureBroker) -> None:
    secret = f"client-secret-{uuid.uuid4().hex}"
    config = secure_broker.oauthbearer_config(
        {
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": "ferrokafka",
            "sasl.oauthbearer.client.secret": secret,
            "sasl.oauthbearer.token.endpoint.url": f"http://user:{secret}@127.0.0.1:1/token",
        }
    )
    for call in (
        lambda: Client(config).produce("never", b"v", timeout=LONG),
        lambda: Client(config).list_topics(timeout=LONG),
    ):
        refused = _refused_at_once(call, "Failed to acquire SASL OAUTHBEARER token")
        assert secret not in f"{refused} {refused!r}"


def test_a_malformed_oauthbearer_config_is_raised_at_once_without_its_value(
    secure_broker: SecureBroker,
) -> None:
    secret = f"value-{uuid.uuid4().hex}"
    config = secure_broker.oauthbearer_config(
        {
            "enable.sasl.oauthbearer.unsecure.jwt": "true",
            "sasl.oauthbearer.config": f"principal=p unknown={secret}",
        }
    )
    refused = _refused_at_once(
        lambda: Client(config).produce("never", b"v", timeout=LONG), "sasl.oauthbearer.config"
    )
    assert secret not in f"{refused} {refused!r}"


def test_a_consumer_reports_a_wrong_password_with_its_cause_at_once(
    secure_broker: SecureBroker,
    wrong_password: str,
) -> None:
    config = {
        **secure_broker.scram_config(password=wrong_password),
        "group.id": f"g-{uuid.uuid4().hex}",
    }
    errors: list[Any] = []
    consumer = Consumer(config, ["never"], lambda batch: None)
    consumer.subscribe(
        lambda name, payload: errors.append(payload["error"]) if name == "error" else None
    )
    started = time.monotonic()
    with consumer:
        wait_until(lambda: bool(errors), WAIT, "the consumer's error event")
    assert time.monotonic() - started < PROMPT + 2.0
    shown = str(errors[0])
    assert "Authentication failed" in shown
    assert "SCRAM-SHA-512" in shown
    assert wrong_password not in shown


def test_a_transactional_producer_raises_a_wrong_password_at_once(
    secure_broker: SecureBroker,
    wrong_password: str,
) -> None:
    config = {
        **secure_broker.scram_config(password=wrong_password),
        "transactional.id": f"tx-{uuid.uuid4().hex}",
    }
    for start in (
        lambda: AsyncProducer(config),
        lambda: Scheduler(config, [f"never-{uuid.uuid4().hex}"], group_id=f"g-{uuid.uuid4().hex}"),
    ):
        refused = _refused_at_once(start, "Authentication failed")
        shown = f"{refused} {refused!r}"
        assert "init_transactions" in shown
        assert "SCRAM-SHA-512" in shown
        assert wrong_password not in shown


def test_daemons_end_with_a_wrong_password_at_once(
    secure_broker: SecureBroker, wrong_password: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = secure_broker.scram_config(password=wrong_password)
    scheduler = Scheduler(config, [f"never-{uuid.uuid4().hex}"], group_id=f"g-{uuid.uuid4().hex}")
    tracker = RedeliveryTracker(
        config, f"never-{uuid.uuid4().hex}", f"never-{uuid.uuid4().hex}", group_id="g"
    )
    for daemon in (scheduler, tracker):
        with caplog.at_level(logging.ERROR):
            refused = _refused_at_once(daemon.run, "Authentication failed")
        assert "connection failed" in str(refused)
        assert "SCRAM-SHA-512" in str(refused)
        assert daemon.stop(timeout=PROMPT)
    assert wrong_password not in f"{caplog.text}"
    assert "scheduler stopped" in caplog.text
    assert "redelivery tracker stopped" in caplog.text


def test_the_scheduler_command_exits_with_the_cause_of_a_wrong_password(
    secure_broker: SecureBroker,
    wrong_password: str,
) -> None:
    config = secure_broker.scram_config(password=wrong_password)
    settings = [f"--config={k}={v}" for k, v in config.items() if k != "bootstrap.servers"]
    command = [sys.executable, "-m", "ferrokafka", "scheduler", "--schedules-topic", "never"]
    command += ["--bootstrap-servers", secure_broker.sasl_ssl, *settings]
    started = time.monotonic()
    ended = subprocess.run(command, capture_output=True, text=True, timeout=LONG, check=False)
    assert time.monotonic() - started < PROMPT + 5.0  # the interpreter's start included
    assert ended.returncode == 1, ended.stderr
    assert "Authentication failed" in ended.stderr
    assert "Traceback" not in ended.stderr
    assert wrong_password not in ended.stderr + ended.stdout
