"""``ferrokafka dashboard`` against the real broker, looked at in a real browser: headless Debian
Chromium driven by Playwright. The screenshot is saved under test-artifacts/."""

from __future__ import annotations

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, sync_playwright

from ferrokafka import Client, NewTopic
from tests.conftest import ROOT, wait_until
from tests.tracking_samples import (
    error_report,
    process_report,
    send_error_report,
    send_process_report,
    send_state_report,
    state_report,
)

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


@pytest.fixture
def dashboard(kafka_bootstrap: str, kafka_client: Client) -> Iterator[tuple[str, list[str]]]:
    """A running dashboard over fresh tracking topics; yields its URL and the topics."""
    suffix = uuid.uuid4().hex[:8]
    reports, errors, states = (
        f"test-dash-reports-{suffix}",
        f"test-dash-errors-{suffix}",
        f"test-dash-{suffix}_states",
    )
    kafka_client.create_topics(
        [NewTopic(reports, 1), NewTopic(errors, 1), NewTopic(states, 1)], timeout=30.0
    )
    now = time.time()
    for step, lag in enumerate([120, 80, 35]):
        report = process_report(PROCESS, dispatched_at=now - 6 + 2 * step, lags={0: lag, 1: 5})
        send_process_report(kafka_client, reports, report)
    send_error_report(
        kafka_client,
        errors,
        error_report("dash-error-1", occurred_at=now - 1, process_id=PROCESS, message="bad row"),
    )
    send_state_report(kafka_client, states, state_report(dispatched_at=now), partition=0)
    port = free_port()
    command = [
        *(sys.executable, "-m", "ferrokafka", "dashboard", "--bootstrap-servers", kafka_bootstrap),
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
            kafka_client.delete_topics([reports, errors, states])


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
    assert (
        f'ferrokafka_partition_lag{{process="{PROCESS}",group="billing",topic="orders",'
        'partition="0"} 35' in metrics
    )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1100})
            page.goto(base)
            row = page.locator(f'#processes tr[data-process-id="{PROCESS}"]')
            row.wait_for(timeout=20_000)
            assert row.get_attribute("data-health") == "alive"
            assert row.locator("td").nth(8).inner_text() == "40"  # total lag 35 + 5
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
            report = process_report(PROCESS, dispatched_at=time.time(), lags={0: 7, 1: 5})
            send_process_report(kafka_client, reports, report)
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
