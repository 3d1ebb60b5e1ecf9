#!/usr/bin/env python3
"""Flows and dependencies: PUSHF admission rate and the rate at which completing
children release their parents, against a running trioqueue broker.

Usage:
    python scripts/bench_flows.py [--target 127.0.0.1:6789] [--flows 1000]
        [--children 9] [--window 8] [--repeat 3]

Each flow is one parent in queue ``bf-parent`` waiting for ``--children`` children in
queue ``bf-kids`` (bunqueue's flow shape: symmetric parentId/childrenIds/dependsOn).
Row 1: ``--flows`` PUSHF commands, ``--window`` in flight. Row 2: the children are
pulled and acknowledged with PULLB/ACKB of 1000 until every parent is waiting. Both
queues are obliterated after each run. Bounded by count; exits 1 on any error reply.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import trio

from trioqueue.testing import RawClient

PARENTS, KIDS = "bf-parent", "bf-kids"


def flow(f: int, children: int) -> list[dict[str, Any]]:
    kids = [f"f{f}c{i}" for i in range(children)]
    jobs: list[dict[str, Any]] = [{"id": f"f{f}p", "queue": PARENTS, "input": {
        "name": "p", "data": {"__childrenIds": kids}, "childrenIds": kids,
        "dependsOn": kids}}]
    jobs += [{"id": kid, "queue": KIDS, "input": {
        "name": "c", "data": {"__parentId": f"f{f}p", "__parentQueue": PARENTS},
        "parentId": f"f{f}p"}} for kid in kids]
    return jobs


async def one_run(port: int, flows: int, children: int, window: int) -> tuple[float, float]:
    client = await RawClient.connect(port)
    t0 = time.perf_counter()
    sent, pending = 0, []
    while sent < flows or pending:
        while sent < flows and len(pending) < window:
            pending.append(await client.send("PUSHF", jobs=flow(sent, children)))
            sent += 1
        reply = await client.reply_to(pending.pop(0))
        if not reply.get("ok"):
            raise SystemExit(f"PUSHF refused: {reply}")
    t1 = time.perf_counter()
    done = 0
    while done < flows * children:
        jobs = (await client.ok("PULLB", queue=KIDS, count=1000, timeout=1000))["jobs"]
        ids = [job["id"] for job in jobs]
        if ids:
            await client.ok("ACKB", ids=ids, results=[1] * len(ids))
        done += len(ids)
    while (await client.ok("GetJobCounts", queue=PARENTS))["counts"]["waiting"] < flows:
        await trio.sleep(0.001)
    t2 = time.perf_counter()
    for queue in (PARENTS, KIDS):
        await client.ok("Obliterate", queue=queue)
    await client.aclose()
    return flows * (children + 1) / (t1 - t0), flows * children / (t2 - t1)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="127.0.0.1:6789")
    ap.add_argument("--flows", type=int, default=1000)
    ap.add_argument("--children", type=int, default=9)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    port = int(args.target.rsplit(":", 1)[1])
    admitted, released = [], []
    for _ in range(args.repeat):
        a, r = await one_run(port, args.flows, args.children, args.window)
        admitted.append(a)
        released.append(r)
    print(f"{'row':<40} {'median':>10} {'min':>10} {'max':>10}")
    for name, values in ((f"pushf_{args.children + 1} (jobs/s admitted)", admitted),
                         ("children acked, parents released (/s)", released)):
        print(f"{name:<40} {statistics.median(values):>10,.0f} {min(values):>10,.0f} "
              f"{max(values):>10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
