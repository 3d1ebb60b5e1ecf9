"""A client going away, however abruptly, ends its own connection and never the broker.

Each test pulls a job over the connection that goes away: the job going back to waiting
shows the broker has handled the disconnect, and the broker must still serve afterwards.
"""

from __future__ import annotations

import json
import socket
import struct

import trio
from trio_websocket import open_websocket_url

from trioqueue.server.run import Server
from trioqueue.testing import RawClient


async def wait_for_state(server: Server, job_id: str, state: str) -> None:
    assert server.tcp_port is not None
    client = await RawClient.connect(server.tcp_port)
    try:
        with trio.fail_after(3):
            while (await client.ok("GetState", id=job_id))["state"] != state:
                await trio.sleep(0.01)
    finally:
        await client.aclose()


async def still_serving(server: Server, job_id: str) -> None:
    assert server.tcp_port is not None
    client = await RawClient.connect(server.tcp_port)
    with trio.fail_after(2):
        await client.ok("Ping")
        assert (await client.ok("PULL", queue="q"))["job"]["id"] == job_id
    await client.aclose()


async def test_tcp_connection_reset_by_the_client(server: Server) -> None:
    assert server.tcp_port is not None
    client = await RawClient.connect(server.tcp_port)
    pushed = await client.ok("PUSH", queue="q", name="n", data=1)
    await client.ok("PULL", queue="q")
    # SO_LINGER 0: close() sends RST, so the broker's next read fails (ECONNRESET).
    assert isinstance(client.stream, trio.SocketStream)
    client.stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await client.aclose()
    await wait_for_state(server, pushed["id"], "waiting")
    await still_serving(server, pushed["id"])


async def test_websocket_closed_normally_by_the_client(server: Server) -> None:
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws") as ws:
        # a command-only client: no job events on this connection
        await ws.send_message(json.dumps({"cmd": "Unsubscribe"}))
        assert json.loads(await ws.get_message()) == {"ok": True, "subscribed": []}
        await ws.send_message(json.dumps({"cmd": "PUSH", "queue": "q", "name": "n",
                                          "data": 1}))
        pushed = json.loads(await ws.get_message())
        await ws.send_message(json.dumps({"cmd": "PULL", "queue": "q"}))
        assert json.loads(await ws.get_message())["job"]["id"] == pushed["id"]
    await wait_for_state(server, pushed["id"], "waiting")
    await still_serving(server, pushed["id"])
