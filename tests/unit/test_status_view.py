"""StatusView without a broker: latest report wins, health by TTL, errors newest first, state
reports, bounded history, skipped records, and the text / JSON / Prometheus renderings."""

from __future__ import annotations

import json
import tracemalloc
import zlib

import pytest

from ferrokafka import codecs
from ferrokafka._native import view_state_report
from ferrokafka.cli import build_parser
from ferrokafka.status import StatusView, render_prometheus, render_text
from ferrokafka.status.hostile import MAX_CLOCK_AHEAD
from ferrokafka.status.view import MAX_LAG_SERIES
from tests.tracking_samples import (
    error_report,
    karafka_fixture,
    packed,
    process_report,
    state_report,
)

REPORTS, ERRORS, STATES = "reports", "errors", "schedules_states"
NOW = 1_800_000_000.0


@pytest.fixture
def view() -> StatusView:
    return StatusView(
        reports_topic=REPORTS, errors_topic=ERRORS, ttl=30.0, max_errors=3, clock=lambda: NOW
    )


def add_report(view: StatusView, offset: int, **kwargs: object) -> bool:
    report = process_report(**kwargs)  # type: ignore[arg-type]
    return view.add_record(REPORTS, 0, offset, codecs.encode_process_report(report))


def test_latest_report_per_process_wins_whatever_the_order(view: StatusView) -> None:
    assert add_report(view, 0, process_id="h:1:a", dispatched_at=NOW - 5, lags={0: 9, 1: 4})
    assert add_report(view, 1, process_id="h:1:a", dispatched_at=NOW - 10, lags={0: 100})
    snapshot = view.snapshot(now=NOW)
    (process,) = snapshot.processes
    assert (process.id, process.dispatched_at, process.lag) == ("h:1:a", NOW - 5, 13)
    # Karafka Web's lag per partition, and librdkafka's to the committed offset (2 behind).
    assert [(p.topic, p.partition, p.lag_hybrid, p.lag) for p in process.partitions] == [
        ("orders", 0, 9, 11),
        ("orders", 1, 4, 6),
    ]
    # Both reports are points in the history, in time order.
    (series0, series1) = snapshot.lag_history
    assert series0.points == [(NOW - 10, 100), (NOW - 5, 9)]
    assert (series1.partition, series1.points) == (1, [(NOW - 5, 4)])


def test_health_by_ttl_and_stopped_status(view: StatusView) -> None:
    add_report(view, 0, process_id="h:1:alive", dispatched_at=NOW - 30, lags={0: 5})
    add_report(view, 1, process_id="h:2:stale", dispatched_at=NOW - 31, lags={0: 7})
    add_report(view, 2, process_id="h:3:stop", dispatched_at=NOW, status="stopped")
    snapshot = view.snapshot(now=NOW)
    assert [(p.id, p.health, p.alive) for p in snapshot.processes] == [
        ("h:1:alive", "alive", True),
        ("h:2:stale", "stale", False),
        ("h:3:stop", "stopped", False),
    ]
    totals = snapshot.totals
    assert (totals.alive, totals.stale, totals.stopped, totals.lag) == (1, 1, 1, 5)
    assert totals.messages == 150  # counters add up over every process shown
    assert [p.health for p in view.snapshot(now=NOW + 100).processes] == [
        "stale",
        "stale",
        "stopped",
    ]


def test_counts_add_up_over_the_reports_of_a_process(view: StatusView) -> None:
    # Karafka Web's rule: each report counts since the process's previous one.
    add_report(view, 0, process_id="h:1:a", dispatched_at=NOW - 10, messages=20)
    add_report(view, 1, process_id="h:1:a", dispatched_at=NOW - 5, messages=30)
    (process,) = view.snapshot(now=NOW).processes
    assert (process.totals["messages"], process.totals["batches"]) == (50, 6)


