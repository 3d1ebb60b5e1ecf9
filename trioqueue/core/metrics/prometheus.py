"""The Prometheus text exposition (format 0.0.4) of the broker's numbers, under
bunqueue's metric names (reference 7.6) so that dashboards made for it work.

Per-queue series are capped at ``metrics_max_queues`` queues (the first by name; 0:
none), and ``bunqueue_queue_metrics_{exported,omitted}`` say how many were left out.
Names bunqueue has that we cannot fill truthfully are left out (docs/protocol.md,
"Prometheus"): the SQLite file's size is given as the store's used bytes under a name of
ours, ``bunqueue_storage_used_bytes``; a JavaScript heap and backups do not exist here.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..queue import lifecycle
from .broker_stats import Histogram, ProcessNumbers

if TYPE_CHECKING:
    from ..commands.stats import StatsScope

Sample = tuple[str, dict[str, str], float]  # (name suffix, labels, value)


def escape_label(value: str) -> str:
    """A label value as the text format wants it: backslash, quote, newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _value(v: float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 2**53):
        return str(int(v))
    return repr(float(v))


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


class Exposition:
    """Families in the order added, each with its HELP and TYPE lines once."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str,
               samples: Iterable[Sample]) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for suffix, labels, value in samples:
            self.lines.append(f"{name}{suffix}{_labels(labels)} {_value(value)}")

    def one(self, name: str, kind: str, help_text: str, value: float,
            labels: dict[str, str] | None = None) -> None:
        self.family(name, kind, help_text, [("", labels or {}, value)])

    def histogram(self, name: str, help_text: str, hist: Histogram) -> None:
        samples: list[Sample] = [("_bucket", {"le": le}, n) for le, n in hist.cumulative()]
        samples.append(("_sum", {}, hist.sum_s))
        samples.append(("_count", {}, hist.count))
        self.family(name, "histogram", help_text, samples)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def exposition(scope: StatsScope, now: int) -> str:
    """The whole scrape."""
    from ..commands.stats import cron_count, storage_fields, totals, uptime_ms

    stats = scope.stats
    t = totals(scope, now)
    out = Exposition()
    for state, value in (("waiting", t.waiting), ("prioritized", t.prioritized),
                         ("delayed", t.delayed), ("active", t.active),
                         ("completed", t.completed), ("dlq", t.dlq)):
        out.one(f"bunqueue_jobs_{state}", "gauge", f"Jobs {state} now, all queues", value)
    for what, value in (("pushed", t.pushed), ("pulled", t.pulled),
                        ("completed", t.completed_total), ("failed", t.failed_total)):
        out.one(f"bunqueue_jobs_{what}_total", "counter",
                f"Jobs {what} since the broker started", value)
    out.one("bunqueue_uptime_seconds", "gauge", "Seconds since the broker started",
            uptime_ms(scope, now) / 1000)
    out.one("bunqueue_cron_jobs_registered", "gauge", "Cron schedules", cron_count(scope))
    _workers(out, scope, now)
    hooks = scope.webhooks.stats()
    out.one("bunqueue_webhooks_registered", "gauge", "Webhooks", hooks["total"])
    out.one("bunqueue_webhooks_enabled", "gauge", "Enabled webhooks", hooks["enabled"])
    storage = storage_fields(scope, now)
    out.one("bunqueue_storage_degraded", "gauge", "1 while the storage is degraded",
            storage["degraded"])
    out.one("bunqueue_storage_disk_full", "gauge", "1 while the store refuses new jobs",
            storage["diskFull"])
    out.one("bunqueue_storage_used_bytes", "gauge", "Bytes the store uses",
            storage["usedBytes"])
    if storage["maxBytes"] is not None:
        out.one("bunqueue_storage_max_bytes", "gauge", "The store's limit in bytes",
                storage["maxBytes"])
    _process(out, scope.stats.process())
    out.one("bunqueue_build_info", "gauge", "The broker's version", 1,
            {"version": stats.version, "python_version": platform.python_version()})
    out.family("bunqueue_connections", "gauge", "Open connections per transport",
               [("", {"transport": kind}, n)
                for kind, n in stats.connections.open_by_kind.items()])
    _per_queue(out, scope, now)
    for kind in ("push", "pull", "ack"):
        out.histogram(f"bunqueue_{kind}_duration_seconds",
                      f"{kind.upper()} commands from their batch reaching the router to "
                      "their replies leaving (sampled batches)", stats.timings[kind])
    return out.text()


def _workers(out: Exposition, scope: StatsScope, now: int) -> None:
    workers = scope.workers.list(now)["data"]["stats"]
    out.one("bunqueue_workers_registered", "gauge", "Registered workers", workers["total"])
    out.one("bunqueue_workers_active", "gauge", "Workers seen recently", workers["active"])
    out.one("bunqueue_worker_active_jobs", "gauge", "Jobs the workers say they run",
            workers["activeJobs"])
    out.one("bunqueue_worker_concurrency_slots", "gauge", "Active workers' concurrency",
            workers["concurrencySlots"])
    out.one("bunqueue_workers_processed_total", "counter",
            "Jobs the registered workers say they processed", workers["totalProcessed"])
    out.one("bunqueue_workers_failed_total", "counter",
            "Jobs the registered workers say failed", workers["totalFailed"])


def _process(out: Exposition, proc: ProcessNumbers) -> None:
    out.one("bunqueue_process_resident_memory_bytes", "gauge", "Resident memory",
            proc.rss_bytes)
    out.one("process_resident_memory_bytes", "gauge", "Resident memory", proc.rss_bytes)
    out.one("process_cpu_seconds_total", "counter", "User and system CPU seconds",
            proc.cpu_seconds)
    out.one("process_start_time_seconds", "gauge", "Start time, seconds since the epoch",
            proc.start_time_s)


def _per_queue(out: Exposition, scope: StatsScope, now: int) -> None:
    cap = scope.stats.metrics_max_queues
    states = sorted(scope.queue_states(), key=lambda item: item[0])
    exported = states[:cap]
    out.one("bunqueue_queue_metrics_exported", "gauge", "Queues with per-queue series",
            len(exported))
    out.one("bunqueue_queue_metrics_omitted", "gauge",
            "Queues left out of the per-queue series (METRICS_MAX_QUEUES)",
            len(states) - len(exported))
    rows = []
    for name, q in exported:
        lifecycle.promote_due(q, now)
        c = q.c
        rows.append((name, {"waiting": c.waiting, "prioritized": c.prioritized,
                            "delayed": c.delayed, "active": c.active,
                            "dlq": len(q.dlq.marks)}))
    for state in ("waiting", "prioritized", "delayed", "active", "dlq"):
        out.family(f"bunqueue_queue_jobs_{state}", "gauge", f"Jobs {state} per queue",
                   [("", {"queue": name}, counts[state]) for name, counts in rows])
