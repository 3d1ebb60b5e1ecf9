#!/usr/bin/env python3
"""How much of a REST request's broker CPU is the HTTP server itself.

The broker runs in this process (memory store, no idle spin); a client process sends
``--requests`` POSTs of a small job over one kept-alive connection, twice: once to the
broker's own app (a real PUSH), once with the app replaced by one that reads the body
and answers ``{}`` at once (hypercorn alone). The broker's CPU (``getrusage``) per
request, for each:

    python scripts/bench_http_server.py [--requests 3000]
"""

from __future__ import annotations

import argparse
import resource
import sys
from typing import Any

import trio

from trioqueue.config import Config
from trioqueue.server.run import Server
from trioqueue.transport.http import app as http_app

CLIENT = """
import httpx, sys
with httpx.Client(base_url=sys.argv[1]) as c:
    for i in range(int(sys.argv[2])):
        assert c.post("/queues/q/jobs", json={"name": "n", "data": {"i": i}}).status_code == 200
"""


async def bare_app(self: Any, scope: dict[str, Any], receive: Any, send: Any,
                   stream: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}"})


async def cpu_per_request(requests: int) -> float:
    server = Server(Config(host="127.0.0.1", tcp_port=0, ws_port=0, memory=True,
                           idle_spin_ms=0))
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        before = resource.getrusage(resource.RUSAGE_SELF)
        with trio.fail_after(300):
            await trio.run_process([sys.executable, "-c", CLIENT,
                                    f"http://127.0.0.1:{server.ws_port}", str(requests)])
        after = resource.getrusage(resource.RUSAGE_SELF)
        server.stop()
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return cpu / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    full = trio.run(cpu_per_request, args.requests)
    http_app.HttpApp.__call__ = bare_app  # type: ignore[method-assign]
    bare = trio.run(cpu_per_request, args.requests)
    print(f"{'app':<20} {'broker us/request':>18}")
    print(f"{'ours (a real PUSH)':<20} {full:>18.0f}")
    print(f"{'bare (answers {})':<20} {bare:>18.0f}")


if __name__ == "__main__":
    main()