def test_karafka_reports_of_every_schema_read_are_shown(view: StatusView) -> None:
    """Karafka Web's consumer reports 1.2.1 through 1.7.0 (several consumer and subscription
    groups, several partitions) and a newer schema, flagged; error schemas 1.0.0 to 1.2.0."""
    versions = ["1.2.1", "1.4.1", "1.6.0", "1.7.0"]
    for offset, version in enumerate(versions):
        document = karafka_fixture(f"consumer_report_{version}")
        document["process"]["id" if version >= "1.3" else "name"] = f"ruby:{offset}:x"
        document["dispatched_at"] = NOW - offset
        assert view.add_record(REPORTS, 0, offset, zlib.compress(json.dumps(document).encode()))
    newer = karafka_fixture("consumer_report_1.7.0")
    newer.update(schema_version="1.9.0", brand_new={"field": 1}, dispatched_at=NOW)
    newer["process"]["id"] = "ruby:9:x"
    assert view.add_record(REPORTS, 0, 9, zlib.compress(json.dumps(newer).encode()))
    processes = {p.id: p for p in view.snapshot(now=NOW).processes}
    assert sorted(processes) == ["ruby:0:x", "ruby:1:x", "ruby:2:x", "ruby:3:x", "ruby:9:x"]
    for process in processes.values():
        # Hybrid lag: the stored lag where known (3, 0, 2), else the committed one (7).
        assert process.lag == 12
        assert [
            (p.group, p.subscription_group, p.topic, p.partition) for p in process.partitions
        ] == [
            ("audit_app", "eccbc87e4b5c_0", "audit", 0),
            ("orders_app", "c4ca4238a0b9_0", "orders", 0),
            ("orders_app", "c4ca4238a0b9_0", "orders", 2),
            ("orders_app", "c4ca4238a0b9_1", "payments", 1),
        ]
        assert process.totals["messages"] == 400
    assert [p.newer_schema for p in processes.values()] == [False] * 4 + [True]
    assert processes["ruby:0:x"].execution_mode is None  # before 1.4.0
    assert "1.9.0 (newer: partly read)" in render_text(view.snapshot(now=NOW))
    assert processes["ruby:3:x"].execution_mode == "standalone"
    for offset, version in enumerate(["1.0.0", "1.1.0", "1.2.0"]):
        error = zlib.compress(json.dumps(karafka_fixture(f"error_report_{version}")).encode())
        assert view.add_record(ERRORS, 0, offset, error)
    errors = view.snapshot(now=NOW).errors
    # 1.0.0 and 1.1.0 carry no id: the same error twice counts once; 1.2.0 has its own id.
    assert [(e.process_id, e.error_class) for e in errors] == [
        ("ruby-host:4242:a1b2c3d4e5f6", "ArgumentError")
    ] * 2
    assert errors[1].details["consumer"] == "OrdersConsumer"


def test_forgotten_processes_leave_the_snapshot() -> None:
    view = StatusView(reports_topic=REPORTS, forget_after=600.0, clock=lambda: NOW)
    view.add_record(
        REPORTS, 0, 0, codecs.encode_process_report(process_report("h:1:a", dispatched_at=NOW))
    )
    assert len(view.snapshot(now=NOW + 600).processes) == 1
    snapshot = view.snapshot(now=NOW + 601)
    assert (snapshot.processes, snapshot.lag_history) == ([], [])


def test_errors_newest_first_bounded_and_deduplicated(view: StatusView) -> None:
    for offset, (error_id, at) in enumerate(
        [("e1", NOW - 4), ("e4", NOW - 1), ("e2", NOW - 3), ("e3", NOW - 2), ("e4", NOW - 1)]
    ):
        report = error_report(error_id, occurred_at=at, process_id="h:1:a")
        view.add_record(ERRORS, 0, offset, codecs.encode_error_report(report))
    errors = view.snapshot(now=NOW).errors
    assert [e.id for e in errors] == ["e4", "e3", "e2"]  # max_errors=3; e4 once
    assert (errors[0].error_class, errors[0].process_id) == ("ValueError", "h:1:a")


def test_state_reports_latest_per_partition(view: StatusView) -> None:
    view.add_record(
        STATES, 1, 0, codecs.encode_state_report(state_report(dispatched_at=NOW, state="loading"))
    )
    view.add_record(STATES, 1, 1, codecs.encode_state_report(state_report(dispatched_at=NOW + 1)))
    (scheduler,) = view.snapshot(now=NOW + 2).schedulers
    assert (scheduler.topic, scheduler.partition, scheduler.state) == ("schedules", 1, "loaded")
    assert (scheduler.pending, scheduler.dispatched, scheduler.daily) == (
        7,
        7,
        {"2030-01-01": 3, "2030-01-02": 4},
    )


