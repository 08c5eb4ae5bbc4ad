"""The dashboard page loads only files shipped in the package (no CDN), and its app routes."""

from __future__ import annotations

import re

from ferrokafka.dashboard import STATIC_DIR, create_app
from ferrokafka.status import StatusReader


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
