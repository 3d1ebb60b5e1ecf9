#!/usr/bin/env python3
"""trioqueue beside the Python queues a user would pick instead: RQ, arq and saq.

Each library enqueues ``--n`` no-op jobs one at a time, then its own worker processes
them with concurrency ``--concurrency`` (RQ: that many ``SimpleWorker`` processes, as
an RQ worker runs one job at a time; arq: ``max_jobs``; saq: ``concurrency``;
trioqueue: ``Worker(concurrency=...)``, on trio, and as ``trioqueue-asyncio`` the same
client code on asyncio). Each phase is bounded by ``--time-limit-s``.
This is repeated ``--repeat`` times, one round over every library at a time (so a
slow spell of the machine hits all of them alike), each run on fresh state: Redis
flushed, a new trioqueue queue (the previous one obliterated). The table shows the
median and [min-max] of the runs; the ratio line compares medians, and a second line
compares trioqueue's slowest run with the fastest median of the others.

RQ, arq and saq run against a local ``redis-server`` the script starts on a free
loopback port (persistence off, as their benchmarks are usually run), trioqueue
against a ``trioqueue serve`` it starts (LMDB, fsync ``interval``: every
acknowledgement committed). Everything started is stopped, also on Ctrl-C, SIGTERM
or an error.

When no redis-server can be had (none on PATH, and ``--no-install`` or no way to
install one), RQ, arq and saq are skipped with a line saying so, and trioqueue's row
is still measured (status 2 when nothing is left to run).

What it installs, unless ``--no-install``:
    * ``redis-server`` from Debian's packages (``apt-get install -y redis-server``,
      after ``apt-get update`` if the first attempt fails; through ``sudo`` when not
      root), when it is not on PATH and RQ, arq or saq is asked for;
    * ``rq==3.0.0``, ``arq==0.28.0``, ``saq[redis]==0.26.4`` (the ones asked for that cannot
      be imported) with ``sys.executable -m pip install``.
It exits with status 2 when something needed cannot be installed, 1 when a run
failed, 0 otherwise.

Usage:
    python scripts/bench_python_queues.py [--n 20000] [--concurrency 10] [--repeat 3]
        [--libraries rq,arq,saq,trioqueue,trioqueue-asyncio] [--time-limit-s 60]
        [--json out.json]
        [--plot out.png] [--no-install]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import json
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

perf = time.perf_counter
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # RQ imports noop by name

LIBRARIES: tuple[str, ...] = ("rq", "arq", "saq", "trioqueue", "trioqueue-asyncio")
# trioqueue's client on both of its backends (the same code; asyncio through anyio).
TRIOQUEUE_ROWS: frozenset[str] = frozenset({"trioqueue", "trioqueue-asyncio"})
# The versions docs/benchmarks.md was measured with.
PINNED: dict[str, str] = {"rq": "rq==3.0.0", "arq": "arq==0.28.0",
                          "saq": "saq[redis]==0.26.4"}  # saq needs its redis extra
INSTALL_TIMEOUT_S = 900.0

Run = dict[str, Any]


def noop(i: int = 0) -> int:
    """The job every library runs."""
    return i


async def anoop(ctx: Any, i: int = 0) -> int:
    return i


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server meant for port {port} exited with status "
                               f"{proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


async def enqueue_one_at_a_time(add: Callable[[int], Awaitable[Any]], n: int,
                                limit_s: float) -> tuple[int, float]:
    """Await ``add(i)`` for i < n, stopping at the time limit: (jobs added, jobs/s)."""
    t0 = perf()
    count = n
    for i in range(n):
        await add(i)
        if perf() - t0 > limit_s:
            count = i + 1
            break
    return count, count / (perf() - t0)


# --------------------------------------------------------------------------- installation


class SetupError(Exception):
    """Something the benchmark needs is missing and cannot be installed (exit status 2)."""


def _run_install(cmd: list[str]) -> bool:
    """Run an install command, its output shown; True when it succeeded in time."""
    try:
        return subprocess.run(cmd, timeout=INSTALL_TIMEOUT_S, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _as_root(cmd: list[str]) -> list[str] | None:
    """``cmd`` as root: as is when we are root, through sudo when there is one, else None."""
    if os.geteuid() == 0:
        return cmd
    sudo = shutil.which("sudo")
    return [sudo, *cmd] if sudo else None


def ensure_redis_server(no_install: bool,
                        run: Callable[[list[str]], bool] = _run_install) -> str:
    """The path of ``redis-server``, installed from Debian's packages when missing."""
    found = shutil.which("redis-server")
    if found:
        return found
    if no_install:
        raise SetupError("redis-server is not on PATH (Debian: apt-get install redis-server) "
                         "and --no-install forbids installing it")
    if shutil.which("apt-get") is None:
        raise SetupError("redis-server is not on PATH and there is no apt-get to install it")
    # sudo drops the environment, so the variable goes through env(1) in both cases.
    install = _as_root(["env", "DEBIAN_FRONTEND=noninteractive",
                        "apt-get", "install", "-y", "redis-server"])
    update = _as_root(["apt-get", "update"])
    if install is None or update is None:
        raise SetupError("redis-server is not on PATH; installing it needs root "
                         "(run as root, or install sudo)")
    print(f"installing redis-server (Debian package): {' '.join(install)}", flush=True)
    if not run(install):
        # A fresh container's package lists are often empty or stale.
        print("apt-get install failed; running apt-get update and trying again", flush=True)
        if not (run(update) and run(install)):
            raise SetupError("apt-get could not install redis-server (see its output above)")
    found = shutil.which("redis-server")
    if not found:
        raise SetupError("apt-get installed redis-server, but it is not on PATH")
    return found


