"""Queue's limit methods and Worker(limiter=...) over every mode."""

from __future__ import annotations

import anyio
import pytest

from trioqueue.client import Connection, Queue, ValidationError, Worker

pytestmark = pytest.mark.anyio


async def test_global_rate_limit_round_trip(conn: Connection) -> None:
    queue = Queue("ql-rate", conn)
    assert await queue.get_global_rate_limit() is None
    assert await queue.get_rate_limit_ttl() == -2
    await queue.set_global_rate_limit(2, 60_000)
    assert await queue.get_global_rate_limit() == {"max": 2, "duration": 60_000}
    await queue.add_bulk([{"name": "n", "data": i} for i in range(3)])
    got = await conn.call("PULLB", queue="ql-rate", count=3)
    assert len(got["jobs"]) == 2
    assert 59_000 < await queue.get_rate_limit_ttl() <= 60_000  # the window frees
    assert await queue.get_rate_limit_ttl(max_jobs=3) == -1  # more than a window takes
    await queue.remove_global_rate_limit()
    assert await queue.get_global_rate_limit() is None
    await queue.set_global_rate_limit(5, ttl_ms=60_000)
    assert 59_000 < await queue.get_rate_limit_ttl() <= 60_000
    with pytest.raises(ValidationError):
        await queue.set_global_rate_limit(-1)


async def test_global_concurrency_round_trip(conn: Connection) -> None:
    queue = Queue("ql-conc", conn)
    assert await queue.get_global_concurrency() is None
    await queue.set_global_concurrency(1)
    assert await queue.get_global_concurrency() == 1
    assert await queue.is_maxed() is False
    await queue.add("n", 1)
    await queue.add("n", 2)
    assert len((await conn.call("PULLB", queue="ql-conc", count=2))["jobs"]) == 1
    assert await queue.is_maxed() is True
    await queue.remove_global_concurrency()
    assert await queue.get_global_concurrency() is None
    assert await queue.is_maxed() is False


async def test_worker_limiter_sets_the_queue_limit(conn: Connection) -> None:
    queue = Queue("ql-worker", conn)
    with pytest.raises(ValueError, match="limiter max"):
        Worker("ql-worker", lambda job: None, conn, limiter={"max": 0, "duration": 1})
    with pytest.raises(ValueError, match="limiter takes"):
        Worker("ql-worker", lambda job: None, conn, limiter={"max": 1, "per": 1})
    worker = Worker("ql-worker", lambda job: None, conn, limiter={"max": 7, "duration": 900})
    async with anyio.create_task_group() as nursery:
        await nursery.start(worker.run)
        assert await queue.get_global_rate_limit() == {"max": 7, "duration": 900}
        await worker.close()
