"""The stall detector and processing timeouts.

The detector never walks the queue: :class:`StallWatch` keeps the active jobs ordered by
their last heartbeat (a :class:`~trioqueue.core.chained_order.ChainedOrder` per stall
limit, an ordered map that never copies itself whole as it grows; a heartbeat moves a
job to the end in O(1)), so a sweep reads only the jobs whose heartbeat is older than their limit,
oldest first, and stops at the first fresh one. A sweep handles at most
``STALL_SWEEP_MAX_JOBS`` jobs and stalls at most ``STALL_SWEEP_MAX_STALLED`` of them;
when it has more, the next sweep comes at once (in a later step, so other queues are
served in between) rather than after ``STALL_CHECK_MS``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .. import attempts as at
from ..chained_order import ChainedOrder
from ..job import ACTIVE, JobRecord
from ..split_heap import SplitHeap
from . import consuming, dependencies
from .leases import is_overlap_job, lease_deadline

if TYPE_CHECKING:
    from .state import QueueState

STALL_CHECK_MS = 5_000
# Jobs one sweep examines at most: a million stale jobs are handled in slices, with
# other queues served between them. Suspecting a job costs about 1 us, stalling one
# (attempt charged, event, retry or burial, its write) about 14 us, measured in
# process: so a sweep suspects up to 5,000 (5 ms) but stalls at most 300 (4 ms).
STALL_SWEEP_MAX_JOBS = 5_000
STALL_SWEEP_MAX_STALLED = 300


def set_stall_config(q: QueueState, config: dict[str, Any]) -> None:
    q.settings.stall.update(config)
    q.store_settings()


class Timeouts:
    """When the queue next looks at its active jobs: the processing deadlines of jobs
    with a ``timeout`` (a heap with stale entries, skipped by their start time) and the
    next sweep of the stall detector. The only writer of both."""

    __slots__ = ("_heap", "stall_check_at")

    def __init__(self) -> None:
        self._heap: SplitHeap[tuple[int, str, int]] = SplitHeap()  # (deadline, id, startedAt)
        self.stall_check_at: int | None = None  # None: nothing active to sweep

    def watch(self, job: JobRecord, now: int) -> None:
        """A job just became active: arm the stall sweep and its processing deadline."""
        if self.stall_check_at is None:
            self.stall_check_at = now + STALL_CHECK_MS
        if job.timeout:
            # As a lease: never before ``timeout`` ms have passed on the ms clock
            self._heap.push((lease_deadline(now, job.timeout), job.id, now))

    def arm_stall_check(self, now: int) -> None:
        """An active job came back (a restart): the sweep runs a check interval on."""
        if self.stall_check_at is None:
            self.stall_check_at = now + STALL_CHECK_MS

    def hold(self, until: int) -> None:
        """The broker's own pause is forgiven until ``until``: the sweep waits as long."""
        if self.stall_check_at is not None and self.stall_check_at < until:
            self.stall_check_at = until

    def stall_check_due(self, now: int) -> bool:
        return self.stall_check_at is not None and now >= self.stall_check_at

    def stall_checked(self, now: int, more: bool, active: bool) -> None:
        """After a sweep: the next one at once with work left (in a later step), a check
        interval on while jobs are active, else none."""
        self.stall_check_at = (now + 1 if more else now + STALL_CHECK_MS
                               if active else None)

    def timeout_due(self, now: int) -> bool:
        top = self._heap.first()
        return top is not None and top[0] <= now

    def expired(self, now: int) -> Iterator[tuple[str, int]]:
        """The deadlines that came by ``now``, each popped: (job id, its startedAt)."""
        heap = self._heap
        while (top := heap.first()) is not None and top[0] <= now:
            heap.pop()
            yield top[1], top[2]

    def next_wakeup(self) -> int | None:
        at = self.stall_check_at
        top = self._heap.first()
        if top is not None and (at is None or top[0] < at):
            return top[0]
        return at

    def sweep(self, keep: Callable[[tuple[int, str, int]], bool]) -> Iterator[int]:
        """Drop the deadlines ``keep`` refuses, a list of the heap at a time (Compact
        Memory); yields how many each dropped."""
        heap = self._heap
        for _ in range(len(heap.chunk_lengths())):
            yield heap.sweep(keep)

    def trim(self, entries: int) -> bool:
        """Drop up to ``entries`` of an all-stale heap (after an Obliterate)."""
        return self._heap.trim(entries)

    def __len__(self) -> int:
        """The deadlines held, stale ones included."""
        return len(self._heap)


class StallWatch:
    """Active jobs by last heartbeat, and the suspects of earlier sweeps.

    A job is in exactly one place while it is active: the ordered dict of its stall
    limit (the queue's interval, or its own ``stallTimeout``) or ``suspects`` (stale at a
    sweep; when it is still stale a sweep ``STALL_CHECK_MS`` later, it has stalled).
    Heartbeats are stamped with the wall clock, so a clock stepped back can put a newer
    stamp before an older one; such a job is then examined one sweep late, never lost.
    """

    __slots__ = ("by_limit", "suspects")

    def __init__(self) -> None:
        # None: the queue's stallInterval; a number: jobs with that stallTimeout.
        self.by_limit: dict[float | None, ChainedOrder[None]] = {None: ChainedOrder()}
        self.suspects: ChainedOrder[int] = ChainedOrder()  # id -> suspected at (ms)

    def enter(self, job: JobRecord) -> None:
        order = self.by_limit.get(job.stall_timeout)
        if order is None:
            order = self.by_limit[job.stall_timeout] = ChainedOrder()
        order[job.id] = None

    def leave(self, job: JobRecord) -> None:
        order = self.by_limit.get(job.stall_timeout)
        if order is None or order.pop(job.id, 0) is not None:  # not there: a suspect
            self.suspects.pop(job.id, None)

    def beat(self, job: JobRecord, now: int) -> None:
        """The job showed life: stamp it and move it to the fresh end of its order."""
        job.last_heartbeat = now
        order = self.by_limit[job.stall_timeout]
        if job.id in order:
            order.move_to_end(job.id)
        elif self.suspects.pop(job.id, None) is not None:
            order[job.id] = None

    def clear(self) -> None:
        for order in self.by_limit.values():
            order.clear()
        self.suspects.clear()


