"""The HTTP port: one listener, each connection handed to WebSocket or to HTTP.

bunqueue serves its WebSocket routes, its REST API, SSE and the health probes on one
port (6790). We serve WebSocket ourselves on wsproto (:mod:`.ws_socket`: large messages
are sent in fragments, a piece a step) and everything else with hypercorn, a well-kept
HTTP/1.1 server, driving our ASGI app (:mod:`.app`).

Which of the two gets a connection is decided by its first request's head, parsed with
h11 (never by hand): a WebSocket upgrade goes to :mod:`.websocket`, anything else to
hypercorn. Both then read the connection from its first byte again: the bytes read to
decide are handed back in front of the stream (:class:`ReplayedStream`). A connection
that sends no complete head within ``http_header_timeout_s``, or a head larger than
``http_max_header_bytes``, is closed (431 for the latter) before either sees it. A
connection counts for its client address from the accept (``max_connections_per_address``,
:mod:`..doors`); one past the cap is answered 503 and closed.

A later request on a kept-alive HTTP connection stays with hypercorn: browsers and
WebSocket libraries open a fresh connection for an upgrade, so an upgrade there is
answered 404 by the app.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import h11
import trio

from ..context import ListenerContext
from ..doors import client_address, too_many_from_address
from ..limits import Shell

if TYPE_CHECKING:
    from .app import HttpApp
    from .live_frames import LiveFrames

log = logging.getLogger("trioqueue.http")

_RECV_BYTES = 16 * 1024


class ReplayedStream(trio.abc.HalfCloseableStream):
    """A socket stream whose first reads return bytes already taken from it.

    Writes, EOF and close go straight to the socket; ``socket`` is exposed because
    both servers ask it for the peer's address.
    """

    def __init__(self, stream: trio.SocketStream, head: bytes) -> None:
        self.transport_stream = stream
        self.socket = stream.socket
        self._head = head

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._head:
            if max_bytes is None or max_bytes >= len(self._head):
                head, self._head = self._head, b""
            else:
                head, self._head = self._head[:max_bytes], self._head[max_bytes:]
            await trio.lowlevel.checkpoint()
            return head
        return bytes(await self.transport_stream.receive_some(max_bytes))

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.transport_stream.send_eof()

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


@dataclass(frozen=True, slots=True)
class HttpPort:
    """What serve_http started: its listeners, the app (its SSE hub, budget...) and the
    live frames (for the server's and the tests' eyes)."""

    listeners: list[trio.SocketListener]
    app: HttpApp
    live: LiveFrames

    @property
    def port(self) -> int:
        return int(self.listeners[0].socket.getsockname()[1])


class HeadTooLarge(Exception):
    """The request's head passed ``http_max_header_bytes``."""


async def read_head(stream: trio.SocketStream, max_bytes: int) -> tuple[bytes, Any]:
    """Read until the first request's head is complete: the bytes read, and h11's
    event for it (a :class:`h11.Request`, or None when the client closed first or sent
    something that is not HTTP: the HTTP server answers that as it sees fit)."""
    parser = h11.Connection(h11.SERVER, max_incomplete_event_size=max_bytes)
    taken = bytearray()
    while True:
        try:
            event = parser.next_event()
        except h11.RemoteProtocolError as exc:
            if len(taken) > max_bytes:
                raise HeadTooLarge from exc
            return bytes(taken), None
        if event is not h11.NEED_DATA:
            # h11 bounds only a head still incomplete in its buffer: a whole head that
            # arrived in one read is measured here.
            unparsed, _ = parser.trailing_data
            if len(taken) - len(unparsed) > max_bytes:
                raise HeadTooLarge
            return bytes(taken), event if isinstance(event, h11.Request) else None
        data = await stream.receive_some(_RECV_BYTES)
        if not data:
            return bytes(taken), None
        taken += data
        parser.receive_data(bytes(data))


