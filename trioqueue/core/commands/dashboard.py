"""bunqueue's dashboard commands (reference 2.11): ``DashboardOverview`` and
``DashboardQueues`` answered by the router from every queue's counts (O(queues)), and
``DashboardQueue``, a queue command run in that queue's actor (its DLQ preview and job
pages read storage, in slices, as ``Dlq`` and ``GetJobs`` do)."""

from __future__ import annotations

from typing import Any

from .. import fields, states
from ..job import ACTIVE
from ..metrics.broker_stats import DURATION_BUCKETS_S, Histogram, mib
from ..queue import QueueState, Sliced, dlq_work, lifecycle
from .context import Ctx, Reply
from .maintenance import queue_listed
from .stats import StatsScope, cron_count, stats, storage_fields

JOBS_LIMIT_DEFAULT = 10
JOBS_LIMIT_MAX = 50
DLQ_PREVIEW_MAX = 10


def _percentile_ms(hist: Histogram, fraction: float) -> float | None:
    """The upper bound (ms) of the bucket holding that fraction of the observations
    (None: none yet; past the last bound: the last bound)."""
    if not hist.count:
        return None
    wanted = fraction * hist.count
    seen = 0
    for bound, n in zip(DURATION_BUCKETS_S, hist.counts, strict=False):
        seen += n
        if seen >= wanted:
            return bound * 1000
    return DURATION_BUCKETS_S[-1] * 1000


def _latency(scope: StatsScope) -> dict[str, Any]:
    timings = scope.stats.timings
    averages = {kind: round(h.sum_s / h.count * 1000, 3) if h.count else None
                for kind, h in timings.items()}
    percentiles = {kind: {f"p{int(p * 100)}": _percentile_ms(h, p)
                          for p in (0.5, 0.95, 0.99)}
                   for kind, h in timings.items()}
    return {"averages": averages, "percentiles": percentiles}


def dashboard_overview(scope: StatsScope, msg: dict[str, Any], now: int,
                       conn: Any) -> Reply:
    """Everything at a glance. ``memory`` is the process's (MiB): Python has no
    JavaScript heap, so ``heapUsed`` is the resident set and ``heapTotal`` its peak."""
    overview = stats(scope, msg, now, conn)["stats"]
    proc = scope.stats.process()
    workers = scope.workers.list(now)["data"]
    queues = list(scope.queue_states())
    return {"data": {
        "stats": overview,
        "throughput": {"pushPerSec": overview["pushPerSec"],
                       "pullPerSec": overview["pullPerSec"]},
        # ours: the totals every 10 s for the last hour (the dashboard's chart)
        "throughputHistory": scope.stats.history.as_list(),
        "latency": _latency(scope),
        "memory": {"heapUsed": mib(proc.rss_bytes), "heapTotal": mib(proc.peak_rss_bytes),
                   "rss": mib(proc.rss_bytes)},
        "collections": {"queues": len(queues), "liveJobs": sum(len(q.jobs) for _, q in queues)},
        "workers": {"total": workers["stats"]["total"],
                    "active": workers["stats"]["active"], "list": workers["workers"]},
        "crons": {"total": cron_count(scope)},
        "storage": storage_fields(scope, now),
        "timestamp": float(now),
    }}


def queue_row(name: str, q: QueueState, now: int) -> dict[str, Any]:
    """A queue's row: bunqueue's counts and paused flag, and ours, its limits
    (``rateLimit`` ``{max, duration}`` or None, ``concurrency`` or None). A rate limit
    past its ttl reads as None here; the queue drops it itself at its next use."""
    lifecycle.promote_due(q, now)
    c = q.c
    rate = q.settings.rate
    if rate is not None and rate.expired(now):
        rate = None
    return {"name": name, "waiting": c.waiting, "prioritized": c.prioritized,
            "delayed": c.delayed, "active": c.active, "dlq": len(q.dlq.marks),
            "paused": q.settings.paused,
            "rateLimit": None if rate is None else {"max": rate.max,
                                                    "duration": rate.duration},
            "concurrency": q.settings.concurrency}


def dashboard_queues(scope: StatsScope, msg: dict[str, Any], now: int,
                     conn: Any) -> Reply:
    """The queues ListQueues names, sorted, each with its counts."""
    rows = [queue_row(name, q, now) for name, q in sorted(scope.queue_states())
            if queue_listed(scope, name, q)]
    return {"data": {"queues": rows, "timestamp": float(now)}}


def dashboard_queue(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Sliced:
    """One queue: counts, priorities, the first DLQ entries, and with ``includeJobs``
    the first ``jobsLimit`` waiting, active and delayed jobs (oldest first)."""
    include = fields.lenient_bool(msg.get("includeJobs"))
    limit = fields.strict_number(msg.get("jobsLimit"), "jobsLimit", integer=True,
                                 default=JOBS_LIMIT_DEFAULT)
    assert limit is not None  # defaulted
    limit = max(1, min(int(limit), JOBS_LIMIT_MAX))
    now = ctx.now
    counts = q.counts(now)  # (the finished counts: a stored read, NeedData first)
    jobs = None
    if include:
        jobs = {"waiting": q.list_jobs((states.WAITING, states.PRIORITIZED, states.PAUSED), now,
                                       asc=True, offset=0, limit=limit),
                "active": q.list_jobs((ACTIVE,), now, asc=True, offset=0, limit=limit),
                "delayed": q.list_jobs((states.DELAYED,), now, asc=True, offset=0, limit=limit)}

    def reply(entries: list[dict[str, Any]]) -> Reply:
        preview = [{"id": e["job"]["id"], "data": e["job"].get("data"),
                    "attempts": e["attempts"], "createdAt": e["job"].get("createdAt")}
                   for e in entries]
        body: dict[str, Any] = {
            "name": q.name, "counts": counts, "paused": q.settings.paused,
            "priorityCounts": q.counts_per_priority(), "dlqPreview": preview,
            "timestamp": float(now)}
        if jobs is not None:
            body["jobs"] = jobs
        return {"data": body}

    return Sliced(dlq_work.list_dlq(q, dlq_work.DlqFilter(), DLQ_PREVIEW_MAX, now), reply)
