"""A :class:`~trioqueue.client.worker.Worker`'s events: its listeners, and the reports of
errors that have no other way out.

Bound as the worker's methods (``Worker.on = worker_events.on``...), as :mod:`.pulling`
and :mod:`.outcomes` are.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from .lease import log

if TYPE_CHECKING:
    from .worker import Listener, Worker

EVENTS = frozenset({"active", "completed", "failed", "progress", "error", "drained",
                    "closed"})


def on(w: Worker, event: str, fn: Listener) -> Listener:
    """Call ``fn`` on ``event``; returns ``fn`` (so it can be a decorator's target)."""
    if event not in EVENTS:
        raise ValueError(f"unknown worker event: {event!r} (one of {sorted(EVENTS)})")
    w._listeners[event].append(fn)
    return fn


def off(w: Worker, event: str, fn: Listener) -> None:
    listeners = w._listeners.get(event, [])
    if fn in listeners:
        listeners.remove(fn)


def _emit(w: Worker, event: str, *args: Any) -> list[Awaitable[Any]]:
    """Call the listeners of ``event``; returns the awaitables that had no nursery
    to run in (only after the worker's nursery is gone)."""
    orphans: list[Awaitable[Any]] = []
    for fn in list(w._listeners[event]):
        try:
            result = fn(*args)
        except Exception:
            log.exception("worker %s: %r listener %r raised", w.name, event, fn)
            continue
        if inspect.isawaitable(result):
            if w._listener_nursery is not None:
                w._listener_nursery.start_soon(w._await_listener, event, result)
            else:
                orphans.append(result)
    return orphans


async def _await_listener(w: Worker, event: str, awaitable: Awaitable[Any]) -> None:
    try:
        await awaitable
    except Exception:
        log.exception("worker %s: %r listener raised", w.name, event)


def _report(w: Worker, exc: BaseException, context: str) -> None:
    """An ``error`` event; with no listener, a log line, so it is never silent."""
    if w._listeners["error"]:
        w._emit("error", exc)
    else:
        log.warning("worker %s: %s failed: %r", w.name, context, exc)

