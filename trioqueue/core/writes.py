"""Named storage mutations, recorded by the sans-IO core and applied by a storage adapter.

The core never touches storage: a command appends named operations to a :class:`Writes`
and the storage writer applies the writes of many commands (from many queues) in one
atomic transaction (group commit). Each operation is a tuple ``(op, *args)`` so that an
adapter dispatches on a small, closed set of names, the same in LMDB and in memory.
"""

from __future__ import annotations

from typing import Any

PUT_JOB = "put_job"  # (record,) upsert a live job (queued, active, waiting-children)
FINISH_JOB = "finish_job"  # (record, has_result, result) live -> completed/failed
# (job_id,) remove a job wherever it is, with its result and its dependency outcome rows
# (the rows where it is the parent; rows where it is the child belong to their parent)
DELETE_JOB = "delete_job"
PUT_QUEUE_META = "put_queue_meta"  # (queue, meta) persisted queue control state
# (parent_id, child_id, outcome) one child's outcome for its parent (upsert); the row lives
# as long as the parent's record: finishing or re-putting the parent keeps it
PUT_DEP_OUTCOME = "put_dep_outcome"


class Writes:
    """An ordered list of storage operations, plus whether the caller asked for fsync."""

    __slots__ = ("ops", "durable")

    def __init__(self) -> None:
        self.ops: list[tuple[Any, ...]] = []
        self.durable = False

    def __bool__(self) -> bool:
        return bool(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def put_job(self, record: dict[str, Any]) -> None:
        self.ops.append((PUT_JOB, record))

    def finish_job(self, record: dict[str, Any], has_result: bool, result: Any = None) -> None:
        self.ops.append((FINISH_JOB, record, has_result, result))

    def delete_job(self, job_id: str) -> None:
        self.ops.append((DELETE_JOB, job_id))

    def put_queue_meta(self, queue: str, meta: dict[str, Any]) -> None:
        self.ops.append((PUT_QUEUE_META, queue, meta))

    def put_dep_outcome(self, parent_id: str, child_id: str, outcome: dict[str, Any]) -> None:
        """Record a child's outcome for its parent (upsert of the (parent, child) row).

        Appended to the same Writes as the child's own state change, so the row and that
        change commit together: a crash can never leave a finished child whose parent
        does not know its outcome, nor the reverse.
        """
        self.ops.append((PUT_DEP_OUTCOME, parent_id, child_id, outcome))

    def extend(self, other: Writes) -> None:
        self.ops.extend(other.ops)
        self.durable = self.durable or other.durable
