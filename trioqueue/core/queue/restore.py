"""Rebuilding one live job of a queue from its stored record after a restart (the
sequence for whole queues is :func:`trioqueue.core.recovery.rebuild`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import attempts as at
from .. import states as st
from ..backoff import backoff_delay_ms
from ..job import ACTIVE, QUEUED, JobRecord
from . import consuming, lifecycle
from .leases import is_overlap_job, restore_lock

if TYPE_CHECKING:
    from .state import QueueState


def restore(q: QueueState, record: dict[str, Any], now: int, *,
            charge_active: bool = True) -> JobRecord:
    """Rebuild one live job from storage after a restart.

    A job that was ACTIVE when the broker died is charged an interrupted attempt and
    a stall, then retried with backoff or buried, as bunqueue's startup recovery does:
    the worker that had it may have done part of the work, so it counts as a try.
    With ``charge_active=False`` (only the queue actor restarted, or another broker
    of a cluster took the queue over: its workers are alive) an active job stays
    active, with the lock its record keeps (same token; the expiry rule is
    :func:`~.leases.restore_lock`'s), so its worker renews and acknowledges it as
    before, and it is re-leased only once that lock runs out.
    """
    job = JobRecord.from_record(record)
    q.jobs[job.id] = job
    q.index.add(job.id, q.name)
    if job.unique_key is not None and not job.dedup_lost:
        q.dedup.claim(job.unique_key, job)
    if job.state == ACTIVE and charge_active and is_overlap_job(job):
        # a cron's job whose worker the crash lost: deleted, the next firing replaces it
        del q.jobs[job.id]
        q.index.remove(job.id)
        q.dedup.release(job)
        q.writes.delete_job(job.id)
        return job
    if job.state == ACTIVE and charge_active:
        decision = at.charge(job, at.Cause.RECOVERY, q.max_stalls)
        job.started_at = None
        if decision.action == at.BURY:
            consuming.bury(q, job, now, decision.reason or "", decision.error, counted=False)
            return job
        lifecycle.move(q, job, st.RETRY)
        job.run_at = now + backoff_delay_ms(job.backoff, job.backoff_config, job.attempts)
        job.add_timeline("waiting", now)
        lifecycle.enqueue(q, job, now)
        q.persist(job)
    elif job.state == QUEUED:
        lifecycle.enqueue(q, job, now, keep_seq=True)
    else:
        q.order.keep_seq(job.seq)
        if job.state == ACTIVE:
            # Only the queue's actor restarted; its workers live on. Their heartbeat
            # clocks restart with it (the stall watch is ordered by arrival), so each
            # worker has a full stall interval to show life again.
            job.last_heartbeat = now
            q.timeouts.arm_stall_check(now)
            lock = record.get("lock")
            if lock is not None:
                restore_lock(q, job, lock, now)
        lifecycle.count(q, job, +1, now)
    return job