def test_a_state_report_is_read_into_a_typed_view() -> None:
    # As an older Karafka tracker writes it: no offsets, none of ferrokafka's counters.
    older = state_report(dispatched_at=NOW)
    for name in ("offsets", "skipped_records", "dispatched"):
        del older[name]
    report = view_state_report(packed(older))
    assert (report.state, report.dispatched_at, report.started_at) == ("loaded", NOW, NOW - 60)
    assert (report.low, report.high) == (-1, -1)
    assert (report.dispatched, report.skipped_records, report.failed) == (0, 0, 0)
    assert report.daily == {"2030-01-01": 3, "2030-01-02": 4}


def test_corrupt_foreign_and_tombstone_records_are_counted_not_raised(
    view: StatusView, caplog: pytest.LogCaptureFixture
) -> None:
    state = codecs.encode_state_report(state_report(dispatched_at=NOW))
    bad_reports = [
        b"not zlib",
        zlib.compress(b"{not json"),
        zlib.compress(json.dumps({"hello": "world"}).encode()),
        state,  # a valid document of another kind
        None,  # tombstone
        json.dumps(process_report("h:1:a", dispatched_at=NOW)).encode(),  # not compressed
    ]
    for offset, value in enumerate(bad_reports):
        assert not view.add_record(REPORTS, 0, offset, value)
    assert not view.add_record(ERRORS, 0, 0, state)
    assert not view.add_record(STATES, 0, 0, b"\x78\x9c garbage")
    assert not view.add_record("orders", 0, 0, state)
    assert add_report(view, len(bad_reports), process_id="h:1:a", dispatched_at=NOW)
    snapshot = view.snapshot(now=NOW)
    assert snapshot.skipped == {ERRORS: 1, "orders": 1, REPORTS: 6, STATES: 1}
    assert snapshot.read == {ERRORS: 1, "orders": 1, REPORTS: 7, STATES: 1}
    assert [p.id for p in snapshot.processes] == ["h:1:a"]
    assert "skipped reports[0]@0: corrupt zlib stream" in caplog.text


def test_offsets_going_back_are_a_partition_created_again_logged_and_read(
    view: StatusView, caplog: pytest.LogCaptureFixture
) -> None:
    """The records of a reports topic deleted and created again were dropped unsaid while
    their offsets were below those read before."""
    for offset in range(20):
        assert add_report(view, offset, process_id="h:1:old", dispatched_at=NOW - 30 + offset)
    for offset in range(3):
        assert add_report(view, offset, process_id="h:2:new", dispatched_at=NOW - 3 + offset)
    assert view.positions() == {(REPORTS, 0): 3}
    snapshot = view.snapshot(now=NOW)
    assert [p.id for p in snapshot.processes] == ["h:1:old", "h:2:new"]
    assert (snapshot.read, snapshot.skipped) == ({REPORTS: 23}, {})
    (warning,) = [r for r in caplog.records if "starts over" in r.getMessage()]
    assert warning.getMessage() == (
        "reports[0] starts over at offset 0, below the 20 read: the partition was deleted and "
        "created again (or truncated); reading its records from there"
    )


def test_lag_history_is_bounded() -> None:
    view = StatusView(reports_topic=REPORTS, history_points=4, clock=lambda: NOW)
    for offset in range(10):
        report = process_report("h:1:a", dispatched_at=NOW + offset, lags={0: offset})
        view.add_record(REPORTS, 0, offset, codecs.encode_process_report(report))
    (series,) = view.snapshot(now=NOW + 10).lag_history
    assert series.points == [(NOW + i, i) for i in range(6, 10)]


def test_lag_history_keeps_the_series_of_the_newest_report_of_a_process(
    view: StatusView,
) -> None:
    """One process id reporting new partitions each time grew the history without bound
    (300 reports of 1,000 partitions: 300,000 series, 237 MiB, 1.25 s per snapshot)."""
    tracemalloc.start()
    try:
        for offset in range(100):
            lags = dict.fromkeys(range(200), offset)
            add_report(
                view,
                offset,
                process_id="h:1:a",
                dispatched_at=NOW - 100 + offset,
                lags=lags,
                topic=f"t{offset}",
            )
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 2 << 20  # 20,000 series, 9 MB, before
    snapshot = view.snapshot(now=NOW)
    assert [(s.topic, s.partition, s.points) for s in snapshot.lag_history] == [
        ("t99", partition, [(NOW - 1, 99)]) for partition in range(MAX_LAG_SERIES)
    ]
    assert snapshot.omitted == {"lag_series": 200 - MAX_LAG_SERIES}


