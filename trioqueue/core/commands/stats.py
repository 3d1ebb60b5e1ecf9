"""The broker's numbers as commands: ``Stats``, ``Metrics`` (both forms),
``StorageStatus`` and ``Prometheus`` (bunqueue's reference, 2.11), and the bodies of the
HTTP layer's periodic frames (``stats:snapshot``, ``health:status``, ``storage:status``,
reference 7.2), built from the same numbers.

Each answer visits every queue once (their counts are O(1) each: the queues keep them),
never a job. Where the numbers come from: docs/architecture.md, "The broker's numbers".
"""

from __future__ import annotations

from typing import Any, Protocol

from .. import fields
from ..errors import Refused
from ..metrics.broker_stats import BrokerStats, QueueTotals, StorageUsage, mib, queue_totals
from ..queue.tallies import COMPLETED_KIND, FAILED_KIND, minute_series
from ..webhooks.registry import WebhookRegistry
from .context import Reply
from .maintenance import BrokerScope


class StatsScope(BrokerScope, Protocol):
    """What the numbers read of the router, besides :class:`BrokerScope`."""

    stats: BrokerStats
    webhooks: WebhookRegistry
    crons: Any  # the cron scheduler (None before the broker runs)

    def stored_count(self, queue: str, state: str) -> int:
        """How many ``state`` (completed, failed) jobs of ``queue`` are stored."""


def totals(scope: StatsScope, now: int) -> QueueTotals:
    """The queues' numbers summed; samples the push/pull rate as it goes."""
    t = queue_totals(scope.queue_states(), now, scope.stored_count)
    scope.stats.rates.sample(now, t.pushed, t.pulled)
    return t


def cron_count(scope: StatsScope) -> int:
    crons = scope.crons
    return 0 if crons is None else len(crons.registry.by_name)


def uptime_ms(scope: StatsScope, now: int) -> int:
    return max(0, now - scope.stats.started_ms)


def command_latency_ms(scope: StatsScope) -> float:
    """The mean time of the timed push, pull and ack commands, in ms."""
    timings = scope.stats.timings.values()
    count = sum(h.count for h in timings)
    return round(sum(h.sum_s for h in timings) * 1000 / count, 3) if count else 0.0


def _average(total_ms: int, count: int) -> float:
    return round(total_ms / count, 2) if count else 0.0


# ------------------------------------------------------------------ commands


def stats(scope: StatsScope, msg: dict[str, Any], now: int, conn: Any) -> Reply:
    """``{stats: ...}``: live counts now, ``failed`` since the broker started (jobs
    failed for good), the rates over the last few seconds."""
    t = totals(scope, now)
    push_rate, pull_rate = scope.stats.rates.rates()
    return {"stats": {
        "waiting": t.waiting + t.prioritized, "prioritized": t.prioritized,
        "active": t.active, "delayed": t.delayed, "dlq": t.dlq,
        "completed": t.completed, "failed": t.failed_total,
        "uptime": uptime_ms(scope, now), "pushPerSec": push_rate, "pullPerSec": pull_rate,
        "totalPushed": t.pushed, "totalPulled": t.pulled, "totalCompleted": t.completed_total,
    }}


def metrics(scope: StatsScope, msg: dict[str, Any], now: int, conn: Any) -> Reply:
    """The queue form when ``queue`` or ``type`` is given, else the legacy totals."""
    if msg.get("queue") is None and msg.get("type") is None:
        return {"metrics": legacy_metrics(scope, now)}
    if msg.get("queue") is None:
        raise Refused("Metrics queue is required")
    name = fields.queue_name(msg.get("queue"))
    kind = msg.get("type")
    if kind not in (COMPLETED_KIND, FAILED_KIND):
        raise Refused("Metrics type must be 'completed' or 'failed'")
    start = fields.strict_number(msg.get("start"), "start", integer=True, default=0)
    end = fields.strict_number(msg.get("end"), "end", integer=True, default=-1)
    assert start is not None and end is not None  # defaulted
    q = scope.queue_state(name)
    if q is None:
        return {"data": {"meta": {"count": 0, "prevTS": 0.0, "prevCount": 0},
                         "data": [], "count": 0}}
    return {"data": minute_series(q.c, kind, now, int(start), int(end))}


