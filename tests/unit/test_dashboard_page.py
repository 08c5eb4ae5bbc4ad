"""The dashboard page loads only files shipped in the package (no CDN), its app routes, and its
script in headless Debian Chromium (Playwright) over hostile documents."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, Route, sync_playwright
from starlette.types import ASGIApp, Message

from ferrokafka import codecs
from ferrokafka.dashboard import STATIC_DIR, create_app
from ferrokafka.status import StatusReader, StatusSnapshot, StatusView
from tests.tracking_samples import error_report, process_report, state_report

CHROMIUM = "/usr/bin/chromium"
NOW = 1_800_000_000.0


def test_page_assets_are_local_files_of_the_package() -> None:
    page = (STATIC_DIR / "index.html").read_text()
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert sorted(assets) == [
        "/static/dashboard.css",
        "/static/dashboard.js",
        "/static/uPlot.iife.min.js",
        "/static/uPlot.min.css",
    ]
    for asset in assets:
        assert (STATIC_DIR / asset.removeprefix("/static/")).stat().st_size > 0
    assert "MIT License" in (STATIC_DIR / "uPlot.LICENSE").read_text()


def test_app_routes() -> None:
    app = create_app(StatusReader({"bootstrap.servers": "127.0.0.1:9"}))
    paths = {getattr(route, "path", None) for route in app.routes}
    assert {"/", "/api/status", "/metrics", "/static"} <= paths


async def get(app: ASGIApp, path: str) -> int:
    """The status of a GET of ``path`` from the ASGI ``app``."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [],
        "server": ("dashboard.test", 80),
        "client": ("127.0.0.1", 1),
    }
    sent: list[Message] = []
    requested, answered = False, asyncio.Event()

    async def receive() -> Message:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await answered.wait()  # the client goes away once it has the whole answer
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            answered.set()

    await app(scope, receive, send)
    status: int = sent[0]["status"]
    return status


@pytest.mark.parametrize("path", ["/api/status", "/metrics"])
def test_a_slow_snapshot_leaves_the_server_serving(path: str) -> None:
    """The snapshot was built on the event loop: while it waited for the view's lock, or
    went through many processes, every request to the dashboard waited."""
    reader = StatusReader({"bootstrap.servers": "127.0.0.1:9"})
    page_served = threading.Event()
    order: list[str] = []

    def slow_snapshot(now: float | None = None) -> StatusSnapshot:
        page_served.wait(timeout=5.0)
        order.append("snapshot")
        return StatusView().snapshot(now)

    reader.snapshot = slow_snapshot  # type: ignore[method-assign]
    app = create_app(reader)

    async def meanwhile() -> list[int]:
        slow = asyncio.create_task(get(app, path))
        served = await get(app, "/")
        order.append("page")
        page_served.set()
        return [served, await slow]

    assert asyncio.run(meanwhile()) == [200, 200]
    assert order == ["page", "snapshot"]


def served_page(page: Page, document: dict[str, Any]) -> None:
    """Opens the dashboard page from the package's files, its /api/status answering
    ``document`` (the page's script on its own, without a server or broker)."""

    def answer(route: Route) -> None:
        path = urlsplit(route.request.url).path
        if path == "/api/status":
            route.fulfill(json=document)
        else:
            name = "index.html" if path == "/" else path.removeprefix("/static/")
            route.fulfill(path=STATIC_DIR / name)

    page.route("http://dashboard.test/**", answer)
    page.goto("http://dashboard.test/")
    page.wait_for_function("() => window.ferrokafkaDashboard.updates > 0", timeout=10_000)


def hostile_document() -> dict[str, Any]:
    """What an unchecking server served: errors dated in milliseconds and at 1e13 (newest
    first, so they come first), a process dated an hour ahead, and markup in the strings."""
    view = StatusView(reports_topic="reports", errors_topic="errors", clock=lambda: NOW)
    report = process_report('<img src=x onerror="window.pwned=1">:1:a', dispatched_at=NOW)
    view.add_record("reports", 0, 0, codecs.encode_process_report(report))
    error = error_report("e-ok", occurred_at=NOW - 1, process_id="h:1:a", message="<b>bold</b>")
    view.add_record("errors", 0, 0, codecs.encode_error_report(error))
    view.add_record("s_states", 0, 0, codecs.encode_state_report(state_report(dispatched_at=NOW)))
    document = view.snapshot(now=NOW).to_dict()
    document["refresh_seconds"] = 60.0
    document["processes"][0]["age"] = -3600.0
    for error_id, at in [("e-ms", NOW * 1000), ("e-1e13", 1e13)]:
        document["errors"].insert(0, dict(document["errors"][0], id=error_id, occurred_at=at))
    return document


def test_page_shows_hostile_documents_as_text_and_every_section_it_can(
    browser: Browser,
) -> None:
    page = browser.new_page()
    document = hostile_document()
    served_page(page, document)
    state = page.evaluate("() => window.ferrokafkaDashboard")
    assert (state["error"], page.evaluate("() => window.pwned")) == (None, None)
    for error_id in ["e-ms", "e-1e13"]:
        when = page.locator(f'#errors tr[data-error-id="{error_id}"] td').first.inner_text()
        assert when == "invalid time"
    assert page.locator('#errors tr[data-error-id="e-ok"]').inner_text().endswith("<b>bold</b>")
    process = page.locator("#processes tbody tr").first
    assert process.locator("td").first.inner_text() == ('<img src=x onerror="window.pwned=1">:1:a')
    assert process.locator("td").nth(3).inner_text() == "in 3600 s (clock ahead)"
    assert page.locator("#schedulers tbody tr").count() == 1

    # A section that cannot be drawn leaves the others drawn and says which one failed.
    document["schedulers"][0]["daily"] = None
    page = browser.new_page()
    served_page(page, document)
    state = page.evaluate("() => window.ferrokafkaDashboard")
    assert state["error"].startswith("renderSchedulers: TypeError")
    assert page.locator("#errors tbody tr").count() == 3
    assert "failed: renderSchedulers" in page.locator("#updated").inner_text()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser
        finally:
            browser.close()
