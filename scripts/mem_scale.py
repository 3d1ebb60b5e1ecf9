#!/usr/bin/env python3
"""Where a broker's memory goes with many jobs, and what stays after they are gone.

An in-process broker on a temporary LMDB store (``--fsync never``) is driven through a
real ``Session`` with msgpack-decoded requests, as a socket would deliver them: N jobs
pushed (PUSHB 1000) into one queue, then removed (``--remove drain``: one Drain;
``pull-ack``: PULLB 1000 + ACKB), ``--cycles`` times. After each stage it prints the
process's RssAnon and RssFile (LMDB's mapped pages are file pages), what tracemalloc
traces (``--tracemalloc``), GC-tracked objects, and the size of every per-job structure
of the queue and the router. With ``--tracemalloc`` it also prints the allocation sites
of the live jobs (bytes per job by line) and what grew between the end of the first
cycle and the end of the last (by traceback). ``--trim`` calls glibc's malloc_trim(0)
after each removal, to tell memory the allocator keeps from memory still referenced.

    python scripts/mem_scale.py [--jobs 200000] [--cycles 3] [--remove drain|pull-ack]
        [--tracemalloc] [--trim] [--shrink] [--top 12]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import sys
import tempfile
import time
import tracemalloc
from operator import attrgetter
from typing import Any

import trio

from trioqueue.actors.broker import Broker
from trioqueue.config import Config
from trioqueue.transport import session
from trioqueue.transport.wire.codec import MSGPACK

QUEUE = "q"


def proc_status() -> dict[str, int]:
    out: dict[str, int] = {}
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def malloc_trim() -> None:
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def structures(broker: Broker) -> dict[str, int]:
    """Entry counts of every per-job structure (queue state, router)."""
    router = broker.router
    out: dict[str, int] = {"router._index": len(router._index),
                           "router._retained": len(router.results.kept),
                           "router.dependents": len(router.dependents._parents)}
    actor = router.actors.get(QUEUE)
    if actor is not None:
        q = actor.state
        for name in ("jobs", "order._ready", "order._delayed", "leases.locks", "leases._heap",
                     "leases.owner_conn", "leases.conn_jobs", "dedup", "logs", "timeouts"):
            out[f"q.{name}"] = len(attrgetter(name)(q))
        parked = q.parked
        out["q.parked.pulls"] = len(parked.pulls)
        out["q.parked.by_job"] = len(parked.by_job)
        out["q.parked.by_conn"] = len(parked.by_conn)
        out["q.parked.deadlines"] = len(parked._deadlines)
        out["q.stall_watch.suspects"] = len(q.stall_watch.suspects)
        out["q.places"] = sum(len(q.places.of(s)) for s in
                              ("waiting", "prioritized", "delayed", "active",
                               "waiting-children"))
        out["sizeof q.jobs"] = sys.getsizeof(q.jobs)
        out["sizeof router._index"] = sys.getsizeof(router._index)
    return out


class Driver:
    def __init__(self, broker: Broker) -> None:
        self.replies: list[dict[str, Any]] = []
        self.arrived = trio.Event()

        def send_now(out: list[dict[str, Any]]) -> str:
            self.replies.extend(out)
            self.arrived.set()
            return session.SENT

        self.session = session.Session(broker, send_now=send_now)
        self.seq = 0

    async def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        """One request as a socket delivers it (msgpack-decoded); its reply."""
        self.seq += 1
        rid = str(self.seq)
        payload = MSGPACK.encode({**msg, "reqId": rid})
        self.replies.clear()
        await self.session.handle([(MSGPACK.decode(payload), len(payload), None)])
        # bounded: a reply comes in the same call, or after the writer task's commit
        with trio.move_on_after(60):
            while True:
                for reply in self.replies:
                    if reply.get("reqId") == rid:
                        if reply.get("ok") is not True:
                            raise RuntimeError(f"{msg['cmd']}: {reply}")
                        return reply
                self.arrived = trio.Event()
                await self.arrived.wait()
        raise RuntimeError(f"no reply to {msg['cmd']} within 60 s")

    async def push(self, n: int) -> None:
        for start in range(0, n, 1000):
            jobs = [{"name": "scale", "data": {"i": start + k}}
                    for k in range(min(1000, n - start))]
            await self.call({"cmd": "PUSHB", "queue": QUEUE, "jobs": jobs})

    async def pull_ack(self, n: int) -> None:
        done = 0
        while done < n:
            got = await self.call({"cmd": "PULLB", "queue": QUEUE, "count": 1000,
                                   "timeout": 0, "owner": "w", "lockTtl": 30_000})
            jobs = got["jobs"]
            if not jobs:
                break
            await self.call({"cmd": "ACKB", "ids": [j["id"] for j in jobs],
                             "tokens": got["tokens"]})
            done += len(jobs)


def show(stage: str, broker: Broker, base: dict[str, int], n_live: int) -> dict[str, int]:
    gc.collect()
    status = proc_status()
    traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
    per_job = ""
    if n_live:
        anon = (status["RssAnon"] - base["RssAnon"]) / n_live
        per_job = f"  ({anon:,.0f} B anon/job" + (
            f", {(traced - base['traced']) / n_live:,.0f} B traced/job)" if traced else ")")
    print(f"{stage:28s} RssAnon {status['RssAnon'] / 1e6:8.1f} MB  RssFile "
          f"{status['RssFile'] / 1e6:7.1f} MB  traced {traced / 1e6:8.1f} MB  "
          f"gc objects {len(gc.get_objects()):>9,}{per_job}", flush=True)
    counts = {k: v for k, v in structures(broker).items() if v}
    print("    " + ", ".join(f"{k} {v:,}" for k, v in counts.items()), flush=True)
    return {**status, "traced": traced}


def top_lines(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, key: str,
              top: int, per: int = 0) -> None:
    stats = after.compare_to(before, key)
    shown = 0
    for stat in stats:
        if stat.size_diff <= 0:
            continue
        frames = stat.traceback.format(limit=6 if key == "traceback" else 1)
        where = " <- ".join(line.strip() for line in frames if line.strip()
                            and not line.startswith("    "))
        extra = f"  {stat.size_diff / per:7.1f} B/job" if per else ""
        print(f"  {stat.size_diff / 1e6:9.2f} MB  {stat.count_diff:>+10,} blocks{extra}  "
              f"{where}")
        shown += 1
        if shown >= top:
            break


async def run(args: argparse.Namespace) -> None:
    config = Config(data_dir=tempfile.mkdtemp(prefix="mem-scale-"), fsync="never")
    broker = Broker(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        driver = Driver(broker)
        await driver.call({"cmd": "GetJobCounts", "queue": QUEUE})
        await driver.push(1000)  # warm the paths once, then an empty queue
        await driver.call({"cmd": "Drain", "queue": QUEUE})
        await trio.sleep(0.05)
        if args.tracemalloc:
            tracemalloc.start(args.frames)
        base = show("idle", broker, {"RssAnon": 0, "traced": 0}, 0)
        snap_idle = tracemalloc.take_snapshot() if args.tracemalloc else None
        snaps: list[tracemalloc.Snapshot] = []
        for cycle in range(1, args.cycles + 1):
            t0 = time.perf_counter()
            await driver.push(args.jobs)
            pushed_s = time.perf_counter() - t0
            show(f"cycle {cycle}: {args.jobs:,} pushed", broker, base, args.jobs)
            if cycle == 1 and snap_idle is not None:
                full = tracemalloc.take_snapshot()
                print(f"  where the {args.jobs:,} live jobs' bytes were allocated (by line):")
                top_lines(snap_idle, full, "lineno", args.top, per=args.jobs)
                del full
            t0 = time.perf_counter()
            if args.remove == "drain":
                await driver.call({"cmd": "Drain", "queue": QUEUE})
            else:
                await driver.pull_ack(args.jobs)
            removed_s = time.perf_counter() - t0
            if args.shrink:
                # What a bulk removal that resized its dicts would keep: a dict never
                # gives back the table of its deleted keys.
                actor = broker.router.actors[QUEUE]
                actor.state.jobs = dict(actor.state.jobs)
                broker.router._index = dict(broker.router._index)
            if args.trim:
                t1 = time.perf_counter()
                malloc_trim()
                print(f"    malloc_trim(0) took {(time.perf_counter() - t1) * 1000:.1f} ms")
            show(f"cycle {cycle}: removed ({pushed_s:.1f}+{removed_s:.1f}s)", broker, base, 0)
            if args.tracemalloc:
                snaps.append(tracemalloc.take_snapshot())
        if len(snaps) >= 2:
            print(f"grew between the end of cycle 1 and the end of cycle {args.cycles} "
                  "(by traceback):")
            top_lines(snaps[0], snaps[-1], "traceback", args.top)
        if snap_idle is not None and snaps:
            print("held after the last cycle compared with idle (by line):")
            top_lines(snap_idle, snaps[-1], "lineno", args.top)
        nursery.cancel_scope.cancel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=200_000)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--remove", choices=("drain", "pull-ack"), default="drain")
    ap.add_argument("--tracemalloc", action="store_true")
    ap.add_argument("--frames", type=int, default=8, help="tracemalloc traceback depth")
    ap.add_argument("--trim", action="store_true", help="malloc_trim(0) after each removal")
    ap.add_argument("--shrink", action="store_true",
                    help="after each removal, copy the queue's and the router's job dicts "
                    "into right-sized ones (what a shrinking bulk removal would keep)")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    trio.run(run, args)


if __name__ == "__main__":
    main()
