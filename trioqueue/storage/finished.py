"""The core's view of one queue's finished jobs, read from a store.

:class:`~trioqueue.core.queue.QueueState` keeps only live jobs in memory; completed and
failed ones are read here. ``before_read`` lets the broker commit pending writes first,
so a query never misses a job the same batch just finished (read-your-writes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .port import FinishedCursor, FinishedPage, Storage


class QueueFinished:
    def __init__(self, queue: str, storage: Storage,
                 before_read: Callable[[], None] | None = None) -> None:
        self.queue = queue
        self.storage = storage
        self._before_read = before_read

    def _fresh(self) -> None:
        if self._before_read is not None:
            self._before_read()

    def get(self, job_id: str) -> dict[str, Any] | None:
        self._fresh()
        record = self.storage.get_finished(job_id)
        if record is None or record.get("queue") != self.queue:
            return None
        return record

    def result(self, job_id: str) -> tuple[bool, Any]:
        if self.get(job_id) is None:
            return False, None
        return self.storage.get_result(job_id)

    def ids(self, state: str) -> Iterator[str]:
        self._fresh()
        return self.storage.iter_finished_ids(self.queue, state)

    def ids_page(self, state: str, *, after: FinishedCursor | None,
                 limit: int) -> FinishedPage:
        """One page of this queue's finished ids, for work done in bounded slices
        (see :meth:`~trioqueue.storage.port.Storage.finished_ids_page`)."""
        self._fresh()
        return self.storage.finished_ids_page(self.queue, state, after=after, limit=limit)

    def get_any(self, job_id: str) -> dict[str, Any] | None:
        """A finished job of any queue (dependencies may live in other queues)."""
        self._fresh()
        return self.storage.get_finished(job_id)

    def result_any(self, job_id: str) -> tuple[bool, Any]:
        self._fresh()
        return self.storage.get_result(job_id)

    def dep_outcomes(self, parent_id: str) -> dict[str, dict[str, Any]]:
        self._fresh()
        return self.storage.dep_outcomes(parent_id)

    def list(self, state: str, *, asc: bool, offset: int, limit: int) -> list[dict[str, Any]]:
        self._fresh()
        return self.storage.list_finished(self.queue, state, asc=asc, offset=offset,
                                          limit=limit)

    def count(self, state: str) -> int:
        self._fresh()
        return self.storage.count_finished(self.queue, state)
