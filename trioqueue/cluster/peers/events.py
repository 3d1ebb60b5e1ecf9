"""Live events across a cluster: the other brokers' job events, republished here.

A queue's events are published by the broker that serves it (docs/scale-out.md). So
that a client subscribed through any broker (SubscribeEvents, WebSocket, SSE, our
client's QueueEvents, the dashboard) sees the events of every queue, :class:`PeerEvents`
keeps, while a client of this broker listens, one *events connection* to each other
live broker: the peer hello (Auth, ClusterPeer), then ``ClusterEvents``, after which
that broker streams every event of the queues it serves. The events of each read are
republished into this broker's hub as *relayed* (:meth:`EventHub.publish_relayed`):
its clients get them, other brokers' streams never do, so no event goes round a loop
or arrives twice.

When connections are held:

- from the moment the first client of this broker subscribes (:attr:`EventHub.listening`;
  a WebSocket connection counts, it gets events by default) until ``linger_s`` after the
  last one left (a client that reconnects finds them up); none while nobody listens, so
  the other brokers' queues build no events for this one;
- to every live broker: one that joins gets a connection at the beat that shows it
  (:attr:`Cluster.live_changed`), one that leaves loses its connection;
- a connection that cannot be opened, or breaks, is opened again after a backoff that
  doubles from ``retry_first_s`` to ``retry_max_s`` (0-30% jitter, so that brokers do
  not retry in step), back to the first after a connection that lasted.

**Events are live-only, as on one broker**: none is kept for a subscriber that is not
there, and none is sent again. What a broker publishes while this broker's connection
to it is down (broken, backing off, or not open yet to a broker that just joined) is
lost to this broker's clients, as a client's own connection loses what is published
while it reconnects. One broker's events arrive in the order it published them (one
TCP connection); events of different brokers have no order between them, including the
two sides of a queue moving from one broker to another.

So that a client that acts after ``SubscribeEvents`` is acknowledged misses nothing (the
promise QueueEvents makes), the acknowledgement waits until every live broker's
connection streams or its attempt failed (:meth:`when_ready`, which the hub asks; at
most the connect timeout).

Cancellation: each connection is a task in :meth:`run`'s nursery under a cancel scope
of its own, so dropping one (its broker left, nobody listens) cancels just it; its
stream is closed by its own ``finally`` (``aclose_forcefully``: a close that cannot be
cancelled half-way). When :meth:`run` is cancelled (the broker shuts down) every
connection ends that way, and the subscriptions still waiting for their acknowledgement
get it then, not silence.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import trio

from ...actors.events import EventHub
from ...core.backoff import reconnect_delay_s
from ...transport.large.frames import decode_large, unmap_soon
from ...transport.wire.codec import CBOR, Codec
from ...transport.wire.framing import MAX_WIRE_LENGTH, FrameDecoder, Payload
from .links import LARGE_REPLY_BYTES, RETRY_FIRST_S, RETRY_MAX_S, Connect
from .wire import RECEIVE_BYTES, decode_now, exchange_hello, reason_of, split_address

__all__ = ["PeerEvents"]

log = logging.getLogger("trioqueue.peer_events")

#: How long the connections stay after the last client stopped listening.
LINGER_S = 1.0
CLUSTER_EVENTS = {"cmd": "ClusterEvents"}


class _Link:
    """The events connection to one broker (its task's state)."""

    __slots__ = ("broker_id", "address", "scope", "tried", "streaming", "failures",
                 "retry_at")

    def __init__(self, broker_id: str, address: str) -> None:
        self.broker_id = broker_id
        self.address = address
        self.scope = trio.CancelScope()  # cancelled when the link is dropped
        self.tried = False  # an attempt ended (streaming, or failed): see when_ready
        self.streaming = False  # ClusterEvents acknowledged, the connection up
        self.failures = 0  # connections that failed or broke in a row
        self.retry_at = 0.0  # no attempt before this (trio time)


class PeerEvents:
    """This broker's events connections to the other live brokers (module docstring).

    ``peers`` gives the other live brokers (id -> "host:port"); ``changed`` the event
    set when that changes (each time a fresh one); ``hello`` the frames a peer
    connection starts with. ``connect_timeout_s`` bounds a connection and its hello.
    """

    def __init__(self, hub: EventHub, *, peers: Callable[[], Mapping[str, str]],
                 changed: Callable[[], trio.Event],
                 hello: Callable[[], list[dict[str, Any]]], connect_timeout_s: float,
                 codec: Codec = CBOR, connect: Connect | None = None,
                 linger_s: float = LINGER_S, retry_first_s: float = RETRY_FIRST_S,
                 retry_max_s: float = RETRY_MAX_S) -> None:
        if not connect_timeout_s > 0:
            raise ValueError("connect_timeout_s must be positive")
        self._hub = hub
        self._peers = peers
        self._changed = changed
        self._hello = hello
        self._timeout_s = connect_timeout_s
        self._codec = codec
        self._open: Connect = connect or trio.open_tcp_stream
        self._linger_s = linger_s
        self._retry_first_s = retry_first_s
        self._retry_max_s = retry_max_s
        self._ids = itertools.count(1)
        self._links: dict[str, _Link] = {}  # by broker id
        self._waiters: list[Callable[[], None]] = []  # acknowledgements (when_ready)
        self._quiet_since: float | None = None  # when the last client stopped listening
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None

    @property
    def links(self) -> int:
        """Events connections streaming now."""
        return sum(1 for link in self._links.values() if link.streaming)

    def status(self) -> dict[str, int]:
        """For ClusterStatus: the connections this broker holds for its clients, and
        the other brokers' connections it streams its own queues' events to."""
        return {"eventLinks": self.links, "eventStreams": self._hub.streams}

    # ------------------------------------------------------------------ the owner

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the connections that are wanted, as that changes, until cancelled (see
        the module docstring, "Cancellation")."""
        hub = self._hub
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                hub.listening_changed = self._wake_up
                hub.relay_gate = self.when_ready
                nursery.start_soon(self._follow_membership)
                task_status.started()
                while True:
                    self._wake = trio.Event()
                    look_again = self._reconcile()
                    with trio.move_on_at(look_again):
                        await self._wake.wait()
        finally:
            hub.listening_changed = None
            hub.relay_gate = None
            self._nursery = None
            self._links.clear()
            self._release_waiters()

    def when_ready(self, done: Callable[[], None]) -> bool:
        """True if the events of every live broker reach this one (each connection
        streams, or its attempt failed); else False, and ``done`` is called once that
        holds, or nobody listens any more, or :meth:`run` ends."""
        if self._nursery is None or self._ready():
            return True
        self._waiters.append(done)
        return False

    def _wake_up(self) -> None:
        self._wake.set()

    async def _follow_membership(self) -> None:
        while True:
            await self._changed().wait()
            self._wake.set()

    def _reconcile(self) -> float:
        """Open and drop connections to match what is wanted now; returns when to look
        again on its own (the end of the linger; inf: at the next wake-up)."""
        look_again = math.inf
        if self._hub.listening:
            self._quiet_since = None
            wanted = dict(self._peers())
        else:
            now = trio.current_time()
            if self._quiet_since is None:
                self._quiet_since = now
            until = self._quiet_since + self._linger_s
            wanted = {}
            if now < until and self._links:  # lingering: keep, open none
                look_again = until
                wanted = {b: a for b, a in self._peers().items() if b in self._links}
        for broker_id, link in list(self._links.items()):
            if wanted.get(broker_id) != link.address:
                del self._links[broker_id]
                link.scope.cancel()
        assert self._nursery is not None
        for broker_id, address in wanted.items():
            if broker_id not in self._links:
                link = self._links[broker_id] = _Link(broker_id, address)
                self._nursery.start_soon(self._stream, link)
        self._settle()
        return look_again

    def _ready(self) -> bool:
        if not self._hub.listening:
            return True
        links = self._links
        return all((link := links.get(broker_id)) is not None and link.address == address
                   and link.tried for broker_id, address in self._peers().items())

    def _settle(self) -> None:
        if self._waiters and self._ready():
            self._release_waiters()

    def _release_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for done in waiters:
            done()

    # ------------------------------------------------------------------ one connection

    async def _stream(self, link: _Link) -> None:
        """The connection's task: open it, relay what it streams, and again after a
        backoff when it fails or breaks, until its scope is cancelled."""
        with link.scope:
            while True:
                if link.retry_at > trio.current_time():
                    await trio.sleep_until(link.retry_at)
                opened = trio.current_time()
                why = await self._connect_and_relay(link)
                now = trio.current_time()
                if now - opened >= self._retry_max_s:
                    link.failures = 0  # it lasted: a break, not a broker that is down
                link.failures += 1
                link.retry_at = now + reconnect_delay_s(
                    link.failures - 1, self._retry_first_s, self._retry_max_s)
                log.info("events of broker %s (%s) stopped: %s", link.broker_id,
                         link.address, why)

    async def _connect_and_relay(self, link: _Link) -> str:
        """One connection, from its hello to its end; returns why it ended."""
        stream: trio.abc.Stream | None = None
        try:
            early: list[Any] = []  # event frames in the read of the hello's replies
            reason: str | None = None
            with trio.move_on_after(self._timeout_s) as timer:
                try:
                    stream = await self._open(*split_address(link.address))
                    decoder = FrameDecoder(MAX_WIRE_LENGTH)
                    reason = await exchange_hello(
                        stream, decoder, self._codec, [*self._hello(), CLUSTER_EVENTS],
                        self._ids, early)
                except Exception as exc:  # refused, reset, unreadable: all "unreachable"
                    reason = reason_of(exc)
            if timer.cancelled_caught:
                reason = f"no connection within {self._timeout_s:g} s"
            link.tried = True
            if reason is not None or stream is None:
                self._settle()
                return f"unreachable: {reason}"
            link.streaming = True
            self._settle()
            log.info("relaying the events of broker %s (%s)", link.broker_id, link.address)
            self._publish(link, early)
            return await self._relay(link, stream, decoder)
        finally:
            link.streaming = False
            if stream is not None:
                await trio.aclose_forcefully(stream)

    async def _relay(self, link: _Link, stream: trio.abc.Stream,
                     decoder: FrameDecoder) -> str:
        """Republish each read's events at once; returns why the stream ended."""
        while True:
            try:
                frames = await self._read(stream, decoder)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                return reason_of(exc)
            except Exception as exc:  # an unreadable frame: nothing after it is trusted
                return f"unreadable frame: {reason_of(exc)}"
            if frames is None:
                return "the broker closed the connection"
            self._publish(link, frames)

    async def _read(self, stream: trio.abc.Stream, decoder: FrameDecoder
                    ) -> list[Any] | None:
        """The frames of one read, decoded (None: the stream ended); a large one in
        slices, other tasks running between two, as PeerLinks decodes its replies."""
        data = await stream.receive_some(RECEIVE_BYTES)
        if not data:
            return None
        frames: list[Any] = []
        for payload in decoder.feed(data):
            if len(payload) >= LARGE_REPLY_BYTES:
                frames.append(await self._decode_sliced(payload))
            else:
                frames.append(decode_now(self._codec, payload))
        return frames

    async def _decode_sliced(self, payload: Payload) -> Any:
        try:
            value, _ = await decode_large(self._codec, payload, bound_up_to=0)
            return value
        finally:
            unmap_soon(payload)

    def _publish(self, link: _Link, frames: list[Any]) -> None:
        """The job events among ``frames``, relayed to this broker's clients."""
        events: list[dict[str, Any]] = []
        for frame in frames:
            event = frame.get("event") if type(frame) is dict else None
            if type(event) is dict and (type(event.get("queue")) is str or (
                    ":" in str(event.get("eventType")))):  # (a broker-wide dashboard one)
                events.append(event)
            elif type(frame) is dict:  # the overflow notice, an idle timeout...
                log.warning("broker %s says on the events connection: %s",
                            link.broker_id, (event or frame).get("error"))
        if events:
            self._hub.publish_relayed(events)
