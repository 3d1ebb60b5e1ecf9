"""A :class:`~trioqueue.client.worker.Worker`'s events: its listeners, and the reports of
errors that have no other way out.

Owned by the worker as ``worker.events``; the puller, the outcomes and the jobs a
processor gets emit through it, so a listener sees every part of the worker alike.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.abc

from .lease import log

EVENTS = frozenset({"active", "completed", "failed", "progress", "error", "drained",
                    "closed"})

Listener = Callable[..., Any]


class WorkerEvents:
    """The listeners of one worker, and the task group their coroutines run in.

    A listener's exception is logged, never propagated: a listener cannot kill the
    worker.
    """

    __slots__ = ("listeners", "name", "nursery")

    def __init__(self, name: str) -> None:
        self.name = name  # the worker's, for the log lines
        self.listeners: dict[str, list[Listener]] = {event: [] for event in EVENTS}
        # Where coroutine listeners run: the worker's listener task group while it runs.
        self.nursery: anyio.abc.TaskGroup | None = None

    def on(self, event: str, fn: Listener) -> Listener:
        if event not in EVENTS:
            raise ValueError(f"unknown worker event: {event!r} (one of {sorted(EVENTS)})")
        self.listeners[event].append(fn)
        return fn

    def off(self, event: str, fn: Listener) -> None:
        listeners = self.listeners.get(event, [])
        if fn in listeners:
            listeners.remove(fn)

    def emit(self, event: str, *args: Any) -> list[Awaitable[Any]]:
        """Call the listeners of ``event``; returns the awaitables that had no nursery
        to run in (only after the worker's nursery is gone)."""
        orphans: list[Awaitable[Any]] = []
        for fn in list(self.listeners[event]):
            try:
                result = fn(*args)
            except Exception:
                log.exception("worker %s: %r listener %r raised", self.name, event, fn)
                continue
            if inspect.isawaitable(result):
                if self.nursery is not None:
                    self.nursery.start_soon(self.await_listener, event, result)
                else:
                    orphans.append(result)
        return orphans

    async def await_listener(self, event: str, awaitable: Awaitable[Any]) -> None:
        try:
            await awaitable
        except Exception:
            log.exception("worker %s: %r listener raised", self.name, event)

    def report(self, exc: BaseException, context: str) -> None:
        """An ``error`` event; with no listener, a log line, so it is never silent."""
        if self.listeners["error"]:
            self.emit("error", exc)
        else:
            log.warning("worker %s: %s failed: %r", self.name, context, exc)
