"""Broker-wide commands: ``workers`` (ListWorkers), ``stats`` (Stats) and ``health``
(Ping, then StorageStatus; its exit status is for scripts and probes)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.console import Console

from .connection import Session
from .output import EXIT_FAILED, EXIT_OK, pairs, table, when

# Stats' fields, in the order shown.
STATS_FIELDS = ("waiting", "active", "delayed", "dlq", "completed", "failed", "uptime",
                "pushPerSec", "pullPerSec")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("workers", parents=[common], help="list registered workers")
    parser.set_defaults(run=list_workers)
    parser = sub.add_parser("stats", parents=[common], help="the broker's totals and rates")
    parser.set_defaults(run=stats)
    parser = sub.add_parser("health", parents=[common],
                            help="exit 0 healthy, 1 unhealthy (storage), 2 unreachable")
    parser.set_defaults(run=health)


async def list_workers(session: Session) -> int:
    data = (await session.call("ListWorkers"))["data"]
    workers, totals = data["workers"], data.get("stats", {})

    def render(console: Console) -> None:
        if not workers:
            console.print("no workers")
            return
        console.print(table(None, ("id", "name", "queues", "status", "concurrency", "active",
                                   "processed", "failed", "host", "pid", "last seen"),
                            ([w.get("id"), w.get("name"), ", ".join(w.get("queues") or ()),
                              w.get("status"), w.get("concurrency"), w.get("activeJobs"),
                              w.get("processedJobs"), w.get("failedJobs"), w.get("hostname"),
                              w.get("pid"), when(w.get("lastSeen"))] for w in workers)))
        console.print(f"{totals.get('total', len(workers))} workers, "
                      f"{totals.get('active', 0)} active", markup=False)

    session.out.emit({"workers": workers, "stats": totals}, render)
    return EXIT_OK


async def stats(session: Session) -> int:
    numbers = (await session.call("Stats"))["stats"]
    session.out.emit({"stats": numbers}, lambda console: console.print(pairs(
        None, [(name, numbers.get(name)) for name in STATS_FIELDS]
        + [(name, value) for name, value in numbers.items() if name not in STATS_FIELDS])))
    return EXIT_OK


async def health(session: Session) -> int:
    """Healthy: the broker answers and its storage neither is full nor failed."""
    started = time.perf_counter()
    await session.call("Ping")
    ping_ms = round((time.perf_counter() - started) * 1000, 3)
    storage = (await session.call("StorageStatus"))["data"]
    problem = storage_problem(storage)
    document = {"healthy": problem is None, "pingMs": ping_ms, "storage": storage}
    line = ("healthy" if problem is None else f"unhealthy: {problem}") + \
        f" (ping {ping_ms:g} ms)"
    session.out.said(document, line)
    return EXIT_OK if problem is None else EXIT_FAILED


def storage_problem(storage: dict[str, Any]) -> str | None:
    """What makes a StorageStatus unhealthy, in words; None when nothing does."""
    since = when(storage.get("since"))
    suffix = f" since {since}" if since else ""
    if storage.get("diskFull"):
        return f"storage full{suffix}"
    if storage.get("error"):
        return f"storage error{suffix}: {storage['error']}"
    return None
