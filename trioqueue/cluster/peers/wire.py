"""What the broker-to-broker links of :mod:`.links` say on the wire, without state:
peer addresses, the hello a new link starts with, the relay of a peer's reply to the
client that asked, and the error texts a forwarded command can get.

The error texts come in two kinds, and the difference matters to whoever retries: a
command that was *not sent* (:func:`unreachable_error`, :func:`not_sent_error`) may be
sent again; one that was *in flight* when its link went (:func:`lost_error`,
:func:`in_flight_error`) may or may not have been applied by the peer.
"""

from __future__ import annotations

import itertools
from typing import Any

import trio

from ...actors.request import _NO_REQ_ID, Replier, Request
from ...transport.large.frames import unmap_soon
from ...transport.wire.codec import Codec
from ...transport.wire.framing import FrameDecoder, frame_header

__all__ = ["PeerBroken", "departed_error", "exchange_hello", "holds",
           "in_flight_error", "lost_error", "not_sent_error", "relay", "split_address",
           "timed_out_error", "unreachable_error"]

#: What one read of a link's socket takes at most.
RECEIVE_BYTES = 256 * 1024


def unreachable_error(address: str, reason: str) -> str:
    """The error of a command that never reached the peer (it may be retried)."""
    return f"Broker at {address} is unreachable: {reason}"


def lost_error(address: str) -> str:
    """The error of a command in flight on a link that broke (it may have been applied)."""
    return (f"Connection to the broker at {address} was lost: the command may or may not "
            "have been applied")


def not_sent_error(address: str, why: str) -> str:
    """A command queued for ``address`` and never sent, as the link closes ``why``."""
    return f"Not forwarded to the broker at {address}: {why}"


def in_flight_error(address: str, why: str) -> str:
    """A command sent to ``address`` and not answered, as the link closes ``why``."""
    return (f"{why}: the command forwarded to the broker at {address} may or may not have "
            "been applied")


def departed_error(address: str) -> str:
    """A command sent to a broker that left the cluster (dead, or frozen past its
    lease) before it answered. Its queues move to the others, and a broker that lost a
    queue can no longer commit for it, but it may have committed the command before."""
    return (f"The broker at {address} left the cluster before answering (its queues "
            "move to the others): the command may or may not have been applied; retry")


def timed_out_error(address: str, timeout_s: float) -> str:
    """The commands on a link whose peer left a command that holds nothing unanswered
    for ``timeout_s`` (see :func:`holds`)."""
    return (f"The broker at {address} did not answer within {timeout_s:g} s: the command "
            "may or may not have been applied; retry")


#: Commands that may rightly wait at the broker before answering (a long-poll, a wait
#: for a job's outcome): the reply deadline of the links leaves them out.
HOLDING = frozenset(("PULL", "PULLB", "WaitJob"))


def holds(cmd: str, msg: dict[str, Any]) -> bool:
    """Whether a command may rightly wait at the broker before answering."""
    if cmd not in HOLDING:
        return False
    timeout = msg.get("timeout")
    return cmd == "WaitJob" or (isinstance(timeout, (int, float)) and timeout > 0)


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (or ``"[v6]:port"``) as ``(host, port)``; ValueError if it is not."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a HOST:PORT address: {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def reason_of(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def decode_now(codec: Codec, payload: Any) -> Any:
    """Decode one reply frame (a large one's mmap is unmapped after)."""
    try:
        return codec.decode(payload)
    finally:
        unmap_soon(payload)


async def exchange_hello(stream: trio.abc.Stream, decoder: FrameDecoder, codec: Codec,
                         frames: list[dict[str, Any]], ids: itertools.count[int],
                         others: list[Any] | None = None) -> str | None:
    """Send a new link's hello ``frames`` in one write (each with a reqId of ``ids``)
    and wait for their replies: the reason the peer refused the link, or None when
    every reply is ok. The caller bounds the wait (the connect timeout). Frames that
    answer none of them (event frames, which may follow the last reply in its read)
    are added to ``others`` when given, dropped otherwise."""
    if not frames:
        return None
    waiting: dict[int, Any] = {}
    parts: list[bytes] = []
    for frame in frames:
        msg = dict(frame)
        req_id = msg["reqId"] = next(ids)
        waiting[req_id] = msg.get("cmd")
        encoded = codec.encode(msg)
        parts += (frame_header(len(encoded)), encoded)
    await stream.send_all(b"".join(parts))
    while waiting:
        data = await stream.receive_some(RECEIVE_BYTES)
        if not data:
            return "it closed the connection during the hello"
        for payload in decoder.feed(data):
            reply = decode_now(codec, payload)
            if type(reply) is not dict:
                continue
            answered = reply.get("reqId")
            if type(answered) is not int or answered not in waiting:
                if reply.get("ok") is False:  # e.g. a frame refused unread
                    return f"it refused the link: {reply.get('error')}"
                if others is not None:
                    others.append(reply)
                continue  # an event frame
            cmd = waiting.pop(answered)
            if not reply.get("ok"):
                return f"it refused {cmd}: {reply.get('error')}"
    return None


class PeerBroken(Exception):
    """The peer's stream can no longer be trusted: the link is given up."""


def relay(pending: dict[int, Request], reply: Any) -> tuple[Replier, dict[str, Any]] | None:
    """``reply``'s request taken out of ``pending`` and the reply as its client gets it
    (the client's reqId, or none when it sent none); None for a frame that answers no
    request (an event frame). ``reply`` is a map just decoded, ours to change."""
    if type(reply) is not dict:
        return None
    req_id = reply.get("reqId")
    req = pending.pop(req_id, None) if type(req_id) is int else None
    if req is None:
        if req_id is not None or reply.get("ok") is not False or not pending:
            return None
        # The peer refused a frame it could not read and could not say which (as it
        # answers a client, transport/req_ids.py): with one in flight it is that one;
        # with more, waiting would hang the one it was.
        if len(pending) > 1:
            raise PeerBroken(f"the broker refused a frame without naming it: "
                             f"{reply.get('error')}")
        _, req = pending.popitem()
    if req.req_id is _NO_REQ_ID:
        reply.pop("reqId", None)
    else:
        reply["reqId"] = req.req_id
    return req.replier, reply
