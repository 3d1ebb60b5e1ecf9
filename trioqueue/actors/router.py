"""The router: owns the broker-wide job index and fans commands into queue actors.

Sessions hand it batches of requests; it resolves each to a queue (by ``queue`` name, by
job id through the index, or by looking a finished job up in storage), groups them per
queue and sends ONE inbox message per queue per batch. Ids that no queue knows are
answered here, without waking any queue. Queue actors keep the index current through
the :class:`~trioqueue.core.queue.JobIndex` methods, synchronously, as they admit and
retire jobs; that is safe because every actor runs on the one trio thread and never
awaits between checking and claiming an id.

How each command is routed, and how an id no queue knows is answered, is read from the
command's declaration (:mod:`trioqueue.core.commands.registry`), which the session hands over
with each request. What the router needs of the broker is passed in as the narrow
interfaces of :mod:`trioqueue.actors.ports`.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ..core import fields
from ..core.broker_events import broker_event
from ..core.cluster_handlers import InboxPoke
from ..core.commands.maintenance import FanOut
from ..core.commands.registry import BROKER, BY_IDS, BY_QUEUE, FLOW, Command, MultiId
from ..core.commands.table import RELEASE_CONNECTION
from ..core.committed import Committed
from ..core.errors import STORAGE_FULL, Refused
from ..core.flows import Dependents
from ..core.job import FINISHED_STATES
from ..core.metrics.broker_stats import BrokerStats
from ..core.queue import QueueState
from ..core.split_dict import SplitDict
from ..core.webhooks.registry import WebhookRegistry
from ..core.workers import WorkerRegistry
from ..turns import give_way
from .events import EventHub, EventRelease
from .fan_out import Gather
from .flow_admission import FlowAdmission
from .joins import Join
from .lookups import Moving, ids_to_look_up
from .ports import (
    AdmissionFactory,
    Committer,
    LocalPlacement,
    Notice,
    Placement,
    RouterLimits,
    Spawn,
)
from .queue_actor import QueueActor
from .request import Request
from .retained import RetainedResults
from .stand_ins import PeerClients
from .timings import BatchTimer

if TYPE_CHECKING:
    from .tracing import BrokerTracing

log = logging.getLogger("trioqueue.router")


# The queues of finished jobs by id, read off the trio thread (Router's finished_queues).
FinishedQueues = Callable[[list[str]], Awaitable[dict[str, str | None]]]


class Router:
    def __init__(self, *, committer: Committer,
                 find_queue: Callable[[str], str | None],
                 now_ms: Callable[[], int], limits: RouterLimits,
                 admission: AdmissionFactory | None,
                 new_actor: Callable[[str], QueueActor], spawn: Spawn,
                 count_stored: Callable[[str, str], int] | None = None,
                 finished_queues: FinishedQueues | None = None,
                 placement: Placement | None = None) -> None:
        self._committer = committer
        # Which queues are served here, and how a request for one served elsewhere
        # goes there: all here on one broker; a cluster's (docs/scale-out.md) answers
        # from its view (cluster/placement.py).
        self.placement: Placement = LocalPlacement() if placement is None else placement
        # Where the dashboard events of broker commands go (the broker's event hub).
        self.hub: EventHub | None = None
        # A finished job's record, seeing every write already submitted.
        self._find_queue = find_queue
        # For a store whose reads block: the queues of a batch's finished ids, looked
        # up before the batch is routed, off the trio thread (None: find_queue).
        self._finished_queues = finished_queues
        # (queue, state) -> how many finished jobs of that state the store holds
        # (ListQueues, the numbers; None: not known)
        self._count_stored = count_stored
        self._now_ms = now_ms
        self._limits = limits
        self._admission = admission  # None when the store has no limit
        self._new_actor = new_actor  # makes a queue's actor and starts its task
        self._spawn = spawn
        self._index: SplitDict[str, str] = SplitDict()  # inserts never copy it whole
        self.actors: dict[str, QueueActor] = {}
        self.workers = WorkerRegistry(overload_ms=int(limits.worker_overload_threshold_ms))
        # the cron scheduler (actors/scheduler.py), set by the broker when it runs
        self.crons: Any = None
        self.webhooks = WebhookRegistry()
        # Results of removed-on-complete jobs kept for a late WaitJob (its graveyard
        # set by the broker).
        self.results = RetainedResults(limits.removed_result_retention_s,
                                       limits.max_removed_results)
        # so that a child's queue finds the jobs waiting for it in any queue
        self.dependents = Dependents()
        # The broker's numbers (core.metrics.broker_stats); the broker fills in what it measures.
        self.stats = BrokerStats()
        self._timer = BatchTimer(self.stats.timings)
        # PUSHF: flows admitted across queues, all or nothing
        self.flows = FlowAdmission(self, limits=limits, admission=admission,
                                   committer=committer, placement=self.placement,
                                   now_ms=now_ms)
        # OpenTelemetry spans (actors/tracing.py), set by the broker when enabled
        self.tracing: BrokerTracing | None = None

    # ------------------------------------------------------------------ JobIndex

    def locate(self, job_id: str) -> str | None:
        queue = self._index.get(job_id)
        if queue is None:  # (in a cluster, another broker's live job)
            queue = self.placement.remote_queue(job_id)
        return queue

    def add_dependent(self, child_id: str, parent_id: str) -> None:
        self.dependents.add(child_id, parent_id)
        if child_id not in self._index:
            parent_queue = self._index.get(parent_id)
            if parent_queue is not None:  # (a child elsewhere must tell this parent)
                self.placement.depend(child_id, parent_id, parent_queue)

    def drop_dependent(self, child_id: str, parent_id: str) -> None:
        self.dependents.drop(child_id, parent_id)

    def take_dependents(self, child_id: str) -> list[str]:
        return self.dependents.take(child_id)

    def has_dependents(self, child_id: str) -> bool:
        return child_id in self.dependents

    def add(self, job_id: str, queue: str) -> None:
        self._index[job_id] = queue
        results = self.results
        if results.kept:  # a new generation: the old result is gone
            results.forget(job_id)

    def remove(self, job_id: str) -> None:
        self._index.pop(job_id, None)

    def retain_result(self, job_id: str, queue: str, has_result: bool, result: Any,
                      now: int) -> None:
        self.results.retain(job_id, queue, has_result, result, now)

    def retained_result(self, job_id: str, now: int) -> tuple[bool, Any] | None:
        return self.results.get(job_id, now)

    def forget_retained(self, queue: str) -> None:
        self.results.forget_queue(queue)

    def compact(self) -> None:
        """Copy the index once most of it is gone: a dict never shrinks on deletes, so
        after a million jobs drained it would keep ~30 MB of empty slots."""
        self._index.compact()

    def post_notices(self, notices: list[Notice]) -> None:
        """Hand each notice to the queue that holds its target job; the placement
        takes the rest (on one broker they are dropped: whatever they were about no
        longer matters; in a cluster they go to the job's broker)."""
        elsewhere: list[Notice] | None = None
        for job_id, notice in notices:
            queue = self._index.get(job_id)
            if queue is not None:
                self.actors[queue].post(notice)
            else:
                if elsewhere is None:
                    elsewhere = []
                elsewhere.append((job_id, notice))
        if elsewhere:
            self.placement.tell(elsewhere)

    def post_to(self, queue: str, notice: tuple[Any, ...]) -> bool:
        """Hand a notice to queue ``queue``; False when there is no such queue."""
        actor = self.actors.get(queue)
        if actor is None:
            return False
        actor.post(notice)
        return True

    def forget_queue(self, queue: str) -> None:
        for job_id in [j for j, q in self._index.items() if q == queue]:
            del self._index[job_id]

    @property
    def live_jobs(self) -> int:
        return len(self._index)

    # ------------------------------------------------------------------ BrokerScope
    # (what the broker-wide commands use: core.commands.maintenance)

    def queue_states(self) -> list[tuple[str, QueueState]]:
        return [(name, actor.state) for name, actor in self.actors.items()]

    def queue_state(self, name: str) -> QueueState | None:
        actor = self.actors.get(name)
        return None if actor is None else actor.state

    def finished_jobs(self, queue: str) -> int:
        return sum(self.stored_count(queue, state) for state in FINISHED_STATES)

    def stored_count(self, queue: str, state: str) -> int:
        return 0 if self._count_stored is None else self._count_stored(queue, state)

    def queues_elsewhere(self) -> list[str]:
        return self.placement.queues_elsewhere()

    def forget_expired_retained(self, now: int) -> int:
        return self.results.forget_expired(now)

    def compact_index(self) -> int:
        before = sys.getsizeof(self._index)
        self.compact()
        return before - sys.getsizeof(self._index)

    # ------------------------------------------------------------------ queues

    def actor(self, name: str, *, recovering: bool = False) -> QueueActor:
        """The actor of queue ``name``, started on first use.

        ``max_queues`` limits what clients can create; queues already in storage are
        always brought back, even if the limit was lowered since.
        """
        actor = self.actors.get(name)
        if actor is None:
            if not recovering and not self.placement.serves(name):
                raise Refused(f"Queue {name} is served by another broker; retry")
            if not recovering and len(self.actors) >= self._limits.max_queues:
                raise Refused(f"Too many queues (max {self._limits.max_queues})")
            actor = self.actors[name] = self._new_actor(name)
            if not recovering:  # (a stored queue brought back is not a new one)
                self.announce([broker_event("queue:created", self._now_ms(), queue=name)])
        return actor

    def queue_of(self, job_id: str, found: dict[str, str | None] | None) -> str | None:
        """A job's queue: the live index first, then storage for finished jobs (what
        :meth:`_look_up_finished` found, when it ran)."""
        queue = self._index.get(job_id)
        if queue is None:
            if found is not None and job_id in found:
                return found[job_id]
            queue = self._find_queue(job_id)
        return queue

    # ------------------------------------------------------------------ dispatch

    async def dispatch(self, routed: list[tuple[Command, Request]]) -> None:
        """Send each request to its queue: one inbox message per queue for the batch."""
        timer = self._timer  # one batch in 16 is timed (actors/timings.py)
        timer.countdown -= 1
        if not timer.countdown:
            timer.time(routed)
        if self.tracing is not None:
            self.tracing.take(routed, self)
        while routed:
            routed, paced = await self._route(routed)
            if paced:
                await give_way()

    async def _route(self, routed: list[tuple[Command, Request]]
                     ) -> tuple[list[tuple[Command, Request]], bool]:
        """Route a batch: look up the ids no live job here has, have the cluster claim
        the queues this broker should serve, claim the new custom ids, then send each
        request to its queue or its broker. Returns the requests to route again: in a
        cluster, those whose queue this broker handed over while the batch waited, once
        that handover is done; on one broker, the rest of a batch whose broker commands
        (answered here, inline) ran past ``slice_budget_ms``, with True: they are routed
        after a pass of every other task, so a read of many costly ones (each
        ``AddWebhook`` parses its URL) is not one long step."""
        found = None
        if self._finished_queues is not None:
            found = await self._look_up_finished(routed, self._finished_queues)
        placement = self.placement
        found, claims = await placement.prepare(routed, found, self._index)
        groups: dict[str, list[Request]] = {}
        remote: dict[str, list[Request]] = {}
        again: list[tuple[Command, Request]] = []
        # (a cluster's claims and look-ups are made for the whole batch: not split)
        until = None if placement.whole_batches else (
            time.perf_counter() + self._limits.slice_budget_ms / 1000)
        rest: list[tuple[Command, Request]] = []
        for at, (command, req) in enumerate(routed):
            try:
                self._resolve(command, req, groups, found, remote, claims)
            except Moving:
                again.append((command, req))
            except Refused as exc:
                req.error(exc.message)
            if until is not None and command.route == BROKER and (
                    time.perf_counter() > until):
                rest = routed[at + 1:]
                break
        if claims:
            placement.settle_claims(claims, groups)
        for address, reqs in remote.items():
            placement.forward(address, reqs)
        for name, reqs in groups.items():
            await self.send(name, reqs)
        if again:
            await placement.moved()
            return again, False
        return rest, bool(rest)

    async def send(self, name: str, reqs: list[Request]) -> None:
        actor = self.actors[name]
        if actor.retired:
            # (a cluster's queue handed over after these were routed to it: nothing
            # would ever answer them)
            for req in reqs:
                req.error(f"Queue {name} is moving between brokers; retry")
            return
        if actor.run_inline(reqs):
            return
        actor.batches_in_flight += 1  # counted until the actor takes it (see Broker.settle)
        try:
            actor.send.send_nowait(reqs)
        except trio.WouldBlock:
            # A full inbox is backpressure: this session stops reading until it drains.
            try:
                await actor.send.send(reqs)
            except BaseException:
                actor.batches_in_flight -= 1
                raise

    async def send_if_served(self, name: str, reqs: list[Request]) -> None:
        """Send to queue ``name``'s actor if this broker has one (the inbox reader's:
        a queue handed over meanwhile is skipped; its messages wait for its owner)."""
        if name in self.actors:
            await self.send(name, reqs)
        else:
            for req in reqs:
                req.error(f"Queue {name} is not served here")

    async def _look_up_finished(self, routed: list[tuple[Command, Request]],
                                finished_queues: FinishedQueues
                                ) -> dict[str, str | None] | None:
        """The queues of the batch's ids that no live job has, in one read off the
        trio thread (a store whose reads block), so routing never waits on the store
        in the event loop. Each id asked maps to its queue or None."""
        ids = ids_to_look_up(routed, self._index, multi=self.placement.looks_up_many)
        if not ids:
            return None
        return await finished_queues(ids)

    def _group(self, name: str, req: Request, groups: dict[str, list[Request]],
               remote: dict[str, list[Request]] | None) -> None:
        """Add ``req`` to queue ``name``'s part of the batch: its actor's here, or (in
        a cluster) the part forwarded to the broker that serves the queue."""
        if remote is not None:
            address = self.placement.where(name, req)
            if address is not None:
                remote.setdefault(address, []).append(req)
                return
        self.actor(name)
        groups.setdefault(name, []).append(req)

    def _resolve(self, command: Command, req: Request,
                 groups: dict[str, list[Request]],
                 found: dict[str, str | None] | None = None,
                 remote: dict[str, list[Request]] | None = None,
                 claims: dict[str, str] | None = None) -> None:
        msg = req.msg
        how = command.route
        if how == BY_QUEUE:
            self._group(fields.queue_name(msg.get("queue")), req, groups, remote)
            return
        if how == BY_IDS:
            assert command.multi is not None  # the registry checked it
            self._resolve_many(command.multi, req, groups, found, remote)
            return
        if how == BROKER:
            self._broker(command, req, remote)
            return
        if how == FLOW:
            if remote is not None:
                address = self.placement.flow_address(req)
                if address is not None:
                    remote.setdefault(address, []).append(req)
                    return
            self.flows.push(req, found, claims)
            return
        # An id route: its name is the field that holds the id. No length check: an
        # over-long id can never exist, so it reads as not found.
        job_id = fields.job_id(msg.get(how), how, check_length=False)
        queue = self.queue_of(job_id, found)
        if queue is None and self.placement.forgotten(job_id, found):
            raise Moving(job_id)
        if queue is None:
            if command.retained is not None:
                retained = self.retained_result(job_id, self._now_ms())
                if retained is not None:
                    req.ok(command.retained(*retained))
                    return
            assert command.missing is not None  # the registry checked it
            req.ok(command.missing(job_id))
            return
        self._group(queue, req, groups, remote)

    def _broker(self, command: Command, req: Request,
                remote: dict[str, list[Request]] | None) -> None:
        """Broker-wide state (workers, queues, memory): answered here; with writes to
        commit first (Committed); or by every queue (a FanOut). Or a cluster's cron
        command for the scheduler's broker. One that stores the client's data (a
        schedule) is admitted first, by its frame's size, as a push is."""
        if command.admits is not None and self._admission is not None and (
                self._admission().refuses(req.frame_bytes, command.admits(req.msg), req)):
            req.error(STORAGE_FULL)
            return
        if remote is not None and self.placement.take(command, req, remote):
            return
        assert command.handler is not None
        if command.sized:
            answer = command.handler(self, req.msg, self._now_ms(), req.conn,
                                     req.frame_bytes, req.json_bound)
        else:
            answer = command.handler(self, req.msg, self._now_ms(), req.conn)
        if self.placement.merged(req, answer):
            return  # (a cluster: the other brokers' answers merged with this one)
        if isinstance(answer, FanOut):
            gather = Gather(req, answer.combine, len(self.actors))
            for name in list(self.actors):
                self._post(name, Request(answer.command, {}, gather))
        elif isinstance(answer, InboxPoke):
            # (another broker committed messages for these queues: apply them now)
            self.placement.poked(answer.queues, req)
        elif isinstance(answer, Committed):
            # The broker's own records: the reply leaves once they are committed, and
            # so do the dashboard events of the change.
            self._committer.submit(answer.writes)
            released: list[tuple[Any, dict[str, Any]]] = [
                (req.replier, req.reply(answer.reply))]
            if answer.events and self.hub is not None and self.hub.active:
                released.append((EventRelease(self.hub), {"events": list(answer.events)}))
            self._committer.release(released)
        else:
            req.ok(answer)
        self.announce(self.workers.take_events())

    def announce(self, events: list[dict[str, Any]]) -> None:
        """Dashboard events of the broker's own state (core/broker_events.py), to the
        hub's subscribers; dropped while nobody listens."""
        if events and self.hub is not None and self.hub.active:
            self.hub.publish(events)

    def _resolve_many(self, multi: MultiId, req: Request,
                      groups: dict[str, list[Request]],
                      found: dict[str, str | None] | None = None,
                      remote: dict[str, list[Request]] | None = None) -> None:
        # Refuse bad arguments up front, exactly as the queue would, so an unknown id
        # or a split across queues never hides an invalid command.
        ids = multi.ids(req.msg)
        by_queue: dict[str, list[int]] = {}
        unknown: list[int] = []
        for i, job_id in enumerate(ids):
            queue = self._index.get(job_id)
            if queue is None and found is not None:  # (a cluster: another broker's)
                queue = found.get(job_id)
            if queue is None:
                if self.placement.forgotten(job_id, found):
                    raise Moving(job_id)
                unknown.append(i)
            else:
                by_queue.setdefault(queue, []).append(i)
        if remote is not None:
            # (refused whole, before any part is routed: a queue handed over raises
            # Moving, and the request is routed again whole once it moved)
            for queue in by_queue:
                self.placement.where(queue, req)
        if len(by_queue) == 1 and not unknown:
            self._group(next(iter(by_queue)), req, groups, remote)
            return
        if not by_queue:
            # Nothing live: the answer is the same as for a queue that knows none of them.
            req.ok(multi.merge(ids, [], unknown))
            return
        join = Join(req, multi, ids, unknown)
        for queue, positions in by_queue.items():
            part = Request(req.cmd, multi.slice(req.msg, positions), join.part(positions),
                           conn=req.conn)
            self._group(queue, part, groups, remote)

    def connection_closed(self, conn: Any, queues: set[str]) -> None:
        """Forget a closed connection's workers; return what it held to its queues."""
        self.workers.connection_closed(conn, self._now_ms())
        self.announce(self.workers.take_events())
        for name in queues:
            if name in self.actors:
                self._post(name, Request(RELEASE_CONNECTION, {}, _NoReply(), conn=conn))
        self.placement.closed(self, conn)  # (a peer link's stand-ins; pulls elsewhere)

    def peer_clients(self, broker_id: str) -> PeerClients:
        """The stand-ins of a peer link's clients (ClusterPeer, on the link's session)."""
        return self.placement.peer_clients(broker_id)

    def cluster_status(self) -> dict[str, Any] | None:
        return self.placement.status()

    def post(self, name: str, request: Request) -> None:
        """Hand the broker's own request to queue ``name`` (its actor made if needed)
        without waiting: a single broker's cron firings (a cluster's: cluster/crons.py)."""
        self.actor(name)
        self._post(name, request)

    def _post(self, name: str, request: Request) -> None:
        """Send the broker's own request to a queue without waiting (its inbox full,
        a task of its own sends it)."""
        actor = self.actors[name]
        try:
            actor.send.send_nowait([request])
            actor.batches_in_flight += 1
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            self._spawn(self.send, name, [request])

    def holds_jobs(self, conn: Any, queues: set[str]) -> bool:
        """Whether a job delivered over ``conn`` in one of ``queues`` is still active.

        A read of the queues' state on the one trio thread (no actor is midway): the
        idle timeout spares a connection that holds jobs.
        """
        for name in queues:
            actor = self.actors.get(name)
            if actor is not None and actor.holds_jobs_of(conn):
                return True
        return False


class _NoReply:
    def deliver(self, reply: dict[str, Any]) -> None:
        pass
