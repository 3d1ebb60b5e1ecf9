"""A broker run in the caller's trio run for one block, with a raw client of it: the
restart tests' two lives of a broker on one data directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from ..config import Config
from ..server.run import Server
from .wire import RawClient


@asynccontextmanager
async def served(config: Config) -> AsyncIterator[RawClient]:
    """``async with served(config) as client``: a broker started on ``config`` and a
    client connected to it; at the end of the block the client closes and the broker
    stops as on SIGTERM (a second block on the same ``config`` is its restart)."""
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(Server(config).run)
        assert server.tcp_port is not None
        client = await RawClient.connect(server.tcp_port)
        try:
            yield client
        finally:
            await client.aclose()
            server.stop()
