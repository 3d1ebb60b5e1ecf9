"""The dashboard loads in a real browser."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .conftest import Broker


def test_the_page_loads_with_no_script_error(start_broker: Callable[..., Broker],
                                             page: Any) -> None:
    broker = start_broker()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(broker.url + "/")
    page.wait_for_selector("#app *")
    assert errors == []
