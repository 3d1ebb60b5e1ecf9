"""WebSocket sessions (``/ws``, ``/ws/queues/<queue>``): commands and live events.

A text message is JSON, a binary message is CBOR; each reply goes back in the kind of
the message it answers (JSON text for text, CBOR binary for binary). Commands pass
through the same :class:`~trioqueue.transport.session.Session` and router as TCP, so
auth, limits and error texts are identical.

Events, as bunqueue's WebSocket sends them: a connection that never subscribed gets
every job event of its path's queue (all queues on ``/ws``) as the raw event map;
after ``{cmd: "Subscribe", events: [patterns]}`` it gets only events whose name
(``job:completed``, ``queue:paused``...) matches a pattern (an exact name,
``family:*`` or ``*``), as ``{event, ts, data}``. Events are JSON text unless the
path asks ``?format=cbor``. With auth tokens set, events flow only after ``Auth``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest, serve_websocket

from ..core import fields
from ..core.errors import Refused
from .codec import CBOR, JSON, Codec, DecodeError
from .session import Session

if TYPE_CHECKING:
    from ..actors.broker import Broker

log = logging.getLogger("trioqueue.websocket")

WS_PATH = "/ws"
QUEUE_PATH_PREFIX = "/ws/queues/"

# Internal event types and the names WebSocket subscribers know them by.
EVENT_NAMES = {
    "pushed": "job:pushed", "pulled": "job:active", "completed": "job:completed",
    "failed": "job:failed", "progress": "job:progress", "stalled": "job:stalled",
    "removed": "job:removed", "delayed": "job:delayed", "duplicated": "job:deduplicated",
    "retried": "job:retried", "waiting-children": "job:waiting-children",
    "waiting": "job:waiting", "paused": "queue:paused", "resumed": "queue:resumed",
    "drained": "queue:drained",
}
EVENT_FAMILIES = frozenset({
    "job", "queue", "dlq", "flow", "cron", "worker", "ratelimit", "concurrency", "webhook",
    "batch", "client", "auth", "health", "stats", "storage", "server", "config",
})


def valid_pattern(pattern: Any) -> bool:
    if not isinstance(pattern, str):
        return False
    if pattern == "*":
        return True
    family, _, name = pattern.partition(":")
    return family in EVENT_FAMILIES and bool(name)


def matches(name: str, patterns: list[str]) -> bool:
    family = name.partition(":")[0]
    return any(p == "*" or p == name or p == f"{family}:*" for p in patterns)


class WsConnection:
    def __init__(self, broker: Broker, ws: WebSocketConnection, queue: str | None = None,
                 event_codec: Codec = JSON) -> None:
        self.broker = broker
        self.ws = ws
        self._scope = trio.CancelScope()
        self.session = Session(broker, encode=self._encode, on_overflow=self._overflow)
        self.queue = queue  # the path's queue filter (None: every queue)
        self.event_codec = event_codec
        self.patterns: list[str] | None = None  # None: legacy mode, raw events

    def _on_events(self, events: list[dict[str, Any]]) -> None:
        if not self.session.authenticated:
            return
        frames: list[dict[str, Any]] = []
        for event in events:
            if self.queue is not None and event["queue"] != self.queue:
                continue
            if self.patterns is None:
                frames.append(event)
                continue
            name = EVENT_NAMES.get(event["eventType"], f"job:{event['eventType']}")
            if matches(name, self.patterns):
                data = {k: v for k, v in event.items() if k != "eventType"}
                frames.append({"event": name, "ts": event["timestamp"], "data": data})
        if frames:
            self.session.send_frames(frames, self.event_codec)

    def _subscription_command(self, msg: dict[str, Any], codec: Codec) -> None:
        """``Subscribe`` / ``Unsubscribe``: WebSocket-only, answered here."""
        reply: dict[str, Any]
        if not self.session.authenticated:
            reply = {"ok": False, "error": "Not authenticated"}
        else:
            events = msg.get("events")
            if msg["cmd"] == "Unsubscribe" and events is None:
                self.patterns = []
                reply = {"ok": True, "subscribed": []}
            elif not isinstance(events, list) or not events:
                reply = {"ok": False, "error": "events must be a non-empty array"}
            elif bad := [str(p) for p in events if not valid_pattern(p)]:
                reply = {"ok": False, "error": f"Invalid: {', '.join(bad)}"}
            elif msg["cmd"] == "Subscribe":
                current = self.patterns or []
                self.patterns = current + [p for p in events if p not in current]
                reply = {"ok": True, "subscribed": list(self.patterns)}
            else:
                self.patterns = [p for p in (self.patterns or []) if p not in events]
                reply = {"ok": True, "subscribed": list(self.patterns)}
        if "reqId" in msg:
            reply["reqId"] = msg["reqId"]
        self.session.send_frames([reply], codec)

    @staticmethod
    def _encode(codec: Any, reply: dict[str, Any]) -> str | bytes:
        # Each reply goes out in the kind (codec) of the message it answers.
        return JSON.encode_text(reply) if codec is JSON else codec.encode(reply)

    def _overflow(self) -> None:
        # The session queued the notice; close once it is sent, or after a grace.
        self._scope.deadline = trio.current_time() + self.broker.config.overflow_notice_s

    async def _send(self, messages: list[str | bytes]) -> None:
        for message in messages:
            await self.ws.send_message(message)
        if self.session.overflowed and not self.session.outbox_pending:
            self._scope.cancel()  # the notice is out: close

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
        self.broker.events.subscribe(self._on_events)
        try:
            await self._serve_messages(session)
        finally:
            self.broker.events.unsubscribe(self._on_events)

    async def _serve_messages(self, session: Session) -> None:
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
                    if isinstance(decoded, dict) and decoded.get("cmd") in (
                            "Subscribe", "Unsubscribe"):
                        self._subscription_command(decoded, codec)
                        continue
                    await session.handle([(decoded, len(raw))], tag=codec)
            finally:
                nursery.cancel_scope.cancel()


async def serve_ws(broker: Broker, host: str, port: int, *,
                   handler_nursery: trio.Nursery | None = None,
                   task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Accept WebSocket connections until cancelled (see serve_tcp for handler_nursery)."""
    config = broker.config

    async def handler(request: WebSocketRequest) -> None:
        path, _, query = request.path.partition("?")
        path = path.rstrip("/") or "/"
        queue: str | None = None
        if path.startswith(QUEUE_PATH_PREFIX):
            queue = unquote(path[len(QUEUE_PATH_PREFIX):])
            try:
                fields.queue_name(queue)
            except Refused:
                await request.reject(404, body=b"Not found")
                return
        elif path != WS_PATH:
            await request.reject(404, body=b"Not found")
            return
        event_codec = CBOR if parse_qs(query).get("format") == ["cbor"] else JSON
        try:
            broker.connections.acquire_nowait()
        except trio.WouldBlock:
            await request.reject(503, body=b"Too many connections")
            return
        try:
            ws = await request.accept()
            await WsConnection(broker, ws, queue, event_codec).serve()
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
