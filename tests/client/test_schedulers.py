"""Queue's job schedulers (BullMQ's upsertJobScheduler shape, on Cron) over every mode."""

from __future__ import annotations

import anyio
import pytest

from trioqueue.client import Connection, Queue

pytestmark = pytest.mark.anyio


async def test_upsert_read_list_and_remove(conn: Connection) -> None:
    queue = Queue("qs-sched", conn)
    info = await queue.upsert_job_scheduler(
        "nightly", pattern="0 2 * * *", tz="Europe/Rome", limit=10,
        template={"name": "report", "data": {"k": 1},
                  "opts": {"attempts": 2, "backoff": 500, "priority": 3}})
    assert (info["name"], info["queue"], info["jobName"], info["schedule"]) == (
        "nightly", "qs-sched", "report", "0 2 * * *")
    assert (info["timezone"], info["maxLimit"], info["priority"]) == ("Europe/Rome", 10, 3)
    assert await queue.get_job_scheduler("nightly") == info
    assert await queue.get_job_scheduler("nope") is None
    await Queue("qs-other", conn).upsert_job_scheduler("other", every_ms=60_000)
    assert [s["name"] for s in await queue.get_job_schedulers()] == ["nightly"]
    assert await queue.remove_job_scheduler("nightly") is True
    assert await queue.remove_job_scheduler("nightly") is False
    with pytest.raises(ValueError, match="one of every_ms and pattern"):
        await queue.upsert_job_scheduler("x")
    with pytest.raises(ValueError, match="a schedule's jobs take only"):
        await queue.upsert_job_scheduler("x", every_ms=10, template={"opts": {"lifo": True}})


async def test_an_every_schedule_pushes_jobs(conn: Connection) -> None:
    queue = Queue("qs-every", conn)
    await queue.upsert_job_scheduler("fast", every_ms=50, immediately=True,
                                     prevent_overlap=False, template={"data": {"n": 1}})
    with anyio.fail_after(5):
        while await queue.count() < 3:
            await anyio.sleep(0.02)  # polling what the broker reports, with a deadline
    jobs = await queue.get_jobs(["waiting"])
    assert all(job.name == "fast" and job.data == {"n": 1} for job in jobs)
    await queue.remove_job_scheduler("fast")
