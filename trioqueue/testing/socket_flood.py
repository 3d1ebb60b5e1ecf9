"""Sockets that never authenticate, in a process of their own:
``python -m trioqueue.testing.socket_flood PORT COUNT PER_ADDRESS``.

The abuser of the doors tests (``tests/transport/test_doors.py``): ``COUNT`` sockets to
``127.0.0.1:PORT``, ``PER_ADDRESS`` from each source address from 127.0.0.10 on, none of
which ever sends ``Auth``; each one the broker closes (refused, closed to make room, timed
out) is opened again at once. Run in a process of its own for the reason
``slow_clients`` is (a latency test must measure the broker, not its abusers).

The conversation, one line each way on stdin/stdout: the program prints ``flooding``
once every socket has been opened and closed at least once; it stops at a line on
stdin and prints one JSON line ``{"opened": N, "closed": M}``, then exits 0.
"""

from __future__ import annotations

import json
import sys

import trio

from .wire import RawClient


class Flood:
    def __init__(self, port: int, count: int, per_address: int) -> None:
        self.port = port
        self.count = count
        self.per_address = per_address
        self.opened = 0
        self.closed = 0
        self._turned = [False] * count
        self._announced = False

    async def hold(self, i: int) -> None:
        source = f"127.0.0.{10 + i // self.per_address}"
        while True:
            try:
                client = await RawClient.connect(self.port, source=source)
            except OSError:
                await trio.sleep(0.01)  # (out of ports or descriptors for a moment)
                continue
            self.opened += 1
            try:
                await client.drain_until_closed()
            finally:
                await client.aclose()
            self.closed += 1
            self._turned[i] = True
            if not self._announced and all(self._turned):
                self._announced = True
                print("flooding", flush=True)

    async def run(self) -> dict[str, int]:
        async with trio.open_nursery() as nursery:
            for i in range(self.count):
                nursery.start_soon(self.hold, i)
            await trio.to_thread.run_sync(sys.stdin.readline)
            nursery.cancel_scope.cancel()
        return {"opened": self.opened, "closed": self.closed}


def main(argv: list[str]) -> int:
    port, count, per_address = int(argv[0]), int(argv[1]), int(argv[2])
    print(json.dumps(trio.run(Flood(port, count, per_address).run)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
