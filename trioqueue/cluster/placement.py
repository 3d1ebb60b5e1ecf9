"""The placement port in a cluster (docs/scale-out.md): which queues this broker serves,
how a request for one served elsewhere goes there, the custom ids a batch claims, and
the messages and pokes for jobs other brokers serve.

The router asks :class:`~trioqueue.actors.ports.Placement` the same questions on one
broker; here the answers come from the cluster's view (cluster/view.py), its peer
links and the database. What the broker wires in after the router is made (the inbox
reader, the broker records' hook, the broker-wide reads) is set on this object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..actors.lookups import Moving
from ..actors.ports import Committer, Found, Notice, Routed, Spawn
from ..actors.request import Replier, Request
from ..actors.stand_ins import PeerClients
from ..core.cluster_handlers import RELEASE_CLAIMS
from ..core.writes import Writes
from ..storage.port import OURS
from .clients import ClusterClients
from .crons import ClusterRecords
from .fanout import ClusterReads
from .inbox import ClusterInbox
from .messages import (
    RemoteJobs,
    depend_writes,
    flow_across,
    release_with_pokes,
    remote_notices,
)
from .routes import (
    ClaimIds,
    ClusterRouting,
    Forward,
    claims_wanted,
    flow_address,
    from_peer,
    queues_named,
    remote_address,
)


class ClusterPlacement:
    """A cluster member's answers to the router (see the module's docstring)."""

    whole_batches = True
    looks_up_many = True

    def __init__(self, cluster: ClusterRouting, forward: Forward, committer: Committer,
                 spawn: Spawn, claim_ids: ClaimIds | None = None) -> None:
        self.cluster = cluster
        # The clients whose commands go to other brokers (their pulls there released
        # when they close), and the way there (the peer links).
        self.clients = ClusterClients(forward)
        self.forward = self.clients.forward
        self._committer = committer
        self._spawn = spawn
        # How the custom ids a batch's pushes and flows admit are claimed (one round
        # trip per batch, with their look-up), so no other broker admits them too
        self._claim_ids = claim_ids
        # The queues of parents served elsewhere of this broker's children ...
        self.remote_parents = RemoteJobs()
        # ... and the live jobs of other brokers that this broker's pushes name (custom
        # ids, dependencies), as the batch's look-up found them
        self.remote_live = RemoteJobs()
        # Set by the broker once the router is made: the reader of this broker's
        # queues' inboxes, the broker records' commands, the broker-wide reads.
        self.inbox: ClusterInbox | None = None
        self.records: ClusterRecords | None = None
        self.reads: ClusterReads | None = None

    # ------------------------------------------------------------------ routing

    async def prepare(self, routed: Routed, found: Found | None, known: Mapping[str, str]
                      ) -> tuple[Found | None, dict[str, str] | None]:
        """Claim the queues this broker should serve that the batch names (those a
        peer asked for as the peer asked), the scheduler's lease for a cron command,
        then the batch's new custom ids."""
        asked = queues_named([(c, r) for c, r in routed if from_peer(r)], known.get, found)
        await self.cluster.prepare(queues_named(routed, known.get, found), set(asked))
        if self.records is not None:
            await self.records.prepare(routed)
        return await self._claim(routed, found, known)

    async def _claim(self, routed: Routed, found: Found | None, known: Mapping[str, str]
                     ) -> tuple[Found | None, dict[str, str] | None]:
        """Claim the new custom ids of the pushes and flows this broker admits, and
        look them up (and the pushes' dependencies), in one read. Returns ``found``
        with each flow id's queue where it is taken (None: free, and claimed here for
        its queue), and the claims made (id -> queue) that the batch must settle
        (:meth:`settle_claims`). Where another broker's job or claim has an id, a push
        of it gets the duplicate answer (``remote_live``, set by the claimer)."""
        if self._claim_ids is None:
            return found, None
        wanted = claims_wanted(routed, self.cluster, known)
        if not wanted:
            return found, None
        where = await self._claim_ids(wanted)
        # (every id sent was claimed, if only until its push is answered as existing)
        claims = {job_id: queue for job_id, queue in wanted.claims.items()
                  if job_id in where}
        if wanted.flows:
            found = {} if found is None else found
            for job_id, queue in wanted.flows.items():
                seen = where.get(job_id)
                taken = seen is not None and (seen.kind != OURS or seen.queue != queue)
                found[job_id] = seen.queue if taken and seen is not None else None
        return found, claims

    def settle_claims(self, claims: dict[str, str],
                      groups: dict[str, list[Request]]) -> None:
        """The claims a batch made and its flows did not settle: each queue's go in
        the commit after its pushes (a request of its own, after them); those of pushes
        forwarded or refused here go now."""
        by_queue: dict[str, list[str]] = {}
        rest: list[tuple[str, str]] = []
        for job_id, queue in claims.items():
            if queue in groups:
                by_queue.setdefault(queue, []).append(job_id)
            else:
                rest.append((job_id, queue))
        for queue, ids in by_queue.items():
            groups[queue].append(Request(RELEASE_CLAIMS, {"ids": ids}, _NoReply()))
        if rest:
            writes = Writes()
            writes.cluster.claims_done.extend(rest)
            self._committer.submit(writes)
            self._committer.release([])

    def where(self, queue: str, req: Request) -> str | None:
        address = remote_address(self.cluster, queue, req)
        if address is None and self.cluster.moving(queue):  # (its actor may be retired)
            raise Moving(queue)
        return address

    def address(self, queue: str, req: Request) -> str | None:
        return remote_address(self.cluster, queue, req)

    def flow_address(self, req: Request) -> str | None:
        return flow_address(self.cluster, req)

    def serves(self, queue: str) -> bool:
        return queue in self.cluster.owned

    def forgotten(self, job_id: str, found: Found | None) -> bool:
        # (a cluster's batches are always looked up: an id not in ``found`` was live
        # here then)
        return found is None or job_id not in found

    async def moved(self) -> None:
        await self.cluster.moved()

    def queues_elsewhere(self) -> list[str]:
        cluster = self.cluster
        return [q for q in cluster.queue_names() if q not in cluster.owned]

    # ------------------------------------------------------------------ jobs elsewhere

    def remote_queue(self, job_id: str) -> str | None:
        return self.remote_live.queue_of(job_id)

    def depend(self, child_id: str, parent_id: str, parent_queue: str) -> None:
        child_queue = self.remote_live.queue_of(child_id)
        if child_queue is not None:
            # (a dependency another broker serves: it must tell this parent)
            self._release_messages(
                depend_writes(child_id, parent_id, parent_queue, child_queue), None)

    def tell(self, notices: list[Notice]) -> None:
        """Each notice goes to its job's broker as an inbox message, committed with the
        batch that made it (cluster/messages.py)."""
        writes = remote_notices(self.remote_parents, notices)
        if writes is not None:
            self._release_messages(writes, None)

    def admit_across(self, jobs: list[Any], remote: set[str],
                     held: list[tuple[str, str]],
                     reply: tuple[Replier, dict[str, Any]]) -> None:
        across = flow_across(jobs, remote, self.remote_parents)
        across.cluster.claims_held.extend(held)
        self._release_messages(across, reply)

    def _release_messages(self, writes: Writes,
                          then: tuple[Replier, dict[str, Any]] | None) -> None:
        """Commit inbox messages, then poke the brokers they are for."""
        release_with_pokes(self._committer, writes,
                           [queue for queue, _ in writes.cluster.messages],
                           self.cluster.route, self.forward, then)

    # ------------------------------------------------------------------ broker commands

    def take(self, command: Any, req: Request,
             remote: dict[str, list[Request]]) -> bool:
        return self.records is not None and self.records.take(command, req, remote)

    def merged(self, req: Request, answer: Any) -> bool:
        return self.reads is not None and self.reads.take(req, answer)

    def poked(self, queues: list[str], req: Request) -> None:
        """Another broker committed messages for these queues: apply them now."""
        if self.inbox is not None:
            self._spawn(self.inbox.poked, queues, req)
        else:
            req.ok({})

    def closed(self, router: Any, conn: Any) -> None:
        self.clients.closed(router, conn)

    def peer_clients(self, broker_id: str) -> PeerClients:
        return PeerClients(broker_id)

    def status(self) -> dict[str, Any] | None:
        return self.cluster.status()


class _NoReply:
    def deliver(self, reply: dict[str, Any]) -> None:
        pass
