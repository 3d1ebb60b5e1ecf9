"""QueueEvents: the live events of one queue, as an async iterator and as callbacks.

::

    async with QueueEvents("emails", conn) as events:
        events.on("completed", lambda event: print(event.job_id, event.return_value))
        async for event in events:
            ...

Entering the block subscribes (``SubscribeEvents`` on a channel of its own, see
:meth:`~trioqueue.client.connection.Connection.subscribe`) and returns once the broker
acknowledged, so no event of a change made after ``__aenter__`` is missed. A dispatcher
task then turns each event map into a :class:`QueueEvent` and hands it, in this order,
to the waits watching its job (:meth:`QueueEvents.watch`, used by
``wait_until_finished``), to the iteration buffer, and to the callback buffer.

Names are BullMQ's: ``pushed`` arrives as ``waiting`` and ``pulled`` as ``active``;
the others keep the broker's name. Two names are ours and say "you may have missed
events": ``reconnected`` (the broker went away and the stream subscribed again; the
broker keeps no events for an absent subscriber) and ``overflow`` (a buffer here, or
the broker's outbox for this subscriber, dropped events).

Buffers, and what happens when a reader is slow: the dispatcher never waits for a
reader, so that one slow consumer (an iterator nobody drains, a callback that sleeps)
cannot delay the waits that depend on the stream. Each buffer (the iteration buffer,
the callback buffer, each watch) holds at most ``max_buffered`` events; past that the
**oldest** event is dropped and counted (:attr:`QueueEvents.dropped`), and the reader
gets one synthetic ``overflow`` event (``raw["dropped"]`` = how many) before the events
that were kept. An iterator that starts late therefore sees at most the last
``max_buffered`` events (and an ``overflow`` event if more arrived), never an unbounded
backlog.
"""

from __future__ import annotations

import inspect
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from ..core.errors import Refused
from ..core.fields import queue_name as check_queue_name
from .errors import ValidationError

if TYPE_CHECKING:
    from .connection import Connection, EventStream

log = logging.getLogger("trioqueue.client")

# The broker's eventType -> BullMQ's event name (anything else keeps its name).
_NAMES = {"pushed": "waiting", "pulled": "active"}

#: Every name :meth:`QueueEvents.on` accepts.
EVENT_NAMES = frozenset({
    "waiting", "active", "completed", "failed", "progress", "stalled", "removed",
    "delayed", "duplicated", "retried", "waiting-children", "drained", "paused",
    "resumed", "reconnected", "overflow",
})

# What a watch on one job needs: its outcome, its disappearance, and the signals that
# events may have been missed (those reach every watch).
_WATCHED = frozenset({"completed", "failed", "removed", "stalled"})
_BROADCAST = frozenset({"reconnected", "overflow"})

DEFAULT_MAX_BUFFERED = 10_000


@dataclass(frozen=True)
class QueueEvent:
    """One event of a queue, in BullMQ's names.

    ``job_id`` is None for queue-wide events (``drained``, ``paused``, ``resumed``,
    ``reconnected``, ``overflow``). Payload fields are set for the events that carry
    them: ``return_value`` (completed), ``failed_reason`` and ``terminal`` (failed:
    False while a retry is pending; a missing flag counts as terminal), ``data`` (the
    job's data on failed, ``{progress, message}`` on progress, ``{stallCount,
    action}`` on stalled), ``progress`` (progress), ``prev`` (removed, retried,
    waiting after a move), ``delay`` (delayed, ms). ``raw`` is the map the broker sent.
    """

    name: str
    job_id: str | None = None
    queue: str | None = None
    timestamp: float | None = None
    return_value: Any = None
    failed_reason: str | None = None
    terminal: bool | None = None
    data: Any = None
    progress: Any = None
    prev: str | None = None
    delay: float | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_raw(cls, raw: dict[str, Any]) -> QueueEvent:
        """The event for a broker event map (``{eventType, queue, jobId, ...}``)."""
        kind = str(raw.get("eventType", ""))
        name = _NAMES.get(kind, kind)
        job_id = raw.get("jobId")
        timestamp = raw.get("timestamp")
        delay = raw.get("delay")
        error = raw.get("error")
        prev = raw.get("prev")
        return cls(
            name=name,
            job_id=str(job_id) if job_id not in (None, "") else None,
            queue=raw.get("queue"),
            timestamp=float(timestamp) if isinstance(timestamp, (int, float)) else None,
            return_value=raw.get("data") if name == "completed" else None,
            failed_reason=None if error is None else str(error),
            terminal=(raw.get("terminal") is not False) if name == "failed" else None,
            data=None if name == "completed" else raw.get("data"),
            progress=raw.get("progress"),
            prev=None if prev is None else str(prev),
            delay=float(delay) if isinstance(delay, (int, float)) else None,
            raw=raw,
        )