def _import_error(module: str) -> str | None:
    """None when ``module`` imports, else why not."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - a broken install is as unusable as a missing one
        return f"{type(exc).__name__}: {exc}"
    return None


def ensure_python_libraries(libraries: Sequence[str], no_install: bool,
                            run: Callable[[list[str]], bool] = _run_install) -> None:
    """pip-install the pinned RQ / arq / saq among ``libraries`` that cannot be imported."""
    missing = [lib for lib in libraries if lib in PINNED and _import_error(lib)]
    if not missing:
        return
    specs = [PINNED[lib] for lib in missing]
    if no_install:
        raise SetupError(f"cannot import {', '.join(missing)} (pip install {' '.join(specs)}) "
                         "and --no-install forbids installing them")
    print(f"installing {' '.join(specs)} into {sys.executable} with pip", flush=True)
    if not run([sys.executable, "-m", "pip", "install", *specs]):
        raise SetupError(f"pip could not install {' '.join(specs)} (see its output above; "
                         "an externally managed Python needs a virtualenv)")
    importlib.invalidate_caches()  # the import system caches directory listings
    still = {lib: err for lib in missing if (err := _import_error(lib))}
    if still:
        raise SetupError(f"installed, yet still cannot import: {still}")


def prepare(libraries: Sequence[str], no_install: bool) -> tuple[list[str], str | None]:
    """Install what ``libraries`` need: the libraries that can run, and the path of
    redis-server when one is needed. Without a redis-server (none on PATH, and none
    may or can be installed) RQ, arq and saq are skipped, with a line saying so; a
    SetupError only when nothing is left to run."""
    kept = list(libraries)
    server = None
    needs_redis = [lib for lib in kept if lib not in TRIOQUEUE_ROWS]
    if needs_redis:
        try:
            server = ensure_redis_server(no_install)
        except SetupError as exc:
            kept = [lib for lib in kept if lib in TRIOQUEUE_ROWS]
            if not kept:
                raise
            print(f"bench_python_queues: {exc}: skipping {', '.join(needs_redis)} (they "
                  "need a local redis-server)", file=sys.stderr, flush=True)
    ensure_python_libraries(kept, no_install)
    return kept, server


def library_versions(libraries: Sequence[str]) -> dict[str, str]:
    versions: dict[str, str] = {}
    for lib in libraries:
        try:
            versions[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            versions[lib] = "?"
    return versions


# --------------------------------------------------------------------------- RQ


def _rq_worker(url: str, queue: str) -> None:
    from redis import Redis
    from rq import Queue, SimpleWorker

    conn = Redis.from_url(url)
    # RQ's default (INFO) writes three lines to the terminal per job: nobody measures
    # a queue that way, and at 20,000 jobs it buries the table.
    SimpleWorker([Queue(queue, connection=conn)], connection=conn).work(
        burst=True, logging_level="WARNING")


def run_rq(url: str, n: int, concurrency: int, limit_s: float) -> Run:
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
    procs = [multiprocessing.Process(target=_rq_worker, args=(url, "bench"))
             for _ in range(concurrency)]
    t0 = perf()
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=max(limit_s - (perf() - t0), 0.1))
        elapsed = perf() - t0
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
    # Finished, not merely taken off the queue: a worker stopped by the time limit
    # may hold a job it never ran.
    done = len(queue.finished_job_registry)
    return {"jobs": n, "enqueue_per_s": enqueue, "processed": done,
            "process_per_s": done / elapsed}


# --------------------------------------------------------------------------- arq


def run_arq(url: str, n: int, concurrency: int, limit_s: float) -> Run:
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker

    settings = RedisSettings.from_dsn(url)

    async def main() -> Run:
        pool = await create_pool(settings)
        await pool.flushall()
        count, enqueue = await enqueue_one_at_a_time(
            lambda i: pool.enqueue_job("anoop", i), n, limit_s)
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


def run_saq(url: str, n: int, concurrency: int, limit_s: float) -> Run:
    from saq import Queue, Worker

    async def main() -> Run:
        queue = Queue.from_url(url)
        await queue.connect()
        await queue.redis.flushall()
        count, enqueue = await enqueue_one_at_a_time(
            lambda i: queue.enqueue("anoop", i=i), n, limit_s)
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


def run_trioqueue(port: int, queue_name: str, n: int, concurrency: int,
                  limit_s: float, backend: str = "trio",
                  reply_poll_ms: float | None = None) -> Run:
    """trioqueue's client on ``backend`` ("trio" or "asyncio"), the same code on both
    (anyio): the issue asks for each backend's own figure."""
    import anyio

    from trioqueue.client import Queue, Worker, open_connection

    async def main() -> Run:
        options = {} if reply_poll_ms is None else {"reply_poll_ms": reply_poll_ms}
        async with open_connection(port=port, **options) as conn:
            queue = Queue(queue_name, conn)
            count, enqueue = await enqueue_one_at_a_time(
                lambda i: queue.add("noop", i), n, limit_s)
            done = 0
            finished = anyio.Event()

            async def processor(job: Any) -> Any:
                return job.data

            def on_completed(job: Any, result: Any) -> None:
                nonlocal done
                done += 1
                if done >= count:
                    finished.set()

            worker = Worker(queue_name, processor, conn, concurrency=concurrency)
            worker.on("completed", on_completed)
            t0 = perf()
            async with anyio.create_task_group() as group:
                await group.start(worker.run)
                with anyio.move_on_after(limit_s):
                    await finished.wait()
                elapsed = perf() - t0
                await worker.close(timeout=5)
            # Untimed: the next run should not share a store full of this run's jobs.
            await queue.obliterate()
            return {"jobs": count, "enqueue_per_s": enqueue, "processed": done,
                    "process_per_s": done / elapsed}

    return anyio.run(main, backend=backend)


