"""One queue's state machine: synchronous, knows nothing of sockets, trio or storage.

A :class:`QueueState` owns the live jobs of one queue (queued, active, waiting for
children), their ordering, locks, deduplication keys and parked pulls. Each command is a
method that takes ``now`` (epoch ms) and returns the reply payload bunqueue sends;
side effects are recorded, never performed:

- storage mutations go into ``self.writes`` (a :class:`~trioqueue.core.writes.Writes`)
  that the caller hands to the storage writer, so a reply is released only after its
  writes are committed;
- job events go into ``self.events``;
- the broker-wide job index (job id -> queue) is updated through the
  :class:`JobIndex` the caller passes in, synchronously, so a custom id is claimed the
  moment a push is admitted.

Finished jobs (completed, failed) live in storage, read through :class:`FinishedReader`.

The transition rules themselves are in :mod:`trioqueue.core.states`.
"""

from __future__ import annotations

import heapq
import json
import math
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import fields, flows
from . import states as st
from .backoff import backoff_delay_ms
from .errors import JOB_NOT_FOUND, CommandError
from .ids import uuid7
from .job import ACTIVE, COMPLETED, FAILED, QUEUED, WAITING_CHILDREN, Job
from .writes import PUT_JOB, Writes

DEFAULT_LOCK_TTL_MS = 30_000
DEFAULT_MAX_STALLS = 3
DEFAULT_STALL_CONFIG = {"enabled": True, "stallInterval": 30_000,
                        "maxStalls": DEFAULT_MAX_STALLS, "gracePeriod": 5_000}
STALL_CHECK_MS = 5_000
MAX_LOGS_PER_JOB = 100
# bunqueue keeps 10,000 jobs' logs; beyond that the oldest job's logs go first.
MAX_JOBS_WITH_LOGS = 10_000

# Notices between queues (see :meth:`QueueState.apply_notice`), as (kind, *args):
SETTLED = "settled"  # (parent id, child id, outcome): a dependency of the parent settled
SET_PARENT = "set_parent"  # (child id, parent id | None, parent queue): patch the marker
REMOVE_CHILD = "remove_child"  # (child id, parent id): remove it if it has not started
ADOPT = "adopt"  # (jobs,): jobs of an atomic flow, committed by the router


class JobIndex(Protocol):
    """The broker-wide index of live jobs, owned by the router."""

    def locate(self, job_id: str) -> str | None: ...
    def add(self, job_id: str, queue: str) -> None: ...
    def remove(self, job_id: str) -> None: ...
    def retain_result(self, job_id: str, queue: str, has_result: bool, result: Any,
                      now: int) -> None:
        """Keep a removed-on-complete job's result a while, for a late WaitJob."""
    def forget_retained(self, queue: str) -> None:
        """Drop the retained results of a queue's jobs (Obliterate)."""
    def retained_result(self, job_id: str, now: int) -> tuple[bool, Any] | None:
        """A removed-on-complete job's retained result (its completion proof), if any."""
    # The reverse of every waiting job's ``pending`` list (child -> waiting parents),
    # broker-wide, so the queue that settles a child finds its parents in any queue.
    def add_dependent(self, child_id: str, parent_id: str) -> None: ...
    def drop_dependent(self, child_id: str, parent_id: str) -> None: ...
    def take_dependents(self, child_id: str) -> list[str]: ...
    def has_dependents(self, child_id: str) -> bool: ...


class FinishedReader(Protocol):
    """Read access to finished jobs, which live in storage rather than in memory.

    An implementation must see every write already recorded (the actor commits its
    pending writes before it reads), so a query never misses a job it just finished.
    """

    def get(self, job_id: str) -> dict[str, Any] | None: ...
    def result(self, job_id: str) -> tuple[bool, Any]: ...
    def list(
        self, state: str, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]]: ...
    def count(self, state: str) -> int: ...
    def ids(self, state: str) -> Iterable[str]: ...
    # Any queue's finished jobs: dependencies and children may live in other queues.
    def get_any(self, job_id: str) -> dict[str, Any] | None: ...
    def result_any(self, job_id: str) -> tuple[bool, Any]: ...
    def dep_outcomes(self, parent_id: str) -> dict[str, dict[str, Any]]: ...


@dataclass(slots=True)
class Lock:
    token: str
    owner: str
    created_at: int
    expires_at: int
    ttl: float
    renewals: int = 0


@dataclass(slots=True)
class PullWaiter:
    """A parked PULL/PULLB: served when a job becomes ready or answered empty at its deadline."""

    handle: Any  # the caller's way back to the client; opaque here
    count: int
    batch: bool
    owner: str | None
    lock_ttl: float
    conn: Any
    detach: bool
    deadline_ms: int
    done: bool = False


@dataclass(slots=True)
class JobWaiter:
    """A parked WaitJob: answered when its job settles, or ``completed: false`` at its
    deadline."""

    handle: Any
    job_id: str
    conn: Any
    deadline_ms: int
    done: bool = False


@dataclass
class Delivery:
    """A parked pull or wait that got its answer (an error text instead, for a wait on
    a job that disappeared)."""

    waiter: PullWaiter | JobWaiter
    reply: dict[str, Any]
    error: str | None = None


@dataclass
class DedupKey:
    owner: str
    expires_at: float | None  # None: held until the owner leaves


@dataclass
class Counters:
    waiting: int = 0
    prioritized: int = 0
    delayed: int = 0
    active: int = 0
    waiting_children: int = 0
    by_priority: dict[float, int] = field(default_factory=dict)


