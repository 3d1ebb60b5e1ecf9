"""WebSocket sessions (``/ws``): the same commands as TCP, one command per message.

A text message is JSON, a binary message is CBOR; each reply goes back in the kind of
the message it answers (JSON text for text, CBOR binary for binary). Commands pass
through the same :class:`~trioqueue.transport.session.Session` and router as TCP, so
auth, limits and error texts are identical.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest, serve_websocket

from .codec import CBOR, JSON, Codec, DecodeError
from .session import Session

if TYPE_CHECKING:
    from ..actors.broker import Broker

log = logging.getLogger("trioqueue.websocket")

WS_PATHS = ("/ws",)


class WsConnection:
    def __init__(self, broker: Broker, ws: WebSocketConnection) -> None:
        self.broker = broker
        self.ws = ws
        self._scope = trio.CancelScope()
        self.session = Session(broker, encode=self._encode, on_overflow=self._scope.cancel)

    @staticmethod
    def _encode(codec: Any, reply: dict[str, Any]) -> str | bytes:
        # Each reply goes out in the kind (codec) of the message it answers.
        return JSON.encode_text(reply) if codec is JSON else codec.encode(reply)

    async def _send(self, messages: list[str | bytes]) -> None:
        for message in messages:
            await self.ws.send_message(message)

    async def serve(self) -> None:
        session = self.session
        try:
            with self._scope:  # cancelled when the client stops reading its replies
                await self._serve(session)
        except* ConnectionClosed:
            # The client closed (or a limit did): the nursery wraps it in an
            # ExceptionGroup, which must end this connection, never the broker.
            pass
        finally:
            session.close()

    async def _serve(self, session: Session) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.run_sender, self._send)
            try:
                limit = self.broker.config.ws_max_message_bytes
                while True:
                    message = await self.ws.get_message()
                    codec: Codec = JSON if isinstance(message, str) else CBOR
                    raw = message.encode() if isinstance(message, str) else message
                    if len(raw) > limit:
                        # trio_websocket counts a text message in characters; the
                        # limit is in bytes, so UTF-8 text is checked again here.
                        await self.ws.aclose(1009, "Exceeded maximum message size: "
                                             f"{limit} bytes")
                        return
                    try:
                        decoded: Any = codec.decode(raw)
                    except DecodeError as exc:
                        decoded = exc
                    await session.handle([(decoded, len(raw))], tag=codec)
            finally:
                nursery.cancel_scope.cancel()


async def serve_ws(broker: Broker, host: str, port: int, *,
                   handler_nursery: trio.Nursery | None = None,
                   task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Accept WebSocket connections until cancelled (see serve_tcp for handler_nursery)."""
    config = broker.config

    async def handler(request: WebSocketRequest) -> None:
        path = request.path.split("?", 1)[0].rstrip("/") or "/"
        if path not in WS_PATHS:
            await request.reject(404, body=b"Not found")
            return
        try:
            broker.connections.acquire_nowait()
        except trio.WouldBlock:
            await request.reject(503, body=b"Too many connections")
            return
        try:
            ws = await request.accept()
            await WsConnection(broker, ws).serve()
        finally:
            broker.connections.release()

    await serve_websocket(
        handler, host, port, ssl_context=None,
        max_message_size=config.ws_max_message_bytes,
        connect_timeout=config.ws_handshake_timeout_s,
        disconnect_timeout=config.ws_close_timeout_s,
        handler_nursery=handler_nursery,
        task_status=task_status,
    )
