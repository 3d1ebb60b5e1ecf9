"""Delivering jobs to workers and taking their outcomes: PULL, ACK, ACKB, FAIL, and
the way into the dead-letter queue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import attempts as at
from .. import flows
from .. import states as st
from ..backoff import backoff_delay_ms
from ..errors import Refused
from ..job import ACTIVE, QUEUED, JobRecord
from ..stack_traces import fail_trace
from . import dependencies, dlq, lifecycle, waiters
from .dlq import new_entry
from .leases import lease_deadline
from .limits import allowance, spent
from .repeats import follow as follow_repeat
from .repeats import may_follow
from .room import refuse_unless_room
from .tallies import count_completed, count_failed
from .views import completed_reply, failed_reply

if TYPE_CHECKING:
    from .state import QueueState


def next_ready(q: QueueState, now: int) -> JobRecord | None:
    """Pop the best ready job; drops jobs whose ttl ran out while they waited."""
    lifecycle.promote_due(q, now)
    pop = q.order.pop_ready
    while (entry := pop()) is not None:
        *_, seq, job_id = entry
        job = q.jobs.get(job_id)
        if job is None or job.state != QUEUED or job.seq != seq:
            continue
        if job.ttl is not None and now > job.created_at + job.ttl:
            # ttl bounds time in the queue: an expired job is dropped (no job event;
            # the dashboard hears of it)
            dependencies.drop_queued(q, job, now)
            q.announce("job:expired", now, jobId=job.id, ttl=job.ttl,
                        age=now - job.created_at)
            continue
        return job
    if q.groups.scheduled:  # ungrouped jobs first, then the groups' turns
        return q.groups.claim(q, now)
    return None


def pull(
    q: QueueState,
    now: int,
    *,
    count: int,
    owner: str | None,
    lock_ttl: float,
    conn: Any,
    detach: bool = False,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Deliver up to ``count`` ready jobs; returns (wire jobs, tokens).

    Tokens are only meaningful with an ``owner`` (a lease); a pull without owner
    leaves stall detection as the only recovery. Jobs are remembered against the
    connection so that they go back to the queue if it closes (unless ``detach``).
    """
    jobs: list[dict[str, Any]] = []
    tokens: list[str] = []
    settings = q.settings
    if settings.paused:
        return jobs, tokens
    if settings.gated:
        count = allowance(q, count, now)
    expires = lease_deadline(now, lock_ttl)  # the same for every job of the pull
    grant = q.leases.grant
    timeouts = q.timeouts
    held_by = None if detach and owner is None else conn  # (None: no connection holds it)
    while len(jobs) < count:
        job = next_ready(q, now)
        if job is None:
            break
        # Stamped before the move, so the job enters the stall watch at its fresh end.
        job.started_at = job.last_heartbeat = now
        lifecycle.transition(q, job, st.PULL, now)
        job.add_timeline("active", now)
        token = grant(job.id, owner, held_by, now, expires, lock_ttl)
        q.persist(job)
        if timeouts.stall_check_at is None or job.timeout:  # (called only when it acts)
            timeouts.watch(job, now)
        if q.events_enabled:
            q.emit("pulled", job.id, now)
        jobs.append(job.to_wire())
        tokens.append(token)
    if settings.gated:
        spent(q, len(jobs), now)
    if jobs:
        q.c.pulled += len(jobs)
    if jobs and q.events_enabled and not (q.c.waiting or q.c.prioritized):
        q.emit("drained", "", now)
    return jobs, tokens


def pull_reply(
    q: QueueState, jobs: list[dict[str, Any]], tokens: list[str], *, batch: bool,
    owner: str | None, now: int | None = None
) -> dict[str, Any]:
    """A pull's reply; ``now``: when jobs were just leased (a PULLB of several is then
    told to the dashboard as ``batch:pulled``)."""
    if batch:
        if now is not None and len(jobs) > 1:
            q.announce("batch:pulled", now, count=len(jobs))
        reply: dict[str, Any] = {"jobs": jobs}
        if owner is not None:
            reply["tokens"] = tokens
        return reply
    reply = {"job": jobs[0] if jobs else None}
    if owner is not None:
        reply["token"] = tokens[0] if tokens else None
    return reply


