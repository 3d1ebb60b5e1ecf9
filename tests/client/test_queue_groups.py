"""Queue's group methods and Worker(group_concurrency=...) over every mode."""

from __future__ import annotations

import anyio
import pytest

from trioqueue.client import Connection, Job, Queue, Worker
from trioqueue.testing.workers import run_workers_until

pytestmark = pytest.mark.anyio


async def test_group_methods_round_trip(conn: Connection) -> None:
    queue = Queue("qg-methods", conn)
    for i in range(3):
        await queue.add("n", i, group_id="t1")
    await queue.add("n", 9, group_id="t2")
    assert await queue.get_group_jobs_count("t1") == 3
    assert await queue.get_groups_jobs_count() == 4
    assert await queue.get_groups_jobs_count(max_count=2) == 2
    await queue.set_group_concurrency("t1", 1)
    assert await queue.get_group_concurrency("t1") == 1
    assert await queue.pause_group("t2") is True
    assert await queue.is_group_paused("t2") is True
    got = await conn.call("PULLB", queue="qg-methods", count=10)
    assert [j["groupId"] for j in got["jobs"]] == ["t1"]
    assert await queue.get_group_active_count("t1") == 1
    assert await queue.resume_group("t2") is True
    assert await queue.remove_group_concurrency("t1") is True
    assert await queue.get_group_concurrency("t1") is None
    await queue.set_group_rate_limit("t1", 1, 60_000)
    assert await queue.get_group_rate_limit("t1") == {"max": 1, "duration": 60_000}
    assert await queue.get_group_rate_limit_ttl("t1") == 0
    assert await queue.remove_group_rate_limit("t1") is True
    assert await queue.get_group_rate_limit_ttl("t1") == -2
    await queue.rate_limit_group("t1", 60_000)
    assert await queue.get_group_rate_limit_ttl("t1") > 59_000


async def test_group_concurrency_binds_two_workers(conn: Connection) -> None:
    queue = Queue("qg-workers", conn)
    for tenant in ("t1", "t2"):
        await queue.add_bulk([{"name": "n", "data": i, "opts": {"group_id": tenant}}
                              for i in range(6)])
    running: dict[str, int] = {"t1": 0, "t2": 0}
    peak: dict[str, int] = {"t1": 0, "t2": 0}
    finished = 0
    done = anyio.Event()

    async def work(job: Job) -> None:
        nonlocal finished
        group = job.raw["groupId"]
        running[group] += 1
        peak[group] = max(peak[group], running[group])
        await anyio.sleep(0.005)  # the job's work: it holds its group's slot a while
        running[group] -= 1
        finished += 1
        if finished == 12:
            done.set()

    workers = [Worker("qg-workers", work, conn, concurrency=4, group_concurrency=1)
               for _ in range(2)]
    await run_workers_until(workers, done)
    assert peak == {"t1": 1, "t2": 1}
