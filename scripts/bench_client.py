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
