#!/usr/bin/env python3
"""What a queue's slices of long work cost, with the slice budget on and off.

An in-process broker (temporary LMDB store, ``fsync never``, the standalone broker's
GC settings) gets ``--jobs`` jobs of about ``--blob-bytes`` of data each, then one
client takes them all with PULLB 1000 (long locks). Every slice the queue actor runs
(``QueueActor._slice``, with its commit) is timed, by the wall clock and in the
thread's CPU time. One row per ``--budgets`` value (``Config.slice_budget_ms``; 0 is
the fixed ``SLICE_JOBS``): the PULLB rate, the slices' p50/p99/max and the counts they
ran with. The client shares the process, so rates are lower than over a real socket.
With ``--work drain`` the jobs are removed by a Drain instead, then pushed again and
removed by an Obliterate, each timed whole.

    python scripts/slice_sizes.py [--jobs 200000] [--blob-bytes 0] [--budgets 0,4]
        [--work pullb|drain]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import Any

import trio

from trioqueue.actors import queue_actor
from trioqueue.config import Config
from trioqueue.server.run import Server, tune_gc
from trioqueue.testing import RawClient


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


async def _push(client: RawClient, jobs: int, blob: str) -> None:
    for start in range(0, jobs, 1000):
        await client.ok("PUSHB", queue="q", jobs=[
            {"name": "j", "data": {"i": start + i, "blob": blob}}
            for i in range(min(1000, jobs - start))])


async def _drain(client: RawClient, jobs: int, blob: str) -> tuple[int, str]:
    """Drain, then Obliterate, of ``jobs`` jobs: how many went and both times."""
    began = time.perf_counter()
    drained = (await client.ok("Drain", queue="q"))["count"]
    drain_s = time.perf_counter() - began
    await _push(client, jobs, blob)
    began = time.perf_counter()
    await client.ok("Obliterate", queue="q")
    return drained, f"Drain {drain_s:.2f} s, Obliterate {time.perf_counter() - began:.2f} s"


async def one_run(jobs: int, blob: str, budget_ms: float, time_limit_s: float,
                  work: str = "pullb") -> dict[str, Any]:
    slices: list[tuple[int, float, float]] = []  # (cap it ran with, wall ms, CPU ms)
    plain = queue_actor.QueueActor._slice

    def timed(self: queue_actor.QueueActor, *, keep_view: bool = False) -> None:
        cap = self.state.slice_cap
        wall, cpu = time.perf_counter(), time.thread_time()
        plain(self, keep_view=keep_view)
        slices.append((cap, (time.perf_counter() - wall) * 1000,
                       (time.thread_time() - cpu) * 1000))

    queue_actor.QueueActor._slice = timed  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as data_dir:
            config = Config(host="127.0.0.1", tcp_port=0, ws_port=0, data_dir=data_dir,
                            fsync="never", slice_budget_ms=budget_ms)
            tune_gc(config)
            async with trio.open_nursery() as nursery:
                server = await nursery.start(Server(config).run)
                client = await RawClient.connect(server.tcp_port)
                await _push(client, jobs, blob)
                slices.clear()
                began = time.perf_counter()
                got = 0
                times = ""
                with trio.move_on_after(time_limit_s):
                    if work == "drain":
                        got, times = await _drain(client, jobs, blob)
                    while got < jobs:
                        reply = await client.ok("PULLB", queue="q", count=1000, timeout=0,
                                                owner="o", lockTtl=3_600_000)
                        got += len(reply["jobs"])
                secs = time.perf_counter() - began
                nursery.cancel_scope.cancel()
    finally:
        queue_actor.QueueActor._slice = plain  # type: ignore[method-assign]
    walls = [w for _, w, _ in slices] or [0.0]
    cpus = [c for _, _, c in slices] or [0.0]
    caps = [cap or 100 for cap, _, _ in slices] or [0]
    return {"budget": budget_ms, "jobs": got, "rate": got / secs, "slices": len(slices),
            "times": times,
            "wall": (pct(walls, .5), pct(walls, .99), max(walls)), "cpu_max": max(cpus),
            "caps": (min(caps), sum(caps) / len(caps))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=200_000)
    ap.add_argument("--blob-bytes", type=int, default=0)
    ap.add_argument("--budgets", default="0,4", help="slice_budget_ms values, comma-separated")
    ap.add_argument("--time-limit-s", type=float, default=300.0, help="cap per run")
    ap.add_argument("--work", choices=("pullb", "drain"), default="pullb")
    args = ap.parse_args(argv)
    blob = "x" * args.blob_bytes
    what = "PULLB 1000" if args.work == "pullb" else "Drain, push again, Obliterate"
    print(f"jobs {args.jobs:,}, data {args.blob_bytes:,} bytes each, {what} "
          "(jobs/s: over all of it)")
    print(f"{'budget ms':>9} {'jobs/s':>9} {'slices':>7} {'wall p50':>9} {'p99':>7} "
          f"{'max':>7} {'CPU max':>8} {'cap min':>8} {'cap mean':>9}")
    for budget in (float(b) for b in args.budgets.split(",")):
        row = trio.run(one_run, args.jobs, blob, budget, args.time_limit_s, args.work)
        p50, p99, top = row["wall"]
        print(f"{budget:>9g} {row['rate']:>9,.0f} {row['slices']:>7} {p50:>9.2f} {p99:>7.2f} "
              f"{top:>7.2f} {row['cpu_max']:>8.2f} {row['caps'][0]:>8} {row['caps'][1]:>9.0f}"
              f"  {row['times']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
