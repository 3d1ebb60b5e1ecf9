"""bunqueue's REST routes for crons, webhooks, workers and monitoring (reference
section 7.1): each runs one command, except ``/heapstats`` (the process's own numbers)
and ``/prometheus`` (the ``Prometheus`` command's text, sent as text).

The health probes, SSE and WebSocket are the app's (:mod:`..app`), not routes; so
is the auth of ``/prometheus`` (``metrics_auth``) and of ``/gc`` and ``/heapstats``
(gated whenever tokens are set, as every route but the probes).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import Any

from ....core.metrics.broker_stats import mib
from ....process_numbers import resident_bytes
from .api import Call, Response, Route, RunCommand, command, error_body, reply_status
from .requests import forward, query_ints

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# The fields of a cron POST /crons forwards to Cron (bunqueue's upsert).
CRON_FIELDS = ("name", "jobName", "queue", "data", "schedule", "repeatEvery", "timezone",
               "priority", "maxLimit", "uniqueKey", "dedup", "skipMissedOnRestart",
               "immediately", "skipIfNoWorker", "preventOverlap", "jobOptions")
WORKER_FIELDS = ("name", "queues", "concurrency", "workerId", "hostname", "pid",
                 "startedAt")


def _read(cmd: str) -> Callable[[Call], dict[str, Any]]:
    """A broker-wide read: in a cluster, every broker's answers merged, or with
    ``?local=true`` this broker's own (docs/scale-out.md, "Broker-wide reads")."""

    def build(call: Call) -> dict[str, Any]:
        msg: dict[str, Any] = {"cmd": cmd}
        if call.arg("local") in ("1", "true"):
            msg["local"] = True
        return msg

    return build


async def _dashboard_queues(call: Call, run: RunCommand) -> Response:
    """DashboardQueues, one page of it: ``offset`` and ``limit`` (bunqueue pages this
    route, not the command) cut the sorted list; ``total`` counts them all."""
    reply = await run(_read("DashboardQueues")(call))
    data = reply.get("data")
    if reply.get("ok") is not False and isinstance(data, dict):
        queues = data.get("queues") or []
        paging = query_ints(call, ("limit", "offset"))
        offset = paging.get("offset", 0)
        offset = int(offset) if offset == offset and offset > 0 else 0  # NaN: from 0
        limit = paging.get("limit")
        end = offset + int(limit) if limit is not None and limit == limit and limit >= 0 \
            else None
        data["total"] = len(queues)
        data["queues"] = queues[offset:end]
    return Response(reply_status(reply), reply)


def _dashboard_queue(call: Call) -> dict[str, Any]:
    return {"cmd": "DashboardQueue", "queue": call.params["queue"],
            "includeJobs": call.arg("includeJobs") == "true"}


async def _prometheus(call: Call, run: RunCommand) -> Response:
    """The exposition text itself (a refusal is answered as JSON)."""
    reply = await run(_read("Prometheus")(call))
    metrics = (reply.get("data") or {}).get("metrics")
    if reply.get("ok", True) is False:
        return Response(reply_status(reply), reply)
    if not isinstance(metrics, str):
        return Response(500, error_body("Internal server error"))
    return Response(200, metrics, content_type=PROMETHEUS_CONTENT_TYPE)


async def _heapstats(call: Call, run: RunCommand) -> Response:
    """What a Python process can say cheaply about its memory: the resident set and
    the collector's counters (no walk of the heap: ``gc.get_objects`` would block the
    broker for as long as the heap is large)."""
    generations = gc.get_stats()
    return Response(200, {
        "ok": True,
        "memory": {"rss": mib(resident_bytes())},
        "gc": {
            "enabled": gc.isenabled(),
            "pending": list(gc.get_count()),
            "thresholds": list(gc.get_threshold()),
            "generations": [{"collections": g.get("collections", 0),
                             "collected": g.get("collected", 0),
                             "uncollectable": g.get("uncollectable", 0)}
                            for g in generations],
            "frozen": gc.get_freeze_count(),
        },
        "runtime": {"implementation": sys.implementation.name,
                    "version": sys.version.split()[0]},
    })


ADMIN_ROUTES: list[Route] = [
    Route("GET", "/crons", command(forward("CronList"))),
    Route("POST", "/crons", command(forward("Cron", body=CRON_FIELDS))),
    Route("GET", "/crons/{name}", command(forward("CronGet", "name"), lookup=True)),
    Route("DELETE", "/crons/{name}", command(forward("CronDelete", "name"))),
    Route("GET", "/webhooks", command(forward("ListWebhooks"))),
    Route("POST", "/webhooks", command(forward(
        "AddWebhook", body=("url", "events", "queue", "secret")))),
    Route("DELETE", "/webhooks/{id}", command(forward("RemoveWebhook", "id",
                                                      key="webhookId"))),
    Route("PUT", "/webhooks/{id}/enabled", command(forward(
        "SetWebhookEnabled", "id", body=("enabled",)))),
    Route("GET", "/workers", command(_read("ListWorkers"))),
    Route("POST", "/workers", command(forward("RegisterWorker", body=WORKER_FIELDS))),
    Route("DELETE", "/workers/{id}", command(forward("UnregisterWorker", "id",
                                                     key="workerId"))),
    Route("POST", "/workers/{id}/heartbeat", command(forward(
        "Heartbeat", "id", body=("activeJobs", "processed", "failed")))),
    Route("GET", "/ping", command(forward("Ping"))),
    Route("GET", "/storage", command(forward("StorageStatus"))),
    Route("GET", "/stats", command(_read("Stats"))),
    Route("GET", "/metrics", command(_read("Metrics"))),
    Route("GET", "/prometheus", _prometheus),
    Route("GET", "/dashboard", command(_read("DashboardOverview"))),
    Route("GET", "/dashboard/queues", _dashboard_queues),
    Route("GET", "/dashboard/queues/{queue}", command(_dashboard_queue)),
    Route("POST", "/gc", command(forward("CompactMemory"))),
    Route("GET", "/heapstats", _heapstats),
]
