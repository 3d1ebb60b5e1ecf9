"""What the router and the queue actors need, said as narrow interfaces.

The broker builds these from its parts (the storage writer is the :class:`Committer`,
the event hub the :class:`EventSink`, the router the :class:`ActorIndex` and the notice
poster, its config the limits) and hands each actor only what it uses, as hypercorn
hands its protocol layer a ``WorkerContext`` rather than the server. So the actors
depend on these interfaces instead of on ``Broker``, and a test can build a queue
actor from in-memory fakes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar

from ..config import Config
from ..core.flows import Dependents
from ..core.queue import JobIndex
from ..core.writes import Writes
from .request import Replier

Notice = tuple[str, tuple[Any, ...]]  # (target job id, notice)
L = TypeVar("L", "QueueLimits", "RouterLimits")
T = TypeVar("T")
NoticePoster = Callable[[list[Notice]], None]


class Committer(Protocol):
    """The storage writer as the actors use it (see actors.writer.StorageWriter)."""

    def submit(self, writes: Writes) -> None: ...
    def release(self, deliveries: list[tuple[Replier, dict[str, Any]]]) -> None: ...
    def commit_now(self) -> None: ...
    async def commit(self) -> None: ...
    # Storage reads in a worker thread (a store whose calls block); see StorageWriter.
    async def read_committed(self, read: Callable[[], T]) -> T: ...
    # True for a store whose commit blocks (commit_now is refused; use commit()).
    off_thread: bool


class ActorIndex(JobIndex, Protocol):
    """The broker-wide job index (the router's), as a queue actor uses it on restart."""

    dependents: Dependents

    def forget_queue(self, queue: str) -> None: ...


class EventSink(Protocol):
    """Where a queue's job events go, and whether anyone listens (events cost a dict
    per transition, so a queue builds none while nobody does)."""

    @property
    def active(self) -> bool: ...
    def publish(self, events: list[dict[str, Any]]) -> None: ...


class AdmissionCheck(Protocol):
    """Room for new jobs, for one batch (see actors.admission.Admission)."""

    def refuses(self, frame_bytes: int | None, jobs: int = 1,
                request: object = None) -> bool: ...


# A fresh check per batch; None where the store has no limit (nothing is checked).
AdmissionFactory = Callable[[], AdmissionCheck]


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """The config limits a queue actor applies (named as in Config, see limits_from)."""

    max_data_bytes: int
    max_wait_holds_per_connection: int
    queue_inbox_batches: int
    actor_restart_window_s: float
    actor_max_restarts: int
    slice_budget_ms: float
    # when queue:idle and queue:threshold are told (core/queue/watch.py; 0: never)
    queue_idle_threshold_ms: float = 0.0
    queue_size_threshold_jobs: int = 0


@dataclass(frozen=True, slots=True)
class RouterLimits:
    """The config limits the router applies (named as in Config, see limits_from)."""

    max_queues: int
    max_data_bytes: int
    removed_result_retention_s: float
    max_removed_results: int
    slice_budget_ms: float  # broker commands answered inline, per step of a batch
    worker_overload_threshold_ms: float = 0.0  # worker:overloaded (core/workers.py)


def limits_from(config: Config, kind: type[L]) -> L:
    """A limits record read from ``config``: each field is the config field of its name."""
    return kind(**{f.name: getattr(config, f.name) for f in fields(kind)})
