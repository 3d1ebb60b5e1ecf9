"""Which broker and token an admin command uses, and its one-line failures: an
unreachable broker, a missing or wrong token, a bad port."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from trioqueue.server.run import Server

from .conftest import Cli

TOKEN_SOURCES = "--token, TRIOQUEUE_TOKEN, BQ_TOKEN or BUNQUEUE_TOKEN"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_an_unreachable_broker_is_one_line_and_exit_2(cli: Cli) -> None:
    port = _closed_port()
    for command in (("queues",), ("health",), ("add", "q", "n", "--json")):
        failed = await cli(*command, "--connect-timeout-s", "0.2", broker_port=port)
        assert (failed.status, failed.out) == (2, "")
        assert failed.err == (f"error: cannot connect to the broker at 127.0.0.1:{port} "
                              f"(tried for 0.2 s; is it running? --host/--port say where)\n")


async def test_flags_beat_the_environment(cli: Cli, broker: Server) -> None:
    port = _closed_port()
    found = await cli("queues", "--json", "-H", "127.0.0.1", "-p", str(broker.tcp_port),
                      broker_port=port)
    assert found.json() == {"queues": []}
    found = await cli("queues", "--json", broker_port=port,
                      env={"TCP_PORT": str(port), "TRIOQUEUE_TCP_PORT": str(broker.tcp_port)})
    assert found.status == 0


async def test_a_bad_port_is_one_line(cli: Cli) -> None:
    bad = await cli("queues", env={"TRIOQUEUE_TCP_PORT": "abc"})
    assert (bad.status, bad.err) == (2, "error: Invalid port: 'abc' (expected a port number)\n")


@pytest.fixture
async def secured(start_server: Callable[..., Any]) -> Server:
    srv: Server = await start_server(auth_tokens=["s3cret", "other"], memory=True)
    return srv


async def test_no_token_for_a_broker_with_auth(cli: Cli, secured: Server) -> None:
    refused = await cli("queues", broker_port=secured.tcp_port)
    assert (refused.status, refused.out) == (1, "")
    assert refused.err == f"error: Not authenticated: the broker wants a token ({TOKEN_SOURCES})\n"


async def test_a_wrong_token(cli: Cli, secured: Server) -> None:
    refused = await cli("queues", "--token", "wrong", broker_port=secured.tcp_port,
                        env={"BQ_TOKEN": "s3cret"})
    assert (refused.status, refused.out) == (1, "")
    assert refused.err == (f"error: Invalid token: the broker refused the token given "
                           f"({TOKEN_SOURCES})\n")


@pytest.mark.parametrize("env", [
    {"TRIOQUEUE_TOKEN": "s3cret", "BQ_TOKEN": "wrong"},
    {"BQ_TOKEN": "s3cret", "BUNQUEUE_TOKEN": "wrong"},
    {"BUNQUEUE_TOKEN": "other", "AUTH_TOKENS": "wrong"},
    {"AUTH_TOKENS": "s3cret,other"},  # the broker's own list, on the broker's host
    {"TRIOQUEUE_AUTH_TOKENS": "other", "AUTH_TOKENS": "wrong"},
])
async def test_token_from_the_environment(cli: Cli, secured: Server,
                                          env: dict[str, str]) -> None:
    assert (await cli("queues", "--json", broker_port=secured.tcp_port, env=env)).json() == {
        "queues": []}


async def test_token_flag(cli: Cli, secured: Server) -> None:
    assert (await cli("add", "q", "n", "-t", "s3cret", "--json",
                      broker_port=secured.tcp_port)).status == 0
