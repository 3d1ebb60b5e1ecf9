"""A client's jobs pulled through another broker, released when the client goes.

On one broker a client's connection holds what it pulled: when the connection closes,
those jobs go back to their queue at once, uncharged, and its parked pulls and waits end
(RELEASE_CONNECTION). In a cluster (docs/scale-out.md), a client of broker A that pulls
from a queue broker B serves gets its jobs through A's peer link to B, and that link's
session on B carries the commands of all of A's clients. So the brokers name the
client to each other:

- **A, forwarding.** :class:`ClusterClients` gives each client connection whose commands
  it forwards a number (:meth:`~ClusterClients.origin_of`, which the peer links put in
  each message they send, :data:`~trioqueue.actors.stand_ins.ORIGIN`), and notes the
  queues each client pulled from through each peer (:meth:`~ClusterClients.forward`,
  the router's way out). When the client's connection closes
  (:meth:`~ClusterClients.closed`, called by the router's ``connection_closed``), each
  of those peers gets a ``ClusterRelease`` per such queue, fire and forget: one that is
  lost leaves the jobs to their lock expiry, as before.
- **B, receiving.** The peer link's session (its :class:`PeerClients`, made by
  ClusterPeer) takes the origin off each command and gives the command a
  :class:`StandIn` of that client as its connection, so the queues keep each client's
  jobs, parked pulls and waits apart, as for B's own clients. ``ClusterRelease`` is
  routed to its queue like any command, so it comes after that client's commands sent
  before it, and releases what its stand-in holds there (core/cluster_handlers.py).
  When the link's session itself closes (A died, or the link broke), every stand-in of
  it is closed as a client's connection is: A's clients are gone, or will reconnect.

A stand-in lives as long as something refers to it: the queues (the jobs it holds, its
parked requests) and its commands in flight. Until then its peer session finds it by its
origin; after, it is forgotten, and that client's next command gets a new one, which
is the same to every queue. So a client of A that never closes (an HTTP request's
session, dropped once answered, as on one broker) costs B nothing once its jobs are
settled, and A forgets it when it is dropped.
"""

from __future__ import annotations

import itertools
from typing import Any
from weakref import WeakKeyDictionary

from ..actors.request import Request
from ..actors.stand_ins import ORIGIN, Connections, StandIns
from ..core.cluster_handlers import CLUSTER_RELEASE
from ..core.commands.table import CORE_COMMANDS
from .routes import Forward

__all__ = ["ClusterClients"]

_PULLS = CORE_COMMANDS.pulls


class _Origin:
    """A client connection whose commands this broker forwards."""

    __slots__ = ("number", "pulled")

    def __init__(self, number: int) -> None:
        self.number = number
        self.pulled: dict[str, set[str]] = {}  # peer address -> queues pulled through it


class _Ignored:
    """The replier of a ClusterRelease (fire and forget: an error, the peer gone or
    unreachable, leaves the jobs to their lock expiry)."""

    __slots__ = ()

    def deliver(self, reply: dict[str, Any]) -> None:
        pass


_IGNORED = _Ignored()


class ClusterClients(StandIns):
    """This broker's side of the clients across brokers, in a cluster: the clients
    whose commands it forwards (numbered, and their pulls noted) and, when a connection
    closes, what it must release elsewhere (see the module's docstring) as well as its
    stand-ins. ``send`` forwards requests to a peer (PeerLinks.forward)."""

    def __init__(self, send: Forward) -> None:
        self._send = send
        self._numbers = itertools.count(1)
        # (weak: a connection that is dropped without closing, an HTTP request's
        # session, is forgotten with it)
        self._origins: WeakKeyDictionary[Any, _Origin] = WeakKeyDictionary()

    def _origin(self, conn: Any) -> _Origin | None:
        try:
            origin = self._origins.get(conn)
            if origin is None:
                origin = self._origins[conn] = _Origin(next(self._numbers))
        except TypeError:  # (a connection that cannot be referred to weakly: none)
            return None
        return origin

    def forward(self, address: str, reqs: list[Request]) -> None:
        """The router's way to the broker at ``address``: the queues each client pulls
        from through it noted (before they go: the client may close before the link
        sends them), then the requests forwarded."""
        for req in reqs:
            if req.cmd not in _PULLS or req.conn is None:
                continue
            queue = req.msg.get("queue")
            if type(queue) is str and (origin := self._origin(req.conn)) is not None:
                origin.pulled.setdefault(address, set()).add(queue)
        self._send(address, reqs)

    def origin_of(self, conn: Any) -> int | None:
        """The number that names ``conn`` to the peers (the links' ``origin_of``): None
        for the broker's own requests, which have no connection."""
        if conn is None:
            return None
        origin = self._origin(conn)
        return None if origin is None else origin.number

    def closed(self, router: Connections, conn: Any) -> None:
        """A connection closed (the router's ``connection_closed``): a peer link's
        stand-ins are closed with it, and each peer a client pulled from through this
        broker is told to release what it holds there."""
        super().closed(router, conn)
        try:
            origin = self._origins.get(conn)
        except TypeError:
            return
        if origin is None or not origin.pulled:
            return
        pulled, origin.pulled = origin.pulled, {}
        for address, queues in pulled.items():
            self._send(address, [
                Request(CLUSTER_RELEASE, {"queue": queue, ORIGIN: origin.number}, _IGNORED)
                for queue in sorted(queues)])
