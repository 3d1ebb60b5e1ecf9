"""The dead-letter queue's commands (bunqueue's reference, 2.6 and 4.13): reading the
message, then the queue's rules (``queue/dlq.py``, the bulk ones in slices in
``queue/dlq_work.py``)."""

from __future__ import annotations

from typing import Any

from .. import fields
from ..errors import Refused
from ..job import COMPLETED, FAILED
from ..queue import QueueState, Sliced, dlq_work, moves
from .context import Ctx, Reply


def _count(value: Any, field: str) -> int | None:
    """A count given as a number (a numeric string counts); negative counts as 0."""
    number = fields.lenient_number(value, field)
    if number is None:
        return None
    return max(int(number), 0) if fields.is_finite(number) else None


def _filter(value: Any) -> dlq_work.DlqFilter:
    """The ``filter`` map; a value of the wrong kind is dropped, as bunqueue does."""
    flt = dlq_work.DlqFilter()
    if not isinstance(value, dict):
        return flt
    if isinstance(value.get("reason"), str):
        flt.reason = value["reason"]
    for key, attr in (("olderThan", "older_than"), ("newerThan", "newer_than")):
        instant = fields.coerce_numeric_string(value.get(key))
        if fields.is_number(instant) and fields.is_finite(instant):
            setattr(flt, attr, instant)
    for key in ("retriable", "expired"):
        if isinstance(value.get(key), bool):
            setattr(flt, key, value[key])
    for key in ("limit", "offset"):
        number = fields.coerce_numeric_string(value.get(key))
        if fields.is_number(number) and fields.is_finite(number) and number >= 0:
            setattr(flt, key, int(number))
    return flt


def dlq(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Sliced:
    flt = _filter(msg.get("filter"))
    limit = flt.limit if flt.limit is not None else _count(msg.get("count"), "count")
    limit = dlq_work.DEFAULT_DLQ_PAGE if limit is None else min(limit, dlq_work.MAX_DLQ_PAGE)

    def reply(entries: list[dict[str, Any]]) -> Reply:
        return {"jobs": [entry["job"] for entry in entries], "entries": entries}

    return Sliced(dlq_work.list_dlq(q, flt, limit, ctx.now), reply)


def get_dlq_stats(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"data": {"stats": q.dlq_stats(ctx.now)}}


def retry_dlq(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply | Sliced:
    job_id = msg.get("jobId")
    if job_id is not None:
        job_id = fields.job_id(job_id, "jobId")
        mark = q.dlq.marks.get(job_id)
        if mark is None:
            return {"count": 0}
        record = q.finished.get(job_id)
        if record is None or record.get("state") != FAILED:
            q.dlq.discard(job_id)  # its id went to another job meanwhile
            return {"count": 0}
        if not dlq_work.can_revive(q, record, ctx.now):
            return {"count": 0}
        moves.revive(q, record, ctx.now)
        q.emit("dlq-retried", job_id, ctx.now)
        return {"count": 1}
    flt = _filter(msg.get("filter"))
    count = _count(msg.get("count"), "count")
    if count is None:
        count = flt.limit
    return dlq_work.work(dlq_work.retry_dlq(q, flt, count, ctx.now), "count")


def purge_dlq(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Sliced:
    return dlq_work.work(dlq_work.purge_dlq(q, ctx.now), "count")


def remove_dlq_job(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    if msg.get("jobId") is None:
        raise Refused("jobId is required")
    job_id = fields.job_id(msg.get("jobId"), "jobId")
    return {"data": {"removed": q.remove_dlq_job(job_id, ctx.now)}}


def retry_completed(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply | Sliced:
    cutoff = fields.lenient_number(msg.get("timestamp"), "timestamp")
    job_id = msg.get("id")
    if job_id is not None:
        job_id = fields.job_id(job_id)
        record = q.finished.get(job_id)
        if (record is None or record.get("state") != COMPLETED
                or cutoff is not None and (record.get("completedAt") or 0) > cutoff
                or not dlq_work.can_revive(q, record, ctx.now)):
            return {"count": 0}
        moves.revive(q, record, ctx.now)
        return {"count": 1}
    count = _count(msg.get("count"), "count")
    return dlq_work.work(dlq_work.retry_completed(q, count, cutoff, ctx.now), "count")


def set_dlq_config(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    config = msg.get("config")
    if not isinstance(config, dict):
        raise Refused("config must be an object")
    q.set_dlq_config(config, ctx.now)
    return {}


def get_dlq_config(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"config": q.settings.dlq.to_wire()}
