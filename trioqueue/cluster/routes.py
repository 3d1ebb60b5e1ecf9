"""How the router routes a batch in a cluster: what it asks of the cluster, and the
batch's queues and ids that it must know about before it routes.

In a cluster (docs/scale-out.md) a batch's command goes to the queue's actor when this
broker owns the queue, and to the owning broker otherwise (forwarded over a peer link,
the reply relayed). Before routing, the router looks up the ids no local queue holds
(in the database: live or finished, in one read off the trio thread), then has the
cluster claim the queues this broker should own but does not yet (a claim is a round
trip and a rebuild), so that routing itself stays synchronous.

A command that reached this broker from another one (a peer session: its first frame
was ``ClusterPeer``) is forwarded again only to the holder of its queue's lease: two
brokers whose guesses disagree for a beat (a broker joined) would otherwise bounce it
between them. Without a lease holder it gets an error that says to retry, which the
view of the next beat settles.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Container, Iterable
from typing import Any, Protocol

from ..actors.lookups import PUSHES
from ..actors.request import Request
from ..core import fields
from ..core.commands.registry import BROKER, BY_IDS, BY_QUEUE, FLOW, SESSION, Command
from ..core.errors import Refused
from ..storage.port import Claimed

# Forward requests to the broker at an address (PeerLinks.forward).
Forward = Callable[[str, list[Request]], None]
# Claim a batch's new custom ids and look them up (ClusterMember._claim_ids).
ClaimIds = Callable[["Wanted"], Awaitable[dict[str, Claimed]]]


class ClusterRouting(Protocol):
    """What the router asks of the cluster (cluster/view.py)."""

    @property
    def owned(self) -> Container[str]: ...
    def route(self, queue: str) -> str | None: ...
    def prepare(self, queues: Iterable[str], asked: Collection[str] = ()
                ) -> Awaitable[None]: ...
    def status(self) -> dict[str, Any]: ...
    def held_elsewhere(self, queue: str) -> bool: ...
    def queue_names(self) -> Iterable[str]: ...
    def moving(self, queue: str) -> bool: ...
    def moved(self) -> Awaitable[None]: ...


def from_peer(req: Request) -> bool:
    """Whether the request came from another broker of the cluster."""
    return getattr(req.conn, "peer_broker", None) is not None


def remote_address(cluster: ClusterRouting, queue: str, req: Request) -> str | None:
    """Where a request for ``queue`` goes: None for this broker's own actor, else the
    address of the broker that serves it. Refused when neither can take it now."""
    address = cluster.route(queue)
    if address is None:
        if queue not in cluster.owned:  # (its claim lost, or failed, just now)
            raise Refused(f"Queue {queue} is moving between brokers; retry")
        return None
    if from_peer(req) and not cluster.held_elsewhere(queue):
        # (passed on only to the holder of the queue's lease: a guess from the
        # rendezvous would let two brokers whose views differ bounce it)
        raise Refused(f"Queue {queue} is served by another broker; retry")
    return address


class Wanted:
    """A batch's custom ids to claim (id -> the queue it is pushed to, the first push
    of it in the batch) and the ids only looked up (dependencies), for the pushes and
    flows this broker admits itself (docs/scale-out.md, custom ids)."""

    __slots__ = ("claims", "looks", "flows")

    def __init__(self) -> None:
        self.claims: dict[str, str] = {}
        self.looks: list[str] = []
        # a flow's ids -> their queues (a flow takes an id only if it is claimed for
        # the flow's own queue of it: it must hold each claim it commits)
        self.flows: dict[str, str] = {}

    def __bool__(self) -> bool:
        return bool(self.claims or self.looks)

    def claim(self, job_id: Any, queue: Any, known: Container[str]) -> None:
        if type(job_id) is str and job_id and type(queue) is str and (
                job_id not in known):
            self.claims.setdefault(job_id, queue)


def claims_wanted(routed: list[tuple[Command, Request]], cluster: ClusterRouting,
                  known: Container[str]) -> Wanted:
    """What the batch's admissions here must claim and look up, in one round trip
    after the batch's queues are claimed: the custom ids of pushes for queues this
    broker serves (a push forwarded is claimed by the broker that serves its queue)
    and their dependencies, and every id of a flow admitted here. Ids in ``known``
    (the live index) are left to the queues, as on one broker."""
    wanted = Wanted()
    for command, req in routed:
        try:
            if command.route == FLOW:
                if flow_address(cluster, req) is None:
                    _flow_claims(req.msg, wanted, known)
            elif req.cmd in PUSHES:
                queue = fields.queue_name(req.msg.get("queue"))
                if remote_address(cluster, queue, req) is None:
                    _push_claims(req.cmd, req.msg, queue, wanted, known)
        except Refused:  # (refused again, with its reply, when it is routed)
            continue
    return wanted


def _flow_claims(msg: dict[str, Any], wanted: Wanted, known: Container[str]) -> None:
    jobs = msg.get("jobs")
    for job in jobs if type(jobs) is list else ():
        if type(job) is dict:
            job_id, queue = job.get("id"), job.get("queue")
            wanted.claim(job_id, queue, known)
            if type(job_id) is str and type(queue) is str:
                wanted.flows.setdefault(job_id, queue)


def _push_claims(cmd: str, msg: dict[str, Any], queue: str, wanted: Wanted,
                 known: Container[str]) -> None:
    jobs = msg.get("jobs")
    items: list[Any] = [msg] if cmd == "PUSH" else jobs if type(jobs) is list else []
    key = "jobId" if cmd == "PUSH" else "customId"
    for item in items:
        if type(item) is not dict:
            continue
        wanted.claim(item.get(key), queue, known)
        deps = item.get("dependsOn")
        if type(deps) is list:
            wanted.looks.extend(d for d in deps if type(d) is str and d and d not in known)


def queues_named(routed: list[tuple[Command, Request]], locate: Callable[[str], str | None],
                 found: dict[str, str | None] | None) -> list[str]:
    """The queues a batch's commands name, by queue name or through their job ids
    (``locate``: the live index; ``found``: what the look-up found), for the cluster to
    claim those it should own before the batch is routed."""
    queues: list[str] = []

    def of(job_id: Any) -> None:
        if type(job_id) is str:
            queue = locate(job_id)
            if queue is None and found is not None:
                queue = found.get(job_id)
            if queue is not None:
                queues.append(queue)

    for command, req in routed:
        how = command.route
        msg = req.msg
        if how == BY_QUEUE:
            try:
                queues.append(fields.queue_name(msg.get("queue")))
            except Refused:
                continue
        elif how == BY_IDS:
            if command.multi is None:
                continue
            try:
                for job_id in command.multi.ids(msg):
                    of(job_id)
            except Refused:
                continue
        elif how == FLOW:
            jobs = msg.get("jobs")
            if type(jobs) is list:
                queues.extend(j["queue"] for j in jobs
                              if type(j) is dict and type(j.get("queue")) is str)
        elif how not in (BROKER, SESSION):
            of(msg.get(how))
    return queues


def flow_address(cluster: ClusterRouting, req: Request) -> str | None:
    """Where a flow (PUSHF) is admitted: when one other broker serves all of its queues,
    that broker (the flow is forwarded whole); else here, where the jobs of queues
    other brokers serve become inbox messages in the flow's one commit
    (cluster/messages.py)."""
    jobs = req.msg.get("jobs")
    names = {j["queue"] for j in jobs if type(j) is dict and type(j.get("queue")) is str
             } if type(jobs) is list else set()
    addresses = {remote_address(cluster, name, req) for name in names}
    if len(addresses) == 1:
        return addresses.pop()
    return None

