"""Real-browser fixtures: Debian's chromium driven by Playwright, the app served in-process on a free port.

Never ``playwright install``: the browser is ``/usr/bin/chromium`` (apt package ``chromium``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"


class Served:
    """An app served on 127.0.0.1:<free port> in a thread; ``url(path)`` builds links to it."""

    def __init__(self, dash_app):
        import logging

        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)

        self.app = dash_app
        self.server = make_server("127.0.0.1", 0, dash_app.server, threaded=True)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/") -> str:
        return self.base + path

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join(timeout=5)


@pytest.fixture()
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    ctx.set_default_timeout(120_000)   # a bound for a page that never comes, far above a busy machine's time
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.js_errors = errors  # type: ignore[attr-defined]
    yield pg
    ctx.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def serve(dash_app) -> Served:
    return Served(dash_app)


@pytest.fixture()
def served_factory() -> Iterator:
    started: list[Served] = []

    def make(dash_app) -> Served:
        s = Served(dash_app)
        started.append(s)
        return s

    yield make
    for s in started:
        s.close()
