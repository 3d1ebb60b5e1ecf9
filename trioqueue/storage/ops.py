"""Write operations, validated, for any storage adapter.

The core records the typed operations of :mod:`trioqueue.core.writes` (re-exported here)
in a :class:`~trioqueue.core.writes.Writes`; :func:`validate_writes` checks a whole group
of them and hands them on, in order. An adapter then maps those onto its own layout: the
LMDB adapter and the in-memory one through :func:`trioqueue.storage.encoding.encode_ops`
(LMDB's byte layout), a SQL adapter into statements. Nothing here knows how a store
keeps its data, so an adapter needs only this module to know what it must write.

What is checked here is what any store needs: a live record's state is live and a
finished record's is finished (a mistake here would put a job in the wrong table), a
job id is a non-empty string, a queue name a non-empty string without NUL, a
dependency outcome a dict, and the operation one of the known five. The error
texts are the broker's:
a ``ValueError`` here is a bug upstream and stops the broker before anything is
written. A layout's own limits (LMDB's 511-byte keys, for instance) are the adapter's
to check, while it encodes and before it opens a transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core.job import FINISHED_STATES, LIVE_STATES, QUEUED
from ..core.writes import (
    DeleteJob,
    FinishJob,
    Op,
    PutBrokerRecord,
    PutDepOutcome,
    PutJob,
    PutQueueMeta,
    Writes,
)

__all__ = ["DeleteJob", "FinishJob", "Op", "PutBrokerRecord", "PutDepOutcome", "PutJob",
           "PutQueueMeta", "validate_writes"]


def _job_id(value: Any) -> None:
    if not value or not isinstance(value, str):
        raise ValueError("job id must be a non-empty string")


def _queue(value: Any) -> None:
    # Queue names are ASCII [A-Za-z0-9_.:-], checked by the broker; NUL is refused here
    # as well because a store may use it as a separator (the LMDB layout does).
    if not value or not isinstance(value, str) or "\x00" in value:
        raise ValueError(f"queue name must be non-empty and contain no NUL: {value!r}")


def _put(op: Any) -> None:
    record = op.record
    if record.get("state", QUEUED) not in LIVE_STATES:
        raise ValueError(f"put_job of a job in state {record.get('state')!r}")
    _job_id(op.job_id)


def _finish(op: Any) -> None:
    if op.state not in FINISHED_STATES:
        raise ValueError(f"finish_job of a job in state {op.state!r}")
    _job_id(op.job_id)
    _queue(op.queue)


def _delete(op: Any) -> None:
    _job_id(op.job_id)


def _meta(op: Any) -> None:
    _queue(op.queue)


def _broker_record(op: Any) -> None:
    kind, name, value = op
    if not isinstance(kind, str) or not kind or "\x00" in kind:
        raise ValueError(f"a broker record's kind must be a non-empty string without "
                         f"NUL: {kind!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a broker record's name must be a non-empty string: {name!r}")
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"a broker record must be a dict or None: {value!r}")


def _dep(op: Any) -> None:
    if not isinstance(op.outcome, dict):
        raise ValueError(f"a dependency outcome must be a dict: {op.outcome!r}")
    _job_id(op.parent_id)
    _job_id(op.child_id)


_CHECKS: dict[type, Callable[[Any], None]] = {
    PutJob: _put,
    FinishJob: _finish,
    DeleteJob: _delete,
    PutQueueMeta: _meta,
    PutDepOutcome: _dep,
    PutBrokerRecord: _broker_record,
}


def validate_writes(batches: Sequence[Writes]) -> list[Op]:
    """Every operation of ``batches``, in order, checked.

    Raises :class:`ValueError` (with the texts above) on the first bad operation, so an
    adapter that validates before it opens a transaction applies all or nothing.
    """
    out: list[Op] = []
    checks = _CHECKS
    for writes in batches:
        # Any: the class is compared by identity below, which mypy does not narrow by
        ops: list[Any] = writes.ops
        for op in ops:
            cls = type(op)
            # put_job, finish_job and delete_job (what every job goes through) are
            # checked inline, the helpers called only to raise: a call less per job
            if cls is PutJob:
                job_id, record = op
                if record.get("state", QUEUED) not in LIVE_STATES or not job_id or (
                        type(job_id) is not str):
                    _put(op)
            elif cls is FinishJob:
                job_id, queue, state = op[0], op[1], op[2]
                if state not in FINISHED_STATES or not job_id or type(job_id) is not str or (
                        not queue or type(queue) is not str or "\x00" in queue):
                    _finish(op)
            elif cls is DeleteJob:
                job_id = op[0]
                if not job_id or type(job_id) is not str:
                    _delete(op)
            else:
                check = checks.get(cls)
                if check is None:
                    raise ValueError(f"unknown storage operation: {op!r}")
                check(op)
        out += writes.ops
    return out
