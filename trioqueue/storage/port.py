"""The storage port: the small, named set of operations the broker needs from a store.

Two adapters implement it: :mod:`trioqueue.storage.memory` (dicts, for tests and
``--memory``) and :mod:`trioqueue.storage.lmdb_store` (the default, durable). Both are
synchronous: the storage writer calls :meth:`Storage.apply` on the trio thread with the
writes of a whole batch, and only :meth:`Storage.sync` (an fsync, which blocks for
hundreds of microseconds) is ever run in a worker thread.

Records are plain dicts as produced by :meth:`trioqueue.core.job.Job.to_record`; the
``state`` key says where the job lives (queued, active, waiting-children, completed,
failed) and ``queue`` which queue owns it.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.writes import Writes


class StorageFullError(Exception):
    """The store has no room left for the writes; nothing of the batch was applied."""


@dataclass
class Recovered:
    """What a restart rebuilds the queues from."""

    live_jobs: list[dict[str, Any]] = field(default_factory=list)
    queue_meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    # (queue, "completed" | "failed") -> number of finished jobs kept in storage
    finished_counts: dict[tuple[str, str], int] = field(default_factory=dict)


class Storage(abc.ABC):
    """A job store. Every method is synchronous and never awaits."""

    @abc.abstractmethod
    def load(self) -> Recovered:
        """Read back everything needed to rebuild every queue after a restart."""

    @abc.abstractmethod
    def apply(self, batches: Sequence[Writes]) -> None:
        """Apply every operation of every batch, in order, in ONE atomic transaction.

        Raises :class:`StorageFullError` (nothing applied) when the store is full; any
        other exception means the store is in trouble and the broker must stop.
        """

    @abc.abstractmethod
    def sync(self) -> None:
        """Force what :meth:`apply` committed onto the disk (fsync). May block."""

    @abc.abstractmethod
    def get_finished(self, job_id: str) -> dict[str, Any] | None:
        """The record of a completed or failed job, or None."""

    @abc.abstractmethod
    def get_result(self, job_id: str) -> tuple[bool, Any]:
        """``(True, result)`` when a result is stored (``None`` is a real result)."""

    @abc.abstractmethod
    def list_finished(
        self, queue: str, state: str, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]]:
        """Finished records of one queue and state ordered by (createdAt, id)."""

    @abc.abstractmethod
    def count_finished(self, queue: str, state: str) -> int:
        """How many finished jobs of one queue and state are stored (exact)."""

    @abc.abstractmethod
    def iter_finished_ids(self, queue: str, state: str) -> Iterator[str]:
        """Every job id of one queue and finished state, in (createdAt, id) order."""

    @abc.abstractmethod
    def dep_outcomes(self, parent_id: str) -> dict[str, dict[str, Any]]:
        """Child id -> outcome, for every dependency outcome row of ``parent_id``.

        Rows are written with :meth:`~trioqueue.core.writes.Writes.put_dep_outcome` (in
        the child's own commit) and deleted with the parent (``delete_job`` of the
        parent id), never when the parent finishes or is put again: a parent reads them
        for GetChildrenValues and after a restart. Children come in code point order of
        their ids; each outcome is a fresh copy. Empty when there is no row, or when
        ``parent_id`` could never have been stored as a parent.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store. Safe to call twice."""

    # --- space (admission of new jobs, see docs/durability.md "Full storage") ---------
    # Not abstract: a store that has no limit (``max_bytes`` None) is never full, so
    # wrappers and test doubles need not implement them.

    @property
    def max_bytes(self) -> int | None:
        """The most this store may hold, in the unit of :meth:`used_bytes`; None: no limit."""
        return None

    def used_bytes(self) -> int:
        """What the committed data occupies now, in bytes; cheap enough for once per batch.

        Space freed by deletes counts as free again at once (a store that was full
        takes new jobs again after jobs are removed). Writes not yet committed are not
        included: callers commit first.
        """
        return 0

    def used_bytes_bound(self) -> int:
        """An upper bound of :meth:`used_bytes`, for callers that only need to know
        that the store is far from full. Adapters override it when they have a bound
        much cheaper than the exact figure."""
        return self.used_bytes()
