"""``ferrokafka dashboard`` against the real broker, looked at in a real browser: headless Debian
Chromium driven by Playwright. The screenshot is saved under test-artifacts/."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from ferrokafka import Client, NewTopic
from tests import tracking_samples as samples
from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.kafka

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("FERROKAFKA_TEST_ARTIFACTS", ROOT / "test-artifacts"))
PROCESS = "dash-host:4242:ab12cd"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body.decode()


def status_document(base: str) -> dict[str, Any] | None:
    try:
        document: dict[str, Any] = json.loads(get(f"{base}/api/status"))
    except (urllib.error.URLError, ConnectionError):
        return None  # not listening yet
    return document


@contextlib.contextmanager
def dashboard_over(
    bootstrap: str, client: Client, fill: Callable[[str, str, str], None]
) -> Iterator[tuple[str, list[str]]]:
    """A running dashboard over fresh tracking topics that ``fill(reports, errors, states)``
    wrote to; yields its URL and the topics."""
    suffix = uuid.uuid4().hex[:8]
    reports, errors, states = (
        f"test-dash-reports-{suffix}",
        f"test-dash-errors-{suffix}",
        f"test-dash-{suffix}_states",
    )
    client.create_topics(
        [NewTopic(reports, 1), NewTopic(errors, 1), NewTopic(states, 1)], timeout=30.0
    )
    fill(reports, errors, states)
    port = free_port()
    command = [
        *(sys.executable, "-m", "ferrokafka", "dashboard", "--bootstrap-servers", bootstrap),
        *("--reports-topic", reports, "--errors-topic", errors, "--states-topic", states),
        *("--port", str(port), "--refresh", "0.5"),
    ]
    base = f"http://127.0.0.1:{port}"
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as server:
        try:
            wait_until(
                lambda: (
                    server.poll() is None
                    and (document := status_document(base)) is not None
                    and document["caught_up"]
                ),
                60.0,
                "the dashboard to serve a caught-up view",
            )
            yield base, [reports, errors, states]
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=30) == 0
        finally:
            server.kill()
            client.delete_topics([reports, errors, states])


@pytest.fixture
def dashboard(kafka_bootstrap: str, kafka_client: Client) -> Iterator[tuple[str, list[str]]]:
    """A running dashboard over a process's reports, an error and a scheduler state."""

    def fill(reports: str, errors: str, states: str) -> None:
        now = time.time()
        for step, lag in enumerate([120, 80, 35]):
            report = samples.process_report(
                PROCESS, dispatched_at=now - 6 + 2 * step, lags={0: lag, 1: 5}
            )
            samples.send_process_report(kafka_client, reports, report)
        samples.send_error_report(
            kafka_client,
            errors,
            samples.error_report(
                "dash-error-1", occurred_at=now - 1, process_id=PROCESS, message="bad row"
            ),
        )
        samples.send_state_report(
            kafka_client, states, samples.state_report(dispatched_at=now), partition=0
        )

    with dashboard_over(kafka_bootstrap, kafka_client, fill) as running:
        yield running


def launched(playwright: Playwright) -> Browser:
    return playwright.chromium.launch(
        executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
    )


def lag_chart_ready(page: Page) -> bool:
    """The chart has a series with a lag above 0 and its canvas has drawn pixels."""
    ready: bool = page.evaluate(
        """() => {
            const chart = window.ferrokafkaDashboard && window.ferrokafkaDashboard.chart;
            if (!chart || chart.data.length < 2) return false;
            const positive = chart.data.slice(1).some((ys) => ys.some((y) => y > 0));
            const canvas = document.querySelector("#lag-chart canvas");
            const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height);
            let drawn = 0;
            for (let i = 3; i < pixels.data.length; i += 4) if (pixels.data[i] > 0) drawn++;
            return positive && drawn > 500;
        }"""
    )
    return ready


