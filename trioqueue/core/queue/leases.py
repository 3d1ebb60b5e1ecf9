"""Leases: the lock a worker holds on an active job, its renewal and expiry, and the
jobs a connection holds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from .. import attempts as at
from .. import states as st
from ..errors import Refused
from ..job import ACTIVE, JobRecord
from ..split_heap import SplitHeap
from . import slices
from .slices import Sliced, Steps

if TYPE_CHECKING:
    from .state import QueueState


@dataclass(slots=True)
class Lock:
    token: str
    owner: str
    created_at: int
    expires_at: int  # the first clock reading at which it is over (lease_deadline)
    ttl: float
    renewals: int = 0
    # The longest renewal granted beyond ``ttl`` (ExtendLock or a heartbeat with a
    # longer duration), kept with the job's record: see stored_lock.
    longest: float = 0.0


def stored_lock(lock: Lock) -> list[Any]:
    """What a job's record keeps of its lock (its ``lock`` field), so that a broker
    that rebuilds the queue (a cluster's takeover, a queue actor's restart) gives the
    worker that holds the job the same token, and re-leases the job only once that
    worker may no longer hold it (:func:`restore_lock`). Written with the record at the
    pull (and whenever the active job is stored again); a renewal writes nothing, except
    one longer than any granted before, which changes what a holder may have been
    promised."""
    return [lock.token, lock.owner, lock.ttl, lock.expires_at, lock.longest]


def restore_lock(q: QueueState, job: JobRecord, stored: Any, now: int) -> bool:
    """Give an active job rebuilt from its record the lock the record keeps (False: it
    keeps none, or one this code cannot read; the job then has no lock, as before).

    Renewals are not stored, so the lock's true expiry is unknown: the holder may have
    renewed it up to the moment the old owner stopped serving, which is before ``now``.
    So the lock ends at the later of its stored expiry and ``now`` plus the longest
    lease the holder was granted: never before the holder's lease could have run out,
    and at most that long after the rebuild, when the holder is gone too.
    """
    if type(stored) is not list or len(stored) != 5:
        return False
    token, owner, ttl, expires_at, longest = stored
    if (type(token) is not str or not token or type(owner) is not str
            or not all(type(v) in (int, float) for v in (ttl, expires_at, longest))):
        return False
    span = max(ttl, longest)
    expires = max(int(expires_at), lease_deadline(now, span))
    q.locks[job.id] = Lock(token, owner, now, expires, ttl, longest=longest)
    q._lock_heap.push((expires, job.id, token))
    return True


def lease_deadline(now: int, duration: float) -> int:
    """The first clock reading at which a lease of ``duration`` ms taken at ``now`` has
    surely run out: locks are due (expired, no longer renewable) at readings ``>=`` it.

    The broker's clock truncates real time to whole milliseconds, so a lease taken at
    reading ``now`` began at some real instant in ``[now, now + 1)`` and ends in
    ``[now + duration, now + duration + 1)``. A deadline of ``now + duration`` could
    fire at the reading ``now + duration`` up to 1 ms before ``duration`` had passed; the
    first reading past every possible end is ``ceil(now + duration) + 1`` (the ceiling
    for fractional durations). Comparing strictly instead (due when ``now >
    expires_at``) would say the same for whole milliseconds, but this keeps one rule,
    ``<=``, for the heap, the renewal check and the actor's timer. A lease is so never
    early, and at most 1 ms late (2 ms for a fractional duration). A duration of 0 or
    less ends the lease at once, as before (nothing can be early).
    """
    if duration <= 0:
        return now
    return math.ceil(now + duration) + 1


def _check_token(q: QueueState, job: JobRecord, token: Any) -> None:
    """bunqueue's token rule: a lock demands its exact token; no lock, no check."""
    lock = q.locks.get(job.id)
    if lock is None:
        return
    if token is None:
        raise Refused(f"Lock token required for job {job.id}")
    if token != lock.token:
        raise Refused(f"Invalid or expired lock token for job {job.id}")


