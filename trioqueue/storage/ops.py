"""Write operations, validated and typed, for any storage adapter.

The core records named tuples in a :class:`~trioqueue.core.writes.Writes`;
:func:`validate_writes` checks a whole group of them and turns each into one of the typed
operations below, in order. An adapter then maps those onto its own layout: the LMDB
adapter and the in-memory one through :func:`trioqueue.storage.keys.encode_ops` (LMDB's
byte layout), a SQL adapter into statements. Nothing here knows how a store keeps its
data, so an adapter needs only this module to know what it must write.

What is checked here is what any store needs: a live record's state is live and a
finished record's is finished (a mistake here would put a job in the wrong table), a
job id is a non-empty string, a queue name a non-empty string without NUL, a
dependency outcome a dict, and the operation name one of the known five. The error
texts are the broker's:
a ``ValueError`` here is a bug upstream and stops the broker before anything is
written. A layout's own limits (LMDB's 511-byte keys, for instance) are the adapter's
to check, while it encodes and before it opens a transaction.

Each operation carries the fields an adapter keys and indexes by, taken out of the
record once (``FinishJob.queue``, ``state``, ``created_at``): a store orders finished
jobs of one queue and state by ``(created_at, job_id)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..core.job import FINISHED_STATES, LIVE_STATES, QUEUED
from ..core.writes import (
    DELETE_JOB,
    FINISH_JOB,
    PUT_DEP_OUTCOME,
    PUT_JOB,
    PUT_QUEUE_META,
    Writes,
)


class PutJob(NamedTuple):
    """Upsert a live job (queued, active, waiting-children) under ``job_id``."""

    job_id: str
    record: dict[str, Any]


class FinishJob(NamedTuple):
    """Move a job to the finished jobs (completed or failed), replacing any earlier
    finished generation of the same id with its index entry and result.

    ``has_result`` False means "no result": a result stored by an earlier generation is
    removed. ``result`` may be ``None`` as a real result.
    """

    job_id: str
    queue: str
    state: str  # "completed" | "failed"
    created_at: int
    record: dict[str, Any]
    has_result: bool
    result: Any


class DeleteJob(NamedTuple):
    """Remove a job wherever it is, with its result and the dependency outcome rows in
    which it is the parent."""

    job_id: str


class PutQueueMeta(NamedTuple):
    """Replace one queue's persisted control state."""

    queue: str
    meta: dict[str, Any]


class PutDepOutcome(NamedTuple):
    """Upsert one child's outcome for its parent; the row lives as long as the parent."""

    parent_id: str
    child_id: str
    outcome: dict[str, Any]


Op = PutJob | FinishJob | DeleteJob | PutQueueMeta | PutDepOutcome


def _job_id(value: Any) -> str:
    if not value or not isinstance(value, str):
        raise ValueError("job id must be a non-empty string")
    return value


def _queue(value: Any) -> str:
    # Queue names are ASCII [A-Za-z0-9_.:-], checked by the broker; NUL is refused here
    # as well because a store may use it as a separator (the LMDB layout does).
    if not value or not isinstance(value, str) or "\x00" in value:
        raise ValueError(f"queue name must be non-empty and contain no NUL: {value!r}")
    return value


def _put(op: tuple[Any, ...]) -> PutJob:
    record = op[1]
    if record.get("state", QUEUED) not in LIVE_STATES:
        raise ValueError(f"put_job of a job in state {record.get('state')!r}")
    return PutJob(_job_id(record["id"]), record)


def _finish(op: tuple[Any, ...]) -> FinishJob:
    _, record, has_result, result = op
    state = record.get("state")
    if state not in FINISHED_STATES:
        raise ValueError(f"finish_job of a job in state {state!r}")
    created = record.get("createdAt") or 0
    return FinishJob(_job_id(record["id"]), _queue(record["queue"]), state, created,
                     record, has_result, result if has_result else None)


def _delete(op: tuple[Any, ...]) -> DeleteJob:
    return DeleteJob(_job_id(op[1]))


def _meta(op: tuple[Any, ...]) -> PutQueueMeta:
    return PutQueueMeta(_queue(op[1]), op[2])


def _dep(op: tuple[Any, ...]) -> PutDepOutcome:
    outcome = op[3]
    if not isinstance(outcome, dict):
        raise ValueError(f"a dependency outcome must be a dict: {outcome!r}")
    return PutDepOutcome(_job_id(op[1]), _job_id(op[2]), outcome)


_TYPED: dict[str, Callable[[tuple[Any, ...]], Op]] = {
    PUT_JOB: _put,
    FINISH_JOB: _finish,
    DELETE_JOB: _delete,
    PUT_QUEUE_META: _meta,
    PUT_DEP_OUTCOME: _dep,
}


# tuple.__new__ builds a NamedTuple in C, skipping its generated Python __new__: for the
# operations every job goes through, that is a frame less per job.
_new = tuple.__new__


def validate_writes(batches: Sequence[Writes]) -> list[Op]:
    """Every operation of ``batches``, in order, checked and typed.

    Raises :class:`ValueError` (with the texts above) on the first bad operation, so an
    adapter that validates before it opens a transaction applies all or nothing.
    """
    out: list[Op] = []
    append = out.append
    typed = _TYPED
    for writes in batches:
        for op in writes.ops:
            name = op[0]
            # put_job, finish_job and delete_job (what every job goes through) are
            # checked inline, the helpers called only to raise: a call less per job
            if name == PUT_JOB:
                record = op[1]
                job_id = record["id"]
                if record.get("state", QUEUED) not in LIVE_STATES or not job_id or (
                        type(job_id) is not str):
                    _put(op)
                append(_new(PutJob, (job_id, record)))
            elif name == FINISH_JOB:
                record = op[1]
                job_id, queue, state = record["id"], record["queue"], record.get("state")
                if state not in FINISHED_STATES or not job_id or type(job_id) is not str or (
                        not queue or type(queue) is not str or "\x00" in queue):
                    _finish(op)
                has_result = op[2]
                append(_new(FinishJob, (job_id, queue, state, record.get("createdAt") or 0,
                                        record, has_result, op[3] if has_result else None)))
            elif name == DELETE_JOB:
                job_id = op[1]
                if not job_id or type(job_id) is not str:
                    _delete(op)
                append(_new(DeleteJob, (job_id,)))
            else:
                make = typed.get(name)
                if make is None:
                    raise ValueError(f"unknown storage operation: {name!r}")
                append(make(op))
    return out
