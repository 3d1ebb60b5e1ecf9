"""Broker-wide reads of a cluster: each broker's own answer merged into one.

In a cluster (docs/scale-out.md) each queue is served by one broker and each worker is
registered on the broker its connection reached, so ``Stats``, ``Metrics``,
``Prometheus``, ``DashboardOverview``, ``DashboardQueues``, ``ListWorkers`` and
``ListWebhooks`` are asked of every live broker (cluster/fanout.py) and their
replies merged here. Each merge is a pure function of the replies' bodies (``ok``
and ``reqId`` taken off), the asking broker's first, in bunqueue's shape so that its
clients still parse the result.

What is summed and what is the asking broker's own:

* **Summed:** the live counts (a queue has one owner, so no job is counted twice), the
  lifetime totals, the push and pull rates, workers, crons (one broker runs them all),
  connections, and each webhook's delivery counters (``ListWebhooks``).
* **The asking broker's own:** ``uptime`` and the process's numbers (memory, CPU),
  whose sum would describe no process; the storage's numbers (one database for all);
  the latency figures (what a client of this broker sees; the brokers send averages
  and percentiles, which do not add up); ``timestamp``; the webhooks themselves (every
  broker holds all of them).
* **Joined:** per-queue rows and series (a queue appears once: where two brokers name
  it, for the moment a queue moves, the first reply's row is kept), the workers list
  (a worker known to two brokers, after it reconnected elsewhere, is listed once, as
  the broker that saw it last knows it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

Reply = dict[str, Any]

# Stats' fields summed over the brokers; the others (uptime) are the asker's.
STATS_SUMMED = ("waiting", "prioritized", "active", "delayed", "dlq", "completed",
                "failed", "pushPerSec", "pullPerSec", "totalPushed", "totalPulled",
                "totalCompleted")
# The legacy Metrics form's summed fields; memory and storage sizes are the asker's.
METRICS_SUMMED = ("totalPushed", "totalPulled", "totalCompleted", "totalFailed",
                  "activeConnections")
HISTORY_STEP_MS = 10_000  # the throughput history's step (core/metrics/broker_stats.py)


class Answered(NamedTuple):
    """The brokers whose replies a merge combines, in the replies' order (the asking
    broker first), and those that did not answer in time (left out)."""

    ids: list[str]
    missing: list[str]

    def wire(self) -> dict[str, Any]:
        """The ``brokers`` field every merged reply carries."""
        return {"answered": len(self.ids), "missing": list(self.missing)}


Merge = Callable[[list[Reply], Answered], Reply]


def total(values: Iterable[Any]) -> int | float:
    """The sum of the numbers among ``values`` (a field a broker lacks counts 0);
    floats rounded to 2 places, as the brokers round their rates."""
    numbers = [v for v in values
               if isinstance(v, (int, float)) and not isinstance(v, bool)]
    summed = sum(numbers)
    return round(summed, 2) if isinstance(summed, float) else summed


def _body(reply: Reply, key: str) -> dict[str, Any]:
    body = reply.get(key)
    return body if isinstance(body, dict) else {}


def _bodies(replies: list[Reply], key: str) -> list[dict[str, Any]]:
    return [_body(reply, key) for reply in replies]


# ------------------------------------------------------------------ Stats, Metrics


def merged_stats(bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """Stats' body: :data:`STATS_SUMMED` summed, the rest the asker's."""
    out = dict(bodies[0])
    for key in STATS_SUMMED:
        if key in out:  # (the asker's shape: a field it does not send stays out)
            out[key] = total(body.get(key) for body in bodies)
    return out


def merge_stats(replies: list[Reply], answered: Answered) -> Reply:
    return {"stats": merged_stats(_bodies(replies, "stats"))}


def _weighted(bodies: list[dict[str, Any]], key: str,
              weight: Callable[[dict[str, Any]], float]) -> float:
    """The brokers' averages ``key`` weighted by ``weight`` of each broker's body."""
    pairs: list[tuple[float, float]] = []
    for body in bodies:
        value, share = body.get(key), weight(body)
        if isinstance(value, (int, float)) and share > 0:
            pairs.append((value, share))
    whole = sum(w for _, w in pairs)
    return round(sum(v * w for v, w in pairs) / whole, 3) if whole else 0.0


def _count(body: dict[str, Any], *keys: str) -> float:
    return float(total(body.get(key) for key in keys))


def merge_metrics(replies: list[Reply], answered: Answered) -> Reply:
    """The legacy form summed (averages weighted by what they average over: processing
    by completed jobs; the timed commands' latency by pushes, pulls and completions,
    which they sample); the queue form is the one broker's that serves the queue (the
    others know no such queue and answer an empty series: the largest count wins)."""
    if "metrics" not in replies[0]:
        return max(replies, key=lambda r: total([_body(_body(r, "data"), "meta")
                                                 .get("count")]))
    bodies = _bodies(replies, "metrics")
    out = dict(bodies[0])
    for key in METRICS_SUMMED:
        if key in out:
            out[key] = total(body.get(key) for body in bodies)
    out["avgProcessingMs"] = _weighted(bodies, "avgProcessingMs",
                                       lambda b: _count(b, "totalCompleted"))
    out["avgLatencyMs"] = _weighted(
        bodies, "avgLatencyMs",
        lambda b: _count(b, "totalPushed", "totalPulled", "totalCompleted"))
    return {"metrics": out}


# ------------------------------------------------------------------ workers


def merged_workers(lists: Iterable[Any]) -> list[dict[str, Any]]:
    """The brokers' workers lists in one, each worker id once (the entry seen last)."""
    by_id: dict[Any, dict[str, Any]] = {}
    for workers in lists:
        for worker in workers if isinstance(workers, list) else ():
            if not isinstance(worker, dict):
                continue
            key = worker.get("id")
            kept = by_id.get(key)
            if kept is None or total([worker.get("lastSeen")]) > total(
                    [kept.get("lastSeen")]):
                by_id[key] = worker
    return list(by_id.values())


