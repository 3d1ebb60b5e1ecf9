"""TCP sessions: length-prefixed frames of CBOR or msgpack, detected per connection.

The reader takes whatever the socket has (up to 256 KiB), parses every complete frame in
it and hands them to the session as one batch; the session's sender writes all pending
replies with one ``send_all``. Abuse limits come from :class:`~trioqueue.config.Config`:
a declared frame length over ``max_frame_bytes`` gets an error frame and the connection
is closed before the body is read; a partial frame that does not complete within
``partial_frame_timeout_s`` (slowloris) closes the connection; an idle connection with no
partial frame is never closed.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import trio

from .codec import MSGPACK, Codec, DecodeError, detect_codec, encode_frames
from .framing import FrameDecoder, FrameTooLarge
from .session import KEPT, SENT, Session, overflow_notice
from .sockio import DirectReader, write_now

if TYPE_CHECKING:
    from ..actors.broker import Broker

log = logging.getLogger("trioqueue.tcp")

RECEIVE_BYTES = 256 * 1024


class TcpConnection:
    def __init__(self, broker: Broker, stream: trio.SocketStream) -> None:
        self.broker = broker
        self.stream = stream
        self._fd = stream.socket.fileno()
        self._pending = bytearray()  # encoded replies the socket has not taken yet
        self._flushing = False
        self._reader = DirectReader(self._fd, RECEIVE_BYTES)
        self._overflowed = False
        self._scope = trio.CancelScope()
        self.session = Session(broker, send_now=self._send_now)
        self.codec: Codec | None = None

    def _codec(self) -> Codec:
        # Until a valid first map arrives we answer in msgpack, bunqueue's own codec.
        return self.codec or MSGPACK

    def _send_now(self, replies: list[dict[str, Any]]) -> str:
        """Write replies straight to the non-blocking socket; queue what does not fit.

        trio's ``send_all`` costs extra scheduler passes per call; a plain write of a
        few hundred bytes almost always completes at once, so the reply leaves in the
        same pass as the commit that released it. Bytes never overtake each other: while
        anything is queued, new replies queue behind it for the sender task. Queued
        bytes are bounded by ``max_write_queue_bytes``: a client that does not read its
        replies is cut off rather than allowed to grow the broker's memory.
        """
        data = encode_frames(self._codec(), replies)
        if self._pending or self._flushing:
            return self._queue(data)
        written = write_now(self._fd, data)
        if written == len(data):
            return SENT
        return self._queue(memoryview(data)[written:])

    def _queue(self, data: bytes | memoryview) -> str:
        if self._overflowed:
            return KEPT  # closing: nothing more is queued behind the notice
        self._pending += data
        limit = self.broker.config.max_write_queue_bytes
        if limit and len(self._pending) > limit:
            self._overflow()
        return KEPT

    def _overflow(self) -> None:
        """Drop what the client did not read, tell it why, and close.

        The notice replaces the unsent frames, so a client that is slow but reading
        finds it right after what it already had; the connection closes once it is
        sent, or after ``overflow_notice_s`` for a client that reads nothing at all.
        """
        log.info("closing a connection that does not read its replies")
        self._overflowed = True
        self._pending.clear()
        notice = overflow_notice(self.broker.config.max_write_queue_bytes)
        self._pending += encode_frames(self._codec(), [notice])
        self._scope.deadline = trio.current_time() + self.broker.config.overflow_notice_s

    async def _send(self, replies: list[tuple[Any, dict[str, Any]]]) -> None:
        # TCP replies never wait in the session's outbox: _send_now took them all.
        self._flushing = True
        try:
            while self._pending:
                data = bytes(self._pending)
                self._pending.clear()
                await self.stream.send_all(data)
        finally:
            self._flushing = False
        if self._overflowed:
            self._scope.cancel()  # the notice is out: close

    async def serve(self) -> None:
        config = self.broker.config
        decoder = FrameDecoder(config.max_frame_bytes)
        session = self.session
        try:
            # _scope is cancelled when the client stops reading its replies.
            with self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(session.run_sender, self._send)
                    try:
                        await self._read_loop(decoder, config.partial_frame_timeout_s)
                    finally:
                        nursery.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            # The peer went away (reset, or closed while we wrote). The nursery wraps
            # this in an ExceptionGroup: it must end this connection, never the broker.
            pass
        finally:
            session.close()
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await self.stream.aclose()

    async def _read_loop(self, decoder: FrameDecoder, partial_timeout_s: float) -> None:
        stream = self.stream
        session = self.session
        # The clock of a partial frame starts with its first bytes and stops only when a
        # frame completes: more bytes of the same frame do not restart it (slowloris).
        deadline = math.inf
        while True:
            if not (decoder.has_partial and partial_timeout_s):
                deadline = math.inf
            elif deadline == math.inf:
                deadline = trio.current_time() + partial_timeout_s
            if deadline == math.inf:
                data = await self._reader.receive()
            else:
                with trio.move_on_at(deadline) as scope:
                    data = await self._reader.receive()
                if scope.cancelled_caught:
                    log.info("closing a connection stuck in a partial frame")
                    return
            if not data:
                return
            try:
                payloads = decoder.feed(data)
            except FrameTooLarge as exc:
                error = {
                    "ok": False,
                    "error": f"Frame too large: {exc.size} bytes exceeds maximum {exc.limit}",
                }
                with trio.move_on_after(1):
                    await stream.send_all(encode_frames(self._codec(), [error]))
                return
            if not payloads:
                continue
            deadline = math.inf  # a frame completed: a pending tail gets its own clock
            messages: list[tuple[Any, int]] = []
            for payload in payloads:
                if self.codec is None and payload:
                    self.codec = detect_codec(payload[0])
                codec = self._codec()
                try:
                    messages.append((codec.decode(payload), len(payload)))
                except DecodeError as exc:
                    messages.append((exc, len(payload)))
            await session.handle(messages)


async def serve_tcp(
    broker: Broker,
    host: str,
    port: int,
    *,
    handler_nursery: trio.Nursery | None = None,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept connections until cancelled.

    Connections run in ``handler_nursery`` when given, so that cancelling the accept
    loop (the first step of shutdown) does not cut the connections that are still
    waiting for the replies of commands already accepted.
    """
    listeners = await trio.open_tcp_listeners(port, host=host)
    limit = broker.connections

    async def handler(stream: trio.SocketStream) -> None:
        try:
            limit.acquire_nowait()
        except trio.WouldBlock:
            await stream.aclose()
            return
        try:
            await TcpConnection(broker, stream).serve()
        finally:
            limit.release()

    task_status.started(listeners)
    await trio.serve_listeners(handler, listeners, handler_nursery=handler_nursery)