def test_lag_history_over_all_processes_is_bounded_alive_processes_first(
    view: StatusView,
) -> None:
    # 25 processes of 50 partitions, stale: 1,250 series, more than are kept.
    for n in range(25):
        lags = dict.fromkeys(range(50), 1)
        add_report(view, n, process_id=f"h:{n:02d}:a", dispatched_at=NOW - 100, lags=lags)
    for n in range(3):  # an alive process listed last keeps its history
        add_report(view, 25 + n, process_id="z:1:a", dispatched_at=NOW - 3 + n, lags={0: n, 1: n})
    # The stale processes listed last lost theirs, and the newest report picks the series.
    add_report(view, 28, process_id="h:24:a", dispatched_at=NOW, lags={0: 7, 1: 7})
    snapshot = view.snapshot(now=NOW)
    assert [
        (s.process_id, s.partition, [lag for _, lag in s.points]) for s in snapshot.lag_history
    ] == [
        ("h:24:a", 0, [7]),
        ("h:24:a", 1, [7]),
        ("z:1:a", 0, [0, 1, 2]),
        ("z:1:a", 1, [0, 1, 2]),
    ]
    assert "lag_series" not in snapshot.omitted


def test_renderings(view: StatusView) -> None:
    add_report(view, 0, process_id="h:1:a", dispatched_at=NOW - 2, lags={0: 9, 1: 4})
    report = error_report("e1", occurred_at=NOW - 1, process_id="h:1:a", message="bad\nrecord")
    view.add_record(ERRORS, 0, 0, codecs.encode_error_report(report))
    view.add_record(STATES, 0, 0, codecs.encode_state_report(state_report(dispatched_at=NOW)))
    view.add_record(REPORTS, 0, 1, b"junk")
    snapshot = view.snapshot(now=NOW)
    text = render_text(snapshot)
    assert text.splitlines()[0] == "Processes: 1 alive, 0 stale, 0 stopped (TTL 30 s); total lag 13"
    assert any(line.split()[:3] == ["h:1:a", "alive", "running"] for line in text.splitlines())
    assert any(
        line.split()[:5] == ["h:1:a", "billing", "orders", "1", "4"] for line in text.splitlines()
    )
    assert "ValueError  bad record" in text
    assert "2030-01-01=3 2030-01-02=4" in text
    assert "Skipped records: reports=1" in text
    document = json.loads(json.dumps(snapshot.to_dict()))
    assert document["processes"][0]["alive"] is True
    assert document["processes"][0]["partitions"][1]["lag_hybrid"] == 4
    assert document["skipped"] == {REPORTS: 1}
    metrics = render_prometheus(snapshot).splitlines()
    assert (
        'ferrokafka_partition_lag{process="h:1:a",group="billing",topic="orders",partition="1"} 6'
        in metrics
    )
    assert (
        'ferrokafka_partition_lag_hybrid{process="h:1:a",group="billing",topic="orders",'
        'partition="1"} 4' in metrics
    )
    assert 'ferrokafka_process_memory_bytes{process="h:1:a"} 122880000' in metrics
    assert 'ferrokafka_status_skipped_records_total{topic="reports"} 1' in metrics


def test_prometheus_lists_each_series_once(view: StatusView) -> None:
    """One report listing a partition in two subscription groups, and two topic names that
    differ after their 256th character, gave the same series twice."""
    report = process_report("h:1:a", dispatched_at=NOW, lags={0: 5})
    subscription_groups = report["consumer_groups"]["billing"]["subscription_groups"]
    ((first_id, first),) = subscription_groups.items()
    second = json.loads(json.dumps(first))
    second["id"] = f"{first_id}-again"
    second["topics"]["orders"]["partitions"]["0"].update(lag=40, lag_stored=30)
    subscription_groups[second["id"]] = second
    for name, lag in [("t" * 300 + "a", 1), ("t" * 300 + "b", 2)]:
        topic = json.loads(json.dumps(first["topics"]["orders"]))
        topic["name"] = name
        topic["partitions"]["0"].update(lag=lag, lag_stored=lag)
        first["topics"][name] = topic
    assert view.add_record(REPORTS, 0, 0, packed(report))
    samples = [
        line.rsplit(" ", 1)
        for line in render_prometheus(view.snapshot(now=NOW)).splitlines()
        if not line.startswith("#")
    ]
    series = [labels for labels, _ in samples]
    assert len(series) == len(set(series))
    lags = dict(samples)
    cut = "t" * 255 + "…"
    for name, orders, long in [("lag", "40", "2"), ("lag_hybrid", "30", "2")]:
        labels = 'process="h:1:a",group="billing",topic="{}",partition="0"'
        assert lags[f"ferrokafka_partition_{name}{{{labels.format('orders')}}}"] == orders
        assert lags[f"ferrokafka_partition_{name}{{{labels.format(cut)}}}"] == long


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="ttl must be a finite number of seconds > 0"):
        StatusView(ttl=0)
    with pytest.raises(ValueError, match="max_errors must be a positive int"):
        StatusView(max_errors=0)


