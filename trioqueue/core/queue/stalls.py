"""The stall detector and processing timeouts."""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any

from .. import attempts as at
from ..job import ACTIVE, Job

if TYPE_CHECKING:
    from .state import QueueState

STALL_CHECK_MS = 5_000


def set_stall_config(q: QueueState, config: dict[str, Any]) -> None:
    q.settings.stall.update(config)
    q.writes.put_queue_meta(q.name, q.settings.to_meta())


def _watch(q: QueueState, job: Job, now: int) -> None:
    """A job just became active: arm the stall sweep and its processing deadline."""
    if q._next_stall_check is None:
        q._next_stall_check = now + STALL_CHECK_MS
    if job.timeout:
        deadline = math.ceil(now + job.timeout)
        heapq.heappush(q._timeouts, (deadline, job.id, now))


def check_stalls(q: QueueState, now: int) -> None:
    """bunqueue's heartbeat stall detector, run every STALL_CHECK_MS.

    An active job whose last heartbeat (pull, progress, token-less heartbeat or lock
    renewal) is older than its stall interval, past the grace period after it
    started, is a suspect; a suspect on two consecutive sweeps has stalled: an
    attempt and a stall are charged, then it is retried with backoff, or buried
    once a bound is reached. Two sweeps, so one late heartbeat is not a stall.
    """
    cfg = q.settings.stall
    suspects: set[str] = set()
    stalled: list[Job] = []
    if cfg["enabled"] and q.c.active:
        grace, interval = cfg["gracePeriod"], cfg["stallInterval"]
        for job in q.jobs.values():
            if job.state != ACTIVE or job.started_at is None:
                continue
            limit = job.stall_timeout if job.stall_timeout is not None else interval
            if now - job.started_at >= grace and now - job.last_heartbeat > limit:
                (stalled.append(job) if job.id in q._stall_suspects
                 else suspects.add(job.id))
    q._stall_suspects = suspects
    max_stalls = q.max_stalls
    for job in stalled:
        decision = at.charge(job, at.Cause.STALL, max_stalls)
        if decision.action == at.BURY:
            q._emit("stalled", job.id, now,
                    data={"stallCount": job.stall_count, "action": "failed"})
            q._bury(job, now, decision.reason or "", decision.error, emit=False)
        else:
            q._emit("stalled", job.id, now,
                    data={"stallCount": job.stall_count, "action": "retried"})
            q._retry_later(job, now)


def expire_timeouts(q: QueueState, now: int) -> None:
    """Fail jobs still active past ``startedAt + timeout`` (reason ``timeout``)."""
    heap = q._timeouts
    while heap and heap[0][0] <= now:
        _, job_id, started_at = heapq.heappop(heap)
        job = q.jobs.get(job_id)
        if job is None or job.state != ACTIVE or job.started_at != started_at:
            continue  # finished, or a later delivery with its own deadline
        decision = at.charge(job, at.Cause.TIMEOUT, q.max_stalls)
        error = at.RULES[at.Cause.TIMEOUT].out_of_attempts[1]
        job.add_timeline("failed", now, error=error, attempt=job.attempts)
        if decision.action == at.BURY:
            q._bury(job, now, decision.reason or "", decision.error)
        else:
            q._retry_later(job, now)
            q._emit("failed", job_id, now, error=error, data=job.data, terminal=False)
            q._emit("retried", job_id, now, prev="failed")