def legacy_metrics(scope: StatsScope, now: int) -> dict[str, Any]:
    t = totals(scope, now)
    usage = scope.stats.storage_usage(now)
    return {
        "totalPushed": t.pushed, "totalPulled": t.pulled,
        "totalCompleted": t.completed_total, "totalFailed": t.failed_total,
        # the timed PUSH/PULL/ACK commands (actors/timings.py); a job's pull to its ACK
        "avgLatencyMs": command_latency_ms(scope),
        "avgProcessingMs": _average(t.ran_ms, t.completed_total),
        "memoryUsageMb": mib(scope.stats.process().rss_bytes),
        # bunqueue's SQLite file: the store's used bytes here (LMDB or memory)
        "sqliteSizeMb": mib(usage.used_bytes), "storageSizeMb": mib(usage.used_bytes),
        "activeConnections": scope.stats.connections.total,
    }


def storage_status(scope: StatsScope, msg: dict[str, Any], now: int, conn: Any) -> Reply:
    return {"data": storage_fields(scope, now)}


def storage_fields(scope: StatsScope, now: int) -> dict[str, Any]:
    """bunqueue's ``diskFull``, ``error``, ``since`` and ours (see StorageUsage); the
    measure also refreshes the storage's health (a full store found, or room again)."""
    usage: StorageUsage = scope.stats.storage_usage(now)
    health = scope.stats.storage_health
    return {
        "diskFull": health.disk_full, "degraded": health.degraded, "error": health.error,
        "since": None if health.since is None else float(health.since),
        "engine": usage.engine, "path": usage.path, "usedBytes": usage.used_bytes,
        "maxBytes": usage.max_bytes, "mapBytes": usage.map_bytes,
        "mapFreeBytes": None if usage.map_bytes is None
        else max(0, usage.map_bytes - usage.used_bytes),
        "diskFreeBytes": usage.disk_free_bytes,
    }


def prometheus(scope: StatsScope, msg: dict[str, Any], now: int, conn: Any) -> Reply:
    from ..metrics.prometheus import exposition

    return {"data": {"metrics": exposition(scope, now)}}


# ------------------------------------------------------------------ periodic frames


def stats_snapshot(scope: StatsScope, now: int) -> dict[str, Any]:
    """The body of the ``stats:snapshot`` frame."""
    t = totals(scope, now)
    push_rate, pull_rate = scope.stats.rates.rates()
    queues = {}
    for name, q in scope.queue_states():
        c = q.c
        queues[name] = {"waiting": c.waiting + c.prioritized, "active": c.active,
                        "delayed": c.delayed, "dlq": len(q.dlq.marks),
                        "paused": q.settings.paused}
    workers = scope.workers.list(now)["data"]["stats"]
    return {
        "waiting": t.waiting + t.prioritized, "active": t.active, "delayed": t.delayed,
        "completed": t.completed, "dlq": t.dlq, "totalPushed": t.pushed,
        "totalCompleted": t.completed_total, "totalFailed": t.failed_total,
        "pushPerSec": push_rate, "pullPerSec": pull_rate, "uptime": uptime_ms(scope, now),
        "queues": queues, "workers": {"total": workers["total"], "active": workers["active"]},
        "cronJobs": cron_count(scope),
    }


def health_status(scope: StatsScope, now: int) -> dict[str, Any]:
    """The body of the ``health:status`` frame (``ok``: the storage is not degraded)."""
    proc = scope.stats.process()
    return {
        "ok": not scope.stats.storage_health.degraded, "uptime": uptime_ms(scope, now),
        "memory": {"rss": mib(proc.rss_bytes), "heapUsed": mib(proc.rss_bytes)},
        "connections": dict(scope.stats.connections.open_by_kind),
    }


def storage_status_frame(scope: StatsScope, now: int) -> dict[str, Any]:
    """The body of the ``storage:status`` frame."""
    body = storage_fields(scope, now)
    states = list(scope.queue_states())
    body["collections"] = {"queues": len(states),
                           "liveJobs": sum(len(q.jobs) for _, q in states)}
    return body
