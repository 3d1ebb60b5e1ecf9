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
from .session import Session

if TYPE_CHECKING:
    from ..actors.broker import Broker

log = logging.getLogger("trioqueue.tcp")

RECEIVE_BYTES = 256 * 1024


class TcpConnection:
    def __init__(self, broker: Broker, stream: trio.SocketStream) -> None:
        self.broker = broker
        self.stream = stream
        self.session = Session(broker)
        self.codec: Codec | None = None

    def _codec(self) -> Codec:
        # Until a valid first map arrives we answer in msgpack, bunqueue's own codec.
        return self.codec or MSGPACK

    async def _send(self, replies: list[dict[str, Any]], codec: Codec) -> None:
        await self.stream.send_all(encode_frames(codec, replies))

    async def serve(self) -> None:
        config = self.broker.config
        decoder = FrameDecoder(config.max_frame_bytes)
        session = self.session
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(session.run_sender, self._codec, self._send)
                try:
                    await self._read_loop(decoder, config.partial_frame_timeout_s)
                finally:
                    nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            session.close()
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await self.stream.aclose()

    async def _read_loop(self, decoder: FrameDecoder, partial_timeout_s: float) -> None:
        stream = self.stream
        session = self.session
        while True:
            timeout = partial_timeout_s if decoder.has_partial and partial_timeout_s else math.inf
            with trio.move_on_after(timeout) as scope:
                data = await stream.receive_some(RECEIVE_BYTES)
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
    broker: Broker, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """Accept connections until cancelled; each runs in the listener's handler nursery."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    limit = trio.CapacityLimiter(broker.config.max_connections)

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
    await trio.serve_listeners(handler, listeners)
