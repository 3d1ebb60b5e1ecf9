"""Admitting new jobs: PUSH and PUSHB (custom ids, deduplication, dependencies)."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import CommandError
from ..ids import uuid7
from ..job import QUEUED, WAITING_CHILDREN, Job
from ..writes import PUT_JOB
from .dedup import DedupKey

if TYPE_CHECKING:
    from .state import QueueState


def push(q: QueueState, specs: Sequence[dict[str, Any]], now: int) -> list[str]:
    """Admit validated job inputs (see core.options); returns their ids in order.

    A custom id names the job broker-wide: a live job with that id makes the push
    a no-op that answers the existing id; a finished one is retired in the same
    commit and replaced. A ``uniqueKey`` applies the queue's dedup policy.
    """
    ids: list[str] = []
    for spec in specs:
        ids.append(q._push_one(spec, now))
    return ids


def _push_one(q: QueueState, spec: dict[str, Any], now: int) -> str:
    """Admit one job. Consumes ``spec`` (a fresh dict from parse_job_input).

    This is the hot path of every producer: the common case (no custom id, no
    unique key) is straight-line code with no call it can avoid.
    """
    delay = spec.pop("delay", 0) or 0
    timestamp = spec.pop("timestamp", None)
    custom_id = spec.get("custom_id")
    retire_finished = False
    if custom_id is not None:
        existing = q.index.locate(custom_id)
        if existing is not None:
            return custom_id
        retire_finished = q.finished.get(custom_id) is not None
    unique_key = spec.get("unique_key")
    replaced: Job | None = None
    if unique_key is not None:
        holder = q.dedup.get(unique_key)
        owner = None
        if holder is not None and (holder.expires_at is None or holder.expires_at > now):
            owner = q.jobs.get(holder.owner)
        if owner is not None:
            assert holder is not None
            if spec.get("deduplication_replace"):
                if owner.state in (QUEUED, WAITING_CHILDREN):
                    if q.index.has_dependents(owner.id):
                        raise CommandError(f"Cannot replace deduplicated job {owner.id} "
                                           "because live jobs depend on it")
                    replaced = owner
            elif spec.get("deduplication_extend") and spec.get("deduplication_ttl"):
                holder.expires_at = now + spec["deduplication_ttl"]
                owner.dedup_expires_at = holder.expires_at
                q._persist(owner)  # the extension must survive a restart
                q._emit("duplicated", owner.id, now)
                return owner.id
            else:
                q._emit("duplicated", owner.id, now)
                return owner.id
    created = int(timestamp) if timestamp is not None else now
    run_at = int(created + delay)
    delayed = run_at > now
    job_id = custom_id if custom_id is not None else uuid7(now)
    q._seq += 1
    job = Job.admit(
        job_id, q.name, created, run_at, q._seq,
        [{"state": "delayed" if delayed else "waiting", "timestamp": float(now)}], spec)
    if retire_finished:
        # The finished generation with this id is replaced in the same commit.
        q.writes.delete_job(job_id)
        q.logs.pop(job_id, None)
    if replaced is not None:
        q._drop_queued(replaced, now)
    elif unique_key is not None:
        holder = q.dedup.get(unique_key)
        old_owner = q.jobs.get(holder.owner) if holder is not None else None
        if old_owner is not None and old_owner.id != job_id:
            # replace of an active owner: it keeps running but no longer owns the
            # key, and remembers that across a restart
            old_owner.dedup_lost = True
            q._persist(old_owner)
    q.jobs[job_id] = job
    q.index.add(job_id, q.name)
    if unique_key is not None:
        ttl = job.deduplication_ttl
        job.dedup_expires_at = None if ttl is None else now + ttl
        q.dedup[unique_key] = DedupKey(job_id, job.dedup_expires_at)
    if job.depends_on:
        pending = q._open_dependencies(job, job.depends_on, now)
        if pending:
            q._park_new(job, pending, now)
            return job_id
    # _enqueue and _count, inlined
    c = q.c
    priority = job.priority
    if delayed:
        heapq.heappush(q._delayed, (run_at, job.seq, job_id))
        c.delayed += 1
        q.places.delayed.add(created, job_id)
    else:
        if job.lifo:
            heapq.heappush(q._ready, (-priority, 0, float(-job.seq), job.seq, job_id))
        else:
            heapq.heappush(q._ready, (-priority, 1, float(run_at), job.seq, job_id))
        if priority > 0:
            c.prioritized += 1
            q.places.prioritized.add(created, job_id)
        else:
            c.waiting += 1
            q.places.waiting.add(created, job_id)
    by_priority = c.by_priority
    by_priority[priority] = by_priority.get(priority, 0) + 1
    q.writes.ops.append((PUT_JOB, job.to_record()))
    if job.durable:
        q.writes.durable = True
    if q.events_enabled:
        if delayed:
            q._emit("delayed", job_id, now, delay=float(run_at - now))
        q._emit("pushed", job_id, now)
    return job_id

