"""The HTTP port's front: one listener shared by WebSocket and HTTP, its limits, and the
WebSocket side's bearer tokens and live frames."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionRejected, open_websocket_url

from trioqueue.server.run import Server
from trioqueue.testing import RawClient

StartServer = Callable[..., Any]


async def raw_request(server: Server, request: bytes) -> bytes:
    """Send ``request`` on a fresh connection; everything read until the broker closes."""
    assert server.ws_port is not None
    stream = await trio.open_tcp_stream("127.0.0.1", server.ws_port)
    await stream.send_all(request)
    wire = b""
    with trio.fail_after(5):
        while chunk := await stream.receive_some(65536):
            wire += chunk
    await stream.aclose()
    return wire


async def test_http_and_websocket_share_the_port(start_server: StartServer) -> None:
    server = await start_server(memory=True)
    async with httpx.AsyncClient(timeout=5) as http:
        response = await http.get(f"http://127.0.0.1:{server.ws_port}/healthz")
    assert (response.status_code, response.text) == (200, "OK")
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws") as ws:
        await ws.send_message(json.dumps({"cmd": "Ping", "reqId": "p"}))
        reply = json.loads(await ws.get_message())
    assert reply["ok"] is True and reply["reqId"] == "p"


async def test_a_head_past_the_limit_gets_431_and_is_closed(start_server: StartServer) -> None:
    server = await start_server(memory=True, http_max_header_bytes=1024)
    wire = await raw_request(server, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
                             + b"a" * 4096 + b"\r\n\r\n")
    assert wire.startswith(b"HTTP/1.1 431 ")
    assert wire.endswith(b'{"ok":false,"error":"Request headers too large"}')


async def test_not_http_at_all_gets_400(start_server: StartServer) -> None:
    server = await start_server(memory=True)
    wire = await raw_request(server, b"\x00\x01garbage\r\n\r\n")
    assert wire.startswith(b"HTTP/1.1 400 ")


async def test_http_connections_count_in_max_connections(start_server: StartServer) -> None:
    server = await start_server(memory=True, max_connections=1)
    assert server.tcp_port is not None
    tcp = await RawClient.connect(server.tcp_port)
    await tcp.ok("Ping")
    wire = await raw_request(server, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert wire.startswith(b"HTTP/1.1 503 ")
    assert wire.endswith(b'{"ok":false,"error":"Too many connections"}')
    await tcp.aclose()


async def test_kept_alive_connections_serve_several_requests(start_server: StartServer) -> None:
    server = await start_server(memory=True)
    async with httpx.AsyncClient(timeout=5) as http:
        statuses = [(await http.get(f"http://127.0.0.1:{server.ws_port}/live")).status_code
                    for _ in range(5)]
    assert statuses == [200] * 5


@pytest.mark.parametrize("token, ok", [("t1", True), ("wrong", False)])
async def test_a_websocket_upgrade_with_a_bearer_token(start_server: StartServer, token: str,
                                                       ok: bool) -> None:
    """A valid bearer token on the upgrade authenticates the session (no Auth); a wrong
    one is refused 401 at the upgrade."""
    server = await start_server(memory=True, auth_tokens=["t1"])
    url = f"ws://127.0.0.1:{server.ws_port}/ws"
    headers = [("Authorization", f"Bearer {token}")]
    if not ok:
        with pytest.raises(ConnectionRejected) as refused:
            async with open_websocket_url(url, extra_headers=headers):
                pass
        assert refused.value.status_code == 401
        return
    async with open_websocket_url(url, extra_headers=headers) as ws:
        await ws.send_message(json.dumps({"cmd": "ListQueues", "reqId": 1}))
        reply = json.loads(await ws.get_message())
    assert reply["ok"] is True


async def test_subscribed_websocket_gets_queue_counts_and_periodic_frames(
    start_server: StartServer,
) -> None:
    server = await start_server(memory=True, health_status_interval_s=0.05)
    assert server.tcp_port is not None
    tcp = await RawClient.connect(server.tcp_port)
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws") as ws:
        await ws.send_message(json.dumps({"cmd": "Subscribe", "reqId": 1,
                                          "events": ["queue:counts", "health:*"]}))
        assert json.loads(await ws.get_message())["subscribed"] == ["queue:counts",
                                                                    "health:*"]
        await tcp.ok("PUSH", queue="wq", name="n", data=1)
        names: dict[str, dict[str, Any]] = {}
        with trio.fail_after(5):
            while len(names) < 2:
                frame = json.loads(await ws.get_message())
                names.setdefault(frame["event"], frame["data"])
    assert names["queue:counts"]["queue"] == "wq" and names["queue:counts"]["waiting"] == 1
    assert names["health:status"]["ok"] is True
    assert names["health:status"]["connections"]["websocket"] == 1
    await tcp.aclose()


async def test_a_legacy_websocket_gets_no_system_frames(start_server: StartServer) -> None:
    """A client that never subscribed gets raw job events only, as before."""
    server = await start_server(memory=True, health_status_interval_s=0.01)
    assert server.tcp_port is not None
    tcp = await RawClient.connect(server.tcp_port)
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws") as ws:
        await tcp.ok("PUSH", queue="lq", name="n", data=1)
        with trio.fail_after(5):
            first = json.loads(await ws.get_message())
        assert first["eventType"] == "pushed"
        await tcp.ok("PUSH", queue="lq", name="n", data=2)
        with trio.fail_after(5):
            second = json.loads(await ws.get_message())
        assert second["eventType"] == "pushed"  # no health:status in between
    await tcp.aclose()