def test_cli_status_and_dashboard_options() -> None:
    args = build_parser().parse_args(
        ["status", "--ttl", "5", "--watch", "--json", "--states-topic", "a_states"]
    )
    assert (args.ttl, args.watch, args.json, args.states_topic) == (5.0, 2.0, True, ["a_states"])
    assert (args.reports_topic, args.errors_topic) == (
        "karafka_consumers_reports",
        "karafka_errors",
    )
    args = build_parser().parse_args(["dashboard", "--port", "9999"])
    assert (args.port, args.host, args.states_topic, args.refresh) == (9999, "127.0.0.1", None, 2.0)


# -- hostile records -------------------------------------------------------------------------

HOSTILE = "\x1b[2J\x1b[1;31mPWNED\x1b[0m\r\nfake-line\u202e\x9b"
HOSTILE_SHOWN = "\\x1b[2J\\x1b[1;31mPWNED\\x1b[0m\\r\\nfake-line\\u202e\\x9b"


def test_out_of_range_times_are_skipped_and_counted_never_fatal(view: StatusView) -> None:
    assert add_report(view, 0, process_id="h:1:a", dispatched_at=NOW - 100)
    # The same process again, its time in milliseconds: it must not look alive forever.
    assert not view.add_record(
        REPORTS, 0, 1, packed(process_report("h:1:a", dispatched_at=NOW * 1000))
    )
    for offset, at in enumerate([NOW * 1000, 1e13, -1.0, float("nan"), NOW - 5]):
        report = error_report(f"e{offset}", occurred_at=at, process_id="h:1:a")
        view.add_record(ERRORS, 0, offset, packed(report))
    in_ms = state_report(dispatched_at=NOW)
    in_ms["dispatched_at"] = NOW * 1000
    assert not view.add_record(STATES, 0, 0, packed(in_ms))
    snapshot = view.snapshot(now=NOW)
    (process,) = snapshot.processes
    assert (process.health, process.age) == ("stale", 100.0)
    assert [e.id for e in snapshot.errors] == ["e4"]
    assert snapshot.skipped == {ERRORS: 4, REPORTS: 1, STATES: 1}
    text = render_text(snapshot)  # raised "year 58871 is out of range" before
    assert any(
        line.split()[:4] == ["h:1:a", "stale", "running", "100"] for line in text.split("\n")
    )


def test_a_report_dated_ahead_by_more_than_the_ttl_is_stale_and_says_so(view: StatusView) -> None:
    add_report(view, 0, process_id="h:1:skew", dispatched_at=NOW + 10)
    add_report(view, 1, process_id="h:2:ahead", dispatched_at=NOW + 200)  # within the 5 minutes
    processes = {p.id: p for p in view.snapshot(now=NOW).processes}
    assert (processes["h:1:skew"].health, processes["h:1:skew"].age) == ("alive", 0.0)
    assert (processes["h:2:ahead"].health, processes["h:2:ahead"].age) == ("stale", -200.0)
    assert "in 200 s (clock ahead)" in render_text(view.snapshot(now=NOW))


YEAR_9999 = 253_402_300_000.0


