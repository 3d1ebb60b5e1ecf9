#!/usr/bin/env python3
"""How long a queue is out of service when the broker serving it dies (docs/scale-out.md).

Three brokers on one PostgreSQL database (subprocesses on loopback,
trioqueue.testing.cluster, lease ``--lease-s``). A queue served by b0 gets ``--jobs``
waiting jobs (PUSHB of 1,000 through b1, forwarded to b0); b0 is killed with SIGKILL;
then, through b1, ``GetJobCounts`` is asked every 10 ms until it answers with every job
waiting. Printed per run: when b1 saw b0 dead (its heartbeat older than the lease), and
when the queue answered again (the survivor that won it claimed it, loaded its jobs and
rebuilt it).

    python scripts/bench_failover.py [--jobs 100000] [--runs 3] [--lease-s 5]

A throwaway PostgreSQL server is started from the installed binaries and removed at the
end; the brokers are stopped by their pids; every wait is bounded.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trioqueue.cluster.rendezvous import preferred_owner  # noqa: E402
from trioqueue.testing import RawClient  # noqa: E402
from trioqueue.testing.cluster import BrokerCluster  # noqa: E402

IDS = ["b0", "b1", "b2"]


async def one_run(dsn: str, workdir: Path, jobs: int, lease_s: float) -> dict[str, float]:
    queue = next(f"failover-{i}" for i in range(10_000)
                 if preferred_owner(f"failover-{i}", IDS) == "b0")
    cluster = BrokerCluster(dsn, 3, workdir, lease_s=lease_s)
    await cluster.start()
    try:
        client = await RawClient.connect(cluster[1].tcp_port)
        with trio.fail_after(30):
            while len((await client.ok("ClusterStatus"))["data"]["cluster"]["live"]) < 3:
                await trio.sleep(0.05)
        for start in range(0, jobs, 1000):
            await client.ok("PUSHB", queue=queue, jobs=[
                {"name": "n", "data": {"i": i}} for i in range(start, min(jobs, start + 1000))])
        assert (await client.ok("GetJobCounts", queue=queue))["counts"]["waiting"] == jobs
        await cluster[0].kill(signal.SIGKILL)
        killed = time.monotonic()
        seen_dead = None
        with trio.fail_after(lease_s + 120):
            while True:
                if seen_dead is None:
                    live = (await client.ok("ClusterStatus"))["data"]["cluster"]["live"]
                    if "b0" not in {b["brokerId"] for b in live}:
                        seen_dead = time.monotonic()
                reply = await client.call("GetJobCounts", queue=queue)
                if reply.get("ok") and reply["counts"]["waiting"] == jobs:
                    break
                await trio.sleep(0.01)
        served = time.monotonic()
        return {"dead_s": (seen_dead or served) - killed, "served_s": served - killed}
    finally:
        await cluster.stop()


async def main_async(args: argparse.Namespace) -> None:
    from trioqueue.testing.postgres import PostgresServer

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)  # (the server runs as the postgres user when we are root)
        with PostgresServer(workdir / "pg") as server:
            for run in range(args.runs):
                dsn = server.create_database(f"failover{run}")
                result = await one_run(dsn, workdir / f"run{run}", args.jobs, args.lease_s)
                results.append(result)
                print(f"run {run + 1}: b0 seen dead after {result['dead_s']:.2f} s, queue of "
                      f"{args.jobs:,} jobs served again after {result['served_s']:.2f} s",
                      flush=True)
    served = [r["served_s"] for r in results]
    print(f"\nfailover with a lease of {args.lease_s:g} s and {args.jobs:,} jobs: median "
          f"{statistics.median(served):.2f} s (min {min(served):.2f}, max {max(served):.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lease-s", type=float, default=5.0)
    args = parser.parse_args()
    if args.jobs < 1 or args.runs < 1:
        parser.error("--jobs and --runs must be positive")
    trio.run(main_async, args)


if __name__ == "__main__":
    main()