# Rebuild the lock heap once it holds this many entries more than twice the live locks,
# and only while it is small enough to rebuild and free in a few milliseconds (a larger
# one loses its dead entries at their expiry instead: freeing a million-entry heap in
# one step held other queues for ~100 ms during an Obliterate of 1M active jobs).
LOCK_HEAP_SLACK = 1024
LOCK_HEAP_REBUILD_MAX = 16_384
# Lock-heap entries one tick pops at most (live or dead); the rest in the next steps.
LOCK_EXPIRY_MAX_ENTRIES = 20_000


def _release_resources(q: QueueState, job: JobRecord) -> None:
    if q.locks.pop(job.id, None) is not None:
        # A released lock's heap entry stays until its expiry (30 s by default): at
        # 30k acks/s that is 900k dead entries, each keeping its token and job id.
        # Rebuild from the live locks once most entries are dead (amortised O(1)).
        heap = q._lock_heap
        if (LOCK_HEAP_SLACK < len(heap) <= 4 * LOCK_HEAP_REBUILD_MAX
                and len(heap) > 2 * len(q.locks)):
            q._lock_heap = SplitHeap((lock.expires_at, job_id, lock.token)
                                     for job_id, lock in q.locks.items())
    conn = q.owner_conn.pop(job.id, None)
    if conn is not None:
        jobs = q.conn_jobs.get(conn)
        if jobs is not None:
            jobs.pop(job.id, None)
            if not jobs:
                del q.conn_jobs[conn]


def extend_lock(q: QueueState, job_id: str, now: int, *, token: str | None,
                duration: float) -> bool:
    lock = q.locks.get(job_id)
    job = q.jobs.get(job_id)
    if lock is None or job is None or job.state != ACTIVE:
        return False
    if token is not None and token != lock.token:
        return False
    if lock.expires_at <= now and now >= q._expiry_held_until:
        # Too late to renew (unless the broker's own pause is being forgiven, see
        # hold_expiry); the lock stays so the expiry sweep requeues the job.
        return False
    lock.expires_at = lease_deadline(now, duration)
    lock.renewals += 1
    q.stall_watch.beat(job, now)
    q._lock_heap.push((lock.expires_at, job_id, lock.token))
    if duration > lock.ttl and duration > lock.longest:
        lock.longest = duration  # a longer promise: stored, see stored_lock
        q._persist(job)
    return True


def heartbeat(q: QueueState, job_id: str, now: int, *, token: str | None,
              duration: float | None) -> bool:
    job = q.jobs.get(job_id)
    if job is None or job.state != ACTIVE:
        return False
    if token is not None:
        lock = q.locks.get(job_id)
        if lock is None or lock.token != token:
            return False
        if duration is not None and duration != 0:
            return q.extend_lock(job_id, now, token=token, duration=duration)
        return q.extend_lock(job_id, now, token=token, duration=lock.ttl)
    q.stall_watch.beat(job, now)
    return True


def expire_locks(q: QueueState, now: int) -> None:
    """Requeue (or bury) jobs whose lease ran out: the worker is presumed gone."""
    if now < q._expiry_held_until:
        return  # the broker was paused: holders may still renew (see hold_expiry)
    heap = q._lock_heap
    budget = LOCK_EXPIRY_MAX_ENTRIES  # the rest next step: the heap top is still due
    while budget and (top := heap.first()) is not None and top[0] <= now:
        budget -= 1
        heap.pop()
        _, job_id, token = top
        lock = q.locks.get(job_id)
        if lock is None or lock.token != token or lock.expires_at > now:
            continue
        job = q.jobs[job_id]
        if is_overlap_job(job):
            q._drop_queued(job, now)  # a cron's next firing replaces it
            continue
        decision = at.charge(job, at.Cause.LOCK_EXPIRY, q.max_stalls,
                             renewals=lock.renewals)
        q._release_resources(job)
        q._emit("stalled", job.id, now)
        if decision.action == at.BURY:
            q._bury(job, now, decision.reason or "", decision.error)
        else:
            q._requeue(job, now)
        q._announce("job:lock-expired", now, jobId=job.id, renewalCount=lock.renewals)


