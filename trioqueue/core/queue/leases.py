"""Leases: the lock a worker holds on an active job, its renewal and expiry, and the
jobs a connection holds."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from .. import attempts as at
from .. import states as st
from ..errors import Refused
from ..ids import uuid7
from ..job import ACTIVE, JobRecord
from ..split_dict import SplitDict
from ..split_heap import SplitHeap
from . import consuming, dependencies, lifecycle, slices
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
    q.leases.restore(job.id, Lock(token, owner, now, expires, ttl, longest=longest))
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


# Rebuild the lock heap once it holds this many entries more than twice the live locks,
# and only while it is small enough to rebuild and free in a few milliseconds (a larger
# one loses its dead entries at their expiry instead: freeing a million-entry heap in
# one step held other queues for ~100 ms during an Obliterate of 1M active jobs).
LOCK_HEAP_SLACK = 1024
LOCK_HEAP_REBUILD_MAX = 16_384
# Lock-heap entries one tick pops at most (live or dead); the rest in the next steps.
LOCK_EXPIRY_MAX_ENTRIES = 20_000


class Leases:
    """The leases of a queue's active jobs: each job's lock, the heap of their expiries,
    the hold on expiry after the broker's own pause, and which connection holds which
    jobs. The only writer of those fields, so a lock, its heap entry and its connection
    can never disagree."""

    __slots__ = ("locks", "_heap", "_held_until", "owner_conn", "conn_jobs")

    def __init__(self) -> None:
        self.locks: SplitDict[str, Lock] = SplitDict()  # one per active job
        self._heap: SplitHeap[tuple[int, str, str]] = SplitHeap()  # (expires_at, id, token)
        self._held_until = 0  # no lock expires before (ms): hold_expiry
        # job id -> connection it was delivered to, and each connection's job ids (a map
        # to None: one connection may hold a million, and a set grows as a dict does)
        self.owner_conn: SplitDict[str, Any] = SplitDict()
        self.conn_jobs: dict[Any, SplitDict[str, None]] = {}

    def grant(self, job_id: str, owner: str | None, conn: Any, now: int, expires: int,
              ttl: float) -> str:
        """Lease a job just pulled: a lock (and its token) for an ``owner``, and the
        job remembered against ``conn`` (None: against no connection). Returns the
        token ("" without an owner)."""
        token = ""
        if owner is not None:
            token = uuid7(now)
            self.locks[job_id] = Lock(token, owner, now, expires, ttl)
            self._heap.push((expires, job_id, token))
        if conn is not None:
            self.owner_conn[job_id] = conn
            held = self.conn_jobs.get(conn)
            if held is None:
                held = self.conn_jobs[conn] = SplitDict()
            held[job_id] = None
        return token

    def restore(self, job_id: str, lock: Lock) -> None:
        """A lock rebuilt from a job's record (:func:`restore_lock`)."""
        self.locks[job_id] = lock
        self._heap.push((lock.expires_at, job_id, lock.token))

    def check(self, job: JobRecord, token: Any) -> None:
        """bunqueue's token rule: a lock demands its exact token; no lock, no check."""
        lock = self.locks.get(job.id)
        if lock is None:
            return
        if token is None:
            raise Refused(f"Lock token required for job {job.id}")
        if token != lock.token:
            raise Refused(f"Invalid or expired lock token for job {job.id}")

    def release(self, job_id: str) -> Lock | None:
        """The job is no longer leased: its lock and its connection go."""
        lock = self.locks.pop(job_id, None)
        if lock is not None:
            # A released lock's heap entry stays until its expiry (30 s by default): at
            # 30k acks/s that is 900k dead entries, each keeping its token and job id.
            # Rebuild from the live locks once most entries are dead (amortised O(1)).
            heap = self._heap
            if (LOCK_HEAP_SLACK < len(heap) <= 4 * LOCK_HEAP_REBUILD_MAX
                    and len(heap) > 2 * len(self.locks)):
                self._heap = SplitHeap((held.expires_at, held_id, held.token)
                                       for held_id, held in self.locks.items())
        conn = self.owner_conn.pop(job_id, None)
        if conn is not None:
            jobs = self.conn_jobs.get(conn)
            if jobs is not None:
                jobs.pop(job_id, None)
                if not jobs:
                    del self.conn_jobs[conn]
        return lock

    def renewable(self, lock: Lock, now: int) -> bool:
        """Whether a renewal comes in time (or the broker's own pause is forgiven, see
        :meth:`hold_expiry`); a lock too late stays so the expiry sweep requeues its job."""
        return lock.expires_at > now or now < self._held_until

    def renew(self, job_id: str, lock: Lock, now: int, duration: float) -> None:
        lock.expires_at = lease_deadline(now, duration)
        lock.renewals += 1
        self._heap.push((lock.expires_at, job_id, lock.token))

    def hold_expiry(self, until: int) -> None:
        """No lock expires before ``until`` (see the module's :func:`hold_expiry`)."""
        if until > self._held_until:
            self._held_until = until

    def expired(self, now: int) -> Iterator[tuple[str, Lock]]:
        """The locks that ran out by ``now``, earliest first, each popped from the heap
        (at most ``LOCK_EXPIRY_MAX_ENTRIES`` heap entries, live or dead, per call: the
        rest next step, the heap top still due). None while the expiry is held."""
        if now < self._held_until:
            return
        heap = self._heap
        locks = self.locks
        budget = LOCK_EXPIRY_MAX_ENTRIES
        while budget and (top := heap.first()) is not None and top[0] <= now:
            budget -= 1
            heap.pop()
            _, job_id, token = top
            lock = locks.get(job_id)
            if lock is None or lock.token != token or lock.expires_at > now:
                continue
            yield job_id, lock

    def next_wakeup(self) -> int | None:
        """When a lock may next run out (stale heap entries may make this early)."""
        top = self._heap.first()
        if top is None:
            return None
        at = top[0]
        return at if at >= self._held_until else self._held_until

    def held_by(self, conn: Any) -> SplitDict[str, None] | None:
        """The ids of the jobs delivered over ``conn`` (None: none); read-only."""
        return self.conn_jobs.get(conn)

    def forget(self, conn: Any, job_id: str) -> None:
        """``conn`` no longer answers for the job (left to lock expiry, or gone)."""
        held = self.conn_jobs.get(conn)
        if held is not None:
            held.pop(job_id, None)

    def forget_conn(self, conn: Any) -> None:
        self.conn_jobs.pop(conn, None)

    def trim(self, entries: int) -> bool:
        """Drop up to ``entries`` of an all-stale heap (after an Obliterate); True while
        some are left."""
        return self._heap.trim(entries)

    def compact(self) -> tuple[int, int]:
        """Give back the maps' unused room; (bytes before, bytes after)."""
        maps: list[Any] = [self.locks, self.owner_conn, *self.conn_jobs.values()]
        before = sum(map(sys.getsizeof, maps))
        for table in maps:
            table.compact()
        return before, sum(map(sys.getsizeof, maps))


