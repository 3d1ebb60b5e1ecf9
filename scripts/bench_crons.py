#!/usr/bin/env python3
"""What cron schedules cost the broker: idle CPU with none and with N schedules, and how
late their firings are when many fall due together.

A broker is started here (``python -m trioqueue serve``, temporary LMDB store). Phases:

    idle_0      the broker's CPU over ``--idle-s`` with no schedule
    idle_n      the same with ``--crons`` schedules whose next run is an hour away
                (one timer for all of them: this should cost what idle_0 does)
    burst       ``--burst`` schedules of ``repeatEvery`` ``--every-ms`` (created in a
                batch, so they fall due together), preventOverlap off, run for
                ``--burst-s``: each job's lateness = its createdAt - its slot (the
                schedule's first nextRun + k * every); p50 / p99 / max ms, jobs and the
                broker's CPU per firing

    python scripts/bench_crons.py [--crons 10000] [--idle-s 10] [--burst 1000]
        [--every-ms 2000] [--burst-s 10]

Every loop is bounded by a count and a time; the broker is stopped by its pid.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Conn  # noqa: E402
from bench_big_frames import LocalBroker  # noqa: E402


def cpu_s(pid: int) -> float:
    """The process's user + system CPU so far (/proc/PID/stat, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else 0.0


def create(conn: Conn, prefix: str, n: int, every_ms: int, queue: str) -> list[float]:
    """``n`` schedules, 256 requests in flight; their first nextRun each."""
    firsts: list[float] = []
    pending: list[str] = []
    for i in range(n):
        rid, frame = conn.make("Cron", name=f"{prefix}{i}", queue=queue,
                               repeatEvery=every_ms, preventOverlap=False)
        conn.send(frame)
        pending.append(rid)
        if len(pending) >= 256 or i == n - 1:
            for wait_rid in pending:
                reply = conn.wait(wait_rid)
                if reply.get("ok") is not True:
                    raise RuntimeError(f"Cron refused: {reply}")
                firsts.append(reply["cron"]["nextRun"])
            pending = []
    return firsts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--crons", type=int, default=10_000)
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--every-ms", type=int, default=2000)
    ap.add_argument("--burst-s", type=float, default=10.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # (the broker's bounds on schedules raised to what the phases ask for)
        broker = LocalBroker(str(Path(tmp) / "data"), [
            "--max-cron-schedules", str(max(1, args.crons + args.burst)),
            "--cron-min-interval-ms", str(max(1, min(1000, args.every_ms)))])
        try:
            conn = Conn("127.0.0.1", broker.port, "msgpack", 30.0)
            time.sleep(1.0)  # let start-up work settle before measuring
            c0 = cpu_s(broker.pid)
            time.sleep(args.idle_s)
            idle_0 = cpu_s(broker.pid) - c0
            create(conn, "idle", args.crons, 3_600_000, "bench-idle")
            time.sleep(1.0)
            c0 = cpu_s(broker.pid)
            time.sleep(args.idle_s)
            idle_n = cpu_s(broker.pid) - c0
            print(f"idle CPU over {args.idle_s:g} s: {idle_0 * 1000:.0f} ms with no schedule, "
                  f"{idle_n * 1000:.0f} ms with {args.crons:,} schedules")
            firsts = create(conn, "burst", args.burst, args.every_ms, "bench-burst")
            c0 = cpu_s(broker.pid)
            time.sleep(args.burst_s)
            burst_cpu = cpu_s(broker.pid) - c0
            for i in range(args.burst):
                conn.call("CronDelete", name=f"burst{i}")
            first_by_name = {f"burst{i}": first for i, first in enumerate(firsts)}
            late: list[float] = []
            offset = 0
            while True:
                page = conn.call("GetJobs", queue="bench-burst", limit=1000, offset=offset)
                jobs = page.get("jobs") or []
                if not jobs:
                    break
                offset += len(jobs)
                for job in jobs:
                    first = first_by_name[job["name"]]
                    k = round((job["createdAt"] - first) / args.every_ms)
                    late.append(job["createdAt"] - (first + k * args.every_ms))
            print(f"burst: {args.burst:,} schedules every {args.every_ms} ms for "
                  f"{args.burst_s:g} s: {len(late):,} firings, lateness p50 "
                  f"{pct(late, 50):.1f} ms, p99 {pct(late, 99):.1f} ms, max "
                  f"{max(late, default=0):.1f} ms; broker CPU "
                  f"{burst_cpu / max(1, len(late)) * 1e6:.0f} us per firing")
            conn.close()
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
