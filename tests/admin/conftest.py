"""The admin tests' harness: a broker in this process (``start_server``, LMDB in the
test's directory) and ``cli``, which runs ``trioqueue.cli.main`` in a thread against it,
as a person would type it, and hands back the exit status and what was printed."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import trio

from trioqueue.cli import main
from trioqueue.server.run import Server


@dataclass
class Ran:
    """One command's exit status, stdout and stderr."""

    status: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.status == 0, self.err
        return json.loads(self.out)


Cli = Callable[..., Any]


@pytest.fixture
async def broker(start_server: Callable[..., Any]) -> Server:
    srv: Server = await start_server()
    return srv


@pytest.fixture
def cli(broker: Server, capsys: pytest.CaptureFixture[str]) -> Cli:
    """``await cli("queues", "--json")``: the command against ``broker``, found through
    the environment serve reads (``TRIOQUEUE_TCP_PORT``); ``env`` adds or replaces
    variables."""

    async def run(*argv: str, env: dict[str, str] | None = None,
                  broker_port: int | None = None) -> Ran:
        port = broker.tcp_port if broker_port is None else broker_port
        environment = {"TRIOQUEUE_TCP_PORT": str(port), **(env or {})}
        capsys.readouterr()
        with trio.fail_after(20):
            status = await trio.to_thread.run_sync(main, list(argv), environment)
        captured = capsys.readouterr()
        return Ran(status, captured.out, captured.err)

    return run
