"""hypercorn, driven one connection at a time by :mod:`.front`.

hypercorn's trio worker owns its listening sockets; the HTTP port's are ours (a
connection's first request decides between WebSocket and HTTP), so each HTTP connection
is handed to hypercorn's per-connection server with the bytes already read in front.
That class is hypercorn's internal API: the version is pinned in pyproject.toml and
``tests/transport/test_http_server.py`` exercises it, so an upgrade that changes it
fails there, not in production.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext

from ...config import Config
from ..context import ListenerContext
from ..limits import Shell
from .app import HttpApp
from .front import answer_and_close, plain_response

if TYPE_CHECKING:
    from .front import ReplayedStream

_TOO_MANY = plain_response("503 Service Unavailable", "Too many connections")


def hypercorn_config(config: Config) -> HypercornConfig:
    hc = HypercornConfig()
    hc.keep_alive_timeout = config.http_keep_alive_timeout_s
    hc.h11_max_incomplete_size = config.http_max_header_bytes
    hc.include_server_header = False
    hc.accesslog = None
    hc.errorlog = None
    return hc


class _ConnectionApp:
    """The app for one connection: hands it the connection's stream, which SSE closes
    to cut a client that does not read (hypercorn's writes are shielded)."""

    __slots__ = ("_app", "_stream")

    def __init__(self, app: HttpApp, stream: ReplayedStream) -> None:
        self._app = app
        self._stream = stream

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self._app(scope, receive, send, self._stream)


class HttpServer:
    def __init__(self, context: ListenerContext, shell: Shell, app: HttpApp) -> None:
        self._slots = context.connection_slots
        self._shell = shell
        self.app = app
        self._config = hypercorn_config(context.config)
        self._context = WorkerContext(None)

    async def serve_stream(self, stream: ReplayedStream) -> None:
        limit = self._slots
        if not await self._shell.doors.slot(limit):
            self._shell.refusals.note("HTTP")
            await answer_and_close(stream, _TOO_MANY)
            return
        try:
            app = ASGIWrapper(_ConnectionApp(self.app, stream))  # type: ignore[arg-type]
            await TCPServer(app, self._config, self._context, {}, stream)  # type: ignore[arg-type]
        finally:
            limit.release()