def worker_stats(workers: list[dict[str, Any]]) -> dict[str, Any]:
    """ListWorkers' ``stats``, counted from the merged list as each broker counts its
    own (core/workers.py)."""
    active = [w for w in workers if w.get("status") == "active"]
    return {
        "total": len(workers), "active": len(active),
        "totalProcessed": total(w.get("processedJobs") for w in workers),
        "totalFailed": total(w.get("failedJobs") for w in workers),
        "activeJobs": total(w.get("activeJobs") for w in workers),
        "concurrencySlots": total(w.get("concurrency") for w in active),
    }


def merge_list_workers(replies: list[Reply], answered: Answered) -> Reply:
    workers = merged_workers(body.get("workers") for body in _bodies(replies, "data"))
    return {"data": {"workers": workers, "stats": worker_stats(workers)}}


# ------------------------------------------------------------------ dashboard


def merged_rows(lists: Iterable[Any]) -> list[dict[str, Any]]:
    """Per-queue rows joined, one per queue name (the first reply's), by name."""
    rows: dict[str, dict[str, Any]] = {}
    for listed in lists:
        for row in listed if isinstance(listed, list) else ():
            if isinstance(row, dict) and isinstance(row.get("name"), str):
                rows.setdefault(row["name"], row)
    return [rows[name] for name in sorted(rows)]


def merge_dashboard_queues(replies: list[Reply], answered: Answered) -> Reply:
    bodies = _bodies(replies, "data")
    out = dict(bodies[0])
    out["queues"] = merged_rows(body.get("queues") for body in bodies)
    return {"data": out}


def merged_history(histories: list[Any]) -> list[dict[str, Any]]:
    """The throughput charts' points summed per 10 s step. A broker with no point at
    a step counts its last point before (its totals did not move), or 0 before its
    first point (it had not started: its lifetime totals were 0)."""
    points: list[dict[int, dict[str, Any]]] = []
    for history in histories:
        steps: dict[int, dict[str, Any]] = {}
        for point in history if isinstance(history, list) else ():
            if isinstance(point, dict) and isinstance(point.get("t"), (int, float)):
                at = int(point["t"])
                steps[at - at % HISTORY_STEP_MS] = point
        points.append(steps)
    merged = []
    last: list[dict[str, Any]] = [{} for _ in points]
    for step in sorted({s for steps in points for s in steps}):
        row: dict[str, Any] = {"t": 0.0, "pushed": 0, "completed": 0, "failed": 0}
        for i, steps in enumerate(points):
            point = steps.get(step)
            if point is not None:
                last[i] = point
                row["t"] = max(row["t"], float(point["t"]))
            for key in ("pushed", "completed", "failed"):
                row[key] = total([row[key], last[i].get(key)])
        merged.append(row)
    return merged


def merge_dashboard_overview(replies: list[Reply], answered: Answered) -> Reply:
    """DashboardOverview: ``stats`` and ``throughput`` as Stats; the history summed
    per step; queues, live jobs, workers and crons summed or joined; ``latency``,
    ``memory``, ``storage`` and ``timestamp`` the asker's (see the module docstring)."""
    bodies = _bodies(replies, "data")
    out = dict(bodies[0])
    stats = merged_stats([_body(body, "stats") for body in bodies])
    out["stats"] = stats
    out["throughput"] = {"pushPerSec": stats["pushPerSec"],
                         "pullPerSec": stats["pullPerSec"]}
    out["throughputHistory"] = merged_history(
        [body.get("throughputHistory") for body in bodies])
    out["collections"] = {
        key: total(_body(body, "collections").get(key) for body in bodies)
        for key in ("queues", "liveJobs")}
    workers = merged_workers(_body(body, "workers").get("list") for body in bodies)
    counted = worker_stats(workers)
    out["workers"] = {"total": counted["total"], "active": counted["active"],
                      "list": workers}
    out["crons"] = {"total": total(_body(body, "crons").get("total") for body in bodies)}
    return {"data": out}


# ------------------------------------------------------------------ webhooks

# A webhook's delivery counters, counted in memory by each broker that delivered.
WEBHOOK_COUNTERS = ("successCount", "failureCount", "droppedCount")


def merge_list_webhooks(replies: list[Reply], answered: Answered) -> Reply:
    """ListWebhooks: the webhooks as the asker lists them (every broker holds the
    table's webhooks), with each one's delivery counters summed over the brokers
    (deliveries start on the broker that serves the event's queue) and its
    ``lastTriggered`` the latest; ``stats`` the asker's (counts of webhooks)."""
    body = _body(replies[0], "data")
    hooks = [dict(h) for h in body.get("webhooks") or () if isinstance(h, dict)]
    by_id = {hook.get("id"): hook for hook in hooks}
    for other in _bodies(replies[1:], "data"):
        for entry in other.get("webhooks") or ():
            hook = by_id.get(entry.get("id")) if isinstance(entry, dict) else None
            if hook is None:
                continue  # (another broker's view of a moment ago: not the asker's)
            for key in WEBHOOK_COUNTERS:
                hook[key] = total([hook.get(key), entry.get(key)])
            times = [t for t in (hook.get("lastTriggered"), entry.get("lastTriggered"))
                     if isinstance(t, (int, float))]
            hook["lastTriggered"] = max(times) if times else None
    return {"data": {**body, "webhooks": hooks}}
