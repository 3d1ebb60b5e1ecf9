"""Waiting for a condition with a deadline: the tests' replacement for a sleep that
stands in for synchronisation. The condition is polled; a timeout fails naming what was
awaited, so a hang becomes a clear failure."""

from __future__ import annotations

from collections.abc import Callable

import trio

__all__ = ["wait_until"]


async def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = 5.0,
                     poll_s: float = 0.01) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = trio.current_time() + timeout_s
    while not predicate():
        if trio.current_time() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await trio.sleep(poll_s)
