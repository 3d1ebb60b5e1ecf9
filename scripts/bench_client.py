"""Rows of scripts/bench.py measured through trioqueue's Python client (trio).

Imported by bench.py only when a ``client_*`` row is asked for, so the broker rows keep
needing nothing but the standard library, msgpack and cbor2. Each row opens its own
``open_connection`` (``--codec`` decides CBOR or msgpack) and runs one ``trio.run``:

    client_add_seq          N/4 ``Queue.add``, one at a time (await each).
    client_add_bulk_1000    N jobs as ``Queue.add_bulk`` of 1000, one at a time.
    client_worker_c1        preload N/4 (untimed), then a ``Worker`` with concurrency 1
                            drains them with a no-op processor (until every completed
                            event arrived).
    client_worker_c10       the same with N jobs and concurrency 10.
    client_worker_c100      the same with N jobs and concurrency 100.
    client_wait_latency     a Worker (concurrency 10) runs; the producer adds one job
                            at a time and awaits ``wait_job_until_finished`` with a
                            QueueEvents; latency = add called -> result returned;
                            p50/p99 ms over --e2e-jobs jobs.

Every row is bounded by its job count and by --time-limit-s.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from trioqueue.client import Queue, QueueEvents, Worker, open_connection

perf = time.perf_counter

def _run(ctx: Any, res: Any, body: Callable[[Any], Awaitable[None]]) -> None:
    async def main() -> None:
        async with open_connection(ctx.host, ctx.port, token=ctx.auth_token,
                                   codec=ctx.codec) as conn:
            with trio.move_on_after(ctx.time_limit_s) as scope:
                await body(conn)
            if scope.cancelled_caught:
                res.stopped_by_time = True

    trio.run(main)


def row_client_add_seq(ctx: Any, q: str, res: Any) -> None:
    count = max(1, ctx.n // 4)
    res.expected_jobs = count

    async def body(conn: Any) -> None:
        queue = Queue(q, conn)
        t0 = perf()
        for i in range(count):
            await queue.add("bench", ctx.data(i))
            res.finish(i + 1, perf() - t0)

    _run(ctx, res, body)


def row_client_add_bulk_1000(ctx: Any, q: str, res: Any) -> None:
    count = ctx.n
    res.expected_jobs = count

    async def body(conn: Any) -> None:
        queue = Queue(q, conn)
        t0 = perf()
        for start in range(0, count, 1000):
            jobs = [{"name": "bench", "data": ctx.data(i)}
                    for i in range(start, min(count, start + 1000))]
            await queue.add_bulk(jobs)
            res.finish(start + len(jobs), perf() - t0)

    _run(ctx, res, body)


async def _preload(queue: Queue, ctx: Any, count: int, res: Any) -> None:
    t0 = perf()
    for start in range(0, count, 1000):
        await queue.add_bulk([{"name": "bench", "data": ctx.data(i)}
                              for i in range(start, min(count, start + 1000))])
    res.preloaded = count
    res.preload_seconds = perf() - t0


def _worker_row(ctx: Any, q: str, res: Any, concurrency: int, count: int) -> None:
    res.expected_jobs = count

    async def body(conn: Any) -> None:
        queue = Queue(q, conn)
        await _preload(queue, ctx, count, res)
        done = trio.Event()
        completed = 0
        t0 = perf()

        async def noop(job: Any) -> None:
            return None

        def on_completed(job: Any, result: Any) -> None:
            nonlocal completed
            completed += 1
            res.finish(completed, perf() - t0)
            if completed >= count:
                done.set()

        worker = Worker(q, noop, conn, concurrency=concurrency)
        worker.on("completed", on_completed)
        worker.on("error", lambda exc: res.fail(f"worker: {exc!r}"))
        async with trio.open_nursery() as nursery:
            t0 = perf()
            await nursery.start(worker.run)
            try:
                await done.wait()
            finally:
                with trio.CancelScope(shield=True):
                    await worker.close(timeout=5)

    _run(ctx, res, body)


def row_client_worker_c1(ctx: Any, q: str, res: Any) -> None:
    _worker_row(ctx, q, res, 1, max(1, ctx.n // 4))


def row_client_worker_c10(ctx: Any, q: str, res: Any) -> None:
    _worker_row(ctx, q, res, 10, ctx.n)


def row_client_worker_c100(ctx: Any, q: str, res: Any) -> None:
    _worker_row(ctx, q, res, 100, ctx.n)


def row_client_wait_latency(ctx: Any, q: str, res: Any) -> None:
    total = max(1, ctx.e2e_jobs)
    res.expected_jobs = total
    latencies: list[float] = []

    async def body(conn: Any) -> None:
        queue = Queue(q, conn)

        async def echo(job: Any) -> Any:
            return job.data

        worker = Worker(q, echo, conn, concurrency=10)
        async with QueueEvents(q, conn) as events, trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            t0 = perf()
            try:
                for i in range(total):
                    start = perf()
                    job = await queue.add("bench", ctx.data(i))
                    result = await queue.wait_job_until_finished(job.id, events, ttl=30)
                    latencies.append((perf() - start) * 1000.0)
                    if result != ctx.data(i):
                        res.insane(f"job {job.id} returned {result!r}")
                    res.finish(i + 1, perf() - t0)
            finally:
                with trio.CancelScope(shield=True):
                    await worker.close(timeout=5)

    try:
        _run(ctx, res, body)
    finally:
        if latencies:
            ordered = sorted(latencies)
            res.p50_ms = ordered[max(0, (len(ordered) + 1) // 2 - 1)]
            res.p99_ms = ordered[max(0, -(-99 * len(ordered) // 100) - 1)]


CLIENT_ROW_FUNCS: dict[str, Callable[[Any, str, Any], None]] = {
    "client_add_seq": row_client_add_seq,
    "client_add_bulk_1000": row_client_add_bulk_1000,
    "client_worker_c1": row_client_worker_c1,
    "client_worker_c10": row_client_worker_c10,
    "client_worker_c100": row_client_worker_c100,
    "client_wait_latency": row_client_wait_latency,
}

CLIENT_ROWS: tuple[str, ...] = tuple(CLIENT_ROW_FUNCS)


# ---------------------------------------------------------------------------------
# Standalone: the client on trio, on asyncio, and bunqueue's own Python client.
#
#   python scripts/bench_client.py [--n 5000] [--worker-n 20000] [--repeat 3]
#       [--target HOST:PORT] [--codec cbor|msgpack] [--time-limit-s 60] [--json out.json]
#
# Against one trioqueue broker (a `trioqueue serve` it starts on 127.0.0.1, LMDB in a
# temporary directory, fsync interval, unless --target names one), in rounds (every
# row once per round, so a slow spell of the shared machine hits all of them alike):
#
#   add_seq[trio|asyncio]   --n Queue.add one at a time (await each)
#   add_seq[bunqueue]       --n bunqueue-client Queue.add one at a time (it blocks)
#   worker_c10[trio|asyncio]  --worker-n jobs preloaded with add_bulk (untimed), then
#                           a Worker at concurrency 10 runs a no-op on each, until
#                           every "completed" event
#
# Each row is bounded by its count and by --time-limit-s. Printed: median [min-max]
# jobs/s per row, and the ratios the issue asks about (from the medians).
# ---------------------------------------------------------------------------------


def _add_seq_anyio(host: str, port: int, codec: str, queue_name: str, n: int,
                   limit_s: float, backend: str, reply_poll_ms: float | None = None
                   ) -> tuple[int, float, float]:
    """(adds, seconds, client CPU seconds): the CPU is this process's, what an
    application pays for its adds (``reply_poll_ms`` trades it for latency)."""
    import anyio

    options = {} if reply_poll_ms is None else {"reply_poll_ms": reply_poll_ms}

    async def main() -> tuple[int, float, float]:
        async with open_connection(host, port, codec=codec, **options) as conn:
            queue = Queue(queue_name, conn)
            done = 0
            t0, cpu0 = perf(), time.process_time()
            with anyio.move_on_after(limit_s):
                for i in range(n):
                    await queue.add("bench", {"i": i})
                    done += 1
            elapsed, cpu = perf() - t0, time.process_time() - cpu0
            await queue.obliterate()
            return done, elapsed, cpu

    result: tuple[int, float, float] = anyio.run(main, backend=backend)
    return result


def _add_seq_bunqueue(host: str, port: int, queue_name: str, n: int, limit_s: float
                      ) -> tuple[int, float, float]:
    from bunqueue import Queue as BunqueueQueue

    queue = BunqueueQueue(queue_name, host=host, port=port)
    done = 0
    t0, cpu0 = perf(), time.process_time()
    try:
        for i in range(n):
            queue.add("bench", {"i": i})
            done += 1
            if perf() - t0 > limit_s:
                break
        return done, perf() - t0, time.process_time() - cpu0
    finally:
        queue.close()


def _worker_anyio(host: str, port: int, codec: str, queue_name: str, n: int,
                  limit_s: float, backend: str, concurrency: int = 10) -> tuple[int, float]:
    import anyio

    async def main() -> tuple[int, float]:
        async with open_connection(host, port, codec=codec) as conn:
            queue = Queue(queue_name, conn)
            for start in range(0, n, 1000):
                await queue.add_bulk([{"name": "bench", "data": {"i": i}}
                                      for i in range(start, min(n, start + 1000))])
            all_done = anyio.Event()
            completed = 0

            async def noop(job: Any) -> None:
                return None

            def on_completed(job: Any, result: Any) -> None:
                nonlocal completed
                completed += 1
                if completed >= n:
                    all_done.set()

            worker = Worker(queue_name, noop, conn, concurrency=concurrency)
            worker.on("completed", on_completed)
            async with anyio.create_task_group() as tasks:
                t0 = perf()
                await tasks.start(worker.run)
                with anyio.move_on_after(limit_s):
                    await all_done.wait()
                elapsed = perf() - t0
                await worker.close(timeout=5)
            await queue.obliterate()
            return completed, elapsed

    result: tuple[int, float] = anyio.run(main, backend=backend)
    return result


def _start_broker() -> tuple[Any, int, str]:
    import socket
    import subprocess
    import sys
    import tempfile

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    data = tempfile.mkdtemp(prefix="bench-client-")
    process = subprocess.Popen(
        [sys.executable, "-m", "trioqueue", "serve", "--host", "127.0.0.1", "--tcp-port",
         str(port), "--ws-port", "0", "--data-dir", data, "--log-level", "warning"])
    deadline = perf() + 30
    while perf() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port, data
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit("the broker did not start")


def _summary(runs: list[tuple[float, ...]]) -> tuple[float, float, float]:
    import statistics

    rates = [run[0] / run[1] for run in runs if run[1] > 0]
    return statistics.median(rates), min(rates), max(rates)


def _cpu_us(runs: list[tuple[float, ...]]) -> str:
    """The median client CPU per add, for rows that measured it."""
    import statistics

    per_add = [run[2] / run[0] * 1e6 for run in runs if len(run) > 2 and run[0]]
    return f"  client CPU {statistics.median(per_add):,.0f} us/add" if per_add else ""


def compare(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import shutil

    parser = argparse.ArgumentParser(description="trioqueue's client on trio and asyncio "
                                                 "beside bunqueue-client, one broker")
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--worker-n", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--target", default=None)
    parser.add_argument("--codec", choices=("cbor", "msgpack"), default="cbor")
    parser.add_argument("--time-limit-s", type=float, default=60.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--rows", choices=("all", "add", "worker"), default="all")
    parser.add_argument("--reply-poll-ms", default=None,
                        help="comma-separated reply_poll_ms values: an add_seq row per "
                             "value and backend (default: the client's own only)")
    args = parser.parse_args(argv)
    polls: list[float | None] = ([float(v) for v in args.reply_poll_ms.split(",")]
                                 if args.reply_poll_ms else [None])
    process = data = None
    if args.target:
        host, _, port_text = args.target.rpartition(":")
        port = int(port_text)
    else:
        process, port, data = _start_broker()
        host = "127.0.0.1"
    rows: dict[str, list[tuple[float, ...]]] = {}
    try:
        for round_no in range(args.repeat):
            for backend in ("trio", "asyncio") if args.rows != "worker" else ():
                for poll in polls:
                    name = (f"add_seq[{backend}]" if poll is None
                            else f"add_seq[{backend}, poll {poll:g}]")
                    rows.setdefault(name, []).append(_add_seq_anyio(
                        host, port, args.codec, f"bc-add-{backend}-{round_no}-{poll}",
                        args.n, args.time_limit_s, backend, poll))
            if args.rows != "worker":
                rows.setdefault("add_seq[bunqueue-client]", []).append(_add_seq_bunqueue(
                    host, port, f"bc-add-bq-{round_no}", args.n, args.time_limit_s))
            for backend in ("trio", "asyncio") if args.rows != "add" else ():
                rows.setdefault(f"worker_c10[{backend}]", []).append(_worker_anyio(
                    host, port, args.codec, f"bc-w-{backend}-{round_no}", args.worker_n,
                    args.time_limit_s, backend))
    finally:
        if process is not None:
            process.terminate()
            process.wait(30)
            shutil.rmtree(str(data), ignore_errors=True)
    medians = {}
    for name, runs in rows.items():
        median, low, high = _summary(runs)
        medians[name] = median
        print(f"{name:28} {median:9,.0f}/s [{low:,.0f}-{high:,.0f}]{_cpu_us(runs)}")
    if args.rows != "worker" and polls == [None]:
        add_t, add_a = medians["add_seq[trio]"], medians["add_seq[asyncio]"]
        add_b = medians["add_seq[bunqueue-client]"]
        print(f"add_seq: asyncio/trio {add_a / add_t:.2f}x; vs bunqueue-client: trio "
              f"{add_t / add_b:.2f}x, asyncio {add_a / add_b:.2f}x")
    if args.rows != "add":
        w_t, w_a = medians["worker_c10[trio]"], medians["worker_c10[asyncio]"]
        print(f"worker_c10: asyncio/trio {w_a / w_t:.2f}x")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "runs": rows}, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(compare())