# --------------------------------------------------------------------------- servers


def start_redis(server: str, workdir: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
         "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port


def start_trioqueue(workdir: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trioqueue", "serve", "--host", "127.0.0.1",
         "--tcp-port", str(port), "--ws-port", str(free_port()),
         "--data-dir", os.path.join(workdir, "tq")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port


def stop_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    # Signal every process before waiting for any: one slow to exit (or a second
    # Ctrl-C during its wait) must not leave the others unsignalled.
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    # An exception, so the finally blocks stop the servers and workers we started.
    raise SystemExit(128 + signum)


def measure(args: argparse.Namespace, libraries: Sequence[str],
            redis_server: str | None) -> list[Run]:
    """Every run of every library, on servers started here and stopped on the way out."""
    workdir = tempfile.mkdtemp(prefix="bench-pyq-")
    started: list[subprocess.Popen[bytes]] = []
    try:
        url, tq_port = "", 0
        if redis_server is not None:
            proc, redis_port = start_redis(redis_server, workdir)
            started.append(proc)
            wait_port(redis_port, proc)
            url = f"redis://127.0.0.1:{redis_port}/0"
        if TRIOQUEUE_ROWS & set(libraries):
            proc, tq_port = start_trioqueue(workdir)
            started.append(proc)
            wait_port(tq_port, proc)
        runs: list[Run] = []
        for run in range(args.repeat):
            for lib in libraries:
                try:
                    result = run_library(lib, run, url, tq_port, args)
                except Exception as exc:  # noqa: BLE001 - one library must not stop the rest
                    result = {"error": f"{type(exc).__name__}: {exc}"}
                runs.append({"library": lib, "run": run, **result})
                print(f"  {lib} #{run + 1}: {_run_line(result)}", flush=True)
        return runs
    finally:
        stop_all(started)
        shutil.rmtree(workdir, ignore_errors=True)


def run_library(lib: str, run: int, redis_url: str, tq_port: int,
                args: argparse.Namespace) -> Run:
    n, conc, limit = args.n, args.concurrency, args.time_limit_s
    if lib in TRIOQUEUE_ROWS:
        backend = "asyncio" if lib == "trioqueue-asyncio" else "trio"
        return run_trioqueue(tq_port, f"bench-{lib}-{run}", n, conc, limit, backend,
                             args.reply_poll_ms)
    runner = {"rq": run_rq, "arq": run_arq, "saq": run_saq}[lib]
    return runner(redis_url, n, conc, limit)


def _run_line(result: Run) -> str:
    if "error" in result:
        return f"error: {result['error']}"
    return (f"{result['jobs']} enqueued at {result['enqueue_per_s']:,.0f}/s, "
            f"{result['processed']} processed at {result['process_per_s']:,.0f}/s")


# --------------------------------------------------------------------------- summary


def summarize(libraries: Sequence[str], runs: Sequence[Run]) -> dict[str, dict[str, Any]]:
    """Per library: median, min and max of each measure over its successful runs."""
    summary: dict[str, dict[str, Any]] = {}
    for lib in libraries:
        mine = [r for r in runs if r["library"] == lib]
        ok = [r for r in mine if "error" not in r]
        failed = [r["error"] for r in mine if "error" in r]
        entry: dict[str, Any] = {"runs": len(ok), "failed_runs": len(failed),
                                 "first_error": failed[0] if failed else None}
        for key in ("jobs", "processed", "enqueue_per_s", "process_per_s"):
            values = [float(r[key]) for r in ok]
            if values:
                entry[f"{key}_median"] = statistics.median(values)
                entry[f"{key}_min"] = min(values)
                entry[f"{key}_max"] = max(values)
        summary[lib] = entry
    return summary


def ratios(summary: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """trioqueue's processing rate over the fastest other library's median, if any."""
    tq = summary.get("trioqueue", {})
    others = {lib: s for lib, s in summary.items() if lib not in TRIOQUEUE_ROWS and s["runs"]}
    if not tq.get("runs") or not others:
        return None
    best = max(others, key=lambda lib: others[lib]["process_per_s_median"])
    best_median = others[best]["process_per_s_median"]
    if best_median <= 0:
        return None
    return {"fastest_other": best, "fastest_other_median": best_median,
            "median_ratio": tq["process_per_s_median"] / best_median,
            "worst_run_ratio": tq["process_per_s_min"] / best_median}


def _spread(entry: dict[str, Any], key: str) -> str:
    """Median, followed by [min-max] when the runs differ."""
    med, lo, hi = (f"{entry[f'{key}_{k}']:,.0f}" for k in ("median", "min", "max"))
    return med if lo == hi else f"{med} [{lo}-{hi}]"


def table(summary: dict[str, dict[str, Any]], repeat: int) -> str:
    header = ("library", "runs", "jobs", "enqueue/s", "processed", "process/s")
    lines: list[tuple[str, ...]] = [header]
    errors: list[str] = []
    for lib, s in summary.items():
        if s["failed_runs"]:
            errors.append(f"{lib}: {s['failed_runs']} failed run(s), first: {s['first_error']}")
        if not s["runs"]:
            lines.append((lib, f"0/{repeat}", "-", "-", "-", "-"))
            continue
        lines.append((lib, f"{s['runs']}/{repeat}", _spread(s, "jobs"),
                      _spread(s, "enqueue_per_s"), _spread(s, "processed"),
                      _spread(s, "process_per_s")))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [f"median [min-max] over {repeat} run(s)"]
    for k, line in enumerate(lines):
        out.append("  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
                             for i, cell in enumerate(line)))
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out + errors)


# --------------------------------------------------------------------------- plot


def plot(summary: dict[str, dict[str, Any]], path: str, n: int, concurrency: int,
         repeat: int) -> None:
    """Two groups of bars (enqueue, process) per library: medians, min-max error bars;
    needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    libs = [lib for lib, s in summary.items() if s["runs"]]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.38
    for k, (key, label) in enumerate((("enqueue_per_s", "enqueue, one at a time"),
                                      ("process_per_s", f"process, concurrency {concurrency}"))):
        medians = [summary[lib][f"{key}_median"] for lib in libs]
        below = [m - summary[lib][f"{key}_min"] for lib, m in zip(libs, medians, strict=True)]
        above = [summary[lib][f"{key}_max"] - m for lib, m in zip(libs, medians, strict=True)]
        bars = ax.bar([i + (k - 0.5) * width for i in range(len(libs))], medians, width,
                      yerr=[below, above], capsize=3, label=label)
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in medians], fontsize=7)
    ax.set_xticks(range(len(libs)), libs)
    ax.set_ylabel("jobs/s")
    ax.set_title(f"{n:,} no-op jobs, median of {repeat} run(s), min-max bars "
                 "(higher is better)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- driver


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000, help="jobs per run")
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3, help="runs per library")
    ap.add_argument("--time-limit-s", type=float, default=60.0,
                    help="cap on each phase (enqueue, process) of a run")
    ap.add_argument("--libraries", default=",".join(LIBRARIES))
    ap.add_argument("--reply-poll-ms", type=float, default=None,
                    help="trioqueue's client reply_poll_ms (default: the client's own)")
    ap.add_argument("--json", metavar="PATH", help="write every raw run and the summary here")
    ap.add_argument("--plot", metavar="PNG", help="draw the medians as a bar chart here")
    ap.add_argument("--no-install", action="store_true",
                    help="never install redis-server or rq/arq/saq; exit 2 if one is missing")
    args = ap.parse_args(argv)
    if args.n < 1 or args.repeat < 1 or args.concurrency < 1 or args.time_limit_s <= 0:
        ap.error("--n, --repeat and --concurrency must be >= 1 and --time-limit-s > 0")
    args.libraries = [lib.strip() for lib in args.libraries.split(",") if lib.strip()]
    unknown = [lib for lib in args.libraries if lib not in LIBRARIES]
    if unknown or not args.libraries:
        ap.error(f"unknown libraries {unknown}; choose from {', '.join(LIBRARIES)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    libraries: list[str] = args.libraries
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        libraries, redis_server = prepare(libraries, args.no_install)
    except SetupError as exc:
        print(f"bench_python_queues: {exc}", file=sys.stderr)
        return 2
    versions = library_versions(libraries)
    started_unix = time.time()
    print(f"n {args.n}  concurrency {args.concurrency}  repeat {args.repeat}  "
          f"time limit {args.time_limit_s:g}s/phase  "
          + "  ".join(f"{lib} {v}" for lib, v in versions.items()), flush=True)
    runs = measure(args, libraries, redis_server)
    summary = summarize(libraries, runs)
    print()
    print(table(summary, args.repeat))
    ratio = ratios(summary)
    if ratio:
        other = ratio["fastest_other"]
        print(f"\ntrioqueue processes {ratio['median_ratio']:.1f}x the fastest of the others "
              f"(medians: trioqueue {summary['trioqueue']['process_per_s_median']:,.0f}/s, "
              f"{other} {ratio['fastest_other_median']:,.0f}/s)")
        print(f"trioqueue's slowest run / {other}'s median: {ratio['worst_run_ratio']:.1f}x")
    if args.plot:
        plot(summary, args.plot, args.n, args.concurrency, args.repeat)
    if args.json:
        doc = {"n": args.n, "concurrency": args.concurrency, "repeat": args.repeat,
               "time_limit_s": args.time_limit_s, "libraries": libraries,
               "versions": versions, "python": sys.version.split()[0],
               "started_unix": started_unix, "runs": runs, "summary": summary,
               "ratios": ratio}
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(doc, out, indent=2)
    return 1 if any("error" in r for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
