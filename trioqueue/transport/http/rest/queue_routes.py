"""bunqueue's ``/queues`` REST routes: producing and pulling, listing, counts, queue
control, the DLQ, limits and per-queue settings (reference section 7.1).

Each route runs the command bunqueue's runs with the fields bunqueue's forwards, and
answers bunqueue's status: its pull, listing, count and queue-control routes answer
200 whatever the reply (a refusal reads ``ok: false`` in the body), the push routes
and the DLQ, limit and settings routes 400 on ``ok: false``. HTTP pulls are not tied
to the request's connection (see :mod:`..commands`).
"""

from __future__ import annotations

import numbers
from typing import Any

from ....core.caller_options import push_fields
from ....core.errors import Refused
from .api import Call, InvalidBody, Response, Route, RunCommand, command
from .requests import forward, parse_int, picked, query_ints

_Q = "/queues/{queue}"

# The PUSH fields ``POST /queues/{queue}/jobs`` forwards (bunqueue forwards these and
# ignores any other key of the body).
PUSH_FIELDS = ("data", "priority", "delay", "backoff", "timeout", "jobId",
               "removeOnComplete", "removeOnFail", "durable", "ttl", "uniqueKey",
               "groupId", "dependsOn", "tags", "lifo", "repeat")


def _opts(job: dict[str, Any], custom_id_key: str, prefix: str = "") -> dict[str, Any]:
    """The PUSH fields of the body's ``opts`` (bunqueue's SDK option names; beyond
    bunqueue's REST push, which ignores ``opts``); one that is not a map is 400."""
    try:
        return push_fields(job.get("opts"), custom_id_key)
    except Refused as exc:
        raise InvalidBody(prefix + exc.message) from None


def _push(call: Call) -> dict[str, Any]:
    """PUSH with bunqueue's forwarded fields, over what ``opts`` sets (a top-level field
    keeps its meaning and wins); the values are judged by PUSH's validator."""
    body = call.object()
    msg: dict[str, Any] = {"cmd": "PUSH", "queue": call.params["queue"]}
    msg.update(_opts(body, "jobId"))
    name = body.get("name")
    msg["name"] = name if isinstance(name, str) else "default"
    # a top-level null is "not given": it leaves what opts set
    msg.update((key, value) for key, value in picked(body, PUSH_FIELDS).items()
               if value is not None or key not in msg)
    attempts = body.get("maxAttempts", body.get("attempts"))
    if attempts is not None:
        msg["maxAttempts"] = attempts
    return msg


def _bulk_job(job: Any, index: int) -> Any:
    """One PUSHB job: its fields over what its ``opts`` sets, its name ``default``
    unless a string; an item that is not an object is left to PUSHB to refuse."""
    if not isinstance(job, dict):
        return job
    fields = _opts(job, "customId", f"jobs[{index}]: ")
    fields.update((key, value) for key, value in job.items() if key != "opts")
    fields["name"] = job["name"] if isinstance(job.get("name"), str) else "default"
    return fields


def _push_bulk(call: Call) -> dict[str, Any]:
    """PUSHB with every job forwarded whole (see :func:`_bulk_job`); a ``jobs`` that is
    not a list is left to PUSHB's own validation to refuse."""
    jobs = call.object().get("jobs")
    if jobs is None:
        jobs = []
    if isinstance(jobs, list):
        jobs = [_bulk_job(job, index) for index, job in enumerate(jobs)]
    return {"cmd": "PUSHB", "queue": call.params["queue"], "jobs": jobs}


def _pull(call: Call) -> dict[str, Any]:
    """The long-poll wait is ``parseInt(timeout ?? "0")``; PULL refuses a bad one."""
    return {"cmd": "PULL", "queue": call.params["queue"],
            "timeout": parse_int(call.arg("timeout") or "0")}


def _list_jobs(call: Call) -> dict[str, Any]:
    """GetJobs: the states of every ``state``, ``status`` and ``states`` parameter,
    each a comma-separated list; one state is sent as a string, several as a list."""
    states = [part.strip() for name in ("state", "status", "states")
              for value in call.query.get(name, []) for part in value.split(",")]
    states = [state for state in states if state]
    msg: dict[str, Any] = {"cmd": "GetJobs", "queue": call.params["queue"]}
    if states:
        msg["state"] = states[0] if len(states) == 1 else states
    msg.update(query_ints(call, ("limit", "offset")))
    return msg


def _clean(call: Call) -> dict[str, Any]:
    """Clean with ``grace`` 0 unless the body gives a number."""
    body = call.object(optional=True)
    grace = body.get("grace")
    is_number = isinstance(grace, numbers.Real) and not isinstance(grace, bool)
    return {"cmd": "Clean", "queue": call.params["queue"],
            "grace": grace if is_number else 0, **picked(body, ("state", "limit"))}


def _dlq(call: Call) -> dict[str, Any]:
    """Dlq, one page: ``limit``, ``offset`` and (beyond bunqueue, for the dashboard's
    listing by reason and age) ``reason``, ``olderThan`` and ``newerThan`` are the
    page's ``filter``; the command checks them as it checks a TCP client's."""
    page: dict[str, Any] = query_ints(call, ("limit", "offset", "olderThan", "newerThan"))
    reason = call.arg("reason")
    if reason:
        page["reason"] = reason
    msg: dict[str, Any] = {"cmd": "Dlq", "queue": call.params["queue"]}
    if page:
        msg["filter"] = page
    return msg