def is_overlap_job(job: JobRecord) -> bool:
    """A job of a cron schedule that prevents overlap (its unique key ``cron:<name>``):
    bunqueue deletes it, rather than running it again, when its worker is lost (stall,
    lock expiry, disconnect, restart), since the schedule's next firing replaces it."""
    key = job.unique_key
    return key is not None and key.startswith("cron:")


def hold_expiry(q: QueueState, resumed_at: int, grace_ms: int) -> None:
    """The broker's own loop was paused until ``resumed_at`` (its clock jumped with
    nothing processed: SIGSTOP, a frozen VM): no lock expires before ``resumed_at +
    grace_ms``, and until then a lock that ran out during the pause can still be
    renewed (its token still completes or fails the job), so heartbeats that waited in
    the sockets are applied before any lock is judged. The stall sweep waits as long.
    Locks not renewed by then expire as usual; nothing else changes. Costs nothing per
    job: ``expire_locks`` checks the hold once per tick.
    """
    until = resumed_at + grace_ms
    if until > q._expiry_held_until:
        q._expiry_held_until = until
    if q._next_stall_check is not None and q._next_stall_check < until:
        q._next_stall_check = until


def _requeue(q: QueueState, job: JobRecord, now: int) -> None:
    """Active -> queued with no attempt charged and runAt unchanged (so it goes first)."""
    q._release_resources(job)
    q._count(job, -1, now)
    q._move(job, st.RELEASE)
    job.started_at = None
    job.add_timeline("waiting", now)
    q._enqueue(job, now)
    q._persist(job)


def release_connection(q: QueueState, conn: Any, now: int) -> int:
    """Jobs delivered over a closed connection go back, unless their lock was renewed;
    returns how many went back (the synchronous form of :func:`release_connection_work`)."""
    released: int = release_connection_work(q, conn, now).run()
    return released


def release_connection_work(q: QueueState, conn: Any, now: int, *,
                            answer_parked: bool = False) -> Sliced:
    """The release of a closed connection's jobs, a slice (``slice_jobs``) a step
    (``answer_parked``: its parked requests are answered, see ``drop_waiters``).

    A renewed lock means the worker heartbeats, possibly over another pooled
    connection, so that job is left to lock expiry instead. Requeued in one step, the
    jobs of a connection that closed holding many held every other client for all of
    them; so they go a slice at a time. Nothing else of the queue runs before the last
    slice, so no job is delivered over the closed connection meanwhile.
    """
    def steps() -> Steps:
        q.drop_waiters(conn, answer=answer_parked)
        released = 0
        fill = slices.SliceFill(q)
        while (held := q.conn_jobs.get(conn)):
            # a piece of the ids, copied before they leave the set (_requeue removes
            # each from it, and drops the set once empty)
            piece = list(islice(held, fill.room()))
            for job_id in piece:
                job = q.jobs.get(job_id)
                lock = q.locks.get(job_id)
                if (job is None or job.state != ACTIVE
                        or (lock is not None and lock.renewals > 0)):
                    held.pop(job_id, None)  # left to lock expiry (or gone already)
                    continue
                if is_overlap_job(job):
                    q._drop_queued(job, now)
                    continue
                q._requeue(job, now)
                released += 1
            if held and fill.took(len(piece)):
                yield None
        q.conn_jobs.pop(conn, None)  # (emptied by skips alone, it is still there)
        return released

    return Sliced(steps(), _released_reply)


def _released_reply(released: int) -> dict[str, Any]:
    return {}
