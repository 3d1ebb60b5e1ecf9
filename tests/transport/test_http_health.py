"""The health probes against a degraded store, and the HTTP port's keep-alive limit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import trio

from trioqueue.testing import RawClient

StartServer = Callable[..., Any]


async def test_health_and_ready_answer_503_while_the_store_is_full(
    start_server: StartServer,
) -> None:
    server = await start_server(memory=True, store_max_bytes=2 * 1024 * 1024)
    assert server.tcp_port is not None
    client = await RawClient.connect(server.tcp_port)
    base = f"http://127.0.0.1:{server.ws_port}"
    async with httpx.AsyncClient(base_url=base, timeout=5) as http:
        assert (await http.get("/ready")).status_code == 200
        assert (await http.get("/health")).json()["status"] == "healthy"
        with trio.fail_after(20):  # large jobs until refused, then small ones
            for size in (20_000, 1):
                for _ in range(100_000):
                    reply = await client.call("PUSH", queue="big", name="n",
                                              data="x" * size)
                    if reply["ok"] is False:
                        break
                assert reply["error"].startswith("Storage full")
        health = await http.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "degraded"
        ready = await http.get("/ready")
        assert ready.status_code == 503 and ready.json()["ready"] is False
        assert (await http.get("/live")).status_code == 200  # alive, just not ready
        await client.ok("Drain", queue="big")
        assert (await http.get("/ready")).status_code == 200  # room again
    await client.aclose()


async def test_an_idle_kept_alive_connection_is_closed(start_server: StartServer) -> None:
    server = await start_server(memory=True, http_keep_alive_timeout_s=0.2)
    assert server.ws_port is not None
    stream = await trio.open_tcp_stream("127.0.0.1", server.ws_port)
    await stream.send_all(b"GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    wire = b""
    with trio.fail_after(5):  # answered, then closed once idle for 0.2 s
        while chunk := await stream.receive_some(65536):
            wire += chunk
    assert wire.startswith(b"HTTP/1.1 200 ") and wire.endswith(b"OK")
    await stream.aclose()
