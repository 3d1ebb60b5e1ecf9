"""The stand-ins of another broker's clients, on any broker that has a peer link.

A peer link's session carries the commands of all the forwarding broker's clients;
each command names its client by a number (:data:`ORIGIN`), and gets that client's
:class:`StandIn` as its connection, so the queues keep each client's jobs, parked pulls
and waits apart. When the link's session closes, every stand-in of it is closed as a
client's connection is. One broker can be at the end of a peer link too, so this is
not the cluster's (its own side, the clients it forwards for, is cluster/clients.py).
"""

from __future__ import annotations

from typing import Any, Protocol
from weakref import WeakValueDictionary

__all__ = ["ORIGIN", "Connections", "PeerClients", "StandIn", "StandIns"]

#: The field of a forwarded command that names the client it came from (a number of
#: the forwarding broker's, one per client connection): the receiving session takes it
#: off before the command is routed, and gives that client's commands a connection of
#: their own (cluster/clients.py).
ORIGIN = "clusterOrigin"


class Connections(Protocol):
    """What the router does with a connection's holdings (actors/router.py)."""

    def connection_closed(self, conn: Any, queues: set[str]) -> None: ...
    def holds_jobs(self, conn: Any, queues: set[str]) -> bool: ...


class StandIn:
    """A client of another broker, as this broker's queues see it: the connection of
    the commands that broker forwarded for it."""

    __slots__ = ("peer_broker", "origin", "pulled_queues", "__weakref__")

    def __init__(self, peer_broker: str, origin: int) -> None:
        # (what came from a peer is never forwarded on, but to a queue's lease holder:
        # cluster/routes.py's from_peer)
        self.peer_broker = peer_broker
        self.origin = origin
        self.pulled_queues: set[str] = set()  # (as a session's: the pulls' queues)

    def __repr__(self) -> str:
        return f"<StandIn {self.origin} of {self.peer_broker}>"


class PeerClients:
    """The stand-ins of the clients of the broker at the other end of a peer link (one
    per link's session)."""

    __slots__ = ("broker", "_stand_ins")

    def __init__(self, broker: str) -> None:
        self.broker = broker
        self._stand_ins: WeakValueDictionary[int, StandIn] = WeakValueDictionary()

    def conn_of(self, session: Any, msg: dict[str, Any]) -> Any:
        """The connection of a command the peer sent: the stand-in of the client its
        origin names (taken off the message, so no handler sees it), or the link's
        ``session`` for the peer's own commands (no origin)."""
        origin = msg.pop(ORIGIN, None)
        if type(origin) is not int:
            return session
        stand_in = self._stand_ins.get(origin)
        if stand_in is None:
            stand_in = self._stand_ins[origin] = StandIn(self.broker, origin)
        return stand_in

    def hold_jobs(self, router: Connections) -> bool:
        """Whether a stand-in holds a job still active here: the idle timeout spares
        the link's session then, as it spares a client's connection."""
        return any(s.pulled_queues and router.holds_jobs(s, s.pulled_queues)
                   for s in list(self._stand_ins.values()))

    def close(self, router: Connections) -> None:
        """The link's session closed: each stand-in is closed as a client's connection
        would be (its jobs go back, its parked pulls and waits end)."""
        stand_ins = list(self._stand_ins.values())
        self._stand_ins.clear()
        for stand_in in stand_ins:
            router.connection_closed(stand_in, stand_in.pulled_queues)


class StandIns:
    """What the router does when a connection closes, on any broker: a peer link's
    stand-ins are closed with it (their jobs back, their parked requests ended)."""

    def closed(self, router: Connections, conn: Any) -> None:
        peer = getattr(conn, "peer_clients", None)
        if isinstance(peer, PeerClients):
            peer.close(router)
