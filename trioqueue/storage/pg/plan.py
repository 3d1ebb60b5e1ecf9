"""A batch of storage operations, reduced to what PostgreSQL must end up holding.

The writer hands :class:`~.store.PgStorage` every queue's operations of a batch, in
order: a job may be put, finished and deleted within one batch. Sent one statement per
operation, a batch of a thousand jobs would be thousands of statements; reduced here to
the last word on each row, it is at most one statement per kind of write
(:mod:`.layout`), each taking its rows as arrays.

The reduction keeps the batch's meaning because each table's rows are keyed (a job id,
a (parent, child) pair, a queue, a broker key) and each operation sets or removes whole
rows: only the last operation on a row matters, with one exception kept in order: a
parent's deletion drops the outcome rows written for it earlier in the batch, and those
written after it stay (statements run deletions of outcome rows first).

Pure: no I/O, so the tests check it against the memory store's semantics directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...core.writes import (
    DeleteJob,
    FinishJob,
    PutBrokerRecord,
    PutDepOutcome,
    PutJob,
    PutQueueMeta,
    Writes,
)
from .. import keys as K
from ..ops import Op

# A finished row as UPSERT_FINISHED takes it: queue, state, created_at, record, result
# (None: no result).
FinishedRow = tuple[str, str, int, bytes, bytes | None]


class RecordBytes(Protocol):
    """How a job's record becomes its row's bytes (:class:`.encoded.EncodedData`
    joins data encoded ahead), and when a job writes no record again."""

    def record(self, job_id: str, record: dict[str, Any]) -> bytes: ...
    def forget(self, job_id: str) -> None: ...
    def result(self, result: Any) -> bytes: ...
    def value(self, value: dict[str, Any]) -> bytes: ...


class _Encoded:
    """Every record encoded whole (no data encoded ahead)."""

    def record(self, job_id: str, record: dict[str, Any]) -> bytes:
        return K.encode_value(record)

    def forget(self, job_id: str) -> None:
        return None

    def result(self, result: Any) -> bytes:
        return K.encode_result(result)

    def value(self, value: dict[str, Any]) -> bytes:
        return K.encode_value(value)


@dataclass
class BatchPlan:
    """The rows a batch leaves, by table; each dict keyed by the row's key."""

    live_put: dict[bytes, tuple[str, bytes]] = field(default_factory=dict)
    live_delete: set[bytes] = field(default_factory=set)
    finished_put: dict[bytes, FinishedRow] = field(default_factory=dict)
    finished_delete: set[bytes] = field(default_factory=set)
    outcomes_cleared: set[bytes] = field(default_factory=set)  # parents deleted
    outcomes_put: dict[bytes, dict[bytes, bytes]] = field(default_factory=dict)
    queue_meta: dict[str, bytes] = field(default_factory=dict)
    broker_put: dict[bytes, bytes] = field(default_factory=dict)
    broker_delete: set[bytes] = field(default_factory=set)
    # the kinds of broker records put or deleted (a cluster raises their versions)
    broker_kinds: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return any((self.live_put, self.live_delete, self.finished_put,
                    self.finished_delete, self.outcomes_cleared, self.outcomes_put,
                    self.queue_meta, self.broker_put, self.broker_delete))


def plan_batch(ops: Sequence[Op], records: RecordBytes | None = None) -> BatchPlan:
    """What ``ops`` (validated, in order) leave in each table; ``records`` makes each
    job's record bytes (by default, encoded whole).

    Raises ``ValueError`` as the LMDB layout does for a key it cannot hold (an id over
    511 bytes of UTF-8), before anything is sent.
    """
    plan = BatchPlan()
    if records is None:
        records = _Encoded()
    encode = records.record
    for op in ops:
        cls = type(op)
        if cls is PutJob:
            job_id, record = op  # type: ignore[misc]  # (narrowed by the class above)
            key = K.job_key(job_id)
            plan.live_put[key] = (record["queue"], encode(job_id, record))
            plan.live_delete.discard(key)
        elif cls is FinishJob:
            _finish(plan, op, records)  # type: ignore[arg-type]
        elif cls is DeleteJob:
            records.forget(op.job_id)  # type: ignore[union-attr]
            _delete(plan, K.job_key(op.job_id))  # type: ignore[union-attr]
        else:
            _other(plan, op, records)
    return plan


