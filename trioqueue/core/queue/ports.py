"""What a queue needs from the broker around it: the job index (finished jobs are read
through :class:`~.finished.FinishedView`)."""

from __future__ import annotations

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
