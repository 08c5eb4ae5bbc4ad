"""``ferrokafka dashboard``: a small web page over a :class:`~ferrokafka.status.StatusReader`.

The page (``/``) shows the processes (alive, stale, stopped), a lag chart per partition over
the last 15 minutes of the alive processes, recent errors and the scheduler states with their
pending schedules per day, and polls ``/api/status`` (the JSON document of ``ferrokafka status
--json``, bounded as :mod:`ferrokafka.status.hostile` says) every few seconds. It shows what the
records say as text, never as markup, and a section it cannot draw leaves the others drawn. The
same figures are served for Prometheus at ``/metrics``. Everything, including the charting
library (uPlot, MIT, vendored in ``static/``), is served locally: the page needs no CDN.

Needs the ``dashboard`` extra: ``pip install 'ferrokafka[dashboard]'`` (Starlette, uvicorn).

Example:
    >>> from ferrokafka.dashboard import create_app, serve
    >>> from ferrokafka.status import StatusReader
    >>> reader = StatusReader({"bootstrap.servers": "127.0.0.1:9092"})
    >>> with reader:  # doctest: +SKIP
    ...     serve(reader, port=8080)  # serves until Ctrl-C
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

from ferrokafka._extras import missing_extra

try:
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles
except ModuleNotFoundError as e:
    raise missing_extra("ferrokafka.dashboard", "dashboard", e) from e

from ferrokafka.status import StatusReader, render_prometheus

__all__ = ["STATIC_DIR", "create_app", "listen", "serve"]

log = logging.getLogger("ferrokafka.dashboard")

STATIC_DIR = Path(__file__).resolve().parent / "static"
"""The page, its script and style, and the vendored uPlot files (shipped in the wheel)."""

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def create_app(reader: StatusReader, refresh_seconds: float = 2.0) -> Starlette:
    """The dashboard's ASGI app over a started ``reader``; the caller starts and stops it.

    Routes: ``/`` (the page), ``/api/status`` (snapshot JSON, plus ``refresh_seconds`` for
    the page's polling), ``/metrics`` (Prometheus text), ``/static/...``.

    Example:
        >>> import uvicorn
        >>> app = create_app(reader)
        >>> [route.path for route in app.routes]
        ['/', '/api/status', '/metrics', '/static']
        >>> uvicorn.run(app, host="127.0.0.1", port=8080)  # doctest: +SKIP
    """
    if not refresh_seconds > 0:
        raise ValueError(f"refresh_seconds must be > 0, got {refresh_seconds!r}")

    async def page(_request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-store"})

    # A snapshot waits for the view's lock (held while the reader folds a batch in) and
    # grows with the processes shown: it is built on a worker thread, so that the event loop
    # goes on serving the page and the other requests meanwhile.
    def status_document() -> dict[str, object]:
        document = reader.snapshot().to_dict()
        document["refresh_seconds"] = refresh_seconds
        return document

    async def status(_request: Request) -> Response:
        document = await run_in_threadpool(status_document)
        return JSONResponse(document, headers={"Cache-Control": "no-store"})

    async def metrics(_request: Request) -> Response:
        text = await run_in_threadpool(lambda: render_prometheus(reader.snapshot()))
        return PlainTextResponse(text, media_type=PROMETHEUS_CONTENT_TYPE)

    return Starlette(
        routes=[
            Route("/", page),
            Route("/api/status", status),
            Route("/metrics", metrics),
            Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
        ]
    )


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` for :func:`serve`; ``OSError`` when the port is
    in use or the address is not this host's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


def serve(
    reader: StatusReader,
    host: str = "127.0.0.1",
    port: int = 8080,
    refresh_seconds: float = 2.0,
    listening: socket.socket | None = None,
) -> None:
    """Serve the dashboard with uvicorn until Ctrl-C / SIGTERM (``reader`` must be started).

    The port is bound before the URL is logged, so a port in use raises ``OSError`` first;
    ``listening``: a socket from :func:`listen` bound already (``host`` and ``port`` then only
    name it in the log).

    Example:
        >>> serve(reader, port=8080)  # doctest: +SKIP
    """
    try:
        import uvicorn
    except ModuleNotFoundError as e:
        raise missing_extra("ferrokafka.dashboard.serve", "dashboard", e) from e

    if listening is None:
        listening = listen(host, port)
    log.info("dashboard on http://%s:%d/", host, port)
    config = uvicorn.Config(
        create_app(reader, refresh_seconds), log_level="warning", access_log=False
    )
    with listening:
        uvicorn.Server(config).run(sockets=[listening])
