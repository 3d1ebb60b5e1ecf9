"""Broker-wide reads across a cluster: every live broker asked, the answers merged.

In a cluster (docs/scale-out.md) each broker holds only its own queues and the workers
registered over its own connections, yet any broker answers any client. So a
broker-wide read (:data:`CLUSTER_READS`) that a client sends to one broker is answered
by that broker from its own state *and* forwarded, unchanged, to every other live
broker over the peer links; a broker answers a request from a peer (or one sent with
``local: true``) from its own state alone, as without a cluster. The replies are
merged (cluster/merge.py, cluster/prometheus.py) and the client gets one.

A broker that has not answered within ``cluster_read_timeout_s`` (paused, cut off,
overloaded), or that answered an error (unreachable, shutting down), is left out: the
reply goes without it and says so in its ``brokers`` field (``{"answered": 2,
"missing": ["b2"]}``), so a read never waits on the slowest broker for longer than the
bound. A late answer is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import trio

from ..actors.request import Request
from ..core import fields
from .merge import (
    Answered,
    Merge,
    merge_dashboard_overview,
    merge_dashboard_queues,
    merge_list_webhooks,
    merge_list_workers,
    merge_metrics,
    merge_stats,
)
from .prometheus import merge_prometheus
from .routes import Forward, from_peer

log = logging.getLogger("trioqueue.cluster")

Reply = dict[str, Any]
Spawn = Callable[..., None]  # start fn(*args) as a task of the broker's nursery

#: The broker-wide reads answered for the whole cluster, each with its merge. Every
#: other broker command stays this broker's own (docs/scale-out.md, "Limits").
CLUSTER_READS: dict[str, Merge] = {
    "Stats": merge_stats,
    "Metrics": merge_metrics,
    "Prometheus": merge_prometheus,
    "DashboardOverview": merge_dashboard_overview,
    "DashboardQueues": merge_dashboard_queues,
    "ListWorkers": merge_list_workers,
    "ListWebhooks": merge_list_webhooks,
}


class Members(Protocol):
    """What the fan-out reads of the cluster (cluster/view.py): this broker's id and
    the live brokers (id -> address) as of the last beat."""

    broker_id: str

    @property
    def live(self) -> Mapping[str, str]: ...


class ClusterReads:
    """Answers :data:`CLUSTER_READS` for the whole cluster (see the module docstring)."""

    def __init__(self, members: Members, forward: Forward, spawn: Spawn,
                 timeout_s: float) -> None:
        self._members = members
        self._forward = forward
        self._spawn = spawn
        self._timeout_s = timeout_s

    def take(self, req: Request, own: Any) -> bool:
        """Answer ``req`` from every live broker, ``own`` (this broker's answer) among
        them; False when it is not a cluster read (or asks for this broker alone, or
        comes from a peer), for the caller to answer ``own`` itself."""
        merge = CLUSTER_READS.get(req.cmd)
        if merge is None or not isinstance(own, dict) or from_peer(req) or (
                fields.lenient_bool(req.msg.get("local"))):
            return False
        me = self._members.broker_id
        peers = {b: a for b, a in self._members.live.items() if b != me}
        read = _Read(req, merge, me, own, sorted(peers))
        # (without the client's reqId: a peer link numbers its own requests)
        msg = {k: v for k, v in req.msg.items() if k != "reqId"}
        for broker in sorted(peers):
            # Each part may be answered at once (a link that is closed refuses
            # synchronously); the read then completes in the loop.
            self._forward(peers[broker], [Request(req.cmd, msg, _Part(read, broker))])
        if not read.done:
            self._spawn(read.expire, self._timeout_s)
        return True


class _Read:
    """One broker-wide read in flight: the replies so far, by broker."""

    __slots__ = ("_req", "_merge", "_order", "_replies", "_waiting", "done", "_deadline")

    def __init__(self, req: Request, merge: Merge, me: str, own: Reply,
                 peers: list[str]) -> None:
        self._req = req
        self._merge = merge
        self._order = [me, *peers]
        self._replies: dict[str, Reply] = {me: own}
        self._waiting = set(peers)
        self.done = False
        self._deadline = trio.CancelScope()
        if not peers:
            self.finish()

    def arrive(self, broker: str, reply: Reply) -> None:
        if self.done or broker not in self._waiting:
            return  # (late: the client was answered without it)
        self._waiting.discard(broker)
        if reply.get("ok"):
            self._replies[broker] = {k: v for k, v in reply.items()
                                     if k not in ("ok", "reqId")}
        else:
            log.info("broker %s left out of %s: %s", broker, self._req.cmd,
                     reply.get("error"))
        if not self._waiting:
            self.finish()

    async def expire(self, timeout_s: float) -> None:
        """The bound: whoever has not answered by then is left out. Ends early once
        every broker answered; a broker shutting down answers with what it has."""
        try:
            with self._deadline:
                await trio.sleep(timeout_s)
        finally:
            self.finish()

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        self._deadline.cancel()
        ids = [b for b in self._order if b in self._replies]
        answered = Answered(ids, [b for b in self._order if b not in self._replies])
        replies = [self._replies[b] for b in ids]
        try:
            merged = self._merge(replies, answered)
        except Exception:  # a peer's reply of an unexpected shape (another version)
            log.exception("could not merge the brokers' answers to %s", self._req.cmd)
            merged = dict(replies[0])
            answered = Answered(ids[:1], [b for b in self._order if b != ids[0]])
        merged["brokers"] = answered.wire()
        self._req.ok(merged)


class _Part:
    """The replier of one peer's part of a read."""

    __slots__ = ("_read", "_broker")

    def __init__(self, read: _Read, broker: str) -> None:
        self._read = read
        self._broker = broker

    def deliver(self, reply: Reply) -> None:
        self._read.arrive(self._broker, reply)
