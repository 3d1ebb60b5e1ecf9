"""The queue-wide limits in real time, with the Python client's workers on two
connections to one broker: what a user sees (issue 14's proof)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import pytest
import trio

from trioqueue.client import Job, Queue, Worker, open_connection
from trioqueue.testing.workers import run_workers_until


async def test_two_workers_of_concurrency_8_never_exceed_a_queue_limit_of_3(
        start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    running = peak = 0
    done = trio.Event()
    finished = 0

    async def work(job: Job) -> None:
        nonlocal running, peak, finished
        running += 1
        peak = max(peak, running)
        await trio.sleep(0.01)  # the job's work: it holds its slot a while
        running -= 1
        finished += 1
        if finished == 60:
            done.set()

    async with open_connection(port=server.tcp_port) as admin, \
            open_connection(port=server.tcp_port) as one, \
            open_connection(port=server.tcp_port) as two:
        queue = Queue("rt-conc", admin)
        await queue.set_global_concurrency(3)
        await queue.add_bulk([{"name": "n", "data": i} for i in range(60)])
        workers = [Worker("rt-conc", work, c, concurrency=8) for c in (one, two)]
        await run_workers_until(workers, done)
    assert peak == 3  # reached, never passed
    assert all(worker.processed_count for worker in workers)  # both took their share


async def test_a_rate_limit_of_50_per_second_delivers_500_jobs_in_10_s(
        start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    starts: list[float] = []
    done = trio.Event()
    total = 550  # the window's first 50 at once, then 500 at 50 a second

    async def work(job: Job) -> None:
        starts.append(trio.current_time())
        if len(starts) == total:
            done.set()

    async with open_connection(port=server.tcp_port) as admin, \
            open_connection(port=server.tcp_port) as one, \
            open_connection(port=server.tcp_port) as two:
        queue = Queue("rt-rate", admin)
        await queue.add_bulk([{"name": "n", "data": i} for i in range(total)])
        await queue.set_global_rate_limit(50, 1000)
        workers = [Worker("rt-rate", work, c, concurrency=8) for c in (one, two)]
        await run_workers_until(workers, done)
    assert all(worker.processed_count for worker in workers)
    starts.sort()
    burst = starts[49] - starts[0]
    steady = starts[-1] - starts[49]
    assert burst < 1.0, burst
    assert 9.0 <= steady <= 11.0, steady  # 500 jobs in 10 s, +-10%


@pytest.mark.parametrize("n_workers", [1, 2])
async def test_a_limiter_of_10_per_second_starts_at_most_10_in_any_second(
        start_server: Callable[..., Any], n_workers: int) -> None:
    """Each worker sets the queue's limit (``limiter``) as it starts; the jobs' start
    times as the broker stamped them (``startedAt``, ms) hold at most 10 in any window
    of 1,000 ms, the first one included, with one worker or two."""
    server = await start_server(memory=True)
    total = 30  # three windows' worth: about 2 s
    started: list[int] = []
    done = trio.Event()

    async def work(job: Job) -> None:
        assert job.processed_on is not None
        started.append(job.processed_on)
        if len(started) == total:
            done.set()

    async with open_connection(port=server.tcp_port) as admin, \
            open_connection(port=server.tcp_port) as one, \
            open_connection(port=server.tcp_port) as two:
        await Queue("rt-window", admin).add_bulk(
            [{"name": "n", "data": i} for i in range(total)])
        workers = [Worker("rt-window", work, c, concurrency=8,
                          limiter={"max": 10, "duration": 1000})
                   for c in (one, two)[:n_workers]]
        await run_workers_until(workers, done)
    started.sort()
    first = started[0]
    assert bisect_left(started, first + 1000) == 10  # the first second: 10, not 19
    most = max(bisect_left(started, t + 1000) - i for i, t in enumerate(started))
    assert most == 10
    assert started[-1] - first >= 2000  # the third ten waited for the third window
