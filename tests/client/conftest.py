"""Client fixtures: the same tests run over TCP and embedded, on LMDB and in memory.

``conn`` is a :class:`~trioqueue.client.Connection` in one of four modes: a broker
served over TCP (LMDB or memory store), or one embedded in the test's trio program
(LMDB or memory). ``connect_args`` are the ``open_connection`` arguments of that mode,
for a test that wants a second connection (TCP) or to reopen the broker (embedded,
LMDB); ``broker_config`` is the broker's config.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from trioqueue.client import Connection, open_connection
from trioqueue.config import Config
from trioqueue.server import Server

MODES = ["tcp-lmdb", "tcp-memory", "embedded-lmdb", "embedded-memory"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def broker_config(tmp_path: Path, mode: str) -> Config:
    return Config(host="127.0.0.1", tcp_port=0, ws_port=0, data_dir=str(tmp_path / "data"),
                  memory=mode.endswith("memory"))


@pytest.fixture
async def connect_args(nursery: trio.Nursery, broker_config: Config, mode: str
                       ) -> AsyncIterator[dict[str, Any]]:
    if mode.startswith("tcp"):
        server: Server = await nursery.start(Server(broker_config).run)
        yield {"port": server.tcp_port}
        server.stop()
    else:
        yield {"embedded": True, "config": broker_config}


@pytest.fixture
async def conn(connect_args: dict[str, Any]) -> AsyncIterator[Connection]:
    async with open_connection(**connect_args) as connection:
        yield connection
