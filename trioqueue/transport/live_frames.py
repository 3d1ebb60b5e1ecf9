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
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from ..config import Config
from .event_names import event_name

log = logging.getLogger("trioqueue.live")

RunCommand = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
# (frame name, data, the queue it is about or None for broker-wide frames)
Listener = Callable[[str, dict[str, Any], "str | None"], None]


class EventSource(Protocol):
    def subscribe(self, subscriber: Callable[[list[dict[str, Any]]], None]) -> None: ...
    def unsubscribe(self, subscriber: Callable[[list[dict[str, Any]]], None]) -> None: ...


def rss_mib() -> float:
    """The process's resident memory now, in MiB (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return round(pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024), 1)


class LiveFrames:
    def __init__(self, events: EventSource, config: Config, run: RunCommand,
                 connections: Callable[[], dict[str, int]]) -> None:
        self._events = events
        self._config = config
        self._run = run
        self._connections = connections
        self._listeners: list[tuple[Listener, bool]] = []
        self._touched: dict[str, None] = {}
        self._wake = trio.Event()
        self._started = time.monotonic()

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
            data = {k: v for k, v in event.items() if k != "eventType"}
            self.publish(event_name(event), data, queue, job_event=True)
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

    def uptime_s(self) -> float:
        return time.monotonic() - self._started

    async def stats_snapshot(self) -> dict[str, Any]:
        """bunqueue's ``stats:snapshot``: the totals, and each queue's counts."""
        stats = (await self._run({"cmd": "Stats"})).get("stats") or {}
        metrics = (await self._run({"cmd": "Metrics"})).get("metrics") or {}
        queues = (await self._run({"cmd": "DashboardQueues"})).get("data") or {}
        workers = (await self._run({"cmd": "ListWorkers"})).get("data") or {}
        crons = (await self._run({"cmd": "CronList"})).get("crons") or []
        listed = workers.get("workers") or []
        return {
            "event": "stats:snapshot",
            **{k: stats.get(k, 0) for k in ("waiting", "active", "delayed", "completed",
                                             "dlq", "pushPerSec", "pullPerSec", "uptime")},
            "totalPushed": metrics.get("totalPushed", 0),
            "totalCompleted": metrics.get("totalCompleted", 0),
            "totalFailed": metrics.get("totalFailed", 0),
            "queues": {q["name"]: {k: q.get(k, 0) for k in ("waiting", "active", "delayed",
                                                           "dlq", "paused")}
                       for q in queues.get("queues") or [] if isinstance(q, dict)},
            "workers": {"total": len(listed),
                        "active": sum(1 for w in listed if w.get("activeJobs"))},
            "cronJobs": len(crons),
        }

    async def health_status(self) -> dict[str, Any]:
        connections = self._connections()
        return {
            "event": "health:status",
            "ok": True,
            "uptime": int(self.uptime_s() * 1000),
            "memory": {"rss": rss_mib(), "heapUsed": rss_mib()},
            "connections": {"sse": connections.get("sse", 0),
                            "ws": connections.get("websocket", 0)},
        }

    async def storage_status(self) -> dict[str, Any]:
        status = (await self._run({"cmd": "StorageStatus"})).get("data") or {}
        queues = (await self._run({"cmd": "ListQueues"})).get("queues") or []
        return {"event": "storage:status", "collections": len(queues),
                "diskFull": bool(status.get("diskFull", False))}
