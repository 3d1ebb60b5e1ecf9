"""Queue handlers of the read side: waiting for a job, jobs, states, results,
children and dependencies, listings and counts (see :mod:`.jobs`)."""

from __future__ import annotations

from typing import Any

from .. import fields, flows, states
from ..errors import JOB_NOT_FOUND, Refused
from ..job import COMPLETED
from ..queue import AfterQueues, JobWaiter, QueueState, completed_reply, failed_reply
from .context import Ctx, Reply, _opt_int, _token

# ------------------------------------------------------------------ queries


def wait_job(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply | JobWaiter:
    """Settle on the job's final outcome, or ``completed: false`` at the timeout.

    A retried failure does not settle the wait; a job that failed for good answers
    ``completed: false`` with its last error. Past ``max_wait_holds`` parked waits on
    one connection a wait is answered ``completed: false`` at once, so holds never
    starve the connection's other commands (the client simply asks again).
    """
    job_id = fields.job_id(msg.get("id"))
    timeout = fields.wait_timeout(msg.get("timeout"))
    if job_id not in q.jobs:
        record = q.finished.get(job_id)
        if record is None:
            raise Refused(f"Job {job_id} not found")
        if record["state"] == COMPLETED:
            return completed_reply(*q.finished.result(job_id))
        return failed_reply((record.get("dlq") or {}).get("error"))
    if timeout <= 0 or q.held_waits(ctx.conn) >= ctx.max_wait_holds:
        return {"completed": False}
    return JobWaiter(handle=None, job_id=job_id, conn=ctx.conn,
                     deadline_ms=int(ctx.now + timeout))


def get_job(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job = q.job_wire(fields.job_id(msg.get("id")), ctx.now)
    if job is None:
        raise Refused(JOB_NOT_FOUND)
    return {"job": job}


def get_job_by_custom_id(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job = q.job_wire(fields.job_id(msg.get("customId"), "customId"), ctx.now)
    if job is None:
        raise Refused(JOB_NOT_FOUND)
    return {"job": job}


def get_state(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    return {"id": job_id, "state": q.state_of(job_id, ctx.now)}


def get_result(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    found, result = q.finished.result(job_id)
    # No key at all when nothing is stored: a stored null must stay distinguishable.
    return {"id": job_id, "result": result} if found else {"id": job_id}


def get_children_values(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    values = q.children_outcomes(fields.job_id(msg.get("id")), flows.COMPLETED)
    return {"data": {"values": values}}


def get_failed_children_values(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    return {"values": q.children_outcomes(job_id, flows.FAILED, flows.CONTINUE_PARENT)}


def get_ignored_children_failures(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    return {"values": q.children_outcomes(job_id, flows.FAILED, flows.IGNORE_DEPENDENCY)}


DEPENDENCY_TYPES = ("processed", "unprocessed", "failed", "ignored")


def get_dependencies(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    """Our command for BullMQ's ``getDependencies`` / ``getJobDependencies``.

    Without ``type``: all four lists. With ``type``: that list alone, entries
    ``start..end`` (inclusive, ``end`` -1 = to the last), plus ``count``, the total.
    """
    job_id = fields.job_id(msg.get("id"))
    kind = msg.get("type")
    if kind is not None and kind not in DEPENDENCY_TYPES:
        raise Refused("type must be one of processed, unprocessed, failed, ignored")
    deps = q.dependencies(job_id)
    if kind is None:
        return {"data": deps}
    start = _opt_int(msg.get("start"), "start") or 0
    end = _opt_int(msg.get("end"), "end")
    if start < 0:
        raise Refused("start must be at least 0")
    stop = None if end is None or end < 0 else end + 1
    chosen = deps[kind]
    if isinstance(chosen, dict):
        page: Any = dict(list(chosen.items())[start:stop])
    else:
        page = chosen[start:stop]
    return {"data": {kind: page, "count": len(chosen)}}


def get_dependencies_count(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    deps = q.dependencies(fields.job_id(msg.get("id")))
    return {"data": {kind: len(deps[kind]) for kind in DEPENDENCY_TYPES}}


def remove_child_dependency(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"removed": q.remove_child_dependency(fields.job_id(msg.get("id")), ctx.now)}


def remove_unprocessed_children(q: QueueState, msg: dict[str, Any],
                                ctx: Ctx) -> Reply | AfterQueues:
    """Answered once the children's queues removed them and settled the parent here:
    what BullMQ does in one script."""
    queues = q.remove_unprocessed_children(fields.job_id(msg.get("id")))
    return AfterQueues({}, queues) if queues else {}


def update_parent(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    child_id = fields.job_id(msg.get("childId"), "childId")
    parent_id = fields.job_id(msg.get("parentId"), "parentId")
    q.update_parent(child_id, parent_id, ctx.now)
    return {}


def move_to_waiting_children(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    moved = q.move_to_waiting_children(fields.job_id(msg.get("id")), ctx.now, _token(msg))
    return {"data": {"moved": moved}}


def _states(value: Any) -> list[str]:
    if value is None:
        return list(states.VISIBLE_STATES)
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if not isinstance(item, str):
            raise Refused("state must be a string or an array of strings")
        out.append(states.STATE_ALIASES.get(item, item))
    return out


def get_jobs(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    limit = _opt_int(msg.get("limit"), "limit")
    offset = _opt_int(msg.get("offset"), "offset")
    if limit is not None and limit < 0 or offset is not None and offset < 0:
        raise Refused("limit and offset must be at least 0")
    asc = msg.get("asc", True) is not False
    jobs = q.list_jobs(_states(msg.get("state")), ctx.now, asc=asc,
                       offset=offset or 0, limit=100 if limit is None else limit)
    return {"jobs": jobs}


def get_job_counts(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"counts": q.counts(ctx.now)}


def get_counts_per_priority(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"queue": q.name, "counts": q.counts_per_priority()}


def count(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"count": q.queued_count(ctx.now)}


def get_deduplication_job_id(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    key = msg.get("deduplicationId")
    if not isinstance(key, str) or not key:
        raise Refused("deduplicationId is required")
    return {"data": {"jobId": q.dedup_owner(key, ctx.now)}}


def remove_deduplication_key(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    key = msg.get("deduplicationId")
    if not isinstance(key, str) or not key:
        raise Refused("deduplicationId is required")
    return {"data": {"count": 1 if q.release_dedup_key(key, ctx.now) else 0}}


def remove_job_deduplication_key(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    job = q.jobs.get(job_id)
    removed = (job is not None and job.unique_key is not None
               and q.release_dedup_key(job.unique_key, ctx.now, owner_id=job_id))
    return {"data": {"removed": removed}}