def active_job(q: QueueState, job_id: str) -> JobRecord:
    job = q.jobs.get(job_id)
    if job is None or job.state != ACTIVE:
        raise Refused(f"Job not found or not in processing state: {job_id}")
    return job


def ack(
    q: QueueState,
    job_id: str,
    now: int,
    *,
    token: str | None = None,
    has_result: bool = False,
    result: Any = None,
    remove: bool | None = None,
) -> None:
    job = q.jobs.get(job_id)
    if job is not None and job.state == QUEUED and job.attempts > 0:
        # A late ACK for a job that lock expiry already put back: the work was done,
        # so complete the queued copy instead of running it a second time.
        if may_follow(job):
            refuse_unless_room(q)  # its successor is a new live job
        lifecycle.transition(q, job, st.RECLAIM, now)
        job = active_job(q, job_id)
        q.leases.check(job, token)
    else:
        job = active_job(q, job_id)
        q.leases.check(job, token)
        if may_follow(job):
            refuse_unless_room(q)
    complete(q, job, now, has_result, result, remove)
    count_completed(q.c, 1, now, now - (job.started_at or now))


def complete(q: QueueState, job: JobRecord, now: int, has_result: bool, result: Any,
              remove: bool | None) -> None:
    lifecycle.remove_live(q, job, now)
    if job.repeat is not None:  # the next generation, named in the completed record
        follow_repeat(q, job, now)
    if remove or job.remove_on_complete:
        q.logs.drop(job.id)
        q.writes.delete_job(job.id)
    else:
        lifecycle.move(q, job, st.ACK)
        job.completed_at = now
        job.add_timeline("completed", now)
        q.writes.finish_job(job.to_record(), has_result, result)
    if job.durable:
        q.writes.durable = True
    if remove or job.remove_on_complete:
        q.index.retain_result(job.id, q.name, has_result, result, now)
    # The outcome and the waiters' reply are built only for jobs that have them:
    # this runs once per acknowledged job.
    if q.index.has_dependents(job.id):
        dependencies.settle_dependents(q, job.id, flows.completed_outcome(q.name, has_result,
                                                                result))
    if job.id in q.parked.by_job:
        waiters.settle(q, job.id, completed_reply(has_result, result))
    if q.events_enabled:
        q.emit("completed", job.id, now, data=result if has_result else None)


def ackb(
    q: QueueState,
    ids: list[str],
    now: int,
    *,
    tokens: list[Any] | None,
    results: list[Any] | None,
    removes: list[Any] | None,
) -> list[int]:
    """Acknowledge many jobs; every token is checked before anything changes.

    Returns the indices that were ignored because the job was not active (a
    duplicate ACK of a finished job is a no-op, not an error, in a batch).
    """
    checked, ignored = q.ackb_check(ids, tokens)
    q.ackb_apply(checked, now, results=results, removes=removes)
    return ignored


def ackb_check(q: QueueState, ids: list[str], tokens: list[Any] | None
               ) -> tuple[list[tuple[int, JobRecord]], list[int]]:
    """The first half of :func:`ackb`, which changes nothing: the jobs to acknowledge
    (index, job), their tokens checked (``Refused`` at the first wrong one), and the
    indices to ignore."""
    checked: list[tuple[int, JobRecord]] = []
    ignored: list[int] = []
    seen: set[str] = set()
    check = q.leases.check
    for i, job_id in enumerate(ids):
        if job_id in seen:  # the same job twice in one batch: ACKed once
            ignored.append(i)
            continue
        seen.add(job_id)
        job = q.jobs.get(job_id)
        if job is None or job.state != ACTIVE:
            if job is not None and job.state == QUEUED and job.attempts > 0:
                checked.append((i, job))
                continue
            ignored.append(i)
            continue
        check(job, tokens[i] if tokens is not None else None)
        checked.append((i, job))
    successors = sum(1 for _, job in checked if job.repeat is not None and may_follow(job))
    if successors:
        refuse_unless_room(q, successors)  # the whole batch, as a PUSHB is
    return checked, ignored