class QueueState:
    def __init__(self, name: str, index: JobIndex, finished: FinishedReader) -> None:
        self.name = name
        self.index = index
        self.finished = finished
        self.jobs: dict[str, Job] = {}
        self.paused = False
        self.writes = Writes()
        self.events: list[dict[str, Any]] = []
        # Events cost a dict per transition; nobody pays for them until someone listens.
        self.events_enabled = False
        # ready heap: (-priority, 0 lifo / 1 fifo, -seq or runAt, seq, id)
        self._ready: list[tuple[float, int, float, int, str]] = []
        # delayed heap: (runAt, seq, id); moved to ready when due
        self._delayed: list[tuple[int, int, str]] = []
        self._seq = 0
        self.locks: dict[str, Lock] = {}
        self._lock_heap: list[tuple[int, str, str]] = []  # (expires_at, id, token)
        self.owner_conn: dict[str, Any] = {}  # job id -> connection it was delivered to
        self.conn_jobs: dict[Any, set[str]] = {}
        self.dedup: dict[str, DedupKey] = {}
        self.waiters: deque[PullWaiter] = deque()
        self.job_waiters: dict[str, list[JobWaiter]] = {}
        self._settled: list[Delivery] = []  # waits answered by a transition, for tick()
        self._wait_deadlines: list[tuple[int, int, PullWaiter | JobWaiter]] = []
        self._wait_seq = 0
        self.logs: dict[str, list[dict[str, Any]]] = {}
        self.stall: dict[str, Any] = dict(DEFAULT_STALL_CONFIG)
        self._stall_suspects: set[str] = set()
        self._next_stall_check: int | None = None
        self._timeouts: list[tuple[int, str, int]] = []  # (deadline, job id, startedAt)
        # Messages for other jobs' queues (target job id, notice), posted by the caller
        # after the batch: how a child's outcome reaches a parent in another queue.
        self.notices: list[tuple[str, tuple[Any, ...]]] = []
        self.c = Counters()

    # ------------------------------------------------------------------ bookkeeping

    def take_writes(self) -> Writes:
        writes, self.writes = self.writes, Writes()
        return writes

    def take_events(self) -> list[dict[str, Any]]:
        events, self.events = self.events, []
        return events

    def take_notices(self) -> list[tuple[str, tuple[Any, ...]]]:
        notices, self.notices = self.notices, []
        return notices

    def _emit(self, event_type: str, job_id: str, now: int, **extra: Any) -> None:
        if not self.events_enabled:
            return
        event: dict[str, Any] = {"eventType": event_type, "queue": self.name, "jobId": job_id}
        event["timestamp"] = float(now)
        event.update(extra)
        self.events.append(event)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def reserve_seq(self) -> int:
        """An admission number for a job another party writes (a PUSHF, admitted by the
        router): it is stored with the job, so the queue need not write it again."""
        return self._next_seq()

    def _count(self, job: Job, delta: int, now: int) -> None:
        """Keep the per-state counters right; called when a job enters or leaves a place."""
        c = self.c
        if job.state == QUEUED:
            if delta < 0:
                # A due job may still sit in the delayed heap (and count): promote first,
                # so the counter it leaves is the one it was added to.
                self._promote_due(now)
            if job.run_at > now:
                c.delayed += delta
            elif job.priority > 0:
                c.prioritized += delta
            else:
                c.waiting += delta
            n = c.by_priority.get(job.priority, 0) + delta
            if n:
                c.by_priority[job.priority] = n
            else:
                c.by_priority.pop(job.priority, None)
        elif job.state == ACTIVE:
            c.active += delta
        elif job.state == WAITING_CHILDREN:
            c.waiting_children += delta

    def _set_state(self, job: Job, state: str, now: int) -> None:
        """Move ``job`` to ``state``, leaving one counter and entering the other."""
        self._count(job, -1, now)
        job.state = state
        self._count(job, +1, now)

    def _enqueue(self, job: Job, now: int, *, keep_seq: bool = False) -> None:
        """Put a QUEUED job in the right heap. Stale heap entries are skipped by seq.

        ``keep_seq`` (restart only) keeps the stored admission number, so the order
        survives any number of restarts; new numbers then continue above it.
        """
        if keep_seq and job.seq > 0:
            self._seq = max(self._seq, job.seq)
        else:
            job.seq = self._next_seq()
        if job.run_at > now:
            heapq.heappush(self._delayed, (job.run_at, job.seq, job.id))
        else:
            self._push_ready(job)
        self._count(job, +1, now)

    def _push_ready(self, job: Job) -> None:
        if job.lifo:
            key = (-job.priority, 0, float(-job.seq), job.seq, job.id)
        else:
            key = (-job.priority, 1, float(job.run_at), job.seq, job.id)
        heapq.heappush(self._ready, key)

    def _promote_due(self, now: int) -> None:
        """Move delayed jobs whose runAt has come into the ready heap (and the counters)."""
        d = self._delayed
        while d and d[0][0] <= now:
            _, seq, job_id = heapq.heappop(d)
            job = self.jobs.get(job_id)
            if job is None or job.state != QUEUED or job.seq != seq:
                continue
            self.c.delayed -= 1
            if job.priority > 0:
                self.c.prioritized += 1
            else:
                self.c.waiting += 1
            self._push_ready(job)

    def _persist(self, job: Job) -> None:
        self.writes.put_job(job.to_record())
        if job.durable:
            self.writes.durable = True

    # ------------------------------------------------------------------ recovery

    def restore(self, record: dict[str, Any], now: int, *, charge_active: bool = True) -> Job:
        """Rebuild one live job from storage after a restart.

        A job that was ACTIVE when the broker died is charged an interrupted attempt and
        a stall, then retried with backoff or buried, as bunqueue's startup recovery does:
        the worker that had it may have done part of the work, so it counts as a try.
        With ``charge_active=False`` (only the queue actor restarted, its workers are
        alive) an active job stays active, without a lock.
        """
        job = Job.from_record(record)
        self.jobs[job.id] = job
        self.index.add(job.id, self.name)
        if job.unique_key is not None and not job.dedup_lost:
            self.dedup[job.unique_key] = DedupKey(job.id, job.dedup_expires_at)
        if job.state == ACTIVE and charge_active:
            job.attempts += 1
            job.stall_count += 1
            job.started_at = None
            if job.attempts >= job.max_attempts:
                self._bury(
                    job,
                    now,
                    "max_attempts_exceeded",
                    f"Job reached max attempts ({job.max_attempts}) during startup recovery",
                    counted=False,
                )
                return job
            if self.max_stalls > 0 and job.stall_count >= self.max_stalls:
                self._bury(job, now, "stalled", "Job stalled during startup recovery",
                           counted=False)
                return job
            job.state = QUEUED
            job.run_at = now + backoff_delay_ms(job.backoff, job.backoff_config, job.attempts)
            job.add_timeline("waiting", now)
            self._enqueue(job, now)
            self._persist(job)
        elif job.state == QUEUED:
            self._enqueue(job, now, keep_seq=True)
        else:
            self._seq = max(self._seq, job.seq)
            self._count(job, +1, now)
            if job.state == ACTIVE and self._next_stall_check is None:
                self._next_stall_check = now + STALL_CHECK_MS
        return job

    # ------------------------------------------------------------------ producing

    def push(self, specs: Sequence[dict[str, Any]], now: int) -> list[str]:
        """Admit validated job inputs (see core.options); returns their ids in order.

        A custom id names the job broker-wide: a live job with that id makes the push
        a no-op that answers the existing id; a finished one is retired in the same
        commit and replaced. A ``uniqueKey`` applies the queue's dedup policy.
        """
        ids: list[str] = []
        for spec in specs:
            ids.append(self._push_one(spec, now))
        return ids

    def _push_one(self, spec: dict[str, Any], now: int) -> str:
        """Admit one job. Consumes ``spec`` (a fresh dict from parse_job_input).

        This is the hot path of every producer: the common case (no custom id, no
        unique key) is straight-line code with no call it can avoid.
        """
        delay = spec.pop("delay", 0) or 0
        timestamp = spec.pop("timestamp", None)
        custom_id = spec.get("custom_id")
        retire_finished = False
        if custom_id is not None:
            existing = self.index.locate(custom_id)
            if existing is not None:
                return custom_id
            retire_finished = self.finished.get(custom_id) is not None
        unique_key = spec.get("unique_key")
        replaced: Job | None = None
        if unique_key is not None:
            holder = self.dedup.get(unique_key)
            owner = None
            if holder is not None and (holder.expires_at is None or holder.expires_at > now):
                owner = self.jobs.get(holder.owner)
            if owner is not None:
                assert holder is not None
                if spec.get("deduplication_replace"):
                    if owner.state in (QUEUED, WAITING_CHILDREN):
                        if self.index.has_dependents(owner.id):
                            raise CommandError(f"Cannot replace deduplicated job {owner.id} "
                                               "because live jobs depend on it")
                        replaced = owner
                elif spec.get("deduplication_extend") and spec.get("deduplication_ttl"):
                    holder.expires_at = now + spec["deduplication_ttl"]
                    owner.dedup_expires_at = holder.expires_at
                    self._persist(owner)  # the extension must survive a restart
                    self._emit("duplicated", owner.id, now)
                    return owner.id
                else:
                    self._emit("duplicated", owner.id, now)
                    return owner.id
        created = int(timestamp) if timestamp is not None else now
        run_at = int(created + delay)
        delayed = run_at > now
        job_id = custom_id if custom_id is not None else uuid7(now)
        self._seq += 1
        job = Job.admit(
            job_id, self.name, created, run_at, self._seq,
            [{"state": "delayed" if delayed else "waiting", "timestamp": float(now)}], spec)
        if retire_finished:
            # The finished generation with this id is replaced in the same commit.
            self.writes.delete_job(job_id)
            self.logs.pop(job_id, None)
        if replaced is not None:
            self._drop_queued(replaced, now)
        elif unique_key is not None:
            holder = self.dedup.get(unique_key)
            old_owner = self.jobs.get(holder.owner) if holder is not None else None
            if old_owner is not None and old_owner.id != job_id:
                # replace of an active owner: it keeps running but no longer owns the
                # key, and remembers that across a restart
                old_owner.dedup_lost = True
                self._persist(old_owner)
        self.jobs[job_id] = job
        self.index.add(job_id, self.name)
        if unique_key is not None:
            ttl = job.deduplication_ttl
            job.dedup_expires_at = None if ttl is None else now + ttl
            self.dedup[unique_key] = DedupKey(job_id, job.dedup_expires_at)
        if job.depends_on:
            pending = self._open_dependencies(job, job.depends_on, now)
            if pending:
                self._park_new(job, pending, now)
                return job_id
        # _enqueue and _count, inlined
        c = self.c
        priority = job.priority
        if delayed:
            heapq.heappush(self._delayed, (run_at, job.seq, job_id))
            c.delayed += 1
        else:
            if job.lifo:
                heapq.heappush(self._ready, (-priority, 0, float(-job.seq), job.seq, job_id))
            else:
                heapq.heappush(self._ready, (-priority, 1, float(run_at), job.seq, job_id))
            if priority > 0:
                c.prioritized += 1
            else:
                c.waiting += 1
        by_priority = c.by_priority
        by_priority[priority] = by_priority.get(priority, 0) + 1
        self.writes.ops.append((PUT_JOB, job.to_record()))
        if job.durable:
            self.writes.durable = True
        if self.events_enabled:
            if delayed:
                self._emit("delayed", job_id, now, delay=float(run_at - now))
            self._emit("pushed", job_id, now)
        return job_id

    # ------------------------------------------------------------------ consuming

    def _next_ready(self, now: int) -> Job | None:
        """Pop the best ready job; drops jobs whose ttl ran out while they waited."""
        self._promote_due(now)
        ready = self._ready
        while ready:
            *_, seq, job_id = heapq.heappop(ready)
            job = self.jobs.get(job_id)
            if job is None or job.state != QUEUED or job.seq != seq:
                continue
            if job.ttl is not None and now > job.created_at + job.ttl:
                # ttl bounds time in the queue: an expired job is dropped silently
                self._drop_queued(job, now)
                continue
            return job
        return None

    def pull(
        self,
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
        if self.paused:
            return jobs, tokens
        while len(jobs) < count:
            job = self._next_ready(now)
            if job is None:
                break
            self._set_state(job, st.next_state(QUEUED, st.PULL), now)
            job.started_at = now
            job.last_heartbeat = now
            job.add_timeline("active", now)
            token = ""
            if owner is not None:
                token = uuid7(now)
                expires = int(now + lock_ttl)
                self.locks[job.id] = Lock(token, owner, now, expires, lock_ttl)
                heapq.heappush(self._lock_heap, (expires, job.id, token))
            if conn is not None and not (detach and owner is None):
                self.owner_conn[job.id] = conn
                self.conn_jobs.setdefault(conn, set()).add(job.id)
            self._persist(job)
            self._watch(job, now)
            self._emit("pulled", job.id, now)
            jobs.append(job.to_wire())
            tokens.append(token)
        if jobs and self.events_enabled and not (self.c.waiting or self.c.prioritized):
            self._emit("drained", "", now)
        return jobs, tokens

    def pull_reply(
        self, jobs: list[dict[str, Any]], tokens: list[str], *, batch: bool, owner: str | None
    ) -> dict[str, Any]:
        if batch:
            reply: dict[str, Any] = {"jobs": jobs}
            if owner is not None:
                reply["tokens"] = tokens
            return reply
        reply = {"job": jobs[0] if jobs else None}
        if owner is not None:
            reply["token"] = tokens[0] if tokens else None
        return reply

    def park(self, waiter: PullWaiter) -> None:
        self.waiters.append(waiter)
        self._arm_deadline(waiter)

    def _arm_deadline(self, waiter: PullWaiter | JobWaiter) -> None:
        # One heap for every parked pull and wait, so finding the next deadline and the
        # expired ones costs O(log n) per batch, not a scan of every parked request.
        self._wait_seq += 1
        heapq.heappush(self._wait_deadlines, (waiter.deadline_ms, self._wait_seq, waiter))

    def expire_waits(self, now: int) -> list[Delivery]:
        """Answer parked pulls (no job) and waits (``completed: false``) at their deadline."""
        out: list[Delivery] = []
        heap = self._wait_deadlines
        while heap and heap[0][0] <= now:
            waiter = heapq.heappop(heap)[2]
            if waiter.done:
                continue
            waiter.done = True
            if isinstance(waiter, PullWaiter):
                reply = self.pull_reply([], [], batch=waiter.batch, owner=waiter.owner)
                out.append(Delivery(waiter, reply))
            else:
                out.append(Delivery(waiter, {"completed": False}))
                waits = self.job_waiters.get(waiter.job_id)
                if waits is not None:
                    waits.remove(waiter)
                    if not waits:
                        del self.job_waiters[waiter.job_id]
        return out

    def serve_waiters(self, now: int) -> list[Delivery]:
        """Hand ready jobs to parked pulls in arrival order (expiry is expire_waits')."""
        out: list[Delivery] = []
        while self.waiters:
            w = self.waiters[0]
            if w.done:
                self.waiters.popleft()
                continue
            if self.paused:
                break
            jobs, tokens = self.pull(
                now, count=w.count, owner=w.owner, lock_ttl=w.lock_ttl, conn=w.conn,
                detach=w.detach,
            )
            if not jobs:
                break
            self.waiters.popleft()
            w.done = True
            out.append(Delivery(w, self.pull_reply(jobs, tokens, batch=w.batch, owner=w.owner)))
        return out

    def drop_waiters(self, conn: Any) -> None:
        """A closed connection's parked pulls claim nothing and its waits end."""
        for w in self.waiters:
            if w.conn is conn:
                w.done = True
        for waits in self.job_waiters.values():
            for jw in waits:
                if jw.conn is conn:
                    jw.done = True

    def _check_token(self, job: Job, token: Any) -> None:
        """bunqueue's token rule: a lock demands its exact token; no lock, no check."""
        lock = self.locks.get(job.id)
        if lock is None:
            return
        if token is None:
            raise CommandError(f"Lock token required for job {job.id}")
        if token != lock.token:
            raise CommandError(f"Invalid or expired lock token for job {job.id}")

    def _release_resources(self, job: Job) -> None:
        self.locks.pop(job.id, None)
        conn = self.owner_conn.pop(job.id, None)
        if conn is not None:
            jobs = self.conn_jobs.get(conn)
            if jobs is not None:
                jobs.discard(job.id)
                if not jobs:
                    del self.conn_jobs[conn]

    def _release_key(self, job: Job) -> None:
        if job.unique_key is not None:
            holder = self.dedup.get(job.unique_key)
            if holder is not None and holder.owner == job.id:
                del self.dedup[job.unique_key]

    def _remove_live(self, job: Job, now: int) -> None:
        """Forget a live job entirely (memory side; the caller records the storage side)."""
        self._count(job, -1, now)
        self._release_resources(job)
        self._release_key(job)
        del self.jobs[job.id]
        self.index.remove(job.id)
        if job.pending:
            # It waits no longer: its children must not notify it.
            for child_id in job.pending:
                self.index.drop_dependent(child_id, job.id)

    def _active_job(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None or job.state != ACTIVE:
            raise CommandError(f"Job not found or not in processing state: {job_id}")
        return job

    def ack(
        self,
        job_id: str,
        now: int,
        *,
        token: str | None = None,
        has_result: bool = False,
        result: Any = None,
        remove: bool | None = None,
    ) -> None:
        job = self.jobs.get(job_id)
        if job is not None and job.state == QUEUED and job.attempts > 0:
            # A late ACK for a job that lock expiry already put back: the work was done,
            # so complete the queued copy instead of running it a second time.
            self._set_state(job, ACTIVE, now)
        job = self._active_job(job_id)
        self._check_token(job, token)
        self._complete(job, now, has_result, result, remove)

    def _complete(self, job: Job, now: int, has_result: bool, result: Any,
                  remove: bool | None) -> None:
        self._remove_live(job, now)
        if remove or job.remove_on_complete:
            self.logs.pop(job.id, None)
            self.writes.delete_job(job.id)
        else:
            job.state = st.next_state(ACTIVE, st.ACK)
            job.completed_at = now
            job.add_timeline("completed", now)
            self.writes.finish_job(job.to_record(), has_result, result)
        if job.durable:
            self.writes.durable = True
        if remove or job.remove_on_complete:
            self.index.retain_result(job.id, self.name, has_result, result, now)
        # The outcome and the waiters' reply are built only for jobs that have them:
        # this runs once per acknowledged job.
        if self.index.has_dependents(job.id):
            self._settle_dependents(job.id, flows.completed_outcome(self.name, has_result,
                                                                    result))
        if job.id in self.job_waiters:
            self._settle(job.id, completed_reply(has_result, result))
        if self.events_enabled:
            self._emit("completed", job.id, now, data=result if has_result else None)

    def ackb(
        self,
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
        checked: list[tuple[int, Job]] = []
        ignored: list[int] = []
        seen: set[str] = set()
        for i, job_id in enumerate(ids):
            if job_id in seen:  # the same job twice in one batch: ACKed once
                ignored.append(i)
                continue
            seen.add(job_id)
            job = self.jobs.get(job_id)
            if job is None or job.state != ACTIVE:
                if job is not None and job.state == QUEUED and job.attempts > 0:
                    checked.append((i, job))
                    continue
                ignored.append(i)
                continue
            self._check_token(job, tokens[i] if tokens is not None else None)
            checked.append((i, job))
        for i, job in checked:
            if job.state == QUEUED:
                self._set_state(job, ACTIVE, now)
            has_result = results is not None
            result = results[i] if results is not None else None
            remove = bool(removes[i]) if removes is not None and removes[i] is True else None
            self._complete(job, now, has_result, result, remove)
        return ignored

    def fail(
        self,
        job_id: str,
        now: int,
        *,
        token: str | None = None,
        error: str | None = None,
        stack: list[str] | None = None,
        unrecoverable: bool = False,
        remove_on_fail: bool | None = None,
    ) -> bool:
        """Fail one attempt; False (not applied) for a late FAIL of a requeued job.

        Lock expiry already charged that attempt and put the job back, so bunqueue
        answers such a FAIL ``already-finalized`` rather than with an error.
        """
        job = self.jobs.get(job_id)
        if job is not None and job.state == QUEUED and job.attempts > 0:
            return False
        job = self._active_job(job_id)
        self._check_token(job, token)
        job.attempts += 1
        if stack is not None:
            limit = int(job.stack_trace_limit) if job.stack_trace_limit else 0
            lines = [s.strip() for s in stack[:100] if isinstance(s, str) and s.strip()]
            job.stacktrace = lines[:limit] if limit > 0 else None
        job.add_timeline("failed", now, error=error, attempt=job.attempts)
        if not unrecoverable and job.attempts < job.max_attempts:
            self._retry_later(job, now)
            self._emit("failed", job.id, now, error=error, data=job.data, terminal=False)
            self._emit("retried", job.id, now, prev="failed")
            return True
        if remove_on_fail or job.remove_on_fail:
            self._remove_live(job, now)
            self.logs.pop(job.id, None)
            self.writes.delete_job(job.id)
            self._child_failed(job, error)
            self._settle(job.id, failed_reply(error))
            self._emit("failed", job.id, now, error=error, data=job.data, terminal=True)
            return True
        self._bury(job, now, "max_attempts_exceeded", error)
        return True

    def _retry_later(self, job: Job, now: int) -> None:
        """Active -> queued after a charged attempt, back after the job's backoff."""
        self._release_resources(job)
        self._count(job, -1, now)
        job.state = st.next_state(ACTIVE, st.RETRY)
        job.started_at = None
        job.run_at = now + backoff_delay_ms(job.backoff, job.backoff_config, job.attempts)
        job.add_timeline("waiting", now)
        self._enqueue(job, now)
        self._persist(job)

    # ------------------------------------------------------------------ stalls, timeouts

    @property
    def max_stalls(self) -> int:
        """Stalls after which lock expiry and restart recovery bury a job (0: never)."""
        return int(self.stall["maxStalls"])

    def set_stall_config(self, config: dict[str, Any]) -> None:
        self.stall.update(config)
        self.writes.put_queue_meta(self.name, self.meta())

    def _watch(self, job: Job, now: int) -> None:
        """A job just became active: arm the stall sweep and its processing deadline."""
        if self._next_stall_check is None:
            self._next_stall_check = now + STALL_CHECK_MS
        if job.timeout:
            deadline = math.ceil(now + job.timeout)
            heapq.heappush(self._timeouts, (deadline, job.id, now))

    def check_stalls(self, now: int) -> None:
        """bunqueue's heartbeat stall detector, run every STALL_CHECK_MS.

        An active job whose last heartbeat (pull, progress, token-less heartbeat or lock
        renewal) is older than its stall interval, past the grace period after it
        started, is a suspect; a suspect on two consecutive sweeps has stalled: an
        attempt and a stall are charged, then it is retried with backoff, or buried
        once a bound is reached. Two sweeps, so one late heartbeat is not a stall.
        """
        cfg = self.stall
        suspects: set[str] = set()
        stalled: list[Job] = []
        if cfg["enabled"] and self.c.active:
            grace, interval = cfg["gracePeriod"], cfg["stallInterval"]
            for job in self.jobs.values():
                if job.state != ACTIVE or job.started_at is None:
                    continue
                limit = job.stall_timeout if job.stall_timeout is not None else interval
                if now - job.started_at >= grace and now - job.last_heartbeat > limit:
                    (stalled.append(job) if job.id in self._stall_suspects
                     else suspects.add(job.id))
        self._stall_suspects = suspects
        max_stalls = cfg["maxStalls"]
        for job in stalled:
            job.attempts += 1
            job.stall_count += 1
            if max_stalls <= 0 or job.stall_count >= max_stalls or (
                    job.attempts >= job.max_attempts):
                self._emit("stalled", job.id, now,
                           data={"stallCount": job.stall_count, "action": "failed"})
                self._bury(job, now, "stalled", "Job stalled more than allowable limit",
                           emit=False)
            else:
                self._emit("stalled", job.id, now,
                           data={"stallCount": job.stall_count, "action": "retried"})
                self._retry_later(job, now)

    def expire_timeouts(self, now: int) -> None:
        """Fail jobs still active past ``startedAt + timeout`` (reason ``timeout``)."""
        heap = self._timeouts
        while heap and heap[0][0] <= now:
            _, job_id, started_at = heapq.heappop(heap)
            job = self.jobs.get(job_id)
            if job is None or job.state != ACTIVE or job.started_at != started_at:
                continue  # finished, or a later delivery with its own deadline
            job.attempts += 1
            error = "Job timeout exceeded"
            job.add_timeline("failed", now, error=error, attempt=job.attempts)
            if job.attempts < job.max_attempts:
                self._retry_later(job, now)
                self._emit("failed", job_id, now, error=error, data=job.data, terminal=False)
                self._emit("retried", job_id, now, prev="failed")
            else:
                self._bury(job, now, "timeout", error)

    def _bury(self, job: Job, now: int, reason: str, error: str | None,
              counted: bool = True, emit: bool = True) -> None:
        """Move a job to the dead-letter queue (state FAILED, kept in storage)."""
        if counted:
            self._remove_live(job, now)
        else:
            self.jobs.pop(job.id, None)
            self.index.remove(job.id)
            self._release_key(job)
            for child_id in job.pending or ():
                self.index.drop_dependent(child_id, job.id)
        job.state = FAILED
        job.dlq = {
            "reason": reason,
            "error": error,
            "enteredAt": float(now),
            "retryCount": 0,
        }
        job.add_timeline("failed", now, error=error)
        job.pending = None
        self.writes.finish_job(job.to_record(), False)
        self._child_failed(job, error)
        self._settle(job.id, failed_reply(error))
        if emit:
            self._emit("failed", job.id, now, error=error, data=job.data, terminal=True)

    # ------------------------------------------------------------------ leases

    def extend_lock(self, job_id: str, now: int, *, token: str | None, duration: float) -> bool:
        lock = self.locks.get(job_id)
        job = self.jobs.get(job_id)
        if lock is None or job is None or job.state != ACTIVE:
            return False
        if token is not None and token != lock.token:
            return False
        if lock.expires_at <= now:
            # Too late to renew; the lock stays so the expiry sweep requeues the job.
            return False
        lock.expires_at = int(now + duration)
        lock.renewals += 1
        job.last_heartbeat = now
        heapq.heappush(self._lock_heap, (lock.expires_at, job_id, lock.token))
        return True

    def heartbeat(self, job_id: str, now: int, *, token: str | None,
                  duration: float | None) -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.state != ACTIVE:
            return False
        if token is not None:
            lock = self.locks.get(job_id)
            if lock is None or lock.token != token:
                return False
            if duration is not None and duration != 0:
                return self.extend_lock(job_id, now, token=token, duration=duration)
            return self.extend_lock(job_id, now, token=token, duration=lock.ttl)
        job.last_heartbeat = now
        return True

    def expire_locks(self, now: int) -> None:
        """Requeue (or bury) jobs whose lease ran out: the worker is presumed gone."""
        heap = self._lock_heap
        while heap and heap[0][0] <= now:
            _, job_id, token = heapq.heappop(heap)
            lock = self.locks.get(job_id)
            if lock is None or lock.token != token or lock.expires_at > now:
                continue
            job = self.jobs[job_id]
            job.attempts += 1
            job.stall_count += 1
            self._release_resources(job)
            self._emit("stalled", job.id, now)
            if job.attempts >= job.max_attempts:
                self._bury(job, now, "max_attempts_exceeded",
                           f"Lock expired at max attempts ({job.max_attempts})")
                continue
            if self.max_stalls > 0 and job.stall_count >= self.max_stalls:
                self._bury(job, now, "stalled", f"Lock expired after {lock.renewals} renewals")
                continue
            self._requeue(job, now)

    def _requeue(self, job: Job, now: int) -> None:
        """Active -> queued with no attempt charged and runAt unchanged (so it goes first)."""
        self._release_resources(job)
        self._count(job, -1, now)
        job.state = st.next_state(ACTIVE, st.RELEASE)
        job.started_at = None
        job.add_timeline("waiting", now)
        self._enqueue(job, now)
        self._persist(job)

    def release_connection(self, conn: Any, now: int) -> int:
        """Jobs delivered over a closed connection go back, unless their lock was renewed.

        A renewed lock means the worker heartbeats, possibly over another pooled
        connection, so that job is left to lock expiry instead.
        """
        self.drop_waiters(conn)
        released = 0
        for job_id in list(self.conn_jobs.get(conn, ())):
            job = self.jobs.get(job_id)
            if job is None or job.state != ACTIVE:
                continue
            lock = self.locks.get(job_id)
            if lock is not None and lock.renewals > 0:
                continue
            self._requeue(job, now)
            released += 1
        self.conn_jobs.pop(conn, None)
        return released

    def next_deadline(self) -> int | None:
        """The earliest wall time at which :meth:`tick` has work (locks, delays, waiters).

        Stale heap entries may make this early; a tick then simply finds nothing.
        """
        candidates: list[int] = []
        if self._lock_heap:
            candidates.append(self._lock_heap[0][0])
        heap = self._wait_deadlines
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        if heap:
            candidates.append(heap[0][0])
        if self.waiters and self._delayed and not self.paused:
            candidates.append(self._delayed[0][0])  # a parked pull wants it when due
        if self._next_stall_check is not None:
            candidates.append(self._next_stall_check)
        if self._timeouts:
            candidates.append(self._timeouts[0][0])
        return min(candidates) if candidates else None

    def tick(self, now: int) -> list[Delivery]:
        self.expire_locks(now)
        self.expire_timeouts(now)
        if self._next_stall_check is not None and now >= self._next_stall_check:
            self.check_stalls(now)
            self._next_stall_check = now + STALL_CHECK_MS if self.c.active else None
        out = self.expire_waits(now)
        out.extend(self.serve_waiters(now))
        if self._settled:
            out.extend(self._settled)
            self._settled = []
        return out

    # ------------------------------------------------------------------ waiting for jobs

    def park_job_waiter(self, waiter: JobWaiter) -> None:
        self.job_waiters.setdefault(waiter.job_id, []).append(waiter)
        self._arm_deadline(waiter)

    def held_waits(self, conn: Any) -> int:
        return sum(1 for waits in self.job_waiters.values() for w in waits
                   if w.conn is conn and not w.done)

    def _settle(self, job_id: str, reply: dict[str, Any], error: str | None = None) -> None:
        """Answer every WaitJob on a job that reached its final outcome."""
        waits = self.job_waiters.pop(job_id, None)
        for w in waits or ():
            if not w.done:
                w.done = True
                self._settled.append(Delivery(w, reply, error))

    def _settle_gone(self, job_id: str) -> None:
        self._settle(job_id, {}, error=f"Job {job_id} not found")

    # ------------------------------------------------------------------ manual moves

    def _queued(self, job_id: str, error: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None or job.state != QUEUED:
            raise CommandError(error)
        return job

    def _reschedule(self, job: Job, now: int, **changes: Any) -> None:
        """Change how a QUEUED job sorts (priority, lifo, runAt) and put it back.

        Its old heap entries go stale (a new seq), exactly as after a requeue.
        """
        self._count(job, -1, now)
        for attr, value in changes.items():
            setattr(job, attr, value)
        self._enqueue(job, now)
        self._persist(job)

    def cancel(self, job_id: str, now: int) -> None:
        """Remove a job that has not started (queued or waiting for children)."""
        job = self.jobs.get(job_id)
        if job is None or job.state not in (QUEUED, WAITING_CHILDREN):
            raise CommandError("Job not found or cannot be cancelled")
        self._drop_queued(job, now)
        self._emit("removed", job_id, now, prev="waiting")

    def update_data(self, job_id: str, data: Any) -> None:
        """New data for a live job; the flow keys the broker and the flow producers
        wrote (``__parentId``, ...) survive, and new data cannot forge them."""
        job = self.jobs.get(job_id)
        if job is None or job.state not in (QUEUED, ACTIVE, WAITING_CHILDREN):
            raise CommandError("Job not found or cannot be updated")
        if isinstance(job.data, dict) and isinstance(data, dict):
            kept = {k: job.data[k] for k in flows.FLOW_DATA_KEYS if k in job.data}
            if kept or any(k in data for k in flows.FLOW_DATA_KEYS):
                data = {k: v for k, v in data.items() if k not in flows.FLOW_DATA_KEYS}
                data.update(kept)
        job.data = data
        self._persist(job)

    def change_priority(self, job_id: str, now: int, priority: float,
                        lifo: bool | None) -> None:
        job = self._queued(job_id, "Job not found or not in queue")
        self._reschedule(job, now, priority=priority,
                         lifo=job.lifo if lifo is None else lifo)

    def promote(self, job_id: str, now: int) -> None:
        job = self.jobs.get(job_id)
        if job is None or job.state != QUEUED or job.run_at <= now:
            raise CommandError("Job not found or not delayed")
        self._reschedule(job, now, run_at=now)

    def promote_jobs(self, now: int, count: int | None) -> int:
        delayed = sorted((j for j in self.jobs.values()
                          if j.state == QUEUED and j.run_at > now),
                         key=lambda j: (j.run_at, j.seq))
        if count is not None:
            delayed = delayed[:count]
        for job in delayed:
            self._reschedule(job, now, run_at=now)
        return len(delayed)

    def change_delay(self, job_id: str, now: int, delay: float, token: str | None,
                     *, active_only: bool = False) -> None:
        """runAt = now + delay: in place for a queued job; an active job (token rule)
        goes back to the queue, its slot and lock released, no attempt charged."""
        job = self.jobs.get(job_id)
        if job is None:
            raise CommandError(JOB_NOT_FOUND if active_only
                               else "Job not found or cannot change delay")
        if job.state == ACTIVE:
            self._check_token(job, token)
            self._release_resources(job)
            self._count(job, -1, now)
            job.state = st.next_state(ACTIVE, st.RELEASE)
            job.started_at = None
            job.run_at = int(now + delay)
            job.add_timeline("delayed", now)
            self._enqueue(job, now)
            self._persist(job)
            self._emit("delayed", job_id, now, delay=float(delay))
            return
        if active_only:
            state = st.visible_state(job.state, job.run_at, job.priority, now)
            raise CommandError(f"Job is not active (current state: {state})")
        if job.state != QUEUED:
            raise CommandError("Job not found or cannot change delay")
        self._reschedule(job, now, run_at=int(now + delay))
        self._emit("delayed", job_id, now, delay=float(delay))

    def move_to_wait(self, job_id: str, now: int, token: str | None) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            record = self.finished.get(job_id)
            if record is None:
                raise CommandError(JOB_NOT_FOUND)
            if record["state"] != FAILED:
                raise CommandError(
                    f"Cannot move job from state '{record['state']}' to waiting")
            self._revive(record, now)
            return
        if job.state == ACTIVE:
            self._check_token(job, token)
            job.run_at = now
            self._requeue(job, now)
            self._emit("waiting", job_id, now, prev="active")
        elif job.state == QUEUED:
            if job.run_at > now:
                self._reschedule(job, now, run_at=now)
        else:
            state = st.visible_state(job.state, job.run_at, job.priority, now)
            raise CommandError(f"Cannot move job from state '{state}' to waiting")

    def _revive(self, record: dict[str, Any], now: int) -> None:
        """A dead-lettered job becomes a fresh waiting job with the same id (bunqueue's
        DLQ retry): attempts, stalls and timing start over."""
        job = Job.from_record(record)
        if job.unique_key is not None and self.dedup_owner(job.unique_key, now) is not None:
            raise CommandError(f"Unique key {job.unique_key} is held by another job")
        job.state = st.next_state(FAILED, st.REVIVE)
        job.attempts = job.stall_count = 0
        job.run_at = job.last_heartbeat = now
        job.started_at = job.completed_at = None
        job.dlq = None
        job.dedup_lost = False
        job.add_timeline("waiting", now)
        self.writes.delete_job(job.id)
        self.jobs[job.id] = job
        self.index.add(job.id, self.name)
        if job.unique_key is not None:
            ttl = job.deduplication_ttl
            job.dedup_expires_at = None if ttl is None else now + ttl
            self.dedup[job.unique_key] = DedupKey(job.id, job.dedup_expires_at)
        self._enqueue(job, now)
        self._persist(job)
        self._emit("waiting", job.id, now, prev="failed")

    def discard(self, job_id: str, now: int, token: str | None) -> None:
        """Queued or active -> the dead-letter queue (reason ``unknown``)."""
        job = self.jobs.get(job_id)
        if job is None or job.state not in (QUEUED, ACTIVE):
            raise CommandError(JOB_NOT_FOUND)
        if job.state == ACTIVE:
            self._check_token(job, token)
        self._bury(job, now, "unknown", None)

    # ------------------------------------------------------------------ dependencies

    def _drop_queued(self, job: Job, now: int) -> None:
        """Remove a job that never ran to the end (cancelled, expired, replaced, removed
        as an unprocessed child): its parents stop waiting for it, its waits end."""
        self._remove_live(job, now)
        self.logs.pop(job.id, None)
        self.writes.delete_job(job.id)
        self._settle_dependents(job.id, flows.DETACHED)
        self._settle_gone(job.id)

    def _settle_dependents(self, child_id: str, outcome: dict[str, Any]) -> list[str]:
        """Tell every job waiting for ``child_id`` how it ended; returns their ids.

        The outcome row is written in this batch, with the child's own change, so a
        crash cannot separate them; the notice reaches the parent's queue after it.
        """
        parents = self.index.take_dependents(child_id)
        for parent_id in parents:
            self.writes.put_dep_outcome(parent_id, child_id, outcome)
            self.notices.append((parent_id, (SETTLED, parent_id, child_id, outcome)))
        return parents

    def _child_failed(self, job: Job, error: str | None) -> None:
        """A terminal failure settles the job's parents only under a failure policy;
        without one they keep waiting (a retry from the DLQ may still complete it)."""
        policy = flows.failure_policy(job)
        if policy is not None:
            self._settle_dependents(job.id, flows.failed_outcome(self.name, error, policy))

    def dependency_exists(self, dep_id: str, now: int) -> bool:
        """A job may depend on a live job, a completed one, or one removed on completion
        whose result is still retained (bunqueue's completion proof)."""
        if self.index.locate(dep_id) is not None:
            return True
        record = self.finished.get_any(dep_id)
        if record is not None:
            return bool(record["state"] == COMPLETED)
        return self.index.retained_result(dep_id, now) is not None

    def check_push_dependencies(self, specs: Sequence[dict[str, Any]], now: int,
                                *, batch: bool) -> None:
        """Refuse unknown or circular dependencies before anything is admitted.

        In a PUSHB, ``dependsOn`` may name any ``customId`` of the same batch, in any
        order; such references are not looked up (the jobs exist once admitted).
        """
        batch_ids = {spec["custom_id"] for spec in specs if spec.get("custom_id")}
        edges: dict[str, list[str]] = {}
        for i, spec in enumerate(specs):
            deps = spec.get("depends_on")
            if not deps:
                continue
            prefix = f"jobs[{i}]: " if batch else ""
            try:
                flows.check_dependencies(spec.get("custom_id"), deps)
                for dep in deps:
                    if dep not in batch_ids and not self.dependency_exists(dep, now):
                        raise CommandError(f"Dependency job not found: {dep}")
            except CommandError as exc:
                raise CommandError(prefix + exc.message) from None
            if spec.get("custom_id"):
                edges[spec["custom_id"]] = deps
        cycle = flows.find_cycle(edges)
        if cycle is not None:
            raise CommandError(f"Dependency cycle: {' -> '.join(cycle)}")

    def _open_dependencies(self, job: Job, deps: Iterable[str], now: int) -> list[str]:
        """Which of ``deps`` the job must wait for; completed ones are recorded now."""
        pending: list[str] = []
        for dep in dict.fromkeys(deps):
            if self.index.locate(dep) is None:
                record = self.finished.get_any(dep)
                if record is not None and record["state"] == COMPLETED:
                    has_result, result = self.finished.result_any(dep)
                    self.writes.put_dep_outcome(
                        job.id, dep, flows.completed_outcome(record["queue"], has_result,
                                                             result))
                    job.children_completed += 1
                    continue
                retained = self.index.retained_result(dep, now)
                if retained is not None:
                    self.writes.put_dep_outcome(
                        job.id, dep, flows.completed_outcome(None, *retained))
                    job.children_completed += 1
                    continue
            # Live, or a job of the same PUSHB that is admitted after this one.
            pending.append(dep)
        return pending

    def _park_new(self, job: Job, pending: list[str], now: int) -> None:
        job.state = st.next_state(st.NEW, st.PUSH_PARKED)
        job.pending = pending
        job.timeline = [{"state": WAITING_CHILDREN, "timestamp": float(now)}]
        for dep in pending:
            self.index.add_dependent(dep, job.id)
        self.c.waiting_children += 1
        self._persist(job)
        self._emit("pushed", job.id, now)
        self._emit("waiting-children", job.id, now)

    def adopt(self, job: Job, now: int) -> None:
        """Take in a job of an atomic flow (PUSHF), already committed by the router.

        The router claimed the id, registered the dependencies and stored the job with
        an admission number from :meth:`reserve_seq`; the queue gives it its place.
        """
        self.jobs[job.id] = job
        if job.state == WAITING_CHILDREN:
            self._count(job, +1, now)
        else:
            self._enqueue(job, now, keep_seq=True)
        self._emit("pushed", job.id, now)
        if job.state == WAITING_CHILDREN:
            self._emit("waiting-children", job.id, now)
        elif job.run_at > now:
            self._emit("delayed", job.id, now, delay=float(job.run_at - now))

    def apply_notice(self, notice: tuple[Any, ...], now: int) -> None:
        """A message from another job's queue (or the router), see :data:`SETTLED`..."""
        kind = notice[0]
        if kind == SETTLED:
            self.apply_outcome(notice[1], notice[2], notice[3], now)
        elif kind == SET_PARENT:
            self._set_parent(notice[1], notice[2], notice[3])
        elif kind == REMOVE_CHILD:
            job = self.jobs.get(notice[1])
            if job is not None and job.state in (QUEUED, WAITING_CHILDREN):
                self._drop_queued(job, now)
                self._emit("removed", job.id, now, prev="waiting")
        elif kind == ADOPT:
            for job in notice[1]:
                self.adopt(job, now)
        else:
            raise ValueError(f"unknown notice {kind!r}")

    def apply_outcome(self, parent_id: str, child_id: str, outcome: dict[str, Any],
                      now: int) -> None:
        """One dependency of ``parent_id`` settled: the rules of the four policies.

        Ignored when the parent no longer waits for that child (it left, or a
        ``continueParentOnFailure`` already released it): notices are at-least-once
        across a restart, which replays the outcome rows.
        """
        job = self.jobs.get(parent_id)
        if job is None or not job.pending or child_id not in job.pending:
            return
        # The child's queue took this registration already, except when a restart
        # replays the row: the map was rebuilt from the stored pending list then.
        self.index.drop_dependent(child_id, parent_id)
        kind = outcome.get("kind")
        if kind == flows.FAILED:
            policy = outcome.get("policy")
            if policy == flows.FAIL_PARENT and job.state == WAITING_CHILDREN:
                self._bury(job, now, "unknown",
                           f"Child job {child_id} failed: {outcome.get('error')}")
                return
            if policy == flows.CONTINUE_PARENT:
                for other in job.pending:
                    if other != child_id:
                        self.index.drop_dependent(other, parent_id)
                job.pending.clear()
            else:
                job.pending.remove(child_id)
        else:
            job.pending.remove(child_id)
            if kind == flows.COMPLETED:
                job.children_completed += 1
        if not job.pending:
            job.pending = None
            if job.state == WAITING_CHILDREN:
                self._count(job, -1, now)
                job.state = st.next_state(WAITING_CHILDREN, st.RESOLVE)
                job.add_timeline("waiting", now)
                self._enqueue(job, now)
                self._persist(job)
                self._emit("waiting", job.id, now, prev="waiting-children")
                return
        self._persist(job)

    def replay_outcomes(self, now: int) -> None:
        """After a restart: apply the outcome rows written after a parent last changed
        (the notice was lost with the process), exactly as the notice would have."""
        for job in [j for j in self.jobs.values() if j.pending]:
            rows = self.finished.dep_outcomes(job.id)
            for child_id in list(job.pending or ()):
                outcome = rows.get(child_id)
                if outcome is not None:
                    self.apply_outcome(job.id, child_id, outcome, now)

    def move_to_waiting_children(self, job_id: str, now: int, token: str | None) -> bool:
        """Active -> waiting-children while it has dependencies left (BullMQ's rule:
        False, and the job stays active, when there is nothing to wait for)."""
        job = self._active_for_progress(job_id, now)
        self._check_token(job, token)
        if not job.pending:
            return False
        self._release_resources(job)
        self._count(job, -1, now)
        job.state = st.next_state(ACTIVE, st.PARK)
        job.started_at = None
        job.add_timeline(WAITING_CHILDREN, now)
        self._count(job, +1, now)
        self._persist(job)
        self._emit("waiting-children", job.id, now)
        return True

    def update_parent(self, child_id: str, parent_id: str, now: int) -> None:
        """bunqueue's legacy flow linking, run in the parent's queue.

        A parent that already lists the child (in any state) only has the child's
        parent marker patched. A new edge needs a live parent that has not finished:
        it then waits for the child unless the child already completed.
        """
        if child_id == parent_id:
            raise CommandError("A job cannot be its own parent")
        fields.check_dependency_pair(parent_id, child_id)
        parent = self.jobs.get(parent_id)
        if parent is None:
            record = self.finished.get(parent_id)
            if record is None:
                raise CommandError(f"Parent job {parent_id} not found")
            if child_id not in (record.get("childrenIds") or ()):
                raise CommandError(
                    f"Parent job {parent_id} is {record['state']} and cannot take children")
            self.notices.append((child_id, (SET_PARENT, child_id, parent_id, self.name)))
            return
        if child_id not in parent.children_ids:
            live = self.index.locate(child_id) is not None
            failed = False
            if not live:
                record = self.finished.get_any(child_id)
                failed = record is not None and record["state"] == FAILED
                if not failed and not self.dependency_exists(child_id, now):
                    raise CommandError(f"Child job {child_id} not found")
            parent.children_ids = [*parent.children_ids, child_id]
            if child_id not in parent.depends_on:
                parent.depends_on = [*parent.depends_on, child_id]
            if isinstance(parent.data, dict):
                parent.data = {**parent.data, "__childrenIds": list(parent.children_ids)}
            if live or failed:
                parent.pending = [*(parent.pending or ()), child_id]
                self.index.add_dependent(child_id, parent_id)
                if parent.state == QUEUED:
                    self._set_state(parent, st.next_state(QUEUED, st.LINK), now)
                    parent.add_timeline(WAITING_CHILDREN, now)
                    self._emit("waiting-children", parent_id, now)
            else:
                # Already completed: record its outcome, as admission does.
                self._open_dependencies(parent, (child_id,), now)
            self._persist(parent)
        self.notices.append((child_id, (SET_PARENT, child_id, parent_id, self.name)))

    def _set_parent(self, child_id: str, parent_id: str | None, parent_queue: str) -> None:
        job = self.jobs.get(child_id)
        if job is None or job.parent_id == parent_id:
            return
        job.parent_id = parent_id
        if isinstance(job.data, dict):
            data = {k: v for k, v in job.data.items()
                    if k not in ("__parentId", "__parentQueue")}
            if parent_id is not None:
                data["__parentId"] = parent_id
                data["__parentQueue"] = parent_queue
            job.data = data
        self._persist(job)

    def remove_child_dependency(self, child_id: str, now: int) -> bool:
        """Detach a job from the parents waiting for it; True when there was a link."""
        job = self.jobs.get(child_id)
        if job is None:
            if self.finished.get(child_id) is None:
                raise CommandError(JOB_NOT_FOUND)
            return False
        parents = self._settle_dependents(child_id, flows.DETACHED)
        had_parent = job.parent_id is not None
        if had_parent:
            self._set_parent(child_id, None, self.name)
        return bool(parents) or had_parent

    def remove_unprocessed_children(self, parent_id: str) -> None:
        """Remove the children the parent still waits for that have not started."""
        job = self.jobs.get(parent_id)
        if job is None:
            if self.finished.get(parent_id) is None:
                raise CommandError(JOB_NOT_FOUND)
            return
        for child_id in job.pending or ():
            self.notices.append((child_id, (REMOVE_CHILD, child_id, parent_id)))

    def _child_queue(self, child_id: str) -> str | None:
        queue = self.index.locate(child_id)
        if queue is None:
            record = self.finished.get_any(child_id)
            queue = record["queue"] if record is not None else None
        return queue

    def children_outcomes(self, parent_id: str, kind: str,
                          policy: str | None = None) -> dict[str, Any]:
        """Children's results (``kind`` completed) or errors (failed, by policy), keyed
        ``<queue>:<id>`` while the child exists and by bare id once it is gone."""
        out: dict[str, Any] = {}
        for child_id, outcome in self.finished.dep_outcomes(parent_id).items():
            if outcome.get("kind") != kind:
                continue
            key = flows.child_key(self._child_queue(child_id), child_id)
            if kind == flows.COMPLETED:
                out[key] = outcome.get("result")
            elif outcome.get("policy") == policy:
                out[key] = outcome.get("error")
        return out

    def dependencies(self, parent_id: str) -> dict[str, Any]:
        """All four lists of BullMQ's ``getDependencies`` for a job (``Job not found``
        for an id this queue does not know)."""
        job = self.jobs.get(parent_id)
        if job is None and self.finished.get(parent_id) is None:
            raise CommandError(JOB_NOT_FOUND)
        pending = (job.pending or []) if job is not None else []
        return {
            "processed": self.children_outcomes(parent_id, flows.COMPLETED),
            "unprocessed": [flows.child_key(self._child_queue(c), c) for c in pending],
            "failed": self.children_outcomes(parent_id, flows.FAILED, flows.CONTINUE_PARENT),
            "ignored": self.children_outcomes(parent_id, flows.FAILED,
                                              flows.IGNORE_DEPENDENCY),
        }

    # ------------------------------------------------------------------ control

    def drain(self, now: int) -> int:
        """Remove every queued job (waiting, prioritized, delayed); active jobs and jobs
        waiting for children stay. No per-job event, as in bunqueue."""
        queued = [job for job in self.jobs.values() if job.state == QUEUED]
        for job in queued:
            self._drop_queued(job, now)
        self._ready.clear()
        self._delayed.clear()
        return len(queued)

    def obliterate(self, now: int) -> None:
        """Remove everything of the queue: live jobs in every state (an active job's
        worker then finds it gone), finished jobs with their results, logs, retained
        results, the stored pause and stall settings. Parked pulls keep waiting."""
        for job in list(self.jobs.values()):
            self._drop_queued(job, now)
        for state in (COMPLETED, FAILED):
            for job_id in list(self.finished.ids(state)):
                self.writes.delete_job(job_id)
        self._ready.clear()
        self._delayed.clear()
        self._lock_heap.clear()
        self._timeouts.clear()
        self._stall_suspects.clear()
        self.logs.clear()
        self.index.forget_retained(self.name)
        self.paused = False
        self.stall = dict(DEFAULT_STALL_CONFIG)
        self.writes.put_queue_meta(self.name, self.meta())

    def set_paused(self, paused: bool, now: int) -> None:
        if self.paused != paused:
            self.paused = paused
            self.writes.put_queue_meta(self.name, self.meta())
            self._emit("paused" if paused else "resumed", "", now)

    def meta(self) -> dict[str, Any]:
        return {"paused": self.paused, "stall": dict(self.stall)}

    def load_meta(self, meta: dict[str, Any]) -> None:
        self.paused = bool(meta.get("paused", False))
        self.stall.update(meta.get("stall") or {})

    # ------------------------------------------------------------------ progress, logs

    def _active_for_progress(self, job_id: str, now: int) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            record = self.finished.get(job_id)
            if record is not None:
                raise CommandError(f"Job is not active (current state: {record['state']})")
            raise CommandError(JOB_NOT_FOUND)
        if job.state != ACTIVE:
            state = st.visible_state(job.state, job.run_at, job.priority, now)
            raise CommandError(f"Job is not active (current state: {state})")
        return job

    def set_progress(self, job_id: str, now: int, progress: Any, message: Any,
                     has_message: bool) -> None:
        job = self._active_for_progress(job_id, now)
        value, text = normalise_progress(progress)
        if has_message:
            text = message if isinstance(message, str) or message is None else str(message)
        elif text is None:
            text = job.progress_message
        job.progress = value
        job.progress_message = text
        job.last_heartbeat = now
        self._persist(job)
        self._emit("progress", job.id, now, progress=value,
                   data={"progress": value, "message": text})

    def get_progress(self, job_id: str, now: int) -> dict[str, Any]:
        job = self._active_for_progress(job_id, now)
        return {"progress": job.progress, "message": job.progress_message}

    def _known(self, job_id: str) -> bool:
        return job_id in self.jobs or self.finished.get(job_id) is not None

    def add_log(self, job_id: str, now: int, message: str, level: str) -> None:
        if not self._known(job_id):
            raise CommandError(JOB_NOT_FOUND)
        logs = self.logs.get(job_id)
        if logs is None:
            if len(self.logs) >= MAX_JOBS_WITH_LOGS:
                self.logs.pop(next(iter(self.logs)))
            logs = self.logs[job_id] = []
        logs.append({"timestamp": float(now), "level": level, "message": message})
        if len(logs) > MAX_LOGS_PER_JOB:
            del logs[0]

    def get_logs(self, job_id: str, start: int | None, end: int | None) -> dict[str, Any]:
        logs = self.logs.get(job_id, [])
        n = len(logs)
        lo = 0 if start is None else start
        hi = n - 1 if end is None or end < 0 else end
        if lo < 0:
            lo = max(n + lo, 0)
        return {"logs": logs[lo : hi + 1], "count": n}

    def clear_logs(self, job_id: str, keep: int) -> None:
        logs = self.logs.get(job_id)
        if logs is None:
            return
        if keep <= 0:
            del self.logs[job_id]
        else:
            del logs[: max(len(logs) - keep, 0)]

    # ------------------------------------------------------------------ queries

    def job_wire(self, job_id: str, now: int) -> dict[str, Any] | None:
        job = self.jobs.get(job_id)
        if job is not None:
            wire = job.to_wire()
            wire["state"] = st.visible_state(job.state, job.run_at, job.priority, now)
            return wire
        record = self.finished.get(job_id)
        if record is None:
            return None
        return finished_wire(record)

    def state_of(self, job_id: str, now: int) -> str:
        job = self.jobs.get(job_id)
        if job is not None:
            return st.visible_state(job.state, job.run_at, job.priority, now)
        record = self.finished.get(job_id)
        return record["state"] if record is not None else st.UNKNOWN

    def counts(self, now: int) -> dict[str, int]:
        self._promote_due(now)
        c = self.c
        waiting, prioritized, paused = c.waiting, c.prioritized, 0
        if self.paused:
            paused, waiting, prioritized = waiting + prioritized, 0, 0
        return {
            "waiting": waiting,
            "prioritized": prioritized,
            "delayed": c.delayed,
            "active": c.active,
            "completed": self.finished.count(COMPLETED),
            "failed": self.finished.count(FAILED),
            "waiting-children": c.waiting_children,
            "paused": paused,
        }

    def queued_count(self, now: int) -> int:
        self._promote_due(now)
        return self.c.waiting + self.c.prioritized + self.c.delayed

    def dedup_owner(self, unique_key: str, now: int) -> str | None:
        """The live job that holds ``unique_key`` (None once it expired or left)."""
        holder = self.dedup.get(unique_key)
        if holder is None or (holder.expires_at is not None and holder.expires_at <= now):
            return None
        return holder.owner if holder.owner in self.jobs else None

    def counts_per_priority(self) -> dict[str, int]:
        return {_priority_key(p): n for p, n in sorted(self.c.by_priority.items())}

    def list_jobs(
        self, states: Iterable[str], now: int, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]]:
        """Jobs in any of ``states``, ordered by (createdAt, id) before paginating."""
        wanted = set(states)
        if self.paused:
            # BullMQ semantics: on a paused queue ready jobs are listed as "paused" only.
            listed_paused = st.PAUSED in wanted
            wanted.discard(st.WAITING)
            wanted.discard(st.PRIORITIZED)
            if listed_paused:
                wanted.update((st.WAITING, st.PRIORITIZED))
        live: list[tuple[int, str, Job]] = []
        for job in self.jobs.values():
            vis = st.visible_state(job.state, job.run_at, job.priority, now)
            if vis in wanted:
                live.append((job.created_at, job.id, job))
        rows: list[tuple[int, str, Any]] = [(a, b, j) for a, b, j in live]
        need = offset + limit
        for fin in (COMPLETED, FAILED):
            if fin in wanted:
                for rec in self.finished.list(fin, asc=asc, offset=0, limit=need):
                    rows.append((int(rec["createdAt"]), rec["id"], rec))
        rows.sort(key=lambda r: (r[0], r[1]), reverse=not asc)
        out: list[dict[str, Any]] = []
        for _, _, item in rows[offset : offset + limit]:
            if isinstance(item, Job):
                wire = item.to_wire()
                wire["state"] = st.visible_state(item.state, item.run_at, item.priority, now)
                if self.paused and wire["state"] in (st.WAITING, st.PRIORITIZED):
                    wire["state"] = st.PAUSED
            else:
                wire = finished_wire(item)
            out.append(wire)
        return out


def completed_reply(has_result: bool, result: Any) -> dict[str, Any]:
    """WaitJob's answer for a completed job (no ``result`` key when none was stored)."""
    return {"completed": True, "result": result} if has_result else {"completed": True}


def failed_reply(error: str | None) -> dict[str, Any]:
    """WaitJob's answer for a job that failed for good: bunqueue's ``completed: false``,
    plus the last error so a client need not ask again."""
    return {"completed": False, "failed": True, "error": error}


def in_admission_order(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored live jobs in the order their queues admitted them.

    Storage hands records back in key (job id) order, which differs from admission
    order once custom ids are involved; restoring by ``seq`` keeps FIFO order (and
    which job owned a key) the same across a restart. ``seq`` counts per queue, and
    sorting all queues together keeps each queue's own order.
    """
    return sorted(records, key=lambda record: record.get("seq", 0))


def finished_wire(record: dict[str, Any]) -> dict[str, Any]:
    job = Job.from_record(record)
    wire = job.to_wire()
    wire["state"] = record["state"]
    return wire


def _priority_key(priority: float) -> str:
    if isinstance(priority, float) and priority.is_integer():
        return str(int(priority))
    return str(priority)


# What JavaScript's Number() accepts (ASCII digits only, like JS): decimals with an
# optional exponent, Infinity, and unsigned 0x/0o/0b integer literals.
_JS_DECIMAL = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|Infinity)")
_JS_RADIX = re.compile(r"0(?:[xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")


def normalise_progress(value: Any) -> tuple[float, str | None]:
    """bunqueue's progress normalisation: numbers clamp to 0..100; text becomes a message.

    Numeric text is read as JavaScript's ``Number()`` would (so ``"1_000"`` or ``"inf"``
    stay text); an object's message is its compact ``JSON.stringify`` form.
    """
    if isinstance(value, bool):
        value = 1 if value else 0
    if value is None:
        return 0, None
    if isinstance(value, (int, float)):
        if value != value:  # NaN
            return 0, None
        return min(max(value, 0), 100), None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return 0, None
        if _JS_RADIX.fullmatch(text):
            number = float(int(text, 0))
        elif _JS_DECIMAL.fullmatch(text):
            number = float(text)
        else:
            return 0, value
        number = min(max(number, 0.0), 100.0)
        return (int(number) if number.is_integer() else number), None
    try:
        return 0, json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return 0, str(value)
