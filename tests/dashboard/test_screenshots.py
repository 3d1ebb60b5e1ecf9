"""Where the browser tests save their screenshots: a scratch folder, so that a test run
leaves the checkout clean, unless ``$TRIOQUEUE_DASHBOARD_SCREENSHOTS`` names a folder
(``docs/dashboard`` refreshes the pictures of docs/dashboard.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .conftest import DOCS_SCREENSHOTS, SCREENSHOTS_VARIABLE, Broker, screenshots_folder


def fingerprints(folder: Path) -> dict[str, tuple[int, str]]:
    """Each file's modification time and content hash: any rewrite changes one of them."""
    return {path.name: (path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
            for path in sorted(folder.glob("*")) if path.is_file()}


def test_a_screenshot_leaves_the_docs_pictures_alone(start_broker: Callable[..., Broker],
                                                     page: Any, screenshots: Path) -> None:
    before = fingerprints(DOCS_SCREENSHOTS)
    broker = start_broker()
    page.goto(broker.url + "/#/")
    page.wait_for_selector("[data-testid=count-waiting]")
    taken = screenshots / "overview.png"
    page.screenshot(path=str(taken))
    assert taken.stat().st_size > 0
    assert fingerprints(DOCS_SCREENSHOTS) == before


def test_the_environment_names_the_screenshot_folder(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    assert screenshots_folder({}, scratch) == scratch
    assert screenshots_folder({SCREENSHOTS_VARIABLE: "docs/dashboard"}, scratch) == \
        Path("docs/dashboard")
