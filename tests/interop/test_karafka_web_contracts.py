"""Karafka Web's own Ruby code judges what ferrokafka writes: its tracking contracts (vendored
unmodified under karafka_web/vendor, see its MANIFEST) run by karafka_web/contracts_driver.rb
over every consumer report and error report ferrokafka's components write to the real broker,
read back with confluent-kafka and decoded with zlib and json only (no ferrokafka code)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import threading
import uuid
import zlib
from pathlib import Path
from typing import Any

import pytest

from ferrokafka import AsyncProducer, Batch, Client, Consumer, codecs
from ferrokafka.redelivery import RedeliveryTracker
from ferrokafka.scheduling import Scheduler, create_topics
from ferrokafka.tracking import Reporter
from tests.conftest import TopicFactory, read_messages, wait_until
from tests.tracking_samples import error_report, process_report

HERE = Path(__file__).parent / "karafka_web"
DRIVER = HERE / "contracts_driver.rb"
VENDOR = HERE / "vendor"
WAIT = 30.0

Request = tuple[str, Any]  # ("report" | "error", the decoded report)


def karafka_web_verdicts(requests: list[Request]) -> list[list[str]]:
    """Each request's contract errors as Karafka Web's Ruby contracts give them (empty:
    valid)."""
    ruby = shutil.which("ruby")
    if ruby is None:
        pytest.fail(
            "ruby is not installed: the Karafka Web interop tests run Karafka Web's Ruby "
            "contracts; scripts/setup.sh installs Debian's ruby package"
        )
    lines = "".join(json.dumps({"contract": c, "report": r}) + "\n" for c, r in requests)
    done = subprocess.run(
        [ruby, str(DRIVER)], input=lines, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"the Ruby driver failed:\n{done.stderr}"
    verdicts = [json.loads(line) for line in done.stdout.splitlines()]
    assert [v["contract"] for v in verdicts] == [c for c, _ in requests]
    return [v["errors"] for v in verdicts]


def test_the_vendored_files_are_upstreams_unmodified_and_none_is_pro() -> None:
    listed: dict[str, str] = {}
    for line in (VENDOR / "MANIFEST").read_text().splitlines():
        if line and not line.startswith("#"):
            repository, commit, path, sha256 = line.split()
            assert len(commit) == 40
            listed[f"{repository.split('/')[1]}/{path}"] = sha256
    files = [p for p in VENDOR.rglob("*") if p.is_file() and p.name != "MANIFEST"]
    present = {str(p.relative_to(VENDOR)) for p in files}
    # The GPL text LGPL-3.0 incorporates comes from Debian, not from these repositories.
    assert present - set(listed) == {"karafka/GPL-3"}
    assert set(listed) <= present
    for path, sha256 in listed.items():
        assert hashlib.sha256((VENDOR / path).read_bytes()).hexdigest() == sha256, path
        assert "pro" not in Path(path).parts, path


def test_karafka_webs_contracts_reject_hand_written_broken_reports() -> None:
    """The harness can fail: reports written by hand (not by ferrokafka's encoder) that break
    a rule are refused by the Ruby contracts, naming the field."""
    valid = process_report("host-1:4242:ab12cd", dispatched_at=1_700_000_000.5)
    no_memory = process_report("host-1:4242:ab12cd", dispatched_at=1_700_000_000.5)
    del no_memory["process"]["memory_usage"]
    bad_partition = process_report("host-1:4242:ab12cd", dispatched_at=1_700_000_000.5)
    subscription = bad_partition["consumer_groups"]["billing"]["subscription_groups"]["billing_0"]
    subscription["topics"]["orders"]["partitions"]["0"]["lag"] = "3"
    untagged_job = process_report("host-1:4242:ab12cd", dispatched_at=1_700_000_000.5)
    untagged_job["jobs"] = [{"consumer": "handle", "tags": [1]}]
    error = error_report("e-1", occurred_at=1_700_000_000.5, process_id="host-1:4242:ab12cd")
    requests: list[Request] = [
        ("report", valid),
        ("report", no_memory),
        ("report", {**valid, "process": {**valid["process"], "tags": "spark"}}),
        ("report", bad_partition),
        ("report", untagged_job),
        ("error", error),
        ("error", {**error, "occurred_at": 1_700_000_000}),  # Integer, not Float
    ]
    verdicts = karafka_web_verdicts(requests)
    # ferrokafka's own port of the rules (checked before every write) agrees with the Ruby.
    ours = {
        "report": codecs.consumer_report_violations_of,
        "error": codecs.error_report_violations_of,
    }
    assert [bool(ours[c](r)) for c, r in requests] == [bool(v) for v in verdicts]
    assert verdicts == [
        [],
        ["process.memory_usage: needs to be present"],
        ["process.tags: is invalid"],
        ['nested contract: {:lag=>"is invalid"}'],
        [
            'nested contract: {:consumer_group=>"needs to be present", :updated_at=>"needs to '
            'be present", :topic=>"needs to be present", :partition=>"needs to be '
            'present", :first_offset=>"needs to be present", :last_offset=>"needs to be '
            'present", :committed_offset=>"needs to be present", :messages=>"needs to be '
            'present", :type=>"needs to be present", :tags=>"is invalid", '
            ':consumption_lag=>"needs to be present", :processing_lag=>"needs to be '
            'present", :status=>"needs to be present"}'
        ],
        [],
        ["occurred_at: is invalid"],
    ]


def decoded(message: Any) -> Any:
    """A record's document as Karafka Web reads it: zlib, then JSON."""
    assert message.headers() == [("zlib", b"true")]
    return json.loads(zlib.decompress(message.value()))


@pytest.mark.kafka
def test_every_report_ferrokafkas_components_write_passes_karafka_webs_contracts(
    kafka_bootstrap: str, kafka_client: Client, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=2)
    reports_topic, errors_topic = topic_factory(partitions=1), topic_factory(partitions=1)
    schedules = f"interop-schedules-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_client, schedules, num_partitions=2)
    queue, markers = topic_factory(partitions=1), topic_factory(partitions=1)
    config = {"bootstrap.servers": kafka_bootstrap}
    with AsyncProducer(config) as producer:
        producer.produce_many([{"value": f"r{i}", "partition": i % 2} for i in range(20)], topic)
        producer.flush()
    running, release = threading.Event(), threading.Event()

    def handle(batch: Batch) -> None:
        values = {m.value() for m in batch}
        if b"r4" in values:  # a job Karafka Web's Job contract sees while it runs
            running.set()
            assert release.wait(WAIT), "the test never released the handler"
        if b"r7" in values:
            raise ValueError("bad record r7")

    reporter = Reporter(
        config,
        reports_topic=reports_topic,
        errors_topic=errors_topic,
        interval=0.2,
        tags=["interop", "karafka-web"],
    )
    group = f"interop-{topic}"
    consumer = Consumer(
        {**config, "group.id": group, "auto.offset.reset": "earliest"},
        [topic],
        handle,
        commit_interval=0.1,
        reporter=reporter,
    )
    scheduler_group, redelivery_group = f"s-{schedules}", f"r-{markers}"
    try:
        with consumer:
            scheduler = Scheduler(config, [schedules], group_id=scheduler_group, reporter=reporter)
            tracker = RedeliveryTracker(
                config, queue, markers, group_id=redelivery_group, reporter=reporter
            )
            tracker.start()
            assert running.wait(WAIT), "the handler never ran"
            assert reporter.report(force=True)  # with the running job
            release.set()
            daemons = {scheduler_group, redelivery_group}
            wait_until(
                lambda: daemons <= set(reporter.sample()["consumer_groups"]),
                WAIT,
                "both daemons in the report",
            )
            reporter.report_error(
                KeyError("order 7"), kind="ferrokafka.test.error", details={"offsets": [1, 2]}
            )
            assert tracker.stop()
            assert scheduler.stop()
        reporter.close()
    finally:
        release.set()
        kafka_client.delete_topics([schedules, f"{schedules}_states"], timeout=30.0)
    reports = [decoded(m) for m in read_messages(kafka_bootstrap, reports_topic, 1)]
    errors = [decoded(m) for m in read_messages(kafka_bootstrap, errors_topic, 1)]
    # Every kind of report was written: jobs, each component, the final status, both errors.
    assert any(r["jobs"] for r in reports)
    for source in (group, scheduler_group, redelivery_group):
        assert any(source in r["consumer_groups"] for r in reports), source
    assert reports[-1]["process"]["status"] == "stopped"
    assert {e["error_class"] for e in errors} == {"ValueError", "KeyError"}
    requests = [("report", r) for r in reports] + [("error", e) for e in errors]
    verdicts = karafka_web_verdicts(requests)
    broken = [(c, r, v) for (c, r), v in zip(requests, verdicts, strict=True) if v]
    assert broken == [], f"{len(broken)} of {len(requests)} reports break Karafka Web's contracts"
