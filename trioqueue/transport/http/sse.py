"""Server-sent events: ``GET /events`` and ``GET /events/queues/{queue}``.

Each client gets ``retry: 3000`` and a ``connected`` frame with its client id, then
every frame of :class:`~.live_frames.LiveFrames` (job events, ``queue:counts``, the
periodic frames) as ``id: n / event: name / data: json``, filtered by the path's queue
(broker-wide frames go to every client), and a ``:heartbeat`` comment when nothing was
sent for ``sse_heartbeat_s``. A client that reconnects with ``Last-Event-ID`` first gets
the frames it missed that are still in the ring of the last ``sse_replay_events``. A
stream opened with ``?events=`` patterns gets only the events they match, by the rules
of a WebSocket ``Subscribe``, so a dashboard can ask SSE for what it would subscribe to.

A client never slows the broker: frames are queued for it without waiting, bounded by
``sse_max_unsent_bytes``: a client that already has more than that waiting when a frame
comes is cut (its socket closed under the blocked write: hypercorn's writes are shielded
from cancellation, a close is not). So a single frame larger than the bound (a completed
event carrying a large result) still reaches a client that keeps up; a frame of many
values is made into text once, a slice at a time, by the first pump that comes to it,
and shared (:mod:`.sse_frames`).
At most ``sse_max_clients`` at once (503 past it).
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

import trio

from ...core import fields
from ...core.errors import Refused
from ...core.large_values.graveyard import Graveyard
from ...core.metrics.broker_stats import ConnectionCounts
from ..sent_marks import Senders, SentCount
from ..wire.codec import JSON
from ..wire.event_names import matches, parse_patterns
from .live_frames import LiveFrames
from .rest.api import Response, error_body
from .sse_frames import Frame, LargeFrame, make_frame

if TYPE_CHECKING:
    from .front import ReplayedStream

log = logging.getLogger("trioqueue.sse")

QUEUE_PREFIX = "/events/queues/"
RETRY_MS = 3000
HEARTBEAT = b":heartbeat\n\n"


class SseClient:
    """One stream's queue of unsent frames (bytes), bounded; ``patterns``: the event
    names it asked for (``?events=``), None for every event."""

    def __init__(self, queue: str | None, max_unsent: int, stream: ReplayedStream,
                 patterns: list[str] | None = None) -> None:
        self.queue = queue
        self.patterns = patterns
        self.chunks: list[Frame] = []
        self.unsent = 0  # the bytes of the frames in chunks, large ones aside
        self._large: list[LargeFrame] = []  # those of chunks (made since, maybe)
        self._max_unsent = max_unsent
        self._stream = stream
        self.wake = trio.Event()
        self.cut = False
        self.sent = SentCount()  # frames queued and sent (shutdown waits on it)

    def offer(self, queue: str | None, frame: Frame, name: str | None = None) -> None:
        if self.cut or (queue is not None and self.queue is not None and queue != self.queue):
            return
        if name is not None and self.patterns is not None and not matches(name, self.patterns):
            return
        # (a large frame counts its bytes once made, the least they can be before)
        behind = self.unsent + sum(f.size for f in self._large)
        if behind > self._max_unsent:
            log.info("cutting an SSE client %d bytes behind", behind)
            self.cut = True
            self.chunks = []
            self._large = []
            self.sent.close()
            self._stream.transport_stream.socket.close()  # wakes a blocked write
        else:
            self.chunks.append(frame)
            self.sent.queued += 1
            if type(frame) is bytes:
                self.unsent += len(frame)
            else:
                self._large.append(frame)  # type: ignore[arg-type]
        self.wake.set()

    def take(self) -> list[Frame]:
        chunks = self.chunks
        self.chunks = []
        self._large = []
        self.unsent = 0
        self.wake = trio.Event()
        return chunks


class SseHub:
    def __init__(self, live: LiveFrames, connections: ConnectionCounts, *, max_clients: int,
                 heartbeat_s: float,
                 replay_events: int, max_unsent_bytes: int,
                 senders: Senders | None = None, graveyard: Graveyard | None = None
                 ) -> None:
        self._live = live
        # where the values of a large frame no pump made go when the ring drops it
        self._graveyard = graveyard
        self._senders = senders if senders is not None else Senders()
        self._connections = connections
        self._max_clients = max_clients
        self._heartbeat_s = heartbeat_s
        self._max_unsent = max_unsent_bytes
        self._ring: deque[tuple[int, str | None, Frame, str]] = deque(maxlen=replay_events)
        self._next_id = 1
        self.clients: set[SseClient] = set()

    def _on_frame(self, name: str, data: dict[str, Any], queue: str | None) -> None:
        event_id = self._next_id
        self._next_id += 1
        frame = make_frame(event_id, name, data)
        ring = self._ring
        if len(ring) == ring.maxlen and ring:
            dropped = ring.popleft()[2]
            if type(dropped) is LargeFrame and self._graveyard is not None:
                self._graveyard.bury(dropped.unmade_data())
        ring.append((event_id, queue, frame, name))
        for client in self.clients:
            client.offer(queue, frame, name)

    async def serve(self, scope: dict[str, Any], receive: Any, send: Any,
                    stream: ReplayedStream, path: str, cors: list[tuple[str, str]]
                    ) -> Response | None:
        queue: str | None = None
        if path != "/events":
            queue = unquote(path[len(QUEUE_PREFIX):])
            try:
                fields.queue_name(queue)
            except Refused:
                return Response(404, error_body("Not found"))
        try:
            patterns = _patterns(scope.get("query_string", b""))
        except ValueError as exc:
            return Response(400, error_body(str(exc)))
        if len(self.clients) >= self._max_clients:
            return Response(503, error_body("Too many SSE connections"))
        client = SseClient(queue, self._max_unsent, stream, patterns)
        last_id = _last_event_id(scope["headers"])
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"),
                   (b"x-accel-buffering", b"no")]
        headers += [(k.encode(), v.encode()) for k, v in cors]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        hello = {"connected": True, "clientId": str(uuid.uuid4())}
        client.offer(None, f"retry: {RETRY_MS}\ndata: {JSON.encode_text(hello)}\n\n".encode())
        if last_id is not None:
            for event_id, frame_queue, frame, name in self._ring:
                if event_id > last_id:
                    client.offer(frame_queue, frame, name)
        if not self.clients:
            self._live.add(self._on_frame, job_events=True)
        self.clients.add(client)
        self._senders.add(client.sent)
        client_id = self._connections.open("sse")
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, client, send, nursery.cancel_scope)
                while (await receive())["type"] != "http.disconnect":
                    pass
                nursery.cancel_scope.cancel()
        finally:
            self._connections.close("sse", client_id)
            self.clients.discard(client)
            self._senders.discard(client.sent)
            client.sent.close()
            if not self.clients:
                self._live.remove(self._on_frame)
        return None

    async def _pump(self, client: SseClient, send: Any, done: trio.CancelScope) -> None:
        while not client.cut:
            with trio.move_on_after(self._heartbeat_s or float("inf")):
                await client.wake.wait()
            frames: list[Frame] = client.take() if client.chunks else [HEARTBEAT]
            told = 0 if frames == [HEARTBEAT] else len(frames)
            if client.cut:
                break
            await _send_frames(client, frames, send)
            client.sent.settle(told)
        done.cancel()


def _patterns(query: bytes) -> list[str] | None:
    """``?events=job:*,cron:created``: the stream's patterns, as a WebSocket's
    ``Subscribe`` takes them (ValueError with the error text); None without it."""
    values = parse_qs(query.decode("latin-1")).get("events")
    if values is None:
        return None
    return parse_patterns([p.strip() for v in values for p in v.split(",") if p.strip()])


async def _send_frames(client: SseClient, frames: list[Frame], send: Any) -> None:
    """Send ``frames`` in order: the bytes between two large frames in one body, a large
    frame made first (a slice per pass, shared with every client) then a piece at a
    time."""
    run: list[bytes] = []
    for frame in frames:
        if type(frame) is bytes:
            run.append(frame)
            continue
        if run:
            await send({"type": "http.response.body", "body": b"".join(run),
                        "more_body": True})
            run = []
        large: LargeFrame = frame  # type: ignore[assignment]
        while not large.step():
            await trio.lowlevel.checkpoint()
        for piece in large.pieces or ():
            if client.cut:
                return
            await send({"type": "http.response.body", "body": piece, "more_body": True})
    if run:
        await send({"type": "http.response.body", "body": b"".join(run), "more_body": True})


def _last_event_id(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"last-event-id":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None
