"""Slowloris clients in a process of their own: ``python -m trioqueue.testing.slow_clients``.

A latency test that runs its abusers in the broker's own thread measures the abusers'
cost as much as the broker's: 200 in-process clients trickling bytes cost the event loop
about as much CPU as the broker spends reading them. Run here, they use the other core,
as real abusers on other machines would, and the test's healthy client measures what the
broker alone makes it wait.

The conversation, one line each way on stdin/stdout:

- the program connects ``COUNT`` clients to ``127.0.0.1:PORT`` and prints ``connected``;
- it waits for a line on stdin, then starts them, evenly spread over one interval; each
  sends a PUSH frame one byte every ``INTERVAL_S``, never its last byte, until the broker
  cuts it; once every client has sent its first byte it prints ``trickling``;
- when all are cut it prints one JSON line ``{"cut_after_s": [...]}``: for each client,
  how long after its first byte the broker closed it, and exits 0. A client that got an
  answer to its partial frame, or was never cut, makes it exit 1 with the reason.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import trio

from .wire import RawClient


class NeverCut(AssertionError):
    """The broker answered or kept a frame that never completed."""


async def trickle(client: RawClient, frame: bytes, interval_s: float, offset_s: float,
                  on_first_byte: Callable[[], None]) -> float:
    """Send ``frame`` but its last byte, one byte per ``interval_s``, starting
    ``offset_s`` late; returns how long after the first byte the broker cut it."""
    await trio.sleep(offset_s)  # pacing: spread the clients' bytes evenly in time
    first = trio.current_time()
    for i in range(len(frame) - 1):  # never the last byte: the frame stays partial
        try:
            await client.send_raw(frame[i: i + 1])
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return trio.current_time() - first
        if i == 0:
            on_first_byte()
        with trio.move_on_after(interval_s):  # the pace, cut short by the close
            if not await client.is_closed():
                raise NeverCut("the broker answered a frame that never completed")
            return trio.current_time() - first
    raise NeverCut("the whole frame but its last byte went through without a cut")


async def run(port: int, count: int, interval_s: float) -> dict[str, list[float]]:
    clients = [await RawClient.connect(port) for _ in range(count)]
    frame = clients[0].frame({"cmd": "PUSH", "queue": "slowloris", "name": "n",
                              "data": {"pad": "s" * 100}})
    print("connected", flush=True)
    await trio.to_thread.run_sync(sys.stdin.readline)
    cut_after: list[float] = []
    waiting = [count]

    def on_first_byte() -> None:
        waiting[0] -= 1
        if not waiting[0]:
            print("trickling", flush=True)

    async def one(i: int, client: RawClient) -> None:
        cut_after.append(await trickle(client, frame, interval_s, interval_s * i / count,
                                       on_first_byte))
        await client.aclose()

    async with trio.open_nursery() as nursery:
        for i, client in enumerate(clients):
            nursery.start_soon(one, i, client)
    return {"cut_after_s": cut_after}


def main(argv: list[str]) -> int:
    port, count, interval_s = int(argv[0]), int(argv[1]), float(argv[2])
    failures: list[str] = []
    try:
        print(json.dumps(trio.run(run, port, count, interval_s)), flush=True)
    except* NeverCut as group:
        failures.append(str(group.exceptions[0]))
    for failure in failures:  # (a return is not allowed in an except* block)
        print(f"error: {failure}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