def _concurrency(call: Call) -> dict[str, Any]:
    """SetConcurrency from ``{concurrency}`` or ``{limit}``."""
    body = call.object()
    limit = body.get("concurrency", body.get("limit"))
    msg: dict[str, Any] = {"cmd": "SetConcurrency", "queue": call.params["queue"]}
    if limit is not None:
        msg["limit"] = limit
    return msg


def _config(cmd: str) -> Any:
    """Set{Stall,Dlq}Config from ``{config: {...}}`` or the settings as the body."""

    def build(call: Call) -> dict[str, Any]:
        body = call.object()
        config = body["config"] if isinstance(body.get("config"), dict) else body
        return {"cmd": cmd, "queue": call.params["queue"], "config": config}

    return build


async def _summary(call: Call, run: RunCommand) -> Response:
    """A bare array ``[{name, paused, counts}]``, one item per queue: its counts and
    whether it is paused (two commands per queue)."""
    listed = await run({"cmd": "ListQueues"})
    items = []
    for name in listed.get("queues") or []:
        counts = await run({"cmd": "GetJobCounts", "queue": name})
        paused = await run({"cmd": "IsPaused", "queue": name})
        items.append({"name": name, "paused": bool(paused.get("paused")),
                      "counts": counts.get("counts") or {}})
    return Response(200, items)


# The fields of a worker as ``GET /queues/{queue}/workers`` shows it.
_WORKER_FIELDS = ("id", "name", "queues", "concurrency", "registeredAt", "lastSeen",
                  "activeJobs", "processedJobs", "failedJobs")


async def _queue_workers(call: Call, run: RunCommand) -> Response:
    """The active (not stale) workers that serve the queue."""
    queue = call.params["queue"]
    reply = await run({"cmd": "ListWorkers"})
    workers = (reply.get("data") or {}).get("workers") or []
    shown = [{key: worker.get(key) for key in _WORKER_FIELDS} for worker in workers
             if queue in (worker.get("queues") or []) and worker.get("status") == "active"]
    return Response(200, {"ok": True, "workers": shown})


def _queue(cmd: str, *body: str, always_ok: bool = False) -> Any:
    """A command on the path's queue, with ``body``'s fields."""
    return command(forward(cmd, "queue", body=body), always_ok=always_ok)


def _always_ok(cmd: str, *body: str) -> Any:
    """A queue route bunqueue answers 200 whatever the reply says (its counts, listing
    and control routes: a refusal reads ``ok: false`` in a 200 body)."""
    return _queue(cmd, *body, always_ok=True)


QUEUE_ROUTES: list[Route] = [
    Route("GET", "/queues", command(forward("ListQueues"), always_ok=True)),
    Route("GET", "/queues/summary", _summary),
    Route("POST", _Q + "/jobs", command(_push)),
    Route("GET", _Q + "/jobs", command(_pull, always_ok=True), changes_state=True),
    Route("POST", _Q + "/jobs/bulk", command(_push_bulk)),
    Route("POST", _Q + "/jobs/pull-batch", command(forward(
        "PULLB", "queue", body=("count", "timeout", "owner", "lockTtl")), always_ok=True)),
    Route("GET", _Q + "/jobs/list", command(_list_jobs, always_ok=True)),
    Route("GET", _Q + "/workers", _queue_workers),
    Route("GET", _Q + "/counts", _always_ok("GetJobCounts")),
    Route("GET", _Q + "/count", _always_ok("Count")),
    Route("GET", _Q + "/priority-counts", _always_ok("GetCountsPerPriority")),
    Route("GET", _Q + "/paused", _always_ok("IsPaused")),
    Route("POST", _Q + "/pause", _always_ok("Pause")),
    Route("POST", _Q + "/resume", _always_ok("Resume")),
    Route("POST", _Q + "/drain", _always_ok("Drain")),
    Route("POST", _Q + "/obliterate", _always_ok("Obliterate")),
    Route("POST", _Q + "/clean", command(_clean, always_ok=True)),
    Route("POST", _Q + "/promote-jobs", _always_ok("PromoteJobs", "count")),
    Route("POST", _Q + "/retry-completed", _always_ok("RetryCompleted", "id")),
    Route("GET", _Q + "/dlq/stats", _queue("GetDlqStats")),
    Route("GET", _Q + "/dlq", command(_dlq)),
    Route("POST", _Q + "/dlq/retry", _queue("RetryDlq", "jobId", "count", "filter")),
    Route("POST", _Q + "/dlq/purge", _queue("PurgeDlq")),
    Route("PUT", _Q + "/rate-limit", _queue("RateLimit", "limit", "duration", "ttl")),
    Route("DELETE", _Q + "/rate-limit", _queue("RateLimitClear")),
    Route("PUT", _Q + "/concurrency", command(_concurrency)),
    Route("DELETE", _Q + "/concurrency", _queue("ClearConcurrency")),
    Route("GET", _Q + "/stall-config", _queue("GetStallConfig")),
    Route("PUT", _Q + "/stall-config", command(_config("SetStallConfig"))),
    Route("GET", _Q + "/dlq-config", _queue("GetDlqConfig")),
    Route("PUT", _Q + "/dlq-config", command(_config("SetDlqConfig"))),
]
