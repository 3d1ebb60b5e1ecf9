"""Admitting new jobs: PUSH and PUSHB (custom ids, deduplication, dependencies)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..ids import uuid7
from ..job import JobRecord, timeline_entry
from ..writes import PutJob
from . import dedup, dependencies, lifecycle, repeats

if TYPE_CHECKING:
    from .state import QueueState

_new = tuple.__new__  # builds the NamedTuple in C (see core.writes)


def push(q: QueueState, specs: Sequence[dict[str, Any]], now: int) -> list[str]:
    """Admit validated job inputs (see core.options); returns their ids in order.

    A custom id names the job broker-wide: a live job with that id makes the push
    a no-op that answers the existing id; a finished one is retired in the same
    commit and replaced. A ``uniqueKey`` applies the queue's dedup policy.
    """
    ids: list[str] = []
    if any("group_max_size" in spec for spec in specs):
        q.groups.admit(specs)  # all or none, before anything is admitted
    depends = any(spec.get("depends_on") for spec in specs)
    order = q.order
    seq = order.seq
    for spec in specs:
        ids.append(push_one(q, spec, now))
    q.c.pushed += order.seq - seq  # each admitted job took one number; a duplicate none
    if depends:
        dependencies.settle_failed_dependencies(q, ids, seq, now)
    return ids


def push_one(q: QueueState, spec: dict[str, Any], now: int) -> str:
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
    replaced: JobRecord | None = None
    if unique_key is not None:
        duplicate, replaced = dedup.dedup_admit(q, spec, unique_key, now)
        if duplicate is not None:
            return duplicate
    created = int(timestamp) if timestamp is not None else now
    if "repeat" in spec:  # a repeat chain's first generation runs at its first slot
        delay = repeats.first_delay(spec["repeat"], created, delay)
    run_at = created if not delay else int(created + delay)  # shares created's int
    delayed = run_at > now
    job_id = custom_id if custom_id is not None else uuid7(now)
    job = JobRecord.admit(
        job_id, q.name, created, run_at, q.order.next_seq(),
        [timeline_entry("delayed" if delayed else "waiting", now)], spec)
    if retire_finished:
        # The finished generation with this id is replaced in the same commit.
        q.writes.delete_job(job_id)
        q.logs.drop(job_id)
        q.dlq.discard(job_id)
    q.jobs[job_id] = job
    q.index.add(job_id, q.name)
    if unique_key is not None:
        dedup.dedup_claim(q, job, unique_key, replaced, now)
    if job.depends_on:
        pending = dependencies.open_dependencies(q, job, job.depends_on, now)
        if pending:
            dependencies.park_new(q, job, pending, now)
            return job_id
    if job.group_id is not None:
        lifecycle.enqueue(q, job, now, keep_seq=True)  # into its group (groups.py)
    else:
        _enqueue_new(q, job, delayed)
    q.writes.ops.append(_new(PutJob, (job_id, job.to_record())))
    if job.durable:
        q.writes.durable = True
    if q.events_enabled:
        _emit_pushed(q, job_id, now, run_at)
    return job_id


def _enqueue_new(q: QueueState, job: JobRecord, delayed: bool) -> None:
    """``_enqueue`` and ``_count`` of an ungrouped new job, inlined: every push runs it."""
    c = q.c
    priority = job.priority
    job_id = job.id
    if delayed:
        q.order.push_delayed(job)
        c.delayed += 1
        q.places.delayed.add(job.created_at, job_id)
    else:
        q.order.push_ready(job)
        if priority > 0:
            c.prioritized += 1
            q.places.prioritized.add(job.created_at, job_id)
        else:
            c.waiting += 1
            q.places.waiting.add(job.created_at, job_id)
    by_priority = c.by_priority
    by_priority[priority] = by_priority.get(priority, 0) + 1


def _emit_pushed(q: QueueState, job_id: str, now: int, run_at: int) -> None:
    if run_at > now:
        q.emit("delayed", job_id, now, delay=float(run_at - now))
    q.emit("pushed", job_id, now)

