"""Drive one queue's sans-IO state machine the way the broker does, without trio.

:class:`QueueHarness` pairs a :class:`~trioqueue.core.queue.QueueState` with a real
:class:`~trioqueue.storage.memory.MemoryStorage` and commits after every command, as the
queue actor does (also after a refused command; a crashing command's writes are
dropped), and can restart the queue from storage as the broker does after a crash.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import Refused
from ..core.flows import Dependents
from ..core.queue import QueueState
from ..core.recovery import rebuild
from ..storage.memory import MemoryStorage
from ..storage.reads import direct_view


class DictIndex(dict[str, str]):
    """The broker-wide job index (job id -> queue), as the router keeps it."""

    def __init__(self) -> None:
        super().__init__()
        self.retained: dict[str, tuple[bool, Any]] = {}  # results of removed jobs
        self.dependents = Dependents()  # child id -> waiting parents

    def locate(self, job_id: str) -> str | None:
        return self.get(job_id)

    def add(self, job_id: str, queue: str) -> None:
        self[job_id] = queue

    def remove(self, job_id: str) -> None:
        self.pop(job_id, None)

    def retain_result(self, job_id: str, queue: str, has_result: bool, result: Any,
                      now: int) -> None:
        self.retained[job_id] = (has_result, result)

    def compact(self) -> None:
        pass  # a test's index stays small

    def forget_retained(self, queue: str) -> None:
        self.retained.clear()  # one queue: everything retained is that queue's

    def retained_result(self, job_id: str, now: int) -> tuple[bool, Any] | None:
        return self.retained.get(job_id)

    def add_dependent(self, child_id: str, parent_id: str) -> None:
        self.dependents.add(child_id, parent_id)

    def drop_dependent(self, child_id: str, parent_id: str) -> None:
        self.dependents.drop(child_id, parent_id)

    def take_dependents(self, child_id: str) -> list[str]:
        return self.dependents.take(child_id)

    def has_dependents(self, child_id: str) -> bool:
        return child_id in self.dependents



class QueueHarness:
    def __init__(self, name: str = "q") -> None:
        self.name = name
        self.storage = MemoryStorage()
        self.index = DictIndex()
        self.q = self._fresh()

    def _fresh(self) -> QueueState:
        return QueueState(self.name, self.index, direct_view(self.storage, self.name))

    def commit(self) -> None:
        writes = self.q.take_writes()
        if writes:
            self.storage.apply([writes])

    def deliver_notices(self, now: int) -> None:
        """Apply the notices the queue posted to its own jobs (a single queue has no
        one else to tell), committing after each round, as the actor does."""
        while notices := self.q.take_notices():
            for job_id, notice in notices:
                if self.index.locate(job_id) == self.name:
                    self.q.apply_notice(notice, now)
            self.commit()

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run one QueueState method and commit its writes, as the actor would."""
        try:
            result = getattr(self.q, method)(*args, **kwargs)
        except Refused:
            self.commit()  # the actor submits whatever a refused command recorded
            raise
        except BaseException:
            self.q.take_writes()  # the actor drops a crashing command's writes
            raise
        self.commit()
        return result

    def restart(self, now: int, *, charge_active: bool = True) -> None:
        """Rebuild the queue from storage: a broker restart (or, without charging
        active jobs, a queue actor restart), by the broker's own recovery sequence."""
        recovered = self.storage.load()
        self.index.clear()
        self.index.dependents.clear()
        self.q = self._fresh()
        rebuild(recovered, now, state_for={self.name: self.q}.get, locate=self.index.locate,
                dependents=self.index.dependents, charge_active=charge_active)
        self.commit()  # nothing is left over: the harness has no other queue
