"""Read-only queries: a job, its state, counts, listings."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .. import states as st
from ..job import ACTIVE, COMPLETED, FAILED, WAITING_CHILDREN, JobRecord
from . import lifecycle
from .finished import COUNT
from .listing import mixed_page, window
from .order import page

if TYPE_CHECKING:
    from .state import QueueState


def job_wire(q: QueueState, job_id: str, now: int) -> dict[str, Any] | None:
    job = q.jobs.get(job_id)
    if job is not None:
        wire = job.to_wire()
        wire["state"] = st.visible_state(job.state, job.run_at, job.priority, now)
        return wire
    record = q.finished.get(job_id)
    if record is None:
        return None
    return finished_wire(record)


def state_of(q: QueueState, job_id: str, now: int) -> str:
    job = q.jobs.get(job_id)
    if job is not None:
        return st.visible_state(job.state, job.run_at, job.priority, now)
    record = q.finished.get(job_id)
    return record["state"] if record is not None else st.UNKNOWN


def counts(q: QueueState, now: int) -> dict[str, int]:
    lifecycle.promote_due(q, now)
    c = q.c
    waiting, prioritized, paused = c.waiting, c.prioritized, 0
    if q.settings.paused:
        paused, waiting, prioritized = waiting + prioritized, 0, 0
    return {
        "waiting": waiting,
        "prioritized": prioritized,
        "delayed": c.delayed,
        "active": c.active,
        "completed": q.finished.count(COMPLETED),
        "failed": q.finished.count(FAILED),
        "waiting-children": c.waiting_children,
        "paused": paused,
    }


def queued_count(q: QueueState, now: int) -> int:
    lifecycle.promote_due(q, now)
    return q.c.waiting + q.c.prioritized + q.c.delayed


def counts_per_priority(q: QueueState) -> dict[str, int]:
    return {_priority_key(p): n for p, n in sorted(q.c.by_priority.items())}


LIVE_LISTED = (st.WAITING, st.PRIORITIZED, st.DELAYED, ACTIVE, WAITING_CHILDREN)


def list_jobs(
    q: QueueState, states: Iterable[str], now: int, *, asc: bool, offset: int, limit: int
) -> list[dict[str, Any]]:
    """Jobs in any of ``states``, ordered by (createdAt, id) before paginating.

    Live states are paged from their :class:`~.order.CreationOrder` in O(spans + page);
    one finished state is paged by the store. Only the parts that hold jobs count: a
    listing of every state (GetJobs without one) on a queue without finished jobs is a
    page of its live orders, and on one with only completed (or only failed) jobs and
    nothing live, a page of the store. A listing that mixes finished jobs of both
    states, or finished and live jobs, finds where the page starts in each part by rank
    (:mod:`.listing`, a few rounds of store reads) and merges one page of each.
    """
    wanted = set(states)
    if q.settings.paused:
        # BullMQ semantics: on a paused queue ready jobs are listed as "paused" only.
        listed_paused = st.PAUSED in wanted
        wanted.discard(st.WAITING)
        wanted.discard(st.PRIORITIZED)
        if listed_paused:
            wanted.update((st.WAITING, st.PRIORITIZED))
    lifecycle.promote_due(q, now)  # the places follow time: a due delayed job lists as waiting
    live = [order for state in LIVE_LISTED if state in wanted
            if (order := q.places.of(state)).size]
    finished = [state for state in (COMPLETED, FAILED) if state in wanted]
    if live and finished or len(finished) > 1:
        # The stored counts (O(1), one round of reads for both): an empty part needs
        # no merge.
        q.finished.want([(COUNT, state) for state in finished])
        finished = [state for state in finished if q.finished.count(state)]
    if not finished:
        return [_live_wire(q, q.jobs[job_id], now)
                for _, job_id in page(live, asc=asc, offset=offset, limit=limit)]
    if not live and len(finished) == 1:
        return [finished_wire(record) for record in
                q.finished.list(finished[0], asc=asc, offset=offset, limit=limit)]
    total = sum(o.size for o in live) + sum(q.finished.count(state) for state in finished)
    start, take = window(total, asc=asc, offset=offset, limit=limit)
    if not take:
        return []
    rows = mixed_page(q, live, {state: q.finished.count(state) for state in finished},
                      start=start, take=take)
    if not asc:
        rows.reverse()
    return [_live_wire(q, item, now) if isinstance(item, JobRecord) else finished_wire(item)
            for _, _, item in rows]


def _live_wire(q: QueueState, job: JobRecord, now: int) -> dict[str, Any]:
    wire = job.to_wire()
    wire["state"] = state = st.visible_state(job.state, job.run_at, job.priority, now)
    if q.settings.paused and state in (st.WAITING, st.PRIORITIZED):
        wire["state"] = st.PAUSED
    return wire


def completed_reply(has_result: bool, result: Any) -> dict[str, Any]:
    """WaitJob's answer for a completed job (no ``result`` key when none was stored)."""
    return {"completed": True, "result": result} if has_result else {"completed": True}


def failed_reply(error: str | None) -> dict[str, Any]:
    """WaitJob's answer for a job that failed for good: bunqueue's ``completed: false``,
    plus the last error so a client need not ask again."""
    return {"completed": False, "failed": True, "error": error}


def finished_wire(record: dict[str, Any]) -> dict[str, Any]:
    job = JobRecord.from_record(record)
    wire = job.to_wire()
    wire["state"] = record["state"]
    entry = record.get("dlq")
    if entry is not None:
        # Ours, beside bunqueue's fields: a dead-lettered job's last error and the whole
        # trace of its failing attempt (``stacktrace`` keeps bunqueue's first lines).
        wire["failedReason"] = entry.get("error")
        wire["failedStack"] = entry.get("stack")
    return wire


def _priority_key(priority: float) -> str:
    if isinstance(priority, float) and priority.is_integer():
        return str(int(priority))
    return str(priority)