def extend_lock(q: QueueState, job_id: str, now: int, *, token: str | None,
                duration: float) -> bool:
    leases = q.leases
    lock = leases.locks.get(job_id)
    job = q.jobs.get(job_id)
    if lock is None or job is None or job.state != ACTIVE:
        return False
    if token is not None and token != lock.token:
        return False
    if not leases.renewable(lock, now):
        return False
    leases.renew(job_id, lock, now, duration)
    q.stall_watch.beat(job, now)
    if duration > lock.ttl and duration > lock.longest:
        lock.longest = duration  # a longer promise: stored, see stored_lock
        q.persist(job)
    return True


def heartbeat(q: QueueState, job_id: str, now: int, *, token: str | None,
              duration: float | None) -> bool:
    job = q.jobs.get(job_id)
    if job is None or job.state != ACTIVE:
        return False
    if token is not None:
        lock = q.leases.locks.get(job_id)
        if lock is None or lock.token != token:
            return False
        if duration is not None and duration != 0:
            return q.extend_lock(job_id, now, token=token, duration=duration)
        return q.extend_lock(job_id, now, token=token, duration=lock.ttl)
    q.stall_watch.beat(job, now)
    return True


def expire_locks(q: QueueState, now: int) -> None:
    """Requeue (or bury) jobs whose lease ran out: the worker is presumed gone."""
    # (none while the broker's own pause is forgiven: holders may still renew)
    for job_id, lock in q.leases.expired(now):
        job = q.jobs[job_id]
        if is_overlap_job(job):
            dependencies.drop_queued(q, job, now)  # a cron's next firing replaces it
            continue
        decision = at.charge(job, at.Cause.LOCK_EXPIRY, q.max_stalls,
                             renewals=lock.renewals)
        q.leases.release(job.id)
        q.emit("stalled", job.id, now)
        if decision.action == at.BURY:
            consuming.bury(q, job, now, decision.reason or "", decision.error)
        else:
            requeue(q, job, now)
        q.announce("job:lock-expired", now, jobId=job.id, renewalCount=lock.renewals)


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
    q.leases.hold_expiry(until)
    q.timeouts.hold(until)


def requeue(q: QueueState, job: JobRecord, now: int) -> None:
    """Active -> queued with no attempt charged and runAt unchanged (so it goes first)."""
    q.leases.release(job.id)
    lifecycle.count(q, job, -1, now)
    lifecycle.move(q, job, st.RELEASE)
    job.started_at = None
    job.add_timeline("waiting", now)
    lifecycle.enqueue(q, job, now)
    q.persist(job)


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
        leases = q.leases
        while (held := leases.held_by(conn)):
            # a piece of the ids, copied before they leave the set (requeue removes
            # each from it, and drops the set once empty)
            piece = list(islice(held, fill.room()))
            for job_id in piece:
                job = q.jobs.get(job_id)
                lock = leases.locks.get(job_id)
                if (job is None or job.state != ACTIVE
                        or (lock is not None and lock.renewals > 0)):
                    leases.forget(conn, job_id)  # left to lock expiry (or gone already)
                    continue
                if is_overlap_job(job):
                    dependencies.drop_queued(q, job, now)
                    continue
                requeue(q, job, now)
                released += 1
            if held and fill.took(len(piece)):
                yield None
        leases.forget_conn(conn)  # (emptied by skips alone, it is still there)
        return released

    return Sliced(steps(), _released_reply)


def _released_reply(released: int) -> dict[str, Any]:
    return {}
