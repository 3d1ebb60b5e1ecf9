#!/usr/bin/env python3
"""How much a standalone broker grows when clients ask for long listings and read none,
and what a healthy client's round trips cost meanwhile.

A ``trioqueue serve`` subprocess (memory store) holds 250 jobs of 20 KB; ``--clients``
connections with a 4 KB receive buffer each send ``--asks`` ``GetJobs`` of 250 jobs (a
5 MB reply), ``--rounds`` times over while they are connected, and read nothing. The
broker's growth is its peak resident set (``VmHWM``) after the attack less its resident
set (``VmRSS``) before, as ``tests/e2e/test_hostile_clients.py`` measures it. A probe
connection times ``Ping`` and ``PUSH`` round trips (each job pulled and acknowledged
after, untimed) alone first, then throughout the attack; the p99 of each is printed
with its limit (2 x alone + 2 ms).

    python scripts/unread_listings.py [--bound-mib 32] [--clients 10] [--asks 2]
                                      [--rounds 3] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import trio

from trioqueue.testing import RawClient
from trioqueue.testing.process import BrokerProcess

MIB = 1024 * 1024




async def round_trips(client: RawClient, n: int) -> tuple[list[float], list[float]]:
    pings: list[float] = []
    pushes: list[float] = []
    for _ in range(n):
        started = time.perf_counter()
        await client.ok("Ping")
        pings.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        await client.ok("PUSH", queue="probe", name="n", data={"a": 1},
                        removeOnComplete=True)
        pushes.append((time.perf_counter() - started) * 1000)
        # (taken and acknowledged, untimed: the probe's own jobs must not grow the broker)
        job = (await client.ok("PULL", queue="probe", timeout=0))["job"]
        await client.ok("ACK", id=job["id"])
    return pings, pushes


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def one_run(args: argparse.Namespace) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRIOQUEUE_") and k != "AUTH_TOKENS"}
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", "--memory", "--idle-timeout-s", "0",
                               "--max-write-queue-total-bytes", f"{args.bound_mib}MiB",
                               env=env)
        await broker.start()
        try:
            healthy = await RawClient.connect(broker.tcp_port)
            probe = await RawClient.connect(broker.tcp_port)
            for _ in range(5):
                await healthy.ok("PUSHB", queue="list", jobs=[
                    {"name": "n", "data": {"text": "z" * 20_000}} for _ in range(50)])
            listing = {"cmd": "GetJobs", "queue": "list", "limit": 250}
            await healthy.ok(**listing)
            alone_ping, alone_push = await round_trips(probe, 300)
            before = broker.memory_bytes("VmRSS")
            hogs = [await RawClient.connect(broker.tcp_port, rcvbuf=4096)
                    for _ in range(args.clients)]
            during_ping: list[float] = []
            during_push: list[float] = []
            attacking = True

            async def probing() -> None:
                while attacking:
                    pings, pushes = await round_trips(probe, 5)
                    during_ping.extend(pings)
                    during_push.extend(pushes)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(probing)
                for _ in range(args.rounds):
                    for hog in hogs:
                        if not hog.peer_closed():
                            try:
                                await hog.send_raw(healthy.frame(listing) * args.asks)
                            except (trio.BrokenResourceError, trio.ClosedResourceError):
                                pass
                    await healthy.ok("Ping")
                for _ in range(20):  # what the clients still connected hold is encoded
                    await healthy.ok("Ping")
                attacking = False
            grown = broker.memory_bytes("VmHWM") - before
            cut = sum(hog.peer_closed() for hog in hogs)
            print(f"bound {args.bound_mib} MiB, {args.clients} clients x {args.asks} "
                  f"listings x {args.rounds} rounds: grew {grown / MIB:.1f} MiB "
                  f"({grown / (args.bound_mib * MIB):.2f} x bound), {cut} cut; "
                  f"Ping p99 {p99(alone_ping):.2f} ms alone, {p99(during_ping):.2f} ms "
                  f"during (limit {2 * p99(alone_ping) + 2:.2f}); PUSH p99 "
                  f"{p99(alone_push):.2f} ms alone, {p99(during_push):.2f} ms during "
                  f"(limit {2 * p99(alone_push) + 2:.2f})", flush=True)
            for hog in hogs:
                await hog.aclose()
        finally:
            await broker.stop()


async def main(args: argparse.Namespace) -> None:
    for _ in range(args.runs):
        await one_run(args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bound-mib", type=int, default=32)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--asks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    trio.run(main, parser.parse_args())
