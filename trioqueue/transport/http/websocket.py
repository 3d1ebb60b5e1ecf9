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
import math
import time
from time import perf_counter
from typing import Any
from urllib.parse import parse_qs, unquote

import trio

from ...core import fields
from ...core.errors import Refused
from ...turns import give_way
from ..context import ListenerContext
from ..large.frames import decode_large, unmap_soon
from ..large.json_text import decode_large_json
from ..large.reply_slices import SlicedJson, SlicedMessage, SlicedPayload, is_long
from ..large.value_slices import SlicedValue, heavy
from ..limits import Shell
from ..session import Session, SessionHost, token_accepted
from ..wire.codec import CBOR, JSON, Codec, DecodeError
from ..wire.event_names import event_data, event_name, is_dashboard, matches, parse_patterns
from ..wire.framing import Payload
from ..wire.req_ids import salvage_req_id
from .auth import bearer_token
from .live_frames import LiveFrames
from .ws_socket import MessageTooLarge, Upgrade, WsClosed, WsSocket

log = logging.getLogger("trioqueue.websocket")

WS_PATH = "/ws"
QUEUE_PATH_PREFIX = "/ws/queues/"

class WsConnection:
    def __init__(self, broker: SessionHost, ws: WsSocket, shell: Shell,
                 queue: str | None = None, event_codec: Codec = JSON,
                 live: LiveFrames | None = None) -> None:
        self.ws = ws
        # queue:counts and the periodic frames, once the client subscribes to patterns
        self._live = live
        self._live_on = False
        self._shell = shell
        self._limits = limits = shell.limits
        self._scope = trio.CancelScope()
        self.session = Session(broker, encode=self._encode, on_overflow=self._overflow,
                               on_outbox_bytes=self._charge_replies,
                               encode_later=self._encode_later)
        self.session.transport = "websocket"
        self.queue = queue  # the path's queue filter (None: every queue)
        self.event_codec = event_codec
        self.patterns: list[str] | None = None  # None: legacy mode, raw events
        # The clocks (trio time), checked by _expire when the shell's timers call it.
        self._timer = shell.timers.handle(self._expire)
        self._authenticated = self.session.authenticated
        now = trio.current_time()
        self._rx_at = now  # the last message (idle clock)
        self._auth_at = (now + limits.auth_timeout_s
                         if not self._authenticated and limits.auth_timeout_s else math.inf)
        self._nursery: trio.Nursery | None = None
        self._close_with: tuple[int, str] | None = None  # the close frame to send
        self._close_grace_s = 0.0

    def evict(self) -> bool:
        """Not authenticated yet, and the oldest such when room was needed (doors.py)."""
        if self._close_with is not None or self._scope.cancel_called:
            return False
        self._close(1008, "Closed to make room: not authenticated")
        return True

    def authenticated_by_bearer(self) -> None:
        """The upgrade carried a valid bearer token: no ``Auth`` needed."""
        self.session.authenticated = self._authenticated = True
        self._auth_at = math.inf

    def _on_events(self, events: list[dict[str, Any]]) -> None:
        if not self.session.authenticated:
            return
        frames: list[dict[str, Any]] = []
        for event in events:
            queue = event.get("queue")  # (None: a broker-wide event, for every path)
            if self.queue is not None and queue is not None and queue != self.queue:
                continue
            if self.patterns is None:
                if not is_dashboard(event):  # legacy mode: raw job events only
                    frames.append(event)
                continue
            name = event_name(event)
            if matches(name, self.patterns):
                frames.append({"event": name, "ts": event["timestamp"],
                               "data": event_data(event)})
        if frames:
            self.session.send_frames(frames, self.event_codec)

    def _on_frame(self, name: str, data: dict[str, Any], queue: str | None) -> None:
        """A frame of LiveFrames (queue:counts, stats:snapshot...), for subscribers."""
        patterns = self.patterns
        if not patterns or (queue is not None and self.queue is not None
                            and queue != self.queue):
            return
        if matches(name, patterns):
            ts = float(int(time.time() * 1000))
            self.session.send_frames([{"event": name, "ts": ts, "data": data}],
                                     self.event_codec)

    def _follow_live(self) -> None:
        want = bool(self.patterns) and self._live is not None
        if want != self._live_on and self._live is not None:
            if want:
                self._live.add(self._on_frame, job_events=False)
            else:
                self._live.remove(self._on_frame)
            self._live_on = want

    def _subscription_command(self, msg: dict[str, Any], codec: Codec) -> None:
        """``Subscribe`` / ``Unsubscribe``: WebSocket-only, answered here."""
        reply: dict[str, Any]
        if not self.session.authenticated:
            reply = {"ok": False, "error": "Not authenticated"}
        else:
            reply = self._subscription(msg["cmd"] == "Subscribe", msg.get("events"))
        if "reqId" in msg:
            reply["reqId"] = msg["reqId"]
        self._follow_live()
        self.session.send_frames([reply], codec)

    def _subscription(self, subscribe: bool, events: Any) -> dict[str, Any]:
        """Change the patterns; the reply. ``Unsubscribe`` with no list, or an empty
        one, unsubscribes from everything: no event at all follows (not even the
        legacy mode's raw job events)."""
        if not subscribe and not events:
            self.patterns = []
            return {"ok": True, "subscribed": []}
        try:
            patterns = parse_patterns(events)
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        current = self.patterns or []
        if subscribe:
            self.patterns = current + [p for p in patterns if p not in current]
        else:
            self.patterns = [p for p in current if p not in patterns]
        return {"ok": True, "subscribed": list(self.patterns)}

    @staticmethod
    def _encode(codec: Any, reply: dict[str, Any]) -> str | bytes:
        # Each reply goes out in the kind (codec) of the message it answers.
        return JSON.encode_text(reply) if codec is JSON else codec.encode(reply)

    @staticmethod
    def _encode_later(codec: Any, reply: dict[str, Any]) -> SlicedMessage:
        # A long reply, encoded a slice per pass by _send (transport/large/reply_slices.py).
        if not is_long(reply) or heavy(reply):  # many values (value_slices.py)
            return SlicedValue(codec, reply)
        return SlicedJson(reply) if codec is JSON else SlicedPayload(codec, reply)

    def _overflow(self) -> None:
        # The session queued the notice; close once it is sent, or after a grace.
        self._scope.deadline = trio.current_time() + self._limits.overflow_notice_s

    def _charge_replies(self, nbytes: int) -> None:
        self._shell.replies.set(self, nbytes)

    def cut(self, budget: str) -> None:
        """A broker-wide budget sheds this connection: drop its unsent replies, close
        now (no close handshake: a client that does not read would hold it)."""
        self.session.drop_unsent()
        self._close(1008, f"Connection cut: the broker's {budget} was reached", grace_s=0)

    def _close(self, code: int, reason: str, *, grace_s: float | None = None) -> None:
        """Close with ``code``: the close frame, then at most ``grace_s`` (default
        ``ws_close_timeout_s``) for the client's; 0 closes the socket at once."""
        if self._close_with is None:
            self._close_with = (code, reason)
            default = self._limits.ws_close_timeout_s
            self._close_grace_s = default if grace_s is None else grace_s
        # Cancelled by trio's run loop, at once, not in this stack: a budget cuts from
        # inside a queue's step, and a Cancelled raised here for a task parked
        # elsewhere would hold the step's frames, its replies among them, until a pass
        # of the cyclic GC (see TcpConnection._end).
        self._scope.deadline = -math.inf

    # ------------------------------------------------------------------ clocks

    def _expire(self, now: float) -> None:
        """Called by the shell's timers: close, or ping, when a clock ran out."""
        if self._close_with is not None or self._scope.cancel_called:
            return
        if now >= self._auth_at:
            log.info("closing a WebSocket that did not authenticate within %g s",
                     self._limits.auth_timeout_s)
            self._close(1008, "Authentication timeout")
            return
        idle = self._limits.idle_timeout_s
        if idle and now >= self._rx_at + idle:
            self._rx_at = now  # held, or pinged: the clock starts again
            if not self.session.holds_anything() and self._nursery is not None:
                self._nursery.start_soon(self._ping)
        self._timer.arm(self._next_deadline())

    def _next_deadline(self) -> float:
        idle = self._limits.idle_timeout_s
        return min(self._auth_at, self._rx_at + idle if idle else math.inf)

    async def _ping(self) -> None:
        """Idle and holding nothing: a client that answers a ping (every WebSocket
        library does) is alive and stays; one that does not is closed."""
        with trio.move_on_after(self._limits.ws_close_timeout_s):
            try:
                await self.ws.ping()
            except WsClosed:
                pass
            return
        log.info("closing a WebSocket idle for %g s that did not answer a ping",
                 self._limits.idle_timeout_s)
        self._close(1001, "Idle timeout")

    async def _send(self, messages: list[str | bytes | SlicedMessage]) -> None:
        for message in messages:
            if isinstance(message, SlicedMessage):
                # Every other task runs between two slices: a PULLB of 1,000 jobs is
                # not one 15-30 ms hold of the loop; nor is joining its parts, which
                # are sent as they are, a piece at a time (ws_socket.py).
                while (parts := message.step_parts()) is None:
                    await give_way()
                self.session.sending(sum(map(len, parts)) - message.estimate_bytes)
                await self.ws.send_parts(parts)
            else:
                await self.ws.send(message)
        if self.session.overflowed and not self.session.outbox_pending:
            self._scope.cancel()  # the notice is out: close

    async def serve(self) -> None:
        session = self.session
        self._shell.senders.add(session.sent)  # (shutdown waits for its notice)
        self._timer.arm(self._next_deadline())
        if not self._authenticated:
            self._shell.doors.arrived(self)  # (may close the oldest not authenticated)
        try:
            # cancelled when the client stops reading its replies, a clock runs out or
            # a budget cuts the connection
            with self._scope:
                await self._serve(session)
        except* WsClosed:
            # The client closed (or a limit did): the nursery wraps it in an
            # ExceptionGroup, which must end this connection, never the broker.
            pass
        finally:
            self._shell.doors.settled(self)
            self._timer.cancel()
            self._shell.replies.release(self)
            self._shell.senders.discard(session.sent)
            session.close()
        if self._close_with is not None:
            # Cancelled (grace 0 included), aclose still closes the socket.
            with trio.move_on_after(self._close_grace_s):
                await self.ws.aclose(*self._close_with)

    async def _serve(self, session: Session) -> None:
        self.session.events.subscribe(self._on_events)
        try:
            await self._serve_messages(session)
        finally:
            self.session.events.unsubscribe(self._on_events)
            self.patterns = None
            self._follow_live()

    async def _serve_messages(self, session: Session) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(session.run_sender, self._send)
            try:
                idle = self._limits.idle_timeout_s
                large = self._limits.large_frame_bytes
                while True:
                    try:
                        text, raw = await self.ws.receive(self._message_limit())
                    except MessageTooLarge as exc:
                        self._refuse_size(exc.size)
                        return
                    started = perf_counter()
                    if idle:
                        self._rx_at = trio.current_time()
                    codec: Codec = JSON if text else CBOR
                    size = len(raw)  # (a memory map is unmapped once decoded)
                    bound: int | None = None
                    if large and size >= large:
                        decoded, bound = await self._decode_large(codec, raw)
                    else:
                        try:
                            decoded = codec.decode(raw)
                        except DecodeError as exc:
                            # a fresh error: the raised one's traceback holds this
                            # frame, which would hold it (a cycle only a full GC frees)
                            decoded = DecodeError(str(exc))
                            decoded.req_id = salvage_req_id(codec.name, raw)
                        finally:
                            # (a memory map when large_frame_bytes is off or above the
                            # size a message is gathered in one: ws_socket.py)
                            unmap_soon(raw)
                    if isinstance(decoded, dict) and decoded.get("cmd") in (
                            "Subscribe", "Unsubscribe"):
                        self._subscription_command(decoded, codec)
                        continue
                    await session.handle([(decoded, size, bound)], tag=codec)
                    # (not held until the next message: a large value let go of is
                    # taken apart in slices once nothing holds it, core/large_values/graveyard.py)
                    decoded = None
                    if not self._authenticated and session.authenticated:
                        self._authenticated = True
                        self._auth_at = math.inf
                        self._shell.doors.settled(self)
                    if session.refused_frames:
                        # As on TCP (read_pacing.py), on the broker's one pause clock:
                        # a client sending garbage gets a bounded share of the loop.
                        session.refused_frames = 0
                        await trio.sleep(self._shell.bad_frames.pause_after(started))
            finally:
                self._nursery = None
                nursery.cancel_scope.cancel()

    async def _decode_large(self, codec: Codec, raw: Payload) -> tuple[Any, int | None]:
        """A large message's value (a DecodeError if bad) and its JSON bound, decoded in
        slices; its bytes (a memory map, see ws_socket.py) unmapped off the loop after."""
        try:
            if codec is CBOR:
                return await self._decode_large_cbor(raw)
            return await self._decode_large_json(raw)
        finally:
            unmap_soon(raw)

    async def _decode_large_cbor(self, raw: Payload) -> tuple[Any, int | None]:
        """A large CBOR message, decoded in slices as a large TCP frame is."""
        turns = self._shell.decoding  # (frames decoded at once, broker-wide)
        await turns.take(len(raw))
        try:
            return await decode_large(CBOR, raw, bound_up_to=self._limits.max_data_bytes,
                                      graveyard=self._shell.graveyard)
        except DecodeError as exc:
            return exc.fresh(), None  # (see _serve_messages)
        finally:
            turns.give_back(len(raw))

    async def _decode_large_json(self, raw: Payload) -> tuple[Any, int | None]:
        """A large JSON text message, decoded in slices as a large REST body is
        (transport/large/json_text.py): its text made from its bytes a piece at a time."""
        try:
            return await decode_large_json(raw, bound_up_to=self._limits.max_data_bytes,
                                           graveyard=self._shell.graveyard)
        except DecodeError as exc:
            decoded = exc.fresh()  # (see _serve_messages; its data too large, if so)
            if decoded.req_id is None:
                decoded.req_id = salvage_req_id(JSON.name, raw)
            return decoded, None

    def _message_limit(self) -> int:
        if self._authenticated:
            return self._limits.ws_max_message_bytes
        return min(self._limits.preauth_frame_bytes(), self._limits.ws_max_message_bytes)

    def _refuse_size(self, size: int) -> None:
        # Counted in bytes as the message arrives (ws_socket.py), refused as soon as it
        # passes the limit (the cap before Auth, or ws_max_message_bytes).
        limit = self._message_limit()
        if self._authenticated:
            reason = f"Exceeded maximum message size: {limit} bytes"
        else:
            log.info("closing a WebSocket that sent a %d-byte message before Auth", size)
            reason = f"Message too large before authentication (max {limit} bytes)"
        self._close(1009, reason)