def test_dashboard_in_a_real_browser(
    dashboard: tuple[str, list[str]], kafka_client: Client
) -> None:
    base, (reports, _errors, states) = dashboard
    metrics = get(f"{base}/metrics").splitlines()
    # The lag to the committed offset, which trails the stored one by 2 in these reports.
    assert (
        f'ferrokafka_partition_lag{{process="{PROCESS}",group="billing",topic="orders",'
        'partition="0"} 37' in metrics
    )
    # Karafka Web's lag, to the stored offset, as the process's total lag sums it.
    assert (
        f'ferrokafka_partition_lag_hybrid{{process="{PROCESS}",group="billing",topic="orders",'
        'partition="0"} 35' in metrics
    )
    with sync_playwright() as playwright:
        browser = launched(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1100})
            page.goto(base)
            row = page.locator(f'#processes tr[data-process-id="{PROCESS}"]')
            row.wait_for(timeout=20_000)
            assert row.get_attribute("data-health") == "alive"
            assert row.locator("td").nth(8).inner_text() == "40"  # total lag 35 + 5
            # Partition 0: Karafka Web's lag, as the total sums it, then the committed one.
            first = page.locator("#partitions tbody tr").first.locator("td")
            assert [first.nth(n).inner_text() for n in (3, 4, 5)] == ["0", "35", "37"]
            page.wait_for_function("() => window.ferrokafkaDashboard.chart !== null")
            wait_until(lambda: lag_chart_ready(page), 20.0, "a drawn lag chart")
            series = page.evaluate(
                "() => window.ferrokafkaDashboard.chart.series.map(s => s.label)"
            )
            assert series == [
                "time",
                f"orders[0] billing @ {PROCESS}",
                f"orders[1] billing @ {PROCESS}",
            ]
            assert page.evaluate("() => window.ferrokafkaDashboard.chart.data[1]") == [120, 80, 35]
            assert (
                "bad row" in page.locator('#errors tr[data-error-id="dash-error-1"]').inner_text()
            )
            scheduler = page.locator("#schedulers tbody tr").first.inner_text()
            assert states.removesuffix("_states") in scheduler
            assert "2030-01-01: 3, 2030-01-02: 4" in scheduler

            # Live refresh: a new report shows up without reloading the page.
            report = samples.process_report(PROCESS, dispatched_at=time.time(), lags={0: 7, 1: 5})
            samples.send_process_report(kafka_client, reports, report)
            page.wait_for_function(
                "() => window.ferrokafkaDashboard.chart.data[1].at(-1) === 7", timeout=20_000
            )
            assert row.locator("td").nth(8).inner_text() == "12"

            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            screenshot = ARTIFACTS / "dashboard.png"
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    assert screenshot.stat().st_size > 10_000
    print(f"dashboard screenshot: {screenshot}")


def test_dashboard_under_hostile_records(kafka_bootstrap: str, kafka_client: Client) -> None:
    """Records no ferrokafka reporter writes, sent with confluent-kafka: times in milliseconds
    and at 1e13, markup in a process id, 7 MB of tags and a 3 MB error message inflated from a
    few KB, a 60 MB zlib bomb, a stopped process and a report from 20 minutes ago."""
    hostile_id = '<img src=x onerror="window.pwned=1">:1:a'
    now = time.time()

    def fill(reports: str, errors: str, _states: str) -> None:
        big = samples.process_report(PROCESS, dispatched_at=now - 2, lags={0: 35, 1: 5})
        big["process"]["tags"] = ["t" * 350_000] * 20
        bomb = samples.process_report(PROCESS, dispatched_at=now - 1)
        bomb["process"]["tags"] = ["t" * 1_000_000] * 60
        samples.produce_unchecked(
            kafka_bootstrap,
            reports,
            [
                samples.process_report(PROCESS, dispatched_at=now - 1200, lags={0: 999}),
                samples.process_report(PROCESS, dispatched_at=now - 4, lags={0: 80, 1: 5}),
                big,
                bomb,
                samples.process_report(PROCESS, dispatched_at=now * 1000, lags={0: 1}),
                samples.process_report(hostile_id, dispatched_at=now - 1, lags={2: 4}),
                samples.process_report("dash-stop:1:aa", dispatched_at=now - 1, status="stopped"),
            ],
        )
        long_message = samples.error_report("dash-long", occurred_at=now - 3, process_id=PROCESS)
        long_message["error_message"] = "m" * 3_000_000
        samples.produce_unchecked(
            kafka_bootstrap,
            errors,
            [
                long_message,
                samples.error_report("dash-ms", occurred_at=now * 1000, process_id=PROCESS),
                samples.error_report("dash-1e13", occurred_at=1e13, process_id=PROCESS),
            ],
        )

    with dashboard_over(kafka_bootstrap, kafka_client, fill) as (base, (reports, errors, _)):
        served = get(f"{base}/api/status")
        assert len(served) < 100_000  # 73 MB of tags and message before
        document = json.loads(served)
        assert document["skipped"] == {errors: 2, reports: 2}  # the times, the bomb
        live = {p["id"]: p for p in document["processes"]}
        assert (live[PROCESS]["health"], live[PROCESS]["age"] > 1) == ("alive", True)
        assert len(live[PROCESS]["tags"]) == 8
        assert [p["poll_state"] for p in live["dash-stop:1:aa"]["partitions"]] == ["stopped"]
        with sync_playwright() as playwright:
            browser = launched(playwright)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 1100})
                page.goto(base)
                page.wait_for_function(
                    "() => window.ferrokafkaDashboard.updates >= 2", timeout=20_000
                )
                state = page.evaluate("() => window.ferrokafkaDashboard")
                assert state["error"] is None
                assert page.evaluate("() => window.pwned") is None
                assert page.locator("#errors tbody tr").count() == 1
                message = page.locator('#errors tr[data-error-id="dash-long"] td.message')
                assert len(message.inner_text()) == 500
                ids = page.locator("#processes tbody td:first-child").all_inner_texts()
                assert hostile_id in ids
                # The chart: the last 15 minutes of the processes alive, nothing else.
                series = page.evaluate(
                    "() => window.ferrokafkaDashboard.chart.series.map(s => s.label)"
                )
                assert series == [
                    "time",
                    f"orders[2] billing @ {hostile_id}",
                    f"orders[0] billing @ {PROCESS}",
                    f"orders[1] billing @ {PROCESS}",
                ]
                times = page.evaluate("() => window.ferrokafkaDashboard.chart.data[0]")
                assert min(times) >= now - 900
            finally:
                browser.close()
