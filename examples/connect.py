"""How every example connects: ``--embedded`` runs a broker in the example's own
program (trio only; nothing else to start); otherwise it connects to
``--host``/``--port`` (a ``trioqueue serve`` started beforehand, or any bunqueue
broker). ``--backend asyncio`` runs the same example on asyncio instead of trio."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from trioqueue.client import Connection, open_connection


def run(main: Callable[[Connection], Awaitable[Any]], description: str) -> None:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--embedded", action="store_true",
                        help="run a broker inside this program (memory store; trio only)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6789)
    parser.add_argument("--token", default=None)
    parser.add_argument("--backend", choices=("trio", "asyncio"), default="trio")
    args = parser.parse_args()

    async def start() -> None:
        async with open_connection(args.host, args.port, token=args.token,
                                   embedded=args.embedded) as conn:
            await main(conn)

    anyio.run(start, backend=args.backend)
