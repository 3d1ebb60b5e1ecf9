#!/usr/bin/env python3
"""trioqueue beside the Python queues a user would pick instead: RQ, arq and saq.

Each library enqueues ``--n`` no-op jobs one at a time, then its own worker processes
them with concurrency ``--concurrency`` (RQ: that many ``SimpleWorker`` processes, as
an RQ worker runs one job at a time; arq: ``max_jobs``; saq: ``concurrency``;
trioqueue: ``Worker(concurrency=...)``). Each phase is bounded by ``--time-limit-s``.
RQ, arq and saq run against a local ``redis-server`` the script starts on a free
loopback port (Debian package ``redis-server``; persistence off, as their benchmarks
are usually run), trioqueue against a ``trioqueue serve`` it starts (LMDB, fsync
``interval``: every acknowledgement committed). Everything started is stopped.

Usage:
    python scripts/bench_python_queues.py [--n 20000] [--concurrency 10]
        [--libraries rq,arq,saq,trioqueue] [--json out.json]

Needs: pip install rq arq saq (plus trioqueue); apt-get install redis-server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

perf = time.perf_counter
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # RQ imports noop by name


def noop(i: int = 0) -> int:
    """The job every library runs."""
    return i


async def anoop(ctx: Any, i: int = 0) -> int:
    return i


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


# --------------------------------------------------------------------------- RQ


def _rq_worker(url: str, queue: str) -> None:
    from redis import Redis
    from rq import Queue, SimpleWorker

    conn = Redis.from_url(url)
    SimpleWorker([Queue(queue, connection=conn)], connection=conn).work(burst=True)


def run_rq(url: str, n: int, concurrency: int, limit_s: float) -> dict[str, float]:
    from redis import Redis
    from rq import Queue

    conn = Redis.from_url(url)
    conn.flushall()
    queue = Queue("bench", connection=conn)
    t0 = perf()
    for i in range(n):
        # by name: RQ's workers import the function, which __main__ cannot give them
        queue.enqueue("bench_python_queues.noop", i)
        if perf() - t0 > limit_s:
            n = i + 1
            break
    enqueue = n / (perf() - t0)
    t0 = perf()
    procs = [multiprocessing.Process(target=_rq_worker, args=(url, "bench"))
             for _ in range(concurrency)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=max(limit_s - (perf() - t0), 0.1))
    elapsed = perf() - t0
    done = n - len(queue)
    for proc in procs:
        proc.kill()
    return {"jobs": n, "enqueue_per_s": enqueue, "processed": done,
            "process_per_s": done / elapsed}


# --------------------------------------------------------------------------- arq


def run_arq(url: str, n: int, concurrency: int, limit_s: float) -> dict[str, float]:
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker

    settings = RedisSettings.from_dsn(url)

    async def main() -> dict[str, float]:
        pool = await create_pool(settings)
        await pool.flushall()
        t0 = perf()
        count = n
        for i in range(n):
            await pool.enqueue_job("anoop", i)
            if perf() - t0 > limit_s:
                count = i + 1
                break
        enqueue = count / (perf() - t0)
        worker = Worker(functions=[anoop], redis_settings=settings, burst=True,
                        max_jobs=concurrency, poll_delay=0.01, keep_result=0,
                        handle_signals=False)
        t0 = perf()
        try:
            await asyncio.wait_for(worker.async_run(), timeout=limit_s)
        except TimeoutError:
            pass
        elapsed = perf() - t0
        done = worker.jobs_complete
        await worker.close()
        await pool.aclose()
        return {"jobs": count, "enqueue_per_s": enqueue, "processed": done,
                "process_per_s": done / elapsed}

    return asyncio.run(main())


# --------------------------------------------------------------------------- saq


def run_saq(url: str, n: int, concurrency: int, limit_s: float) -> dict[str, float]:
    from saq import Queue, Worker

    async def main() -> dict[str, float]:
        queue = Queue.from_url(url)
        await queue.connect()
        await queue.redis.flushall()
        t0 = perf()
        count = n
        for i in range(n):
            await queue.enqueue("anoop", i=i)
            if perf() - t0 > limit_s:
                count = i + 1
                break
        enqueue = count / (perf() - t0)
        done = 0
        finished = asyncio.Event()

        async def counted(ctx: Any, *, i: int = 0) -> int:
            nonlocal done
            done += 1
            if done >= count:
                finished.set()
            return i

        counted.__qualname__ = counted.__name__ = "anoop"
        worker = Worker(queue, functions=[counted], concurrency=concurrency,
                        dequeue_timeout=0.01)
        t0 = perf()
        task = asyncio.create_task(worker.start())
        try:
            await asyncio.wait_for(finished.wait(), timeout=limit_s)
        except TimeoutError:
            pass
        elapsed = perf() - t0
        await worker.stop()
        task.cancel()
        await queue.disconnect()
        return {"jobs": count, "enqueue_per_s": enqueue, "processed": done,
                "process_per_s": done / elapsed}

    return asyncio.run(main())


# --------------------------------------------------------------------------- trioqueue


def run_trioqueue(port: int, n: int, concurrency: int, limit_s: float) -> dict[str, float]:
    import trio

    from trioqueue.client import Queue, Worker, open_connection

    async def main() -> dict[str, float]:
        async with open_connection(port=port) as conn:
            queue = Queue("bench", conn)
            await queue.obliterate()
            t0 = perf()
            count = n
            for i in range(n):
                await queue.add("noop", i)
                if perf() - t0 > limit_s:
                    count = i + 1
                    break
            enqueue = count / (perf() - t0)
            done = 0
            finished = trio.Event()

            async def processor(job: Any) -> Any:
                return job.data

            def on_completed(job: Any, result: Any) -> None:
                nonlocal done
                done += 1
                if done >= count:
                    finished.set()

            worker = Worker("bench", processor, conn, concurrency=concurrency)
            worker.on("completed", on_completed)
            t0 = perf()
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                with trio.move_on_after(limit_s):
                    await finished.wait()
                elapsed = perf() - t0
                await worker.close(timeout=5)
            return {"jobs": count, "enqueue_per_s": enqueue, "processed": done,
                    "process_per_s": done / elapsed}

    return trio.run(main)


# --------------------------------------------------------------------------- plot


def plot(results: dict[str, dict[str, float]], path: str, n: int, concurrency: int) -> None:
    """Two groups of bars (enqueue, process) per library; needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    libs = [lib for lib, r in results.items() if "error" not in r]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.38
    for k, (key, label) in enumerate((("enqueue_per_s", "enqueue, one at a time"),
                                      ("process_per_s", f"process, concurrency {concurrency}"))):
        values = [results[lib][key] for lib in libs]
        bars = ax.bar([i + (k - 0.5) * width for i in range(len(libs))], values, width,
                      label=label)
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=7)
    ax.set_xticks(range(len(libs)), libs)
    ax.set_ylabel("jobs/s")
    ax.set_title(f"{n:,} no-op jobs (higher is better)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --------------------------------------------------------------------------- driver


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--time-limit-s", type=float, default=60.0)
    ap.add_argument("--libraries", default="rq,arq,saq,trioqueue")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--plot", metavar="PNG", help="draw the table as a bar chart here")
    args = ap.parse_args()
    libraries = [lib.strip() for lib in args.libraries.split(",") if lib.strip()]
    results: dict[str, dict[str, float]] = {}
    workdir = tempfile.mkdtemp(prefix="bench-pyq-")
    started: list[subprocess.Popen[bytes]] = []
    try:
        redis_port = free_port()
        if any(lib != "trioqueue" for lib in libraries):
            server = shutil.which("redis-server")
            if server is None:
                print("redis-server not found (apt-get install redis-server)", file=sys.stderr)
                return 2
            started.append(subprocess.Popen(
                [server, "--bind", "127.0.0.1", "--port", str(redis_port), "--save", "",
                 "--appendonly", "no", "--dir", workdir],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_port(redis_port)
        url = f"redis://127.0.0.1:{redis_port}/0"
        tq_port = free_port()
        if "trioqueue" in libraries:
            started.append(subprocess.Popen(
                [sys.executable, "-m", "trioqueue", "serve", "--host", "127.0.0.1",
                 "--tcp-port", str(tq_port), "--ws-port", str(free_port()),
                 "--data-dir", os.path.join(workdir, "tq")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_port(tq_port)
        runners: dict[str, Callable[[], dict[str, float]]] = {
            "rq": lambda: run_rq(url, args.n, args.concurrency, args.time_limit_s),
            "arq": lambda: run_arq(url, args.n, args.concurrency, args.time_limit_s),
            "saq": lambda: run_saq(url, args.n, args.concurrency, args.time_limit_s),
            "trioqueue": lambda: run_trioqueue(tq_port, args.n, args.concurrency,
                                               args.time_limit_s),
        }
        for lib in libraries:
            try:
                results[lib] = runners[lib]()
            except Exception as exc:  # noqa: BLE001 - one library must not stop the rest
                results[lib] = {"error": f"{type(exc).__name__}: {exc}"}  # type: ignore[dict-item]
            print(lib, results[lib], flush=True)
    finally:
        for proc in started:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    fastest = max((r.get("process_per_s", 0.0) for lib, r in results.items()
                   if lib != "trioqueue"), default=0.0)
    print(f"\n{'library':<10} {'jobs':>7} {'enqueue/s':>10} {'processed':>10} {'process/s':>10}")
    for lib, r in results.items():
        if "error" in r:
            print(f"{lib:<10} error: {r['error']}")
            continue
        print(f"{lib:<10} {r['jobs']:>7.0f} {r['enqueue_per_s']:>10,.0f} "
              f"{r['processed']:>10.0f} {r['process_per_s']:>10,.0f}")
    tq = results.get("trioqueue", {}).get("process_per_s")
    if tq and fastest:
        print(f"\ntrioqueue processes {tq / fastest:.1f}x the fastest of the others")
    if args.plot:
        plot(results, args.plot, args.n, args.concurrency)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"n": args.n, "concurrency": args.concurrency, "results": results},
                      out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
