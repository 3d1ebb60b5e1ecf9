"""The wire's command table: the core's commands plus the ones a session answers itself.

The session commands are declared here, beside their handlers, and added to
:data:`~trioqueue.core.commands.table.CORE_COMMANDS`, so every command a client may send is in
:data:`COMMANDS`, declared once, and checked by the same registry.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from ... import __version__
from ...core import fields
from ...core.commands.registry import SESSION, Command, Reply
from ...core.commands.table import CORE_COMMANDS
from ...core.errors import Refused

PROTOCOL_VERSION = 3
CAPABILITIES = ["pipelining", "separate-job-name"]
#: A session command's answer the session gives itself, later: SubscribeEvents' in a
#: cluster, once the events of every live broker reach this one (at once when they do).
AFTER_RELAYS: Reply = {}


class SessionOps(Protocol):
    """What the session commands do to their session (see transport.session)."""

    peer_broker: str | None  # another broker's id, on its peer connection

    def authenticate(self, token: Any) -> bool: ...
    def subscribe(self, queue: str, replier: Any) -> None: ...
    def unsubscribe(self) -> None: ...
    def become_peer(self, broker_id: str) -> None: ...
    def stream_cluster_events(self, replier: Any) -> None: ...
    def cluster_status(self) -> dict[str, Any]: ...


def _auth(session: SessionOps, msg: dict[str, Any], replier: Any) -> Reply:
    if session.authenticate(msg.get("token")):
        return {}
    raise Refused("Invalid token")


def _hello(session: SessionOps, msg: dict[str, Any], replier: Any) -> Reply:
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": list(CAPABILITIES),
        "server": "bunqueue",
        "version": __version__,
        "broker": "trioqueue",
    }


def _ping(session: SessionOps, msg: dict[str, Any], replier: Any) -> Reply:
    return {"data": {"pong": True, "time": float(int(time.time() * 1000))}}


def _subscribe(session: SessionOps, msg: dict[str, Any], replier: Any) -> Reply:
    session.subscribe(fields.queue_name(msg.get("queue")), replier)
    return AFTER_RELAYS


def _unsubscribe(session: SessionOps, msg: dict[str, Any], replier: Any) -> Reply:
    session.unsubscribe()
    return {}


def _cluster_peer(session: SessionOps, msg: dict[str, Any], replier: Any) -> Reply:
    """The first frame of another broker's peer link (docs/scale-out.md): the commands
    that follow were forwarded to this broker because it serves their queues."""
    broker = msg.get("broker")
    if type(broker) is not str or not 0 < len(broker) <= 64:
        raise Refused("ClusterPeer needs the sending broker's id (1 to 64 characters)")
    session.become_peer(broker)
    return {}


def _cluster_events(session: SessionOps, msg: dict[str, Any], replier: Any) -> Reply:
    """A peer broker's events connection (cluster/peers/events.py): after this, every job
    event of the queues this broker serves follows as an event frame, never one it
    only relayed from another broker (so none goes round or twice)."""
    if session.peer_broker is None:
        raise Refused("ClusterEvents is for another broker's peer connection "
                      "(ClusterPeer first)")
    session.stream_cluster_events(replier)
    return {}


def _cluster_status(session: SessionOps, msg: dict[str, Any], replier: Any) -> Reply:
    """This broker's view of its cluster (docs/scale-out.md): its id, the live brokers
    and the queues it serves; ``{"cluster": null}`` on a broker that is not in one."""
    return {"data": session.cluster_status()}


COMMANDS = CORE_COMMANDS.extended([
    Command("Auth", SESSION, _auth, before_auth=True),
    Command("Hello", SESSION, _hello),
    Command("Ping", SESSION, _ping),
    Command("SubscribeEvents", SESSION, _subscribe),
    Command("UnsubscribeEvents", SESSION, _unsubscribe),
    Command("ClusterPeer", SESSION, _cluster_peer),
    Command("ClusterEvents", SESSION, _cluster_events),
    Command("ClusterStatus", SESSION, _cluster_status),
])

# Views for existing readers: command -> route, and the pulls (whose deliveries are
# tied to the connection, released when it closes).
ROUTES = COMMANDS.routes
PULLS = COMMANDS.pulls
