"""The health probes: ``/health`` (details), ``/healthz`` and ``/live`` (the process
answers), ``/ready`` (it can take work). Never behind auth, as in bunqueue, so a load
balancer or Kubernetes needs no token. ``/health`` and ``/ready`` answer 503 while the
store refuses writes (full, or failing): the broker is alive but should get no new work.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ... import __version__
from ...core.metrics.broker_stats import ConnectionCounts, mib
from ...process_numbers import resident_bytes
from .rest.api import Response, RunCommand


class Health:
    def __init__(self, run: RunCommand,
                 connections: ConnectionCounts) -> None:
        self._run = run
        self._connections = connections

    async def degraded(self) -> str | None:
        """Why the store is degraded (None: it is not)."""
        status = (await self._run({"cmd": "StorageStatus"})).get("data") or {}
        if status.get("diskFull"):
            return "disk full"
        error = status.get("error")
        return str(error) if error else None

    async def health(self) -> Response:
        problem = await self.degraded()
        # This broker's own numbers (local), also in a cluster: a probe must not wait
        # for the other brokers, nor fail a healthy broker because one of them is slow.
        stats = (await self._run({"cmd": "Stats", "local": True})).get("stats") or {}
        body = {
            "ok": problem is None,
            "status": "healthy" if problem is None else "degraded",
            "version": __version__,
            "uptime": int(stats.get("uptime", 0)) // 1000,  # the broker's, in seconds
            "queues": {k: stats.get(k, 0) for k in ("waiting", "active", "delayed",
                                                     "completed", "dlq")},
            "connections": dict(self._connections.open_by_kind),
            "memory": {"rss": mib(resident_bytes())},
        }
        if problem is not None:
            body["storage"] = problem
        return Response(200 if problem is None else 503, body)

    async def ready(self) -> Response:
        problem = await self.degraded()
        if problem is None:
            return Response(200, {"ok": True, "ready": True})
        return Response(503, {"ok": False, "ready": False, "error": problem})

    async def live(self) -> Response:
        return Response(200, "OK", content_type="text/plain")


HEALTH_ROUTES: dict[str, Callable[[Health], Awaitable[Response]]] = {
    "/health": Health.health,
    "/healthz": Health.live,
    "/live": Health.live,
    "/ready": Health.ready,
}