def ackb_apply(q: QueueState, checked: Sequence[tuple[int, JobRecord]], now: int, *,
               results: list[Any] | None, removes: list[Any] | None) -> None:
    """The second half of :func:`ackb`: complete the jobs :func:`ackb_check` passed (a
    part of them at a time, for a batch acknowledged in slices)."""
    started = 0  # the jobs' pull times summed (tallies: their run time, once a batch)
    for i, job in checked:
        if job.state == QUEUED:
            lifecycle.transition(q, job, st.RECLAIM, now)
        has_result = results is not None
        result = results[i] if results is not None else None
        remove = bool(removes[i]) if removes is not None and removes[i] is True else None
        complete(q, job, now, has_result, result, remove)
        started += job.started_at or now
    if checked:
        count_completed(q.c, len(checked), now, len(checked) * now - started)


def fail(
    q: QueueState,
    job_id: str,
    now: int,
    *,
    token: str | None = None,
    error: str | None = None,
    stack: list[str] | None = None,
    trace: Any = None,
    unrecoverable: bool = False,
    remove_on_fail: bool | None = None,
) -> bool:
    """Fail one attempt; False (not applied) for a late FAIL of a requeued job.

    ``trace``: the ``stack`` as sent, kept whole (its tail) in the DLQ entry if this
    attempt buries the job; read only then, so a retried FAIL pays nothing for it.

    Lock expiry already charged that attempt and put the job back, so bunqueue
    answers such a FAIL ``already-finalized`` rather than with an error.
    """
    job = q.jobs.get(job_id)
    if job is not None and job.state == QUEUED and job.attempts > 0:
        return False
    job = active_job(q, job_id)
    q.leases.check(job, token)
    decision = at.charge(job, at.Cause.FAIL, q.max_stalls, unrecoverable=unrecoverable,
                         error=error)
    if stack is not None:
        limit = int(job.stack_trace_limit) if job.stack_trace_limit else 0
        lines = [s.strip() for s in stack[:100] if isinstance(s, str) and s.strip()]
        job.stacktrace = lines[:limit] if limit > 0 else None
    job.add_timeline("failed", now, error=error, attempt=job.attempts)
    if decision.action != at.BURY:
        retry_later(q, job, now)
        q.emit("failed", job.id, now, error=error, data=job.data, terminal=False)
        q.emit("retried", job.id, now, prev="failed")
        return True
    if remove_on_fail or job.remove_on_fail:
        lifecycle.remove_live(q, job, now)
        count_failed(q, now)
        q.logs.drop(job.id)
        q.writes.delete_job(job.id)
        dependencies.child_failed(q, job, error)
        waiters.settle(q, job.id, failed_reply(error))
        q.emit("failed", job.id, now, error=error, data=job.data, terminal=True)
        return True
    bury(q, job, now, decision.reason or "", decision.error, trace=fail_trace(trace))
    return True


def retry_later(q: QueueState, job: JobRecord, now: int) -> None:
    """Active -> queued after a charged attempt, back after the job's backoff."""
    q.leases.release(job.id)
    lifecycle.count(q, job, -1, now)
    lifecycle.move(q, job, st.RETRY)
    job.started_at = None
    job.run_at = now + backoff_delay_ms(job.backoff, job.backoff_config, job.attempts)
    job.add_timeline("waiting", now)
    lifecycle.enqueue(q, job, now)
    q.persist(job)


def bury(q: QueueState, job: JobRecord, now: int, reason: str, error: str | None,
          counted: bool = True, emit: bool = True, trace: list[str] | None = None) -> None:
    """Move a job to the dead-letter queue (state FAILED, kept in storage); ``trace``:
    the whole stack of a failing FAIL, for the entry (see :func:`.dlq.new_entry`)."""
    if counted:
        lifecycle.remove_live(q, job, now)
    else:
        q.jobs.pop(job.id, None)
        q.index.remove(job.id)
        q.dedup.release(job)
        for child_id in job.pending or ():
            q.index.drop_dependent(child_id, job.id)
    lifecycle.move(q, job, st.BURY)
    count_failed(q, now)
    job.dlq = new_entry(job, now, reason, error, trace)
    job.add_timeline("failed", now, error=error)
    job.pending = None
    q.writes.finish_job(job.to_record(), False)
    dlq.dlq_enter(q, job, now)
    dependencies.child_failed(q, job, error)
    waiters.settle(q, job.id, failed_reply(error))
    if emit:
        q.emit("failed", job.id, now, error=error, data=job.data, terminal=True)