def _overflow(queue: str, dropped: int) -> QueueEvent:
    return QueueEvent(name="overflow", queue=queue,
                      raw={"eventType": "overflow", "queue": queue, "dropped": dropped})


class _Buffer:
    """A bounded FIFO the dispatcher puts into without ever waiting.

    Full, it drops its oldest event; the reader then gets one ``overflow`` event
    (before the kept ones) saying how many were lost. ``get`` returns None once the
    buffer is closed and empty. Readers wait on one shared event, made by the first
    of them and replaced at each wake-up, so that several can wait at once without one
    of them missing it (and a buffer can be made outside an event loop).
    """

    def __init__(self, queue: str, size: int) -> None:
        self._queue = queue
        self._size = size
        self._items: deque[QueueEvent] = deque()
        self._wake: anyio.Event | None = None
        self._unreported = 0
        self.dropped = 0
        self.closed = False

    def put(self, event: QueueEvent) -> None:
        if self.closed:
            return
        if len(self._items) >= self._size:
            self._items.popleft()
            self._unreported += 1
            self.dropped += 1
        self._items.append(event)
        self._wake_readers()

    def close(self) -> None:
        self.closed = True
        self._wake_readers()

    def _wake_readers(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.set()

    async def get(self) -> QueueEvent | None:
        # Cancel-safe: nothing is taken out before the last checkpoint.
        while True:
            if self._unreported:
                dropped, self._unreported = self._unreported, 0
                return _overflow(self._queue, dropped)
            if self._items:
                return self._items.popleft()
            if self.closed:
                return None
            if self._wake is None:
                self._wake = anyio.Event()
            await self._wake.wait()


class JobWatch:
    """Interest in one job's outcome, registered with a :class:`QueueEvents`.

    Receives the job's ``completed``, ``failed``, ``removed`` and ``stalled`` events,
    plus every ``reconnected`` and ``overflow`` (a watcher must then re-read the job,
    since its event may be among those missed). :meth:`next` returns None once the
    QueueEvents has closed: a wait then carries on without events.
    """

    def __init__(self, job_id: str, buffer: _Buffer) -> None:
        self.job_id = job_id
        self._buffer = buffer

    async def next(self) -> QueueEvent | None:
        return await self._buffer.get()

    @property
    def closed(self) -> bool:
        return self._buffer.closed


Callback = Callable[[QueueEvent], Any]


class QueueEvents:
    """The events of queue ``queue_name`` on ``connection``; use as ``async with``.

    See the module documentation for naming, buffering and overflow. One iterator at
    a time is the intended use (several would share the events between them); for
    fan-out register callbacks with :meth:`on`.
    """

    def __init__(self, queue_name: str, connection: Connection, *,
                 max_buffered: int = DEFAULT_MAX_BUFFERED) -> None:
        try:
            check_queue_name(queue_name)
        except Refused as exc:
            raise ValidationError(exc.message) from None
        if max_buffered < 1:
            raise ValueError("max_buffered must be at least 1")
        self.name = queue_name
        self.connection = connection
        self.max_buffered = max_buffered
        self._listeners: dict[str, list[Callback]] = {}
        self._watches: dict[str, set[_Buffer]] = {}
        self._events = _Buffer(queue_name, max_buffered)
        self._callbacks = _Buffer(queue_name, max_buffered)
        self._lifetime: AbstractAsyncContextManager[QueueEvents] | None = None
        self.running = False
        self.closed = False

    def __repr__(self) -> str:
        return f"<QueueEvents {self.name}>"

    @property
    def dropped(self) -> int:
        """Events dropped so far by the iteration and callback buffers (overflow)."""
        return self._events.dropped + self._callbacks.dropped

    # ------------------------------------------------------------------ lifetime

    async def __aenter__(self) -> QueueEvents:
        if self._lifetime is not None:
            raise RuntimeError("a QueueEvents can be entered only once")
        self._lifetime = self._run()
        return await self._lifetime.__aenter__()

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> bool | None:
        assert self._lifetime is not None
        return await self._lifetime.__aexit__(exc_type, exc, tb)

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[QueueEvents]:
        # The subscription (with its reconnecting reader) encloses the dispatcher, so
        # the dispatcher is cancelled first and never reads a half-closed stream.
        async with self.connection.subscribe(self.name) as stream:
            async with anyio.create_task_group() as nursery:
                nursery.start_soon(self._dispatch, stream)
                nursery.start_soon(self._run_callbacks)
                self.running = True
                try:
                    yield self
                finally:
                    # The block's end is the subscription's end: events still queued
                    # for callbacks are not delivered, and a callback still running is
                    # cancelled, so leaving the block never waits on user code. Buffers
                    # are closed before the cancel so that iterators end (after what
                    # they already buffered) and waits fall back to WaitJob holds
                    # instead of waiting for events that will never come.
                    self.running = False
                    self.closed = True
                    self._close_buffers()
                    nursery.cancel_scope.cancel()

    def _close_buffers(self) -> None:
        self._events.close()
        self._callbacks.close()
        for buffers in self._watches.values():
            for buffer in buffers:
                buffer.close()

    async def _dispatch(self, stream: EventStream) -> None:
        try:
            async for raw in stream:
                self._deliver(QueueEvent.from_raw(raw))
        finally:
            # The stream only ends when the subscription does; either way no more
            # events come, and readers must not wait for them.
            self.closed = True
            self._close_buffers()

    def _deliver(self, event: QueueEvent) -> None:
        """Hand one event to its watchers, the iterator and the callbacks; never waits."""
        if event.name in _BROADCAST:
            for buffers in self._watches.values():
                for buffer in buffers:
                    buffer.put(event)
        elif event.name in _WATCHED and event.job_id is not None:
            for buffer in self._watches.get(event.job_id, ()):
                buffer.put(event)
        self._events.put(event)
        if self._listeners.get(event.name):
            self._callbacks.put(event)

    async def _run_callbacks(self) -> None:
        """Call the listeners of each event in order, one event at a time.

        Sync callbacks are called, async ones awaited, so listeners see events in
        the order they happened. A callback that raises is logged and the others
        still run: listeners observe the stream, and one broken listener must not
        stop the stream the waits depend on.
        """
        while True:
            event = await self._callbacks.get()
            if event is None:
                return
            for callback in list(self._listeners.get(event.name, ())):
                try:
                    result = callback(event)
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    log.exception("QueueEvents %s: %r listener failed", self.name,
                                  event.name)

    # ------------------------------------------------------------------ listeners

    def on(self, name: str, callback: Callback) -> Callback:
        """Call ``callback(event)`` (sync, or async and awaited) for each ``name`` event.

        Returns ``callback`` (handy for a later :meth:`off`). An unknown name is
        refused: a typo must not silently listen to nothing.
        """
        if name not in EVENT_NAMES:
            raise ValueError(f"unknown event name: {name!r}")
        self._listeners.setdefault(name, []).append(callback)
        return callback

    def off(self, name: str, callback: Callback) -> None:
        """Stop calling ``callback`` for ``name`` (no error when it was not listening)."""
        listeners = self._listeners.get(name)
        if listeners and callback in listeners:
            listeners.remove(callback)

    # ------------------------------------------------------------------ iteration

    def __aiter__(self) -> QueueEvents:
        return self

    async def __anext__(self) -> QueueEvent:
        if self._lifetime is None:
            raise RuntimeError("enter the QueueEvents (async with) before iterating")
        event = await self._events.get()
        if event is None:
            raise StopAsyncIteration
        return event

    # ------------------------------------------------------------------ watches

    @contextmanager
    def watch(self, job_id: str) -> Iterator[JobWatch]:
        """Register interest in ``job_id`` for the duration of the block.

        Register before reading the job's state: an outcome that lands between the
        read and the registration would otherwise be missed. A watch on a closed
        QueueEvents is closed from the start.
        """
        buffer = _Buffer(self.name, self.max_buffered)
        if self.closed or not self.running:
            buffer.close()
        self._watches.setdefault(job_id, set()).add(buffer)
        try:
            yield JobWatch(job_id, buffer)
        finally:
            buffers = self._watches.get(job_id)
            if buffers is not None:
                buffers.discard(buffer)
                if not buffers:
                    del self._watches[job_id]


__all__ = ["EVENT_NAMES", "JobWatch", "QueueEvent", "QueueEvents"]