class WsEndpoint:
    """The HTTP port's WebSocket side: takes a connection whose first request is an
    upgrade (see :mod:`.front`), does the handshake and serves the session.

    Per connection: the handshake within ``ws_handshake_timeout_s``, then the session,
    then the close handshake within ``ws_close_timeout_s`` (:mod:`.ws_socket`).
    """

    def __init__(self, context: ListenerContext, shell: Shell,
                 live: LiveFrames | None = None) -> None:
        self._context = context
        self._shell = shell
        self._live = live

    async def serve_stream(self, stream: trio.abc.Stream) -> None:
        config = self._context.config
        socket = WsSocket(stream)
        try:
            upgrade: Upgrade | None = None
            with trio.move_on_after(config.ws_handshake_timeout_s):
                upgrade = await socket.upgrade()
            if upgrade is None:
                return
            try:
                await self._handle(socket, upgrade)
            finally:
                with trio.move_on_after(config.ws_close_timeout_s):
                    await socket.aclose()
        except WsClosed:
            pass  # the client went away during the handshake or the close
        finally:
            await stream.aclose()

    async def _handle(self, socket: WsSocket, upgrade: Upgrade) -> None:
        context, shell = self._context, self._shell
        path, _, query = upgrade.target.partition("?")
        path = path.rstrip("/") or "/"
        queue: str | None = None
        if path.startswith(QUEUE_PATH_PREFIX):
            queue = unquote(path[len(QUEUE_PATH_PREFIX):])
            try:
                fields.queue_name(queue)
            except Refused:
                await socket.reject(404, b"Not found")
                return
        elif path != WS_PATH:
            await socket.reject(404, b"Not found")
            return
        bearer = bearer_token(upgrade.headers)
        if bearer is not None and not token_accepted(context.config.auth_tokens, bearer):
            # A wrong token on the upgrade is refused there, as bunqueue does; none at
            # all leaves the session to authenticate with ``Auth`` (our clients do).
            await socket.reject(401, b"Unauthorized")
            return
        event_codec = CBOR if parse_qs(query).get("format") == ["cbor"] else JSON
        if not await shell.doors.slot(context.connection_slots):
            shell.refusals.note("WebSocket")
            await socket.reject(503, b"Too many connections")
            return
        client_id = context.open_connections.open("websocket")
        try:
            await socket.accept()
            connection = WsConnection(context.session_host, socket, shell, queue, event_codec,
                                      self._live)
            if bearer is not None:
                connection.authenticated_by_bearer()
            await connection.serve()
        finally:
            context.open_connections.close("websocket", client_id)
            context.connection_slots.release()