def test_records_dated_too_far_ahead_are_skipped_and_never_displace_genuine_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A flood dated year 9999 (inside 1970 to 9999) filled the room for processes and errors
    for good, and one such report under a genuine id froze that process."""
    view = StatusView(
        reports_topic=REPORTS, errors_topic=ERRORS, max_processes=5, max_errors=5, clock=lambda: NOW
    )
    offset = 0
    for n, at in enumerate([YEAR_9999] * 5 + [NOW + MAX_CLOCK_AHEAD + 1]):
        assert not add_report(view, offset, process_id=f"h:{n}:ghost", dispatched_at=at)
        report = error_report(f"ghost-{n}", occurred_at=at, process_id=f"h:{n}:ghost")
        assert not view.add_record(ERRORS, 0, offset, packed(report))
        offset += 1
    assert not add_report(view, offset, process_id="h:1:real", dispatched_at=YEAR_9999)
    assert not view.add_record(
        STATES, 0, 0, packed(state_report(dispatched_at=YEAR_9999, state="loading"))
    )
    for n in range(3):  # the genuine process keeps reporting; its latest lag wins
        offset += 1
        lags = {0: n}
        assert add_report(view, offset, process_id="h:1:real", dispatched_at=NOW - 3 + n, lags=lags)
    report = error_report("real", occurred_at=NOW - 1, process_id="h:1:real")
    assert view.add_record(ERRORS, 0, offset, packed(report))
    assert view.add_record(STATES, 0, 1, packed(state_report(dispatched_at=NOW - 1)))
    snapshot = view.snapshot(now=NOW)
    assert [(p.id, p.health, p.lag) for p in snapshot.processes] == [("h:1:real", "alive", 2)]
    assert [e.id for e in snapshot.errors] == ["real"]
    assert [s.state for s in snapshot.schedulers] == ["loaded"]
    assert snapshot.skipped == {ERRORS: 6, REPORTS: 7, STATES: 1}
    assert snapshot.omitted == {}
    assert render_text(snapshot).startswith("Processes: 1 alive, 0 stale, 0 stopped")
    assert (
        f"skipped {REPORTS}[0]@0: dispatched_at {YEAR_9999!r} is {YEAR_9999 - NOW:.0f} s ahead of "
        "this reader's clock (more than 300 s of clock skew)" in caplog.text
    )


def test_status_text_escapes_control_characters(
    view: StatusView, caplog: pytest.LogCaptureFixture
) -> None:
    report = process_report(HOSTILE, dispatched_at=NOW, group=HOSTILE, topic=HOSTILE)
    report["process"]["tags"] = [HOSTILE]
    report["process"]["status"] = HOSTILE
    assert view.add_record(REPORTS, 0, 0, packed(report))
    error = error_report(HOSTILE, occurred_at=NOW, process_id=HOSTILE, message=HOSTILE)
    error.update(error_class=HOSTILE, type=HOSTILE)
    assert view.add_record(ERRORS, 0, 0, packed(error))
    # The state is refused by name, and the warning quotes it.
    assert not view.add_record(STATES, 0, 0, packed(state_report(dispatched_at=NOW, state=HOSTILE)))
    text = render_text(view.snapshot(now=NOW))
    controls = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0), 0x202E]} - {"\n"}
    assert not controls & set(text)
    assert not [line for line in text.split("\n") if line.startswith("fake-line")]
    # The process id twice, its status, group and topic, the error's process, type and class;
    # the message is folded on one line.
    assert text.count(HOSTILE_SHOWN) == 8
    assert "PWNED\\x1b[0m fake-line\\u202e\\x9b" in text
    assert "PWNED" in caplog.text
    assert not controls & set(caplog.text)


def test_names_that_only_invisible_characters_tell_apart_are_shown_apart(
    view: StatusView,
) -> None:
    # A fake "billing-1" (zero-width space, BOM, soft hyphen, word joiner, a tag character)
    # must not render exactly as the genuine one beside it.
    genuine = "billing-1"
    fakes = [
        genuine + invisible for invisible in ("\u200b", "\ufeff", "\u00ad", "\u2060", "\U000e0001")
    ]
    for offset, process in enumerate([genuine, *fakes]):
        report = process_report(process, dispatched_at=NOW)
        assert view.add_record(REPORTS, 0, offset, packed(report))
    text = render_text(view.snapshot(now=NOW))
    rows = [line.split()[0] for line in text.splitlines() if line.startswith(genuine)]
    assert len(set(rows)) == 6, rows  # in the processes' and the partitions' lists
    assert {"billing-1\\u200b", "billing-1\\ufeff", "billing-1\\xad", "billing-1\\U000e0001"} < set(
        rows
    )


def test_what_is_kept_of_a_record_is_bounded(view: StatusView) -> None:
    report = process_report("h" * 100_000, dispatched_at=NOW)
    report["process"]["tags"] = ["t" * 350_000] * 20  # 7 MB inflated from 7 KB
    blob = packed(report)
    assert len(blob) < 50_000
    assert view.add_record(REPORTS, 0, 0, blob)
    report["process"]["tags"] = ["t" * 1_000_000] * 60  # 60 MB: a zlib bomb
    assert not view.add_record(REPORTS, 0, 1, packed(report))
    error = error_report("e1", occurred_at=NOW, process_id="p" * 10_000, message="m" * 3_000_000)
    error.update(backtrace="b" * 3_000_000, details={"k" * 500: ["v" * 500] * 2_000})
    assert view.add_record(ERRORS, 0, 0, packed(error))
    snapshot = view.snapshot(now=NOW)
    (process,) = snapshot.processes
    assert (len(process.id), process.id[-1]) == (256, "…")
    assert [len(tag) for tag in process.tags] == [256] * 8
    (shown,) = snapshot.errors
    assert (len(shown.error_message), len(shown.backtrace), len(shown.process_id)) == (
        10_000,
        10_000,
        256,
    )
    assert len(json.dumps(shown.details)) < 40_000
    assert len(json.dumps(snapshot.to_dict())) < 100_000  # 7 MB + 6 MB before
    assert len(render_text(snapshot)) < 10_000


def test_a_snapshot_lists_bounded_processes_partitions_and_lag_series() -> None:
    view = StatusView(reports_topic=REPORTS, max_processes=5, clock=lambda: NOW)
    for offset in range(7):
        report = process_report(
            f"h:{offset}:a", dispatched_at=NOW - offset, lags=dict.fromkeys(range(600), 1)
        )
        view.add_record(REPORTS, 0, offset, codecs.encode_process_report(report))
    snapshot = view.snapshot(now=NOW)
    assert [p.id for p in snapshot.processes] == [f"h:{i}:a" for i in range(5)]
    assert [len(p.partitions) for p in snapshot.processes] == [600, 600, 600, 200, 0]
    assert snapshot.totals.partitions == 3000
    assert len(snapshot.lag_history) == 50
    assert snapshot.omitted == {"processes": 2, "partitions": 1000, "lag_series": 2950}
    assert "Partitions: 2000 (1000 more not listed)" in render_text(snapshot)


def test_stopped_partitions_show_stopped_and_the_chart_a_recent_window_of_alive_ones(
    view: StatusView,
) -> None:
    add_report(view, 0, process_id="h:1:live", dispatched_at=NOW - 20 * 60, lags={0: 50})
    add_report(view, 1, process_id="h:1:live", dispatched_at=NOW - 10, lags={0: 5})
    add_report(view, 2, process_id="h:2:stop", dispatched_at=NOW - 5, status="stopped")
    add_report(view, 3, process_id="h:3:stale", dispatched_at=NOW - 100)
    snapshot = view.snapshot(now=NOW)
    processes = {p.id: p for p in snapshot.processes}
    assert [(p.fetch_state, p.poll_state) for p in processes["h:2:stop"].partitions] == [
        ("stopped", "stopped")
    ]
    assert [p.poll_state for p in processes["h:1:live"].partitions] == ["active"]
    assert [(s.process_id, s.points) for s in snapshot.lag_history] == [
        ("h:1:live", [(NOW - 10, 5)])
    ]
    rows = [line.split() for line in render_text(snapshot).split("\n")]
    assert ["h:2:stop", "billing", "orders", "0", "3"] in [row[:5] for row in rows]
    assert [row[-1] for row in rows if row[:1] == ["h:2:stop"] and row[1] == "billing"] == [
        "stopped"
    ]


@pytest.mark.parametrize(
    "command",
    [
        ["status", "--watch", "1e-9"],
        ["status", "--watch", "0.4"],
        ["status", "--watch", "1e308"],
        ["dashboard", "--refresh", "0.001"],
        ["dashboard", "--refresh", "1e308"],
    ],
)
def test_refresh_intervals_have_sensible_bounds(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(command)
    assert exited.value.code == 2
    assert "expected 0.5 to 86400 seconds" in capsys.readouterr().err
