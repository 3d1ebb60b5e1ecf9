"""What the router and the queue actors need, said as narrow interfaces.

The broker builds these from its parts (the storage writer is the :class:`Committer`,
the event hub the :class:`EventSink`, the router the :class:`ActorIndex` and the notice
poster, its config the limits) and hands each actor only what it uses, as hypercorn
hands its protocol layer a ``WorkerContext`` rather than the server. So the actors
depend on these interfaces instead of on ``Broker``, and a test can build a queue
actor from in-memory fakes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar

from ..config import Config
from ..core.commands.registry import Command
from ..core.flows import Dependents
from ..core.queue import JobIndex
from ..core.writes import Writes
from ..storage.port import Fence, Recovered, Storage
from .request import Replier, Request
from .stand_ins import PeerClients, StandIns

Notice = tuple[str, tuple[Any, ...]]  # (target job id, notice)
L = TypeVar("L", "QueueLimits", "RouterLimits")
T = TypeVar("T")
NoticePoster = Callable[[list[Notice]], None]
Spawn = Callable[..., None]  # start fn(*args) as a task of the broker's nursery


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


Routed = list[tuple[Command, Request]]
Found = dict[str, str | None]  # job id -> its queue (None: no such job), as looked up


class Placement(Protocol):
    """Where queues are served, as the router asks it: all here on one broker (the
    :class:`LocalPlacement` below), here or on another broker in a cluster
    (cluster/placement.py). The router has one question per step of routing
    and never asks whether it is in a cluster."""

    # A batch is routed whole (its claims and look-ups are made for all of it), not
    # cut at the slice budget.
    whole_batches: bool
    # Multi-id commands' ids are looked up too (another broker's queues hold most jobs).
    looks_up_many: bool

    async def prepare(self, routed: Routed, found: Found | None, known: Mapping[str, str]
                      ) -> tuple[Found | None, dict[str, str] | None]:
        """Before a batch is routed: what must be claimed or looked up first. Returns
        ``found`` (completed) and the custom ids claimed (id -> queue), or None."""
    def where(self, queue: str, req: Request) -> str | None:
        """The address of the broker ``req`` for ``queue`` goes to; None: this one.
        Raises Moving while the queue is handed over, Refused when nobody serves it."""
    def address(self, queue: str, req: Request) -> str | None:
        """As :meth:`where`, without waiting for a queue handed over."""
    def flow_address(self, req: Request) -> str | None:
        """Where a whole flow is admitted (None: here)."""
    def serves(self, queue: str) -> bool:
        """Whether this broker may start queue ``queue``'s actor."""
    def forward(self, address: str, reqs: list[Request]) -> None: ...
    def forgotten(self, job_id: str, found: Found | None) -> bool:
        """Whether ``job_id`` was live here when its batch was looked up and its queue
        has been handed over since (the batch is routed again)."""
    async def moved(self) -> None:
        """Wait for the handovers that made a batch's requests unroutable."""
    def settle_claims(self, claims: dict[str, str],
                      groups: dict[str, list[Request]]) -> None: ...
    def remote_queue(self, job_id: str) -> str | None:
        """The queue of another broker's live job that a request here named."""
    def depend(self, child_id: str, parent_id: str, parent_queue: str) -> None:
        """A parent here waits for a child that is not: tell the child's broker."""
    def tell(self, notices: list[Notice]) -> None:
        """Notices for jobs no queue here holds."""
    def admit_across(self, jobs: list[Any], remote: set[str],
                     held: list[tuple[str, str]],
                     reply: tuple[Replier, dict[str, Any]]) -> None:
        """Commit a flow's jobs of queues served elsewhere, then answer it."""
    def queues_elsewhere(self) -> list[str]: ...
    def take(self, command: Command, req: Request,
             remote: dict[str, list[Request]]) -> bool:
        """A broker command that another broker answers (added to ``remote``)."""
    def merged(self, req: Request, answer: Any) -> bool:
        """A broker-wide read answered with every broker's (it answers ``req``)."""
    def poked(self, queues: list[str], req: Request) -> None:
        """Apply the messages other brokers committed for ``queues``; answer ``req``."""
    def closed(self, router: Any, conn: Any) -> None:
        """A connection closed: its peer stand-ins close, what it holds elsewhere goes."""
    def peer_clients(self, broker_id: str) -> PeerClients:
        """The stand-ins of a peer link's clients (its session's, made by ClusterPeer)."""
    def status(self) -> dict[str, Any] | None:
        """The cluster as ClusterStatus shows it (None: not in one)."""


