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

from ..core import fields
from ..core.errors import Refused
from ..core.registry import BROKER, BY_IDS, BY_QUEUE, FLOW, SESSION, Command
from .request import Request

# Forward requests to the broker at an address (PeerLinks.forward).
Forward = Callable[[str, list[Request]], None]


class ClusterRouting(Protocol):
    """What the router asks of the cluster (actors/cluster.py)."""

    @property
    def owned(self) -> Container[str]: ...
    def route(self, queue: str) -> str | None: ...
    def prepare(self, queues: Iterable[str], asked: Collection[str] = ()
                ) -> Awaitable[None]: ...
    def status(self) -> dict[str, Any]: ...
    def held_elsewhere(self, queue: str) -> bool: ...
    def queue_names(self) -> Iterable[str]: ...


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


def ids_to_look_up(routed: list[tuple[Command, Request]], known: Container[str],
                   *, multi: bool) -> list[str]:
    """The job ids the batch names that ``known`` (the live index) lacks: single-id
    commands, a flow's client-given ids, and (``multi``: in a cluster, where another
    broker's queues hold most jobs) the ids of multi-id commands and the custom ids and
    dependencies of pushes (a custom id or a dependency may be another broker's job)."""
    ids: list[str] = []
    for command, req in routed:
        how = command.route
        if multi and req.cmd in _PUSHES:
            ids.extend(i for i in push_ids(req.cmd, req.msg) if i not in known)
            continue
        if how == FLOW:  # a flow's ids are the client's: they may exist already
            jobs = req.msg.get("jobs")
            named: list[Any] = [j.get("id") for j in jobs if type(j) is dict] if (
                type(jobs) is list) else []
        elif how == BY_IDS:
            if not multi or command.multi is None:
                continue
            try:
                named = list(command.multi.ids(req.msg))
            except Refused:  # (refused again, with its reply, when it is routed)
                continue
        elif how in (BY_QUEUE, BROKER, SESSION):
            continue
        else:
            named = [req.msg.get(how)]
        ids.extend(i for i in named if type(i) is str and i and i not in known)
    return ids


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
    (actors/cluster_messages.py)."""
    jobs = req.msg.get("jobs")
    names = {j["queue"] for j in jobs if type(j) is dict and type(j.get("queue")) is str
             } if type(jobs) is list else set()
    addresses = {remote_address(cluster, name, req) for name in names}
    if len(addresses) == 1:
        return addresses.pop()
    return None


_PUSHES = frozenset(("PUSH", "PUSHB"))


def push_ids(cmd: str, msg: dict[str, Any]) -> list[str]:
    """A PUSH's or PUSHB's custom ids and dependencies, as given (checked later)."""
    jobs = msg.get("jobs")
    items: list[Any] = [msg] if cmd == "PUSH" else jobs if type(jobs) is list else []
    key = "jobId" if cmd == "PUSH" else "customId"
    ids: list[str] = []
    for item in items:
        if type(item) is not dict:
            continue
        custom = item.get(key)
        if type(custom) is str and custom:
            ids.append(custom)
        deps = item.get("dependsOn")
        if type(deps) is list:
            ids.extend(d for d in deps if type(d) is str and d)
    return ids