def check_stalls(q: QueueState, now: int) -> bool:
    """bunqueue's heartbeat stall detector, run every STALL_CHECK_MS; True when work is
    left for a sweep right after this one (the per-sweep bound was reached).

    An active job whose last heartbeat (pull, progress, token-less heartbeat or lock
    renewal) is older than its stall interval, past the grace period after it
    started, is a suspect; a suspect still stale ``STALL_CHECK_MS`` later has stalled:
    an attempt and a stall are charged, then it is retried with backoff, or buried
    once a bound is reached. Two sweeps, so one late heartbeat is not a stall.
    """
    cfg = q.settings.stall
    watch = q.stall_watch
    if not (cfg["enabled"] and q.c.active):
        _unsuspect_all(q, watch)
        return False
    grace, interval = cfg["gracePeriod"], cfg["stallInterval"]
    budget = STALL_SWEEP_MAX_JOBS
    stall_budget = STALL_SWEEP_MAX_STALLED
    stalled: list[JobRecord] = []
    suspects = watch.suspects
    while suspects and budget and stall_budget:
        job_id, since = suspects.first()
        if now - since < STALL_CHECK_MS:
            break
        budget -= 1
        job = q.jobs[job_id]
        limit = job.stall_timeout if job.stall_timeout is not None else interval
        del suspects[job_id]
        if now - job.last_heartbeat > limit:
            # Back in its order until it leaves ACTIVE (leave() finds it there).
            watch.by_limit[job.stall_timeout][job_id] = None
            stalled.append(job)
            stall_budget -= 1
        else:  # the configuration changed: not stale any more, keep its age
            watch.by_limit[job.stall_timeout][job_id] = None
            watch.by_limit[job.stall_timeout].move_to_end(job_id, last=False)
    if not stall_budget:  # suspects left to settle: the new ones wait for that
        budget = 0
    for key, order in watch.by_limit.items():
        limit = interval if key is None else key
        for job_id in list(_stale_prefix(q, order, now, limit, budget)):
            job = q.jobs[job_id]
            budget -= 1
            # Within its grace period a job is not suspected yet (it stays in place).
            if job.started_at is not None and now - job.started_at >= grace:
                del order[job_id]
                suspects[job_id] = now
    for job in stalled:
        if is_overlap_job(job):
            dependencies.drop_queued(q, job, now)  # a cron's next firing replaces it
            continue
        decision = at.charge(job, at.Cause.STALL, q.max_stalls)
        if decision.action == at.BURY:
            q.emit("stalled", job.id, now,
                    data={"stallCount": job.stall_count, "action": "failed"})
            consuming.bury(q, job, now, decision.reason or "", decision.error, emit=False)
        else:
            q.emit("stalled", job.id, now,
                    data={"stallCount": job.stall_count, "action": "retried"})
            consuming.retry_later(q, job, now)
    return budget <= 0


def _stale_prefix(q: QueueState, order: ChainedOrder[None], now: int, limit: float,
                  budget: int) -> Iterator[str]:
    """The oldest ids of ``order`` whose heartbeat is older than ``limit`` (at most
    ``budget``); the walk stops at the first fresh job."""
    for job_id in order:
        if budget <= 0 or now - q.jobs[job_id].last_heartbeat <= limit:
            return
        budget -= 1
        yield job_id


def _unsuspect_all(q: QueueState, watch: StallWatch) -> None:
    """Detection is off or nothing is active: suspects go back to the front of their
    orders (they are the oldest), so a later sweep starts clean."""
    while watch.suspects:
        job_id, _ = watch.suspects.popitem(last=True)
        order = watch.by_limit[q.jobs[job_id].stall_timeout]
        order[job_id] = None
        order.move_to_end(job_id, last=False)


def expire_timeouts(q: QueueState, now: int) -> None:
    """Fail jobs still active past ``startedAt + timeout`` (reason ``timeout``)."""
    for job_id, started_at in q.timeouts.expired(now):
        job = q.jobs.get(job_id)
        if job is None or job.state != ACTIVE or job.started_at != started_at:
            continue  # finished, or a later delivery with its own deadline
        q.announce("job:timeout", now, jobId=job_id, timeout=job.timeout)
        decision = at.charge(job, at.Cause.TIMEOUT, q.max_stalls)
        error = at.RULES[at.Cause.TIMEOUT].out_of_attempts[1]
        job.add_timeline("failed", now, error=error, attempt=job.attempts)
        if decision.action == at.BURY:
            consuming.bury(q, job, now, decision.reason or "", decision.error)
        else:
            consuming.retry_later(q, job, now)
            q.emit("failed", job_id, now, error=error, data=job.data, terminal=False)
            q.emit("retried", job_id, now, prev="failed")

