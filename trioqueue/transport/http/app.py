"""The HTTP port's ASGI app: bunqueue's REST API, SSE and health probes.

First of all, what a web page may send (:mod:`.origin`, beyond bunqueue): a
``Host`` this broker does not answer is 403, two ``Authorization`` headers 400, a
write from another ``Origin`` 403, a body not declared ``application/json`` 415.
Then around every route, in this order (as bunqueue):

1. CORS: an ``OPTIONS`` preflight is answered 204; every answer carries
   ``Access-Control-Allow-Origin`` for an allowed origin (``cors_allow_origins``);
2. the per-address request budget (429 past it, with ``Retry-After``);
3. the health probes ``/health``, ``/healthz``, ``/live``, ``/ready``, never gated;
4. bearer-token auth when tokens are set (401 ``Unauthorized``); ``/prometheus`` only
   with ``metrics_auth`` (503 when that is on with no tokens to check);
5. the route: SSE streams, or a REST route of :mod:`.rest.routes` with its body read
   up to ``http_max_body_bytes`` (413 past it), within ``http_body_timeout_s`` (408)
   and the broker-wide ``http_max_body_total_bytes`` (503; :mod:`.bodies`);
   malformed JSON is 400 ``Invalid JSON body``, an unknown path 404, an exception 500
   ``Internal server error``. A 401 is answered before the body is read, and closes.

A request whose client goes away before its answer (a long-polled ``PULL``) is
cancelled: its command's session closes, so nothing is claimed for it (see
:mod:`.commands`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import trio

from ...config import Config
from ...core.broker_events import broker_event
from ...dashboard import STATIC_DIR
from ...turns import give_way
from ..large.reply_slices import SlicedJson, is_long
from ..large.value_slices import SlicedValue, heavy
from ..limits import ByteBudget
from ..wire.codec import JSON
from .auth import RequestBudget, authorized
from .bodies import (
    CLOSE_UNREAD,
    BodyCut,
    BodyTimeout,
    BodyTooLarge,
    ClientGone,
    RequestBody,
    answer_and_close,
    body_refused,
)
from .commands import CommandRunner
from .dashboard_assets import DashboardAssets
from .health import HEALTH_ROUTES, Health
from .origin import BrowserGuard
from .rest.api import Call, InvalidBody, Response, RouteTable, error_body
from .rest.routes import ROUTES
from .sse import SseHub

if TYPE_CHECKING:
    from .front import ReplayedStream

log = logging.getLogger("trioqueue.http")

Send = Any
Receive = Any


class HttpApp:
    def __init__(self, config: Config, runner: CommandRunner, health: Health, sse: SseHub,
                 body_budget: ByteBudget | None = None) -> None:
        self._config = config
        # request bodies still arriving, broker-wide (the shell's: bodies.py)
        self.body_budget = body_budget or ByteBudget(config.http_max_body_total_bytes,
                                                     "http_max_body_total_bytes")
        self.runner = runner
        self.routes = RouteTable(ROUTES)
        self.guard = BrowserGuard(config)  # Host, Origin, Content-Type (origin.py)
        self.budget = RequestBudget(config.http_rate_limit_window_ms,
                                    config.http_rate_limit_max_requests)
        self.health = health
        self.sse = sse
        # Where ratelimit:hit goes (the router's announce, set by http_front).
        self.announce: Callable[[list[dict[str, Any]]], None] | None = None
        self._cors = frozenset(config.cors_allow_origins)
        self.assets = DashboardAssets(STATIC_DIR)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send,
                       stream: ReplayedStream) -> None:
        if scope["type"] == "lifespan":
            return
        if scope["type"] != "http":
            # A WebSocket upgrade on a kept-alive HTTP connection (http_front sends
            # only a connection's first request to the WebSocket side).
            await send({"type": "websocket.close", "code": 1008})
            return
        raw = scope.get("raw_path") or scope["path"].encode()
        path = raw.split(b"?", 1)[0].decode("latin-1").rstrip("/") or "/"
        cors = self._cors_headers(scope)
        body = RequestBody(receive, self._config.http_max_body_bytes, scope["headers"],
                           timeout_s=self._config.http_body_timeout_s,
                           budget=self.body_budget)
        try:
            response = await self._answer(scope, receive, send, stream, path, cors, body)
        except ClientGone:
            return
        except (BodyTooLarge, BodyTimeout, BodyCut) as exc:
            response = body_refused(exc, body)
        except InvalidBody as exc:
            response = Response(400, error_body(exc.message))
        except Exception:
            log.exception("an HTTP route failed: %s %s", scope["method"], path)
            response = Response(500, error_body("Internal server error"))
        if response is not None:
            # refused unread (401), or a body past a bound: answer and close
            if response.status in CLOSE_UNREAD or body.refused or not await body.drain():
                response.headers.append(("connection", "close"))
                await answer_and_close(receive, partial(_send, send, response, cors))
            else:
                await _send(send, response, cors)

    async def _answer(self, scope: dict[str, Any], receive: Receive, send: Send,
                      stream: ReplayedStream, path: str, cors: list[tuple[str, str]],
                      body: RequestBody) -> Response | None:
        method = scope["method"]
        if _head_bytes(scope) > self._config.http_max_header_bytes:
            # A later request of a kept-alive connection: hypercorn's h11 bounds only a
            # head that arrives in pieces (the first head is measured by http_front).
            return Response(431, error_body("Request headers too large"))
        refusal = self.guard.check_request(
            method, scope["headers"], changes_state=self.routes.changes_state(method, path))
        if refusal is not None:
            return Response(refusal.status, error_body(refusal.message))
        if method == "OPTIONS":
            return Response(204, b"", headers=[
                ("access-control-allow-methods", "GET, POST, PUT, DELETE, OPTIONS"),
                ("access-control-allow-headers", "Content-Type, Authorization"),
                ("access-control-max-age", "86400")])
        address = (scope.get("client") or ("?",))[0]
        now = trio.current_time()
        if not self.budget.take(address, now):
            if self.announce is not None and self.budget.first_refusal(address):
                self.announce([broker_event("ratelimit:hit", int(time.time() * 1000),
                                            clientId=address, transport="http")])
            return Response(429, error_body("Rate limit exceeded"), headers=[
                ("retry-after", str(self.budget.retry_after_s(now)))])
        headers = scope["headers"]
        if method == "GET" and (page := self.assets.answer(path)) is not None:
            return page
        probe = HEALTH_ROUTES.get(path)
        if probe is not None and method == "GET":
            return await probe(self.health)
        refused = self._unauthorized(path, headers)
        if refused is not None:
            return refused
        if method == "GET" and (path == "/events" or path.startswith("/events/queues/")):
            return await self.sse.serve(scope, receive, send, stream, path, cors)
        found = self.routes.find(method, path)
        if found is None:
            return Response(404, error_body("Not found"))
        handler, params = found
        call = await self.runner.decoded(
            Call(method, path, params, _query(scope), await body.read()))
        return await _until_disconnect(receive, handler(call, self.runner.run))

    def _unauthorized(self, path: str, headers: list[tuple[bytes, bytes]]) -> Response | None:
        """The answer to a request its token does not admit, or None: ``/prometheus``
        asks for one only with ``metrics_auth``; any other 401 is told as
        ``auth:failed``."""
        tokens = self._config.auth_tokens
        if path == "/prometheus":
            if not self._config.metrics_auth:
                return None
            if not tokens:
                return Response(503, error_body("Metrics auth is on but no tokens "
                                                "are configured"))
            return None if authorized(tokens, headers) else Response(
                401, error_body("Unauthorized"))
        if authorized(tokens, headers):
            return None
        if self.announce is not None:
            self.announce([broker_event("auth:failed", int(time.time() * 1000),
                                        transport="http")])
        return Response(401, error_body("Unauthorized"))

    def _cors_headers(self, scope: dict[str, Any]) -> list[tuple[str, str]]:
        if not self._cors:
            return []
        origin = next((v.decode("latin-1") for k, v in scope["headers"]
                       if k == b"origin"), None)
        if "*" in self._cors:
            return [("access-control-allow-origin", "*")]
        if origin is not None and origin in self._cors:
            return [("access-control-allow-origin", origin), ("vary", "Origin")]
        return []


def _head_bytes(scope: dict[str, Any]) -> int:
    """The size of the request's head as sent (request line and header lines)."""
    target = scope.get("raw_path") or b""
    if b"?" not in target and scope.get("query_string"):
        target += b"?" + scope["query_string"]
    line = len(scope["method"]) + len(target) + 12  # "GET <target> HTTP/1.1\r\n"
    return line + sum(len(name) + len(value) + 4 for name, value in scope["headers"])