def is_websocket_upgrade(request: h11.Request) -> bool:
    for name, value in request.headers:
        if name == b"upgrade" and b"websocket" in value.lower():
            return True
    return False


def plain_response(status: str, message: str) -> bytes:
    """A whole JSON error response that closes the connection, for the answers given
    before hypercorn has the connection (431 and refused upgrades here, 503 in
    http_server)."""
    body = json.dumps({"ok": False, "error": message}, separators=(",", ":")).encode()
    return (b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (status.encode(), len(body), body))


async def answer_and_close(stream: trio.abc.Stream, response: bytes) -> None:
    """Send a whole response (at most a second for a client that does not read), then
    close the connection."""
    with trio.move_on_after(1):
        try:
            await stream.send_all(response)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    await stream.aclose()


_HEAD_TOO_LARGE = plain_response("431 Request Header Fields Too Large",
                                 "Request headers too large")


async def serve_http(context: ListenerContext, host: str, port: int, *, shell: Shell,
                     handler_nursery: trio.Nursery | None = None,
                     task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Accept connections on the HTTP port until cancelled; each runs in
    ``handler_nursery`` (see serve_tcp: shutdown stops accepting before it cuts)."""
    from .app import HttpApp
    from .commands import CommandRunner
    from .health import Health
    from .live_frames import LiveFrames
    from .server import HttpServer
    from .sse import SseHub
    from .websocket import WsEndpoint

    config = context.config
    listeners = await trio.open_tcp_listeners(port, host=host)
    runner = CommandRunner(context.session_host, shell.graveyard)

    live = LiveFrames(context.session_host.events, config, runner.run, context.stats,
                      context.now_ms)
    sse = SseHub(live, context.open_connections, max_clients=config.sse_max_clients,
                 heartbeat_s=config.sse_heartbeat_s, replay_events=config.sse_replay_events,
                 max_unsent_bytes=config.sse_max_unsent_bytes, senders=shell.senders,
                 graveyard=shell.graveyard)
    app = HttpApp(config, runner, Health(runner.run, context.open_connections), sse,
                  shell.http_bodies)
    app.announce = context.session_host.router.announce
    ws = WsEndpoint(context, shell, live)
    http = HttpServer(context, shell, app)
    guard = app.guard

    doors = shell.doors

    async def handler(stream: trio.SocketStream) -> None:
        # Counted from the accept, the head's wait included (doors.py).
        address = client_address(stream.socket)
        if not doors.enter(address):
            await answer_and_close(stream, plain_response(
                "503 Service Unavailable", too_many_from_address(doors.per_address)))
            return
        try:
            await serve_connection(stream)
        finally:
            doors.leave(address)

    async def serve_connection(stream: trio.SocketStream) -> None:
        head, request = b"", None
        try:
            with trio.move_on_after(config.http_header_timeout_s or math.inf) as waited:
                head, request = await read_head(stream, config.http_max_header_bytes)
        except HeadTooLarge:
            await answer_and_close(stream, _HEAD_TOO_LARGE)
            return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.aclose()
            return
        if waited.cancelled_caught:
            log.info("closing an HTTP connection that sent no request head within %g s",
                     config.http_header_timeout_s)
            await stream.aclose()
            return
        replayed = ReplayedStream(stream, head)
        if request is not None and is_websocket_upgrade(request):
            # Checked here, where the whole head is at hand (wsproto keeps Host apart):
            # CORS does not cover WebSocket, so a page of another origin is refused.
            refusal = guard.check_upgrade(request.headers)
            if refusal is not None:
                status = HTTPStatus(refusal.status)
                await answer_and_close(stream, plain_response(
                    f"{status.value} {status.phrase}", refusal.message))
                return
            await ws.serve_stream(replayed)
        else:
            await http.serve_stream(replayed)

    async with trio.open_nursery() as nursery:
        await nursery.start(live.run)
        task_status.started(HttpPort(listeners, app, live))
        await trio.serve_listeners(handler, listeners, handler_nursery=handler_nursery)
