"""The dead-letter queue from the Python client, over every mode (TCP and embedded,
LMDB and memory), and ``Job.failed_reason`` / ``Job.stacktrace`` from a real worker's
failure."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from trioqueue.client import Connection, Job, Queue, ValidationError, Worker
from trioqueue.client.dlq import DlqEntry
from trioqueue.sync import SyncQueue

from .test_worker import started

pytestmark = pytest.mark.anyio

DLQ_METHODS = ["get_dlq", "get_dlq_stats", "retry_dlq", "purge_dlq", "remove_dlq_job",
               "retry_completed", "set_dlq_config", "get_dlq_config"]


async def bury(conn: Connection, queue: Queue, error: str = "boom", **options: Any) -> str:
    """A job of one attempt, pulled and failed over the raw protocol: a DLQ entry."""
    job = await queue.add("n", {"i": 1}, attempts=1, **options)
    reply = await conn.call("PULL", queue=queue.name)
    assert reply["job"]["id"] == job.id
    await conn.call("FAIL", id=job.id, error=error)
    return job.id


def parse_address(address: str) -> str:
    if "@" not in address:
        raise ValueError(f"not an address: {address!r}")
    return address


async def test_failed_reason_and_whole_stacktrace_from_a_worker(conn: Connection) -> None:
    queue = Queue("c-trace", conn)
    job = await queue.add("send", {"to": "nobody"}, attempts=1)

    async def processor(job: Job) -> None:
        parse_address(job.data["to"])

    worker = Worker("c-trace", processor, conn)
    async with started(worker):
        reply = await conn.call("WaitJob", id=job.id, timeout=5000)
        assert reply["failed"] is True
        await worker.close()
    failed = await queue.get_job(job.id)
    assert failed is not None and failed.state == "failed"
    assert failed.failed_reason == "not an address: 'nobody'"
    trace = failed.stacktrace
    assert trace is not None and trace[0] == "Traceback (most recent call last):"
    assert trace[-1] == "ValueError: not an address: 'nobody'"
    here = Path(__file__).name
    user_frames = [line for line in trace if here in line]
    assert any("in parse_address" in line for line in user_frames)
    assert any("in processor" in line for line in user_frames)
    # bunqueue's own field keeps its first lines only; the entry has them all
    assert len(failed.raw["stacktrace"]) <= 10 < len(trace)
    [entry] = await queue.get_dlq()
    assert entry.stack == trace and entry.job.stacktrace == trace
    assert entry.reason == "max_attempts_exceeded"


async def test_failed_reason_of_a_job_still_retrying(conn: Connection) -> None:
    queue = Queue("c-retrying", conn)
    job = await queue.add("n", {}, attempts=3, backoff=60_000)
    await conn.call("PULL", queue="c-retrying")
    await conn.call("FAIL", id=job.id, error="first try")
    again = await queue.get_job(job.id)
    assert again is not None and again.state == "delayed"
    assert again.failed_reason == "first try"


async def test_dlq_methods(conn: Connection) -> None:
    queue = Queue("c-dlq", conn)
    ids = [await bury(conn, queue, error=f"e{i}") for i in range(4)]
    entries = await queue.get_dlq()
    assert all(isinstance(entry, DlqEntry) for entry in entries)
    assert [entry.job.id for entry in entries] == ids
    assert [entry.error for entry in entries] == ["e0", "e1", "e2", "e3"]
    assert entries[0].job.failed_reason == "e0" and entries[0].retry_count == 0
    assert entries[0].expires_at == entries[0].entered_at + 604_800_000
    assert [e.job.id for e in await queue.get_dlq(2)] == ids[:2]
    assert [e.job.id for e in await queue.get_dlq(offset=1, limit=2)] == ids[1:3]
    assert await queue.get_dlq(reason="unknown") == []
    stats = await queue.get_dlq_stats()
    assert stats["total"] == 4 and stats["byReason"] == {"max_attempts_exceeded": 4}
    assert await queue.retry_dlq(ids[0]) == 1
    assert await queue.get_job_state(ids[0]) == "waiting"
    assert await queue.retry_dlq(count=1) == 1
    assert await queue.remove_dlq_job(ids[2]) is True
    assert await queue.remove_dlq_job(ids[2]) is False
    assert await queue.purge_dlq() == 1
    assert await queue.get_dlq() == []
    assert await queue.retry_dlq() == 0
    with pytest.raises(ValidationError, match="unknown DLQ filter"):
        await queue.get_dlq(colour="red")


async def test_dlq_config_and_retry_completed(conn: Connection) -> None:
    queue = Queue("c-config", conn)
    assert await queue.get_dlq_config() == {
        "autoRetry": False, "autoRetryInterval": 3_600_000, "maxAutoRetries": 3,
        "maxAge": 604_800_000, "maxEntries": 10_000}
    await queue.set_dlq_config(auto_retry=True, max_age=None, max_entries=2)
    config = await queue.get_dlq_config()
    assert config["autoRetry"] is True and config["maxAge"] is None
    assert config["maxEntries"] == 2
    with pytest.raises(ValidationError, match="unknown DLQ option"):
        await queue.set_dlq_config(colour="red")
    with pytest.raises(ValidationError):
        await queue.set_dlq_config(max_entries="many")
    job = await queue.add("n", {})
    await conn.call("PULL", queue="c-config")
    await conn.call("ACK", id=job.id, result=7)
    assert await queue.retry_completed(timestamp=0) == 0
    assert await queue.retry_completed() == 1
    assert await queue.get_job_state(job.id) == "waiting"
    assert await queue.get_result(job.id) is None


def test_the_sync_facade_has_the_dlq_methods() -> None:
    for name in DLQ_METHODS:
        blocking = SyncQueue.__dict__[name]
        expected = list(inspect.signature(getattr(Queue, name)).parameters)[1:]
        assert list(blocking.signature.parameters) == expected
        assert blocking.__doc__ == getattr(Queue, name).__doc__
