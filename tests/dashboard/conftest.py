"""Browser tests of the dashboard: headless Chromium (Debian's ``chromium`` package)
driven by Playwright's Python package, against a broker in a thread of its own.

Nothing here downloads a browser: the executable is ``$TRIOQUEUE_CHROMIUM``, else
``chromium`` or ``chromium-browser`` on the PATH; without one (or without the
``playwright`` package) every test here is skipped with the reason. CI installs both
(``.ci/run``); on a machine of your own: ``apt-get install chromium`` (Debian) and
``pip install -e '.[test]'``.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from trioqueue.config import Config
from trioqueue.server.run import Server

# The pictures of docs/dashboard.md, refreshed on request only (``SCREENSHOTS_VARIABLE``).
DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "dashboard"
SCREENSHOTS_VARIABLE = "TRIOQUEUE_DASHBOARD_SCREENSHOTS"


def screenshots_folder(environ: Mapping[str, str], scratch: Path) -> Path:
    """The folder the browser tests save their screenshots in: the one the environment
    names (``docs/dashboard`` refreshes the docs' pictures), else a scratch folder, so
    that running the tests leaves the checkout as it was."""
    named = environ.get(SCREENSHOTS_VARIABLE)
    return Path(named) if named else scratch


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's screenshot folder (``screenshots_folder``), created."""
    folder = screenshots_folder(os.environ, tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def chromium_executable() -> str | None:
    configured = os.environ.get("TRIOQUEUE_CHROMIUM")
    if configured:
        return configured
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    executable = chromium_executable()
    if executable is None:
        pytest.skip("no Chromium: install Debian's chromium package (apt-get install "
                    "chromium) or set TRIOQUEUE_CHROMIUM to run the dashboard's browser "
                    "tests")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is missing: pip install -e '.[test]'")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True,
                                              args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(10_000)
    try:
        yield context.new_page()
    finally:
        context.close()


@dataclass
class Broker:
    """A running broker: its page's address, its ports, and REST and TCP helpers."""

    url: str
    tcp_port: int
    token: str | None
    http: httpx.Client

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """A REST call with the broker's token; the reply's JSON (status 2xx asserted)."""
        response = self.http.request(method, path, **kwargs)
        assert response.is_success, (response.status_code, response.text)
        return response.json()


@pytest.fixture
def start_broker() -> Iterator[Callable[..., Broker]]:
    """Start a broker (memory store; ``Config`` overrides) in a thread; stopped after
    the test."""
    started: list[tuple[threading.Thread, Callable[[], None], httpx.Client]] = []

    def start(**overrides: Any) -> Broker:
        ready = threading.Event()
        holder: dict[str, Any] = {}

        async def main() -> None:
            server = Server(Config(host="127.0.0.1", tcp_port=0, ws_port=0, memory=True,
                                   **overrides))
            async with trio.open_nursery() as nursery:
                await nursery.start(server.run)
                stop = trio.Event()
                holder.update(server=server, token=trio.lowlevel.current_trio_token(),
                              stop=stop.set)
                ready.set()
                await stop.wait()
                server.stop()

        thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
        thread.start()
        assert ready.wait(10), "the broker did not start"
        server: Server = holder["server"]
        tokens = overrides.get("auth_tokens") or []
        token = tokens[0] if tokens else None
        url = f"http://127.0.0.1:{server.ws_port}"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        http = httpx.Client(base_url=url, headers=headers, timeout=10)

        def stop() -> None:
            trio.from_thread.run_sync(holder["stop"], trio_token=holder["token"])

        started.append((thread, stop, http))
        assert server.tcp_port is not None
        return Broker(url, server.tcp_port, token, http)

    yield start
    for thread, stop, http in started:
        http.close()
        stop()
        thread.join(10)
