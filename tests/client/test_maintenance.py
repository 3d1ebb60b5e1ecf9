"""Queue.clean, get_queues / list_queues, trim_events and compact_memory over every mode
(TCP and embedded, LMDB and memory), and in the sync facade."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator

import pytest

import trioqueue.sync
from tests.test_sync import ThreadedBroker
from trioqueue.client import Connection, Queue, ValidationError
from trioqueue.config import Config

pytestmark = pytest.mark.anyio

HOUR_MS = 3_600_000


async def finish(conn: Connection, queue: str, *, fail: bool = False) -> str:
    reply = await conn.call("PULL", queue=queue, owner="w")
    job_id = str(reply["job"]["id"])
    if fail:
        await conn.call("FAIL", id=job_id, token=reply["token"], error="boom")
    else:
        await conn.call("ACK", id=job_id, token=reply["token"])
    return job_id


async def test_clean_by_state_limit_and_age(conn: Connection) -> None:
    queue = Queue("q-clean", conn)
    old = int(time.time() * 1000) - HOUR_MS
    olds = [(await queue.add("n", i, timestamp=old + i)).id for i in range(5)]
    young = (await queue.add("n", "young")).id
    assert await queue.clean(60_000, limit=2) == olds[:2]  # oldest first
    assert await queue.clean(60_000, 1000, "delayed") == olds[2:]  # any queued state
    assert await queue.get_job_state(young) == "waiting"
    done = await finish(conn, "q-clean")
    assert await queue.clean(60_000, state="completed") == []  # completed just now
    assert await queue.clean(0, state="completed") == [done]
    await queue.add("n", "dead", attempts=1)
    dead = await finish(conn, "q-clean", fail=True)
    assert await queue.clean(0, state="active") == []
    assert await queue.clean(0, state="failed") == [dead]
    assert await queue.get_job(dead) is None


async def test_clean_checks_its_arguments(conn: Connection) -> None:
    queue = Queue("q-clean-args", conn)
    for call in (queue.clean(-1), queue.clean(1.5),  # type: ignore[arg-type]
                 queue.clean(0, limit=0), queue.clean(0, state="finished")):
        with pytest.raises(ValidationError):
            await call


async def test_get_queues_and_list_queues(conn: Connection) -> None:
    held = Queue("q-listed", conn)
    await held.add("n", 1)
    asked = Queue("q-only-asked", conn)
    assert await asked.count() == 0
    names = await held.get_queues()
    assert "q-listed" in names and "q-only-asked" not in names
    assert names == sorted(names) and await asked.list_queues() == names


async def test_trim_events_and_compact_memory(conn: Connection) -> None:
    queue = Queue("q-mem", conn)
    assert await queue.trim_events(100) == 0
    with pytest.raises(ValidationError):
        await queue.trim_events(-1)
    jobs = await queue.add_bulk([{"name": "n", "data": i} for i in range(300)])
    for job in jobs:
        await queue.remove(job.id)
    freed = await queue.compact_memory()
    assert freed["heapEntries"] >= 300 and freed["queues"] >= 1
    assert set(freed) >= {"retainedResults", "bytes", "gcObjects"}
    assert freed["gcObjects"] == 0
    assert (await queue.compact_memory(collect_garbage=True))["gcObjects"] >= 0
    with pytest.raises(ValidationError):
        await queue.compact_memory(collect_garbage=1)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- sync


@pytest.fixture
def broker(configure: Callable[..., Config]) -> Iterator[ThreadedBroker]:
    running = ThreadedBroker(configure()).start()
    yield running
    running.stop()


def test_the_sync_facade_has_them(broker: ThreadedBroker) -> None:
    with trioqueue.sync.connect(port=broker.port) as sync_conn:
        queue = sync_conn.queue("s-maint")
        queue.add("n", 1)
        assert queue.get_queues() == queue.list_queues() == ["s-maint"]
        assert queue.clean(0) and queue.count() == 0
        assert queue.trim_events(5) == 0
        assert "bytes" in queue.compact_memory()
        for name in ("clean", "get_queues", "list_queues", "trim_events",
                     "compact_memory"):
            method = getattr(queue, name)
            assert not inspect.iscoroutinefunction(method)
            assert method.__doc__ == getattr(Queue, name).__doc__
