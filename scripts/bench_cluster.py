#!/usr/bin/env python3
"""What a cluster costs: scripts/bench.py rows with one, two and three brokers on one
PostgreSQL database (docs/scale-out.md), each row against broker b0 on a queue that b0
serves (local) and, with two and three brokers, on a queue that b1 serves (forwarded:
b0 relays every command over its peer link to b1 and the reply back).

    python scripts/bench_cluster.py [--n 20000] [--repeat 1] [--rows ROWS] [--dsn URL]

Without ``--dsn`` a throwaway PostgreSQL server is started from the installed binaries
(trioqueue.testing.postgres) and removed at the end. Each broker count gets a fresh
database; the brokers are subprocesses on loopback (trioqueue.testing.cluster), stopped
by their pids at the end. Every row is bounded by bench.py's count and time limit.
On this machine kind (2 cores) three brokers share the cores with PostgreSQL and the
client: the table shows the cost of the hop, not a scale-out of throughput.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trioqueue.testing.cluster import BrokerCluster  # noqa: E402

DEFAULT_ROWS = "push_pipelined_256,pushb_1000,pull_ack_1,pullb_ackb_100,e2e_latency"


def bench(port: int, place: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """bench.py against 127.0.0.1:port, queues placed by ``place``; its summary rows."""
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--target", f"127.0.0.1:{port}",
         "--n", str(args.n), "--repeat", str(args.repeat), "--rows", args.rows,
         "--place", place, "--json", str(out), "--codec", "cbor"],
        check=True, timeout=60 * 60)
    return {entry["row"]: entry for entry in json.loads(out.read_text())["summary"]}


async def measure(dsn: str, size: int, args: argparse.Namespace, workdir: Path
                  ) -> dict[str, dict[str, Any]]:
    ids = ",".join(f"b{i}" for i in range(size))
    cluster = BrokerCluster(dsn, size, workdir / f"brokers-{size}", lease_s=5.0)
    await cluster.start()
    try:
        port = cluster[0].tcp_port
        results = {"local": await trio.to_thread.run_sync(
            bench, port, f"b0@{ids}", args, workdir / f"{size}-local.json")}
        if size > 1:
            results["forwarded"] = await trio.to_thread.run_sync(
                bench, port, f"b1@{ids}", args, workdir / f"{size}-forwarded.json")
        return results
    finally:
        await cluster.stop()


def cell(summary: dict[str, Any], row: str) -> str:
    entry = summary.get(row)
    if entry is None:
        return "-"
    errors = f" ({entry['errors']} errors)" if entry.get("errors") else ""
    if entry.get("p50_ms_median") is not None:
        return (f"p50 {entry['p50_ms_median']:.2f} / p99 {entry['p99_ms_median']:.2f} ms"
                + errors)
    return f"{entry['jobs_per_s_median']:,.0f}/s" + errors


async def main_async(args: argparse.Namespace) -> None:
    from trioqueue.testing.postgres import PostgresServer

    columns: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)  # (the server runs as the postgres user when we are root)
        server = None if args.dsn else PostgresServer(workdir / "pg")
        try:
            if server is not None:
                server.start()
            for size in (1, 2, 3):
                if server is not None:
                    dsn = server.create_database(f"cluster{size}")
                else:
                    dsn = args.dsn
                results = await measure(dsn, size, args, workdir)
                for kind, summary in results.items():
                    columns.append((f"{size} broker{'s' if size > 1 else ''}, {kind}",
                                    summary))
        finally:
            if server is not None:
                server.close()
    rows = args.rows.split(",")
    print()
    print("| row | " + " | ".join(name for name, _ in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for row in rows:
        print(f"| {row} | " + " | ".join(cell(s, row) for _, s in columns) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--rows", default=DEFAULT_ROWS)
    parser.add_argument("--dsn", help="a database to use for every run (emptied by "
                                      "nobody: give a fresh one; default: a throwaway server)")
    args = parser.parse_args()
    if args.n < 1 or args.repeat < 1:
        parser.error("--n and --repeat must be positive")
    trio.run(main_async, args)


if __name__ == "__main__":
    main()