def _finish(plan: BatchPlan, op: FinishJob, records: RecordBytes) -> None:
    key = K.job_key(op.job_id)
    plan.live_put.pop(key, None)
    plan.live_delete.add(key)
    result = records.result(op.result) if op.has_result else None
    plan.finished_put[key] = (op.queue, op.state, op.created_at,
                              records.record(op.job_id, op.record), result)
    records.forget(op.job_id)
    plan.finished_delete.discard(key)


def _delete(plan: BatchPlan, key: bytes) -> None:
    plan.live_put.pop(key, None)
    plan.live_delete.add(key)
    plan.finished_put.pop(key, None)
    plan.finished_delete.add(key)
    plan.outcomes_put.pop(key, None)  # rows put for it before, in this batch, go too
    plan.outcomes_cleared.add(key)


def _other(plan: BatchPlan, op: Any, records: RecordBytes) -> None:
    cls = type(op)
    if cls is PutDepOutcome:
        parent = K.job_key(op.parent_id)
        plan.outcomes_put.setdefault(parent, {})[K.job_key(op.child_id)] = (
            records.value(op.outcome))
    elif cls is PutQueueMeta:
        plan.queue_meta[op.queue] = K.encode_value(op.meta)
    elif cls is PutBrokerRecord:
        key = K.broker_key(op.kind, op.name)
        plan.broker_kinds.add(op.kind)
        if op.value is None:
            plan.broker_put.pop(key, None)
            plan.broker_delete.add(key)
        else:
            plan.broker_put[key] = records.value(op.value)
            plan.broker_delete.discard(key)
    else:
        raise ValueError(f"unknown storage operation: {op!r}")


@dataclass
class ClusterRows:
    """A cluster's own rows of a batch (core.writes.ClusterWrites), as the statement
    takes them: each table's rows at most once, the last word on each."""

    messages: list[tuple[str, bytes]] = field(default_factory=list)
    consumed: set[int] = field(default_factory=set)
    waits_put: dict[tuple[bytes, bytes], tuple[str, str]] = field(default_factory=dict)
    waits_gone: set[bytes] = field(default_factory=set)
    # custom-id claims settled (deleted) and held by inbox messages: job key -> queue
    claims_gone: dict[bytes, str] = field(default_factory=dict)
    claims_held: dict[bytes, str] = field(default_factory=dict)


def plan_cluster(batches: Sequence[Writes]) -> ClusterRows | None:
    """The cluster rows of ``batches`` in order (None: none): a child's waits put after
    its rows went are kept, and the reverse."""
    rows: ClusterRows | None = None
    for writes in batches:
        part = writes.cluster_rows
        if part is None:
            continue
        if rows is None:
            rows = ClusterRows()
        encode = K.encode_value
        rows.messages.extend((queue, encode(message)) for queue, message in part.messages)
        rows.consumed.update(part.consumed)
        for child_id in part.waits_done:
            child = K.job_key(child_id)
            rows.waits_gone.add(child)
            for key in [k for k in rows.waits_put if k[0] == child]:
                del rows.waits_put[key]
        for child_id, parent_id, parent_queue, child_queue in part.waits:
            child = K.job_key(child_id)
            rows.waits_put[(child, K.job_key(parent_id))] = (parent_queue, child_queue)
            rows.waits_gone.discard(child)
        _claims(rows, part)
    return rows


def _claims(rows: ClusterRows, part: Any) -> None:
    """A batch's custom-id claims, the last word on each id kept."""
    for job_id, queue in part.claims_done:
        key = K.job_key(job_id)
        rows.claims_held.pop(key, None)
        rows.claims_gone[key] = queue
    for job_id, queue in part.claims_held:
        key = K.job_key(job_id)
        rows.claims_gone.pop(key, None)
        rows.claims_held[key] = queue
