"""With tokens set, nothing but Auth is served until a token matches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trioqueue.testing import RawClient


async def test_commands_refused_until_auth(start_server: Callable[..., Any]) -> None:
    auth_server = await start_server(auth_tokens=["s3cret", "other"])
    assert auth_server.tcp_port is not None
    client = await RawClient.connect(auth_server.tcp_port)
    assert (await client.call("PUSH", queue="q", data=1))["error"] == "Not authenticated"
    assert (await client.call("Auth", token="wrong"))["error"] == "Invalid token"
    assert (await client.call("Auth", token="   "))["error"] == "Invalid token"
    assert (await client.call("Ping"))["error"] == "Not authenticated"
    await client.ok("Auth", token="  s3cret ")
    await client.ok("PUSH", queue="q", name="n", data=1)
    await client.aclose()