class LocalPlacement:
    """One broker: every queue is served here, nothing is forwarded or claimed, and a
    notice for a job no queue holds is dropped (whatever it was about is gone). A peer
    link's session may still connect (ClusterPeer): its stand-ins close with it."""

    whole_batches = False
    looks_up_many = False

    def __init__(self) -> None:
        self._stand_ins = StandIns()

    async def prepare(self, routed: Routed, found: Found | None, known: Mapping[str, str]
                      ) -> tuple[Found | None, dict[str, str] | None]:
        return found, None

    def where(self, queue: str, req: Request) -> str | None:
        return None

    def address(self, queue: str, req: Request) -> str | None:
        return None

    def flow_address(self, req: Request) -> str | None:
        return None

    def serves(self, queue: str) -> bool:
        return True

    def forward(self, address: str, reqs: list[Request]) -> None:
        raise AssertionError("one broker forwards nothing")

    def forgotten(self, job_id: str, found: Found | None) -> bool:
        return False

    async def moved(self) -> None:
        raise AssertionError("one broker's queues never move")

    def settle_claims(self, claims: dict[str, str],
                      groups: dict[str, list[Request]]) -> None:
        raise AssertionError("one broker claims no ids")

    def remote_queue(self, job_id: str) -> str | None:
        return None

    def depend(self, child_id: str, parent_id: str, parent_queue: str) -> None:
        pass  # (the child is gone, or will be pushed here)

    def tell(self, notices: list[Notice]) -> None:
        pass

    def admit_across(self, jobs: list[Any], remote: set[str],
                     held: list[tuple[str, str]],
                     reply: tuple[Replier, dict[str, Any]]) -> None:
        raise AssertionError("one broker serves every queue of a flow")

    def queues_elsewhere(self) -> list[str]:
        return []

    def take(self, command: Command, req: Request,
             remote: dict[str, list[Request]]) -> bool:
        return False

    def merged(self, req: Request, answer: Any) -> bool:
        return False

    def poked(self, queues: list[str], req: Request) -> None:
        req.ok({})

    def closed(self, router: Any, conn: Any) -> None:
        self._stand_ins.closed(router, conn)

    def peer_clients(self, broker_id: str) -> PeerClients:
        return PeerClients(broker_id)

    def status(self) -> dict[str, Any] | None:
        return None


class Membership(Protocol):
    """The broker's part in a cluster as the broker drives it (cluster/member.py), or
    none (:class:`LocalMembership`)."""

    def attach(self, router: Any) -> None:
        """The router is made (it asks the member's placement)."""
    def load(self) -> Recovered:
        """What the broker rebuilds at its start."""
    def cron_firing(self) -> tuple[Callable[[Any], None] | None, str | None]:
        """How the scheduler fires a schedule, and the lease it fires under (None,
        None: into a queue here, always)."""
    def scheduler_made(self, scheduler: Any) -> None: ...
    async def join(self, tcp_port: int, nursery: Any) -> None:
        """The TCP listener is bound (``tcp_port``): join, in the broker's nursery."""
    async def leave(self) -> None:
        """The last commit is in: give the leases back."""


class LocalMembership:
    """One broker: every queue is rebuilt from its store at the start; nothing to join
    or leave."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def attach(self, router: Any) -> None:
        pass

    def load(self) -> Recovered:
        return self._storage.load()

    def cron_firing(self) -> tuple[Callable[[Any], None] | None, str | None]:
        return None, None

    def scheduler_made(self, scheduler: Any) -> None:
        pass

    async def join(self, tcp_port: int, nursery: Any) -> None:
        pass

    async def leave(self) -> None:
        pass


class Member(Membership, Protocol):
    """A cluster's membership, which also says where queues are served and looks up
    jobs no local queue holds (cluster/member.py)."""

    @property
    def placement(self) -> Placement: ...
    async def queues_of(self, job_ids: list[str]) -> dict[str, str | None]: ...


# Rebuild the queues a member just claimed from what was read of them (Broker.adopt).
Rebuild = Callable[[Recovered, set[str]], None]


class Joining(Protocol):
    """How a broker joins its cluster, handed to it from above (cluster/member.py), so
    that the broker knows of no cluster: the leases it will hold, which fence every
    commit of its store, and its member, made once the broker's parts are."""

    @property
    def fence(self) -> Fence: ...
    def member(self, config: Config, storage: Storage, writer: Any, events: Any, *,
               spawn: Spawn, rebuild: Rebuild) -> Member: ...
