"""PUSHF: how the router admits a flow graph across queues, all or nothing, in one
commit (the router's ``flows``).

In a cluster the flow's jobs in queues other brokers serve become inbox messages of the
same commit (cluster/messages.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..core.errors import STORAGE_FULL, Refused
from ..core.flows import FlowItem, new_flow_job, parse_flow
from ..core.job import JobRecord
from ..core.queue import ADOPT
from ..core.states import visible_state
from ..core.writes import Writes
from .ports import AdmissionFactory, Committer, Placement, RouterLimits
from .queue_actor import QueueActor
from .request import Request


class FlowIndex(Protocol):
    """What admitting a flow reads and changes of the router: its job index and its
    queues' actors."""

    actors: dict[str, QueueActor]

    def queue_of(self, job_id: str, found: dict[str, str | None] | None) -> str | None: ...
    def retained_result(self, job_id: str, now: int) -> tuple[bool, Any] | None: ...
    def actor(self, name: str, *, recovering: bool = False) -> QueueActor: ...
    def add(self, job_id: str, queue: str) -> None: ...
    def add_dependent(self, child_id: str, parent_id: str) -> None: ...


class FlowAdmission:
    """Admits PUSHF flows for the router (``index``), given what it uses."""

    __slots__ = ("_index", "_limits", "_admission", "_committer", "_placement", "_now_ms")

    def __init__(self, index: FlowIndex, *, limits: RouterLimits,
                 admission: AdmissionFactory | None, committer: Committer,
                 placement: Placement, now_ms: Callable[[], int]) -> None:
        self._index = index
        self._limits = limits
        self._admission = admission
        self._committer = committer
        self._placement = placement
        self._now_ms = now_ms

    def _check_flow(self, req: Request, items: list[FlowItem],
                    found: dict[str, str | None] | None, now: int) -> set[str]:
        """Refuse a flow before any change (a refused flow leaves no trace); return the
        queues of its jobs that other brokers serve (in a cluster: their jobs become
        messages)."""
        limits = self._limits
        index = self._index
        for item in items:
            if index.queue_of(item.id, found) is not None or (
                    index.retained_result(item.id, now) is not None):
                raise Refused(f"Job {item.id} already exists")
        address = self._placement.address
        remote = {item.queue for item in items if address(item.queue, req) is not None}
        actors = index.actors
        new_queues = {item.queue for item in items} - actors.keys() - remote
        if len(actors) + len(new_queues) > limits.max_queues:
            raise Refused(f"Too many queues (max {limits.max_queues})")
        # Last of the checks: the room in the store.
        if self._admission is not None and self._admission().refuses(
                req.frame_bytes, len(items)):
            raise Refused(STORAGE_FULL)
        return remote

    def push(self, req: Request, found: dict[str, str | None] | None,
             claims: dict[str, str] | None = None) -> None:
        """PUSHF: an atomic flow graph across queues, all or nothing, in one commit.

        Queue actors each own their jobs, so no single actor can admit a flow that
        spans queues atomically. The router does it, synchronously (no actor can run in
        between): it validates the whole graph, claims every id, writes every job in
        one commit (durable, whatever the fsync policy), then hands each queue its jobs
        as an ``adopt`` notice. Notices are applied before a queue's inbox, and the
        reply leaves only after the commit, so any command the client sends after the
        reply finds the jobs in place.

        In a cluster ``claims`` are the ids this batch claimed (id -> queue): the flow
        settles its own in its commit, and those of its jobs in other brokers' queues
        pass to the messages that carry them (each taken off ``claims``).
        """
        items = parse_flow(req.msg, max_data_bytes=self._limits.max_data_bytes,
                           frame_bytes=req.frame_bytes, json_bound=req.json_bound)
        now = self._now_ms()
        remote = self._check_flow(req, items, found, now)
        index = self._index
        # One Writes per queue, submitted together: one commit all the same, and in a
        # cluster each is fenced by its own queue's lease.
        writes: dict[str, Writes] = {}
        per_queue: dict[str, list[JobRecord]] = {}
        snapshots = []
        jobs: list[JobRecord] = []
        held: list[tuple[str, str]] = []  # claims the messages for other brokers hold
        for item in items:
            job = new_flow_job(item, now)
            jobs.append(job)
            wire = job.to_wire()
            wire["state"] = visible_state(job.state, job.run_at, job.priority, now)
            snapshots.append(wire)
            claimed = claims is not None and claims.get(job.id) == job.queue
            if claims is not None and claimed:
                del claims[job.id]
            if job.queue in remote:
                # (admitted by the broker that serves it: flow_across; its children
                # served here tell it how they end, through its queue's inbox)
                for child_id in job.pending or ():
                    index.add_dependent(child_id, job.id)
                if claimed:
                    held.append((job.id, job.queue))
                continue
            # The one place the router touches a queue's state (its admission
            # counter): synchronous, on the one trio thread, so no actor is midway.
            job.seq = index.actor(job.queue).state.reserve_seq()
            index.add(job.id, job.queue)
            for child_id in job.pending or ():
                index.add_dependent(child_id, job.id)
            queue_writes = writes.get(job.queue)
            if queue_writes is None:
                queue_writes = writes[job.queue] = Writes(job.queue)
                queue_writes.durable = True
            queue_writes.put_job(job.to_record())
            if claimed:
                queue_writes.cluster.claims_done.append((job.id, job.queue))
            per_queue.setdefault(job.queue, []).append(job)
        for queue_writes in writes.values():
            self._committer.submit(queue_writes)
        for name, queue_jobs in per_queue.items():
            index.actors[name].post((ADOPT, queue_jobs))
        reply = (req.replier, req.reply({"data": {"jobs": snapshots}}))
        if remote:
            self._placement.admit_across(jobs, remote, held, reply)
        else:
            self._committer.release([reply])
