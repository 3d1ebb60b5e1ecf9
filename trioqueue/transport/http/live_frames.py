"""What live subscribers get besides job events: ``queue:counts`` and periodic frames.

bunqueue sends its SSE clients (and its subscribed WebSocket clients) a queue's counts
after job events of that queue, and every few seconds ``stats:snapshot``,
``health:status`` and ``storage:status``. :class:`LiveFrames` builds those frames by
running the same commands a client would (``GetJobCounts``, ``Stats``...), and hands
each frame to its listeners, which must not block (they queue it, bounded).

Nothing is built while no one listens: the hub subscribes to the queues' events only
while it has a listener, so queues do not build events for nobody, and the periodic
frames are skipped. A queue's job events within ``queue_counts_coalesce_ms`` give it one
``queue:counts`` frame (a burst of 10,000 pushes is not 10,000 count frames).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from ...config import Config
from ...core.commands.stats import StatsScope, health_status, stats_snapshot, storage_status_frame
from ..wire.event_names import event_data, event_name
from .rest.api import RunCommand

log = logging.getLogger("trioqueue.live")

# (frame name, data, the queue it is about or None for broker-wide frames)
Listener = Callable[[str, dict[str, Any], "str | None"], None]


class EventSource(Protocol):
    def subscribe(self, subscriber: Callable[[list[dict[str, Any]]], None]) -> None: ...
    def unsubscribe(self, subscriber: Callable[[list[dict[str, Any]]], None]) -> None: ...


class LiveFrames:
    def __init__(self, events: EventSource, config: Config, run: RunCommand,
                 scope: StatsScope, now_ms: Callable[[], int]) -> None:
        self._events = events
        self._config = config
        self._run = run
        self._scope = scope
        self._now_ms = now_ms
        self._listeners: list[tuple[Listener, bool]] = []
        self._touched: dict[str, None] = {}
        self._wake = trio.Event()

    # ------------------------------------------------------------------ listeners

    def add(self, listener: Listener, *, job_events: bool) -> None:
        """Send ``listener`` every frame; with ``job_events`` the job events too (SSE;
        a WebSocket connection takes those from the queues' events itself)."""
        if not self._listeners:
            self._events.subscribe(self._on_events)
        self._listeners.append((listener, job_events))

    def remove(self, listener: Listener) -> None:
        self._listeners = [(f, jobs) for f, jobs in self._listeners if f is not listener]
        if not self._listeners:
            self._events.unsubscribe(self._on_events)
            self._touched.clear()

    @property
    def listening(self) -> bool:
        return bool(self._listeners)

    def publish(self, name: str, data: dict[str, Any], queue: str | None,
                *, job_event: bool = False) -> None:
        for listener, wants_jobs in list(self._listeners):
            if wants_jobs or not job_event:
                listener(name, data, queue)

    def _on_events(self, events: list[dict[str, Any]]) -> None:
        touched = self._touched
        for event in events:
            queue = event.get("queue")
            self.publish(event_name(event), event_data(event), queue, job_event=True)
            if isinstance(queue, str):
                touched[queue] = None
        if touched:
            self._wake.set()

    # ------------------------------------------------------------------ the tasks

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        config = self._config
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._counts)
            for interval, build in ((config.stats_snapshot_interval_s, self.stats_snapshot),
                                    (config.health_status_interval_s, self.health_status),
                                    (config.storage_status_interval_s, self.storage_status)):
                if interval > 0:
                    nursery.start_soon(self._every, interval, build)
            task_status.started()

    async def _counts(self) -> None:
        delay_s = self._config.queue_counts_coalesce_ms / 1000
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            if delay_s:
                await trio.sleep(delay_s)  # gather the burst's other events
            touched, self._touched = self._touched, {}
            for queue in touched:
                if not self._listeners:
                    break
                reply = await self._run({"cmd": "GetJobCounts", "queue": queue})
                counts = reply.get("counts")
                if isinstance(counts, dict):
                    self.publish("queue:counts", {"queue": queue, **counts}, queue)

    async def _every(self, interval_s: float,
                     build: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        while True:
            await trio.sleep(interval_s)
            if not self._listeners:
                continue
            try:
                frame = await build()
            except Exception:  # a frame that cannot be built is skipped, not fatal
                log.exception("building a periodic frame failed")
                continue
            self.publish(frame.pop("event"), frame, None)

    # ------------------------------------------------------------------ the frames

    # The frames' bodies are the broker's numbers (core/commands/stats.py), read on
    # this thread between two steps of the queues: O(queues), never O(jobs).

    async def stats_snapshot(self) -> dict[str, Any]:
        return {"event": "stats:snapshot", **stats_snapshot(self._scope, self._now_ms())}

    async def health_status(self) -> dict[str, Any]:
        return {"event": "health:status", **health_status(self._scope, self._now_ms())}

    async def storage_status(self) -> dict[str, Any]:
        return {"event": "storage:status",
                **storage_status_frame(self._scope, self._now_ms())}
