"""What a queue needs from the broker around it: the job index and finished jobs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol


class JobIndex(Protocol):
    """The broker-wide index of live jobs, owned by the router."""

    def locate(self, job_id: str) -> str | None: ...
    def add(self, job_id: str, queue: str) -> None: ...
    def remove(self, job_id: str) -> None: ...
    def retain_result(self, job_id: str, queue: str, has_result: bool, result: Any,
                      now: int) -> None:
        """Keep a removed-on-complete job's result a while, for a late WaitJob."""
    def compact(self) -> None:
        """Give back the memory of many removed entries (after a large Drain)."""
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


IdPage = list[str]


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
    def ids_page(self, state: str, *, after: Any, limit: int) -> tuple[IdPage, Any]:
        """Up to ``limit`` finished ids of ``state`` in (createdAt, id) order, and the
        cursor of the next page (None after the last). ``after`` is a cursor from a
        previous page (None: from the start); pages hold while earlier ids are deleted,
        so a bounded-slice deletion walks the state once."""
        ...
    # Any queue's finished jobs: dependencies and children may live in other queues.
    def get_any(self, job_id: str) -> dict[str, Any] | None: ...
    def result_any(self, job_id: str) -> tuple[bool, Any]: ...
    def dep_outcomes(self, parent_id: str) -> dict[str, dict[str, Any]]: ...