def _query(scope: dict[str, Any]) -> dict[str, list[str]]:
    text = scope.get("query_string", b"").decode("latin-1")
    return parse_qs(text, keep_blank_values=True)


async def _until_disconnect(receive: Receive, answer: Any) -> Response | None:
    """Await ``answer``, cancelled if the client disconnects first (None then)."""
    result: list[Response] = []
    failed: list[Exception] = []

    async def run(scope: trio.CancelScope) -> None:
        try:
            result.append(await answer)
        except Exception as exc:  # raised below, outside the nursery's group
            failed.append(exc)
        scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, nursery.cancel_scope)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                nursery.cancel_scope.cancel()
                break
    if failed:
        raise failed[0]
    return result[0] if result else None


async def _send(send: Send, response: Response, cors: list[tuple[str, str]]) -> None:
    body = response.body
    if isinstance(body, bytes):
        payload = body
    elif isinstance(body, str):
        payload = body.encode()
    elif isinstance(body, dict) and (is_long(body) or heavy(body)):
        # A long list (a PULLB of 1,000 jobs), or a reply holding many values (a job of
        # a million small maps), is encoded a slice per pass, every other task running
        # between two, as on TCP and WebSocket (reply_slices.py, value_slices.py).
        sliced = (SlicedJson(body) if is_long(body) and not heavy(body)
                  else SlicedValue(JSON, body))
        while (whole := sliced.step()) is None:
            await give_way()
        payload = whole.encode() if isinstance(whole, str) else whole
    else:
        payload = JSON.encode(body)
    headers = [(b"content-type", response.content_type.encode()),
               (b"content-length", str(len(payload)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in [*cors, *response.headers]]
    await send({"type": "http.response.start", "status": response.status,
                "headers": headers})
    await send({"type": "http.response.body", "body": payload})
