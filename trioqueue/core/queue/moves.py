"""Manual moves: cancel, update, change priority or delay, promote, move to wait,
retry from the DLQ, discard."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import flows
from .. import states as st
from ..errors import JOB_NOT_FOUND, Refused
from ..job import ACTIVE, FAILED, QUEUED, WAITING_CHILDREN, JobRecord
from . import consuming, dependencies, leases, lifecycle, slices
from .repeats import pending_successor
from .room import refuse_unless_room
from .slices import Sliced

if TYPE_CHECKING:
    from .state import QueueState


def queued(q: QueueState, job_id: str, error: str) -> JobRecord:
    job = q.jobs.get(job_id)
    if job is None or job.state != QUEUED:
        raise Refused(error)
    return job


def reschedule(q: QueueState, job: JobRecord, now: int, **changes: Any) -> None:
    """Change how a QUEUED job sorts (priority, lifo, runAt) and put it back.

    Its old heap entries go stale (a new seq), exactly as after a requeue.
    """
    lifecycle.count(q, job, -1, now)
    for attr, value in changes.items():
        setattr(job, attr, value)
    lifecycle.enqueue(q, job, now)
    q.persist(job)


def cancel(q: QueueState, job_id: str, now: int) -> None:
    """Remove a job that has not started (queued or waiting for children)."""
    job = q.jobs.get(job_id)
    if job is None or job.state not in (QUEUED, WAITING_CHILDREN):
        raise Refused("Job not found or cannot be cancelled")
    dependencies.drop_queued(q, job, now)
    q.emit("removed", job_id, now, prev="waiting")


def update_data(q: QueueState, job_id: str, data: Any) -> None:
    """New data for a live job; the flow keys the broker and the flow producers
    wrote (``__parentId``, ...) survive, and new data cannot forge them."""
    job = q.jobs.get(job_id)
    if job is None:  # a completed repeat job: its pending successor takes the data
        job = pending_successor(q, job_id)
    if job is None or job.state not in (QUEUED, ACTIVE, WAITING_CHILDREN):
        raise Refused("Job not found or cannot be updated")
    if isinstance(job.data, dict) and isinstance(data, dict):
        kept = {k: job.data[k] for k in flows.FLOW_DATA_KEYS if k in job.data}
        if kept or any(k in data for k in flows.FLOW_DATA_KEYS):
            data = {k: v for k, v in data.items() if k not in flows.FLOW_DATA_KEYS}
            data.update(kept)
    job.data = data
    q.persist(job)


def change_priority(q: QueueState, job_id: str, now: int, priority: float,
                    lifo: bool | None) -> None:
    job = queued(q, job_id, "Job not found or not in queue")
    reschedule(q, job, now, priority=priority,
                     lifo=job.lifo if lifo is None else lifo)


def promote(q: QueueState, job_id: str, now: int) -> None:
    job = q.jobs.get(job_id)
    if job is None or job.state != QUEUED or job.run_at <= now:
        raise Refused("Job not found or not delayed")
    reschedule(q, job, now, run_at=now)


def promote_jobs(q: QueueState, now: int, count: int | None) -> int:
    """Promote at once (see :func:`.slices.promote_jobs`; the actor runs it in slices)."""
    return int(q.promote_jobs_work(now, count).run())


def promote_jobs_work(q: QueueState, now: int, count: int | None) -> Sliced:
    return Sliced(slices.promote_jobs(q, now, count), lambda n: {"count": n})


def change_delay(q: QueueState, job_id: str, now: int, delay: float, token: str | None,
                 *, active_only: bool = False) -> None:
    """runAt = now + delay: in place for a queued job; an active job (token rule)
    goes back to the queue, its slot and lock released, no attempt charged.

    ``active_only`` is MoveToDelayed, which answers in bunqueue's words (``Job is not
    active (current state: X)``) for a job it cannot move. It moves a queued job in
    place too: a job that holds no lock is moved administratively, as bunqueue does.
    """
    job = q.jobs.get(job_id)
    if job is None:
        if not active_only:
            raise Refused("Job not found or cannot change delay")
        record = q.finished.get(job_id)
        if record is None:
            raise Refused(JOB_NOT_FOUND)
        raise Refused(f"Job is not active (current state: {record['state']})")
    if job.state == ACTIVE:
        q.leases.check(job, token)
        q.leases.release(job.id)
        lifecycle.count(q, job, -1, now)
        lifecycle.move(q, job, st.RELEASE)
        job.started_at = None
        job.run_at = int(now + delay)
        job.add_timeline("delayed", now)
        lifecycle.enqueue(q, job, now)
        q.persist(job)
        q.emit("delayed", job_id, now, delay=float(delay))
        return
    if job.state != QUEUED:
        if active_only:
            state = st.visible_state(job.state, job.run_at, job.priority, now)
            raise Refused(f"Job is not active (current state: {state})")
        raise Refused("Job not found or cannot change delay")
    reschedule(q, job, now, run_at=int(now + delay))
    q.emit("delayed", job_id, now, delay=float(delay))


def move_to_wait(q: QueueState, job_id: str, now: int, token: str | None) -> None:
    job = q.jobs.get(job_id)
    if job is None:
        record = q.finished.get(job_id)
        if record is None:
            raise Refused(JOB_NOT_FOUND)
        if record["state"] != FAILED:
            raise Refused(
                f"Cannot move job from state '{record['state']}' to waiting")
        revive(q, record, now)
        return
    if job.state == ACTIVE:
        q.leases.check(job, token)
        job.run_at = now
        leases.requeue(q, job, now)
        q.emit("waiting", job_id, now, prev="active")
    elif job.state == QUEUED:
        if job.run_at > now:
            reschedule(q, job, now, run_at=now)
    else:
        state = st.visible_state(job.state, job.run_at, job.priority, now)
        raise Refused(f"Cannot move job from state '{state}' to waiting")


def revive(q: QueueState, record: dict[str, Any], now: int,
            carry: dict[str, Any] | None = None) -> None:
    """A dead-lettered (or completed) job becomes a fresh waiting job with the same id
    (bunqueue's DLQ retry, RetryCompleted, MoveToWait of a failed job, the DLQ's
    auto-retry): attempts, stalls and timing start over. Refused with ``Storage full``,
    before it changes anything, when the store has no room for one more live job.
    ``carry``: an auto-retry's count and time, kept on the job for its next entry."""
    job = JobRecord.from_record(record)
    if job.unique_key is not None and q.dedup_owner(job.unique_key, now) is not None:
        raise Refused(f"Unique key {job.unique_key} is held by another job")
    # A live job again: it needs room to be pulled and finished, as a push does.
    refuse_unless_room(q)
    lifecycle.move(q, job, st.REVIVE)
    job.attempts = job.stall_count = 0
    job.run_at = job.last_heartbeat = now
    job.started_at = job.completed_at = None
    job.dlq = carry
    job.dedup_lost = False
    job.add_timeline("waiting", now)
    q.writes.delete_job(job.id)
    q.dlq.discard(job.id)
    q.jobs[job.id] = job
    q.index.add(job.id, q.name)
    if job.unique_key is not None:
        ttl = job.deduplication_ttl
        job.dedup_expires_at = None if ttl is None else now + ttl
        q.dedup.claim(job.unique_key, job)
    lifecycle.enqueue(q, job, now)
    q.persist(job)
    q.emit("waiting", job.id, now, prev="failed")


def discard(q: QueueState, job_id: str, now: int, token: str | None) -> None:
    """Queued or active -> the dead-letter queue (reason ``unknown``)."""
    job = q.jobs.get(job_id)
    if job is None or job.state not in (QUEUED, ACTIVE):
        raise Refused(JOB_NOT_FOUND)
    if job.state == ACTIVE:
        q.leases.check(job, token)
    consuming.bury(q, job, now, "unknown", None)

