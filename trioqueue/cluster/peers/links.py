"""Broker-to-broker links: commands for a queue another broker owns, forwarded there.

In cluster mode a client may send any command to any broker; one for a queue owned by
another broker is forwarded to that broker (the *peer*) over a link of our own, and the
peer's reply is handed to the client's session as if we had answered it ourselves
(docs: shared/design/scale-out.md, "Forwarding"). A link is one TCP connection per peer
address, CBOR frames in the broker's own framing, many commands in flight on it at once
(pipelined, matched by ``reqId``), so the peer serves a forwarded command like any
client's.

Each link has two tasks in :class:`PeerLinks`' nursery:

- a **sender**, which sleeps until requests are queued for its peer, opens the
  connection when there is none (the ``hello`` frames first, e.g. Auth), and then writes
  *every* request queued meanwhile with ONE ``send_all``: a session's read of 200
  PUSHes for a remote queue costs the peer one read, not 200 (the broker's own batching
  then holds end to end);
- a **reader** per connection, which decodes each read of replies and hands each
  session all of its replies of that read at once (:func:`deliver_all`).

A forwarded message is a copy of the client's with the link's own ``reqId`` (a counter
shared by all links); the client's ``reqId`` stays on the :class:`Request` and is put
back on the reply (or taken off, when the client sent none). The copy also names the
client connection it came from (``origin_of``; actors/stand_ins.py's ``ORIGIN``), so
that the peer keeps each client's jobs apart and can release them when it leaves.

No request is ever left without an answer (the texts are in :mod:`.wire`). A peer
that cannot be reached (refused, timed out, its hello refused) fails the requests
waiting for it at once with ``unreachable_error`` (not sent: safe to retry). A link that
breaks with requests in flight fails each with ``lost_error`` (the peer may or may not
have applied them). Dropping a link (its broker left the cluster: dead, or frozen past
its lease) and stopping :meth:`PeerLinks.run` (the broker shuts down) answer what they
hold too.

**A deadline.** A peer that stops answering without closing its connection (frozen,
wedged, cut off by the network) would hold what was sent to it for as long as it
stays so. A command that holds nothing at the peer (:func:`.wire.holds`: not a
long-poll) is answered within milliseconds by a peer that works; one left unanswered
for ``reply_timeout_s`` gives its connection up, and every command on it gets
``timed_out_error`` (retriable, and ambiguous: the peer may have applied it before it
stopped). The broker's cluster drops the link of a broker that left at its next beat
(:meth:`PeerLinks.drop`), long-polls included. Neither sends the command to the queue's
new owner itself: a broker that stopped answering may have committed it before its
lease moved, and a command applied twice is worse than one answered with an error.

Frames from the peer that answer no pending request (event frames) are counted in
:attr:`PeerLinks.dropped_frames` and dropped: the peers' events travel on connections
of their own (:mod:`.events`), so a slow events stream never delays a command.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ...actors.request import Replier, Request, deliver_all
from ...actors.stand_ins import ORIGIN
from ...core.backoff import reconnect_delay_s
from ...transport.large.frames import decode_large, unmap_soon
from ...transport.wire.codec import CBOR, Codec
from ...transport.wire.framing import MAX_WIRE_LENGTH, FrameDecoder, Payload, frame_header
from .wire import (
    RECEIVE_BYTES,
    PeerBroken,
    decode_now,
    departed_error,
    exchange_hello,
    holds,
    in_flight_error,
    lost_error,
    not_sent_error,
    reason_of,
    relay,
    split_address,
    timed_out_error,
    unreachable_error,
)

__all__ = ["PeerLinks"]

log = logging.getLogger("trioqueue.peers")

#: Delay before reconnecting after a failed connection attempt: doubling from the first
#: to the most, 0-30% jitter (so that the brokers of a cluster do not retry in step).
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0
#: A reply frame at least this large is decoded in slices (transport/large_frames.py),
#: other tasks running between two, as the broker does for its clients' large frames.
LARGE_REPLY_BYTES = 64 * 1024
SHUTTING_DOWN = "This broker is shutting down"

#: Opens a stream to ``(host, port)``; trio.open_tcp_stream unless a test wraps it.
Connect = Callable[[str, int], Awaitable[trio.abc.Stream]]
#: The number that names a request's client connection to the peer (None: none).
OriginOf = Callable[[Any], int | None]
Deliveries = list[tuple[Replier, dict[str, Any]]]


class _Conn:
    """One connection of a link: its stream, the decoder of its replies, and the
    requests sent on it and not yet answered (by the link's ``reqId``)."""

    __slots__ = ("stream", "decoder", "pending", "scope", "broken", "quick")

    def __init__(self, stream: trio.abc.Stream, decoder: FrameDecoder) -> None:
        self.stream = stream
        self.decoder = decoder
        self.pending: dict[int, Request] = {}
        self.scope = trio.CancelScope()  # the reader's: cancelled when the link breaks
        self.broken = False
        # (sent at, reqId) of the requests that hold nothing at the peer, in send
        # order: the reply deadline watches the oldest one still pending (answered
        # ones are dropped from the front as it looks)
        self.quick: deque[tuple[float, int]] = deque()

    def oldest_quick(self) -> float | None:
        """When the oldest request still pending that holds nothing was sent."""
        quick, pending = self.quick, self.pending
        while quick and quick[0][1] not in pending:
            quick.popleft()
        return quick[0][0] if quick else None


class _Link:
    """Everything about one peer address."""

    __slots__ = ("address", "host", "port", "queued", "conn", "wake", "failures",
                 "retry_at", "scope", "room", "dropped_frames")

    def __init__(self, address: str, host: str, port: int) -> None:
        self.address = address
        self.host = host
        self.port = port
        self.queued: list[Request] = []  # forwarded, not sent yet
        self.conn: _Conn | None = None
        self.wake = trio.Event()  # set when requests are queued
        self.failures = 0  # connection attempts failed in a row
        self.retry_at = 0.0  # no attempt before this (trio time)
        self.scope = trio.CancelScope()  # the sender's: cancelled by drop()
        self.room = trio.lowlevel.ParkingLot()  # forward_wait's callers, for room
        self.dropped_frames = 0

    def in_flight(self) -> int:
        conn = self.conn
        return len(self.queued) + (len(conn.pending) if conn is not None else 0)


def _refuse(reqs: list[Request], message: str) -> None:
    if reqs:
        deliver_all([(req.replier, req.error_reply(message)) for req in reqs])


class PeerLinks:
    """The links of this broker to its peers (one per address, opened on first use).

    ``hello`` gives the frames every new connection starts with (its reqIds are set
    here); each reply must be ok, or the connection is given up and the requests
    waiting for it fail. ``connect_timeout_s`` bounds the connection *and* its hello;
    ``reply_timeout_s`` (None: no deadline) the wait for the reply of a command that
    holds nothing at the peer (see the module docstring).
    At most ``max_in_flight`` requests wait for one peer (queued or sent); past that
    :meth:`forward` refuses and :meth:`forward_wait` waits. ``origin_of`` names each
    request's client (its ``conn``) in the message sent.
    """

    def __init__(self, *, hello: Callable[[], list[dict[str, Any]]],
                 connect_timeout_s: float, max_in_flight: int = 10_000,
                 codec: Codec = CBOR, connect: Connect | None = None,
                 retry_first_s: float = RETRY_FIRST_S, retry_max_s: float = RETRY_MAX_S,
                 large_reply_bytes: int = LARGE_REPLY_BYTES,
                 origin_of: OriginOf | None = None,
                 reply_timeout_s: float | None = None) -> None:
        if not connect_timeout_s > 0:
            raise ValueError("connect_timeout_s must be positive")
        if reply_timeout_s is not None and not reply_timeout_s > 0:
            raise ValueError("reply_timeout_s must be positive")
        self._reply_timeout_s = reply_timeout_s
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._hello = hello
        self._connect_timeout_s = connect_timeout_s
        self._max = max_in_flight
        self._codec = codec
        self._open: Connect = connect or trio.open_tcp_stream
        self._retry_first_s = retry_first_s
        self._retry_max_s = retry_max_s
        self._large = large_reply_bytes or MAX_WIRE_LENGTH + 1
        self._origin_of = origin_of
        self._links: dict[str, _Link] = {}
        self._ids = itertools.count(1)
        self._nursery: trio.Nursery | None = None
        self._closed = False
        #: Frames from peers that answered no pending request (events), all links.
        self.dropped_frames = 0

    # ------------------------------------------------------------------ the owner

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Own every link's tasks until cancelled (the broker shutting down).

        Requests forwarded before this starts wait for it. When it is cancelled, the
        readers' cancellation fails what they have in flight (the peer may have
        applied it) and, once every task is gone, the requests never sent are
        answered too: the sessions still get a reply for each, and nothing is
        forwarded after (:meth:`forward` then refuses at once).
        """
        if self._nursery is not None or self._closed:
            raise RuntimeError("PeerLinks.run runs once")
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for link in self._links.values():
                    nursery.start_soon(self._send_loop, link)
                if self._reply_timeout_s is not None:
                    nursery.start_soon(self._watch_replies, self._reply_timeout_s)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._closed = True
            self._nursery = None
            links, self._links = list(self._links.values()), {}
            for link in links:
                self._close_link(link, not_sent_error(link.address, "this broker is "
                                                      "shutting down"),
                                 in_flight_error(link.address, SHUTTING_DOWN))

    # ------------------------------------------------------------------ the API

    def forward(self, address: str, reqs: list[Request]) -> None:
        """Queue ``reqs`` for the peer at ``address`` ("host:port"); never blocks.

        Every request queued for a peer before its sender runs goes out in one write.
        Those past ``max_in_flight`` are refused at once (retriable), as are all of
        them when this broker is shutting down or the address is not one.
        """
        if not reqs:
            return
        if self._closed:
            _refuse(reqs, not_sent_error(address, "this broker is shutting down"))
            return
        link = self._links.get(address)
        if link is None:
            try:
                host, port = split_address(address)
            except ValueError as exc:
                _refuse(reqs, unreachable_error(address, str(exc)))
                return
            link = self._links[address] = _Link(address, host, port)
            if self._nursery is not None:
                self._nursery.start_soon(self._send_loop, link)
        room = self._max - link.in_flight()
        if room < len(reqs):
            room = max(room, 0)
            _refuse(reqs[room:], f"Too many commands in flight to the broker at "
                                 f"{address} ({self._max}): try again")
            reqs = reqs[:room]
            if not reqs:
                return
        link.queued.extend(reqs)
        link.wake.set()

    async def forward_wait(self, address: str, reqs: list[Request]) -> None:
        """:meth:`forward`, waiting for room under ``max_in_flight`` instead of refusing.

        A batch larger than the room left goes out in parts, each as room frees up.
        Cancelled while it waits, it refuses the requests it had not forwarded yet:
        the caller's sessions get an answer for every request, as always.
        """
        waited = False
        try:
            while reqs:
                link = self._links.get(address)
                room = self._max if link is None else self._max - link.in_flight()
                if room <= 0 and link is not None and not self._closed:
                    waited = True
                    await link.room.park()
                    continue
                part, reqs = reqs[:max(room, 1)], reqs[max(room, 1):]
                self.forward(address, part)
        except trio.Cancelled:
            _refuse(reqs, not_sent_error(address, "cancelled while waiting for room"))
            raise
        if not waited:
            # An async call checkpoints (trio's rule); shielded, as every request has
            # been forwarded already and a cancellation here could not undo it.
            await trio.lowlevel.cancel_shielded_checkpoint()

    def drop(self, address: str) -> None:
        """Close the link to a broker that left the cluster: what waits for it is
        answered now, with an error that says to retry (not sent: it was not applied;
        in flight: it may or may not have been)."""
        link = self._links.pop(address, None)
        if link is None:
            return
        log.info("link to %s given up: the broker left the cluster", address)
        self._close_link(link, not_sent_error(address, "it left the cluster; retry"),
                         departed_error(address))

    def addresses(self) -> list[str]:
        """The peers this broker has links to."""
        return list(self._links)

    def in_flight(self, address: str) -> int:
        """Requests forwarded to ``address`` and not answered yet (queued or sent)."""
        link = self._links.get(address)
        return 0 if link is None else link.in_flight()

    # ------------------------------------------------------------------ closing

    def _close_link(self, link: _Link, unsent: str, sent: str) -> None:
        """Stop ``link``'s tasks and answer every request it holds. Its sender is
        cancelled (a connection it was opening is closed by its own cleanup); its
        reader too (it closes the stream on its way out)."""
        link.scope.cancel()
        queued, link.queued = link.queued, []
        _refuse(queued, unsent)
        conn = link.conn
        if conn is not None:
            link.conn = None
            conn.broken = True
            conn.scope.cancel()
            pending, conn.pending = conn.pending, {}
            _refuse(list(pending.values()), sent)
        link.room.unpark_all()

    def _lose(self, link: _Link, conn: _Conn, message: str, why: str) -> None:
        """``conn`` is broken: what is in flight on it fails with ``message``; the
        link's next request opens a new connection."""
        if conn.broken:
            return
        conn.broken = True
        conn.scope.cancel()
        if link.conn is conn:
            link.conn = None
        pending, conn.pending = conn.pending, {}
        if pending:
            log.warning("link to %s lost with %d commands in flight: %s",
                        link.address, len(pending), why)
            _refuse(list(pending.values()), message)
        else:
            log.info("link to %s closed: %s", link.address, why)
        link.room.unpark_all()

    async def _watch_replies(self, timeout_s: float) -> None:
        """The reply deadline: a connection whose oldest pending request that holds
        nothing was sent more than ``timeout_s`` ago is given up (each request on it
        answered with ``timed_out_error``); the next request opens a new one. Looks a
        few times per deadline, at a cost of one look per link."""
        while True:
            await trio.sleep(timeout_s / 4)
            now = trio.current_time()
            for link in list(self._links.values()):
                conn = link.conn
                if conn is None:
                    continue
                sent = conn.oldest_quick()
                if sent is not None and now - sent > timeout_s:
                    self._lose(link, conn, timed_out_error(link.address, timeout_s),
                               f"no answer within {timeout_s:g} s")

    # ------------------------------------------------------------------ sending

    async def _send_loop(self, link: _Link) -> None:
        """The link's sender: connect when needed, then one write per batch.

        It runs in ``link.scope`` so that :meth:`drop` stops it alone; a batch being
        written when it is cancelled is already in the connection's pending map, so
        its requests are answered by whoever breaks the connection.
        """
        with link.scope:
            while True:
                while not link.queued:
                    link.wake = trio.Event()
                    await link.wake.wait()
                conn = link.conn
                if conn is None:
                    conn = await self._connect(link)
                    if conn is None:
                        continue  # the queued requests have been answered
                await self._send_batch(link, conn)

    async def _connect(self, link: _Link) -> _Conn | None:
        """Open a connection and pass its hello; None (the queued requests answered
        with the reason, the next attempt backed off) if either fails.

        The connection and the hello share one deadline, ``connect_timeout_s``: a peer
        that accepts but never answers is as unreachable as one that refuses. The
        stream is closed here unless it is handed over to a reader, also when the
        sender is cancelled meanwhile (shutdown, drop).
        """
        wait_until = link.retry_at
        if wait_until > trio.current_time():
            await trio.sleep_until(wait_until)
        stream: trio.abc.Stream | None = None
        reason: str | None = None
        conn: _Conn | None = None
        try:
            with trio.move_on_after(self._connect_timeout_s) as timer:
                try:
                    stream = await self._open(link.host, link.port)
                    decoder = FrameDecoder(MAX_WIRE_LENGTH)
                    reason = await exchange_hello(stream, decoder, self._codec,
                                                  self._hello(), self._ids)
                except Exception as exc:  # refused, reset, unreadable: all "unreachable"
                    reason = reason_of(exc)
            if timer.cancelled_caught:
                reason = f"no connection within {self._connect_timeout_s:g} s"
            if reason is None and stream is not None:
                conn = _Conn(stream, decoder)
        finally:
            if conn is None and stream is not None:
                await trio.aclose_forcefully(stream)
        if conn is None:
            assert reason is not None
            self._fail_attempt(link, reason)
            return None
        link.failures = 0
        link.conn = conn
        assert self._nursery is not None  # the sender runs in it
        self._nursery.start_soon(self._read_loop, link, conn)
        return conn

    def _fail_attempt(self, link: _Link, reason: str) -> None:
        link.failures += 1
        link.retry_at = trio.current_time() + reconnect_delay_s(
            link.failures - 1, self._retry_first_s, self._retry_max_s)
        queued, link.queued = link.queued, []
        log.info("broker at %s unreachable (%d commands refused): %s",
                 link.address, len(queued), reason)
        _refuse(queued, unreachable_error(link.address, reason))
        link.room.unpark_all()

    async def _send_batch(self, link: _Link, conn: _Conn) -> None:
        """Everything queued for ``link``, encoded now and written in one ``send_all``.

        Requests enter the connection's pending map before the write, so a reply that
        the reader sees while the write is still going finds its request; a message
        the codec refuses is answered at once and the rest still go. The encoding has
        no checkpoint, so at every checkpoint a request is queued or pending, never in
        between: a cancellation (drop, shutdown) finds and answers each of them.
        """
        batch, link.queued = link.queued, []
        parts: list[bytes] = []
        pending = conn.pending
        encode = self._codec.encode
        origin_of = self._origin_of
        refused: Deliveries = []
        quick = conn.quick if self._reply_timeout_s is not None else None
        now = trio.current_time()
        for req in batch:
            msg = dict(req.msg)  # a copy: the client's map may have other holders
            msg["cmd"] = req.cmd  # (the part of a split command has it on the request)
            req_id = msg["reqId"] = next(self._ids)
            if origin_of is not None and (origin := origin_of(req.conn)) is not None:
                msg[ORIGIN] = origin
            try:
                payload = encode(msg)
                header = frame_header(len(payload))
            except Exception as exc:
                refused.append((req.replier, req.error_reply(
                    f"Could not forward {req.cmd} to the broker at {link.address}: "
                    f"{reason_of(exc)}")))
                continue
            parts += (header, payload)
            pending[req_id] = req
            if quick is not None and not holds(req.cmd, req.msg):
                quick.append((now, req_id))
        if refused:
            deliver_all(refused)
            link.room.unpark_all()
        if not parts:
            return
        try:
            await conn.stream.send_all(b"".join(parts))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._lose(link, conn, lost_error(link.address),
                       f"write failed: {reason_of(exc)}")

    # ------------------------------------------------------------------ reading

    async def _read_loop(self, link: _Link, conn: _Conn) -> None:
        """The connection's reader: relays each read's replies, and on the way out
        (the peer closed, a broken or unreadable stream, cancellation) fails what is
        still in flight and closes the stream.

        Cancellation only reaches a reader whose connection is already given up (its
        own scope, by :meth:`_lose` or :meth:`drop`: nothing left in flight) or at
        shutdown, whose message it then uses.
        """
        message = lost_error(link.address)
        why = "the broker closed the connection"
        deliveries: Deliveries = []
        try:
            with conn.scope:
                while True:
                    data = await conn.stream.receive_some(RECEIVE_BYTES)
                    if not data:
                        break
                    for payload in conn.decoder.feed(data):
                        if len(payload) >= self._large:
                            # the replies before it first: they need not wait for it
                            self._deliver(link, deliveries)
                            reply = await self._decode_sliced(payload)
                        else:
                            reply = decode_now(self._codec, payload)
                        self._settle(link, conn, reply, deliveries)
                    self._deliver(link, deliveries)
        except trio.Cancelled:
            message = in_flight_error(link.address, SHUTTING_DOWN)
            why = "this broker is shutting down"
            raise
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            why = reason_of(exc)
        except PeerBroken as exc:
            why = str(exc)
        except Exception as exc:  # an unreadable frame: nothing after it is trusted
            why = f"unreadable reply: {reason_of(exc)}"
        finally:
            self._deliver(link, deliveries)
            self._lose(link, conn, message, why)
            await trio.aclose_forcefully(conn.stream)

    async def _decode_sliced(self, payload: Payload) -> Any:
        try:
            value, _ = await decode_large(self._codec, payload, bound_up_to=0)
            return value
        finally:
            unmap_soon(payload)

    def _settle(self, link: _Link, conn: _Conn, reply: Any, deliveries: Deliveries) -> None:
        """Add ``reply``, as its client gets it, to the read's deliveries; count a frame
        that answers nothing (an event frame), which is dropped."""
        delivery = relay(conn.pending, reply)
        if delivery is None:
            self._count_dropped(link)
        else:
            deliveries.append(delivery)

    def _deliver(self, link: _Link, deliveries: Deliveries) -> None:
        if deliveries:
            batch = deliveries[:]
            deliveries.clear()
            deliver_all(batch)
            link.room.unpark_all()

    def _count_dropped(self, link: _Link) -> None:
        link.dropped_frames += 1
        self.dropped_frames += 1
