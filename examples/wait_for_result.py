"""Request/reply: add a job and wait for its result, with and without QueueEvents; a
job that fails for good raises JobFailed with its last error.

    python examples/wait_for_result.py --embedded
"""

from __future__ import annotations

import anyio

from trioqueue.client import Connection, Job, JobFailed, Queue, QueueEvents, Worker


async def resize(job: Job) -> dict[str, int]:
    if job.data["width"] <= 0:
        raise ValueError(f"bad width {job.data['width']}")
    return {"width": job.data["width"] // 2}


async def main(conn: Connection) -> dict[str, object]:
    queue = Queue("images", conn)
    worker = Worker("images", resize, conn, concurrency=2)
    out: dict[str, object] = {}
    async with anyio.create_task_group() as tasks:
        await tasks.start(worker.run)
        # removeOnComplete: the broker keeps the result a while for the waiter
        job = await queue.add("resize", {"width": 800}, remove_on_complete=True)
        out["without_events"] = await queue.wait_job_until_finished(job.id, ttl=10)
        async with QueueEvents("images", conn) as events:
            job = await queue.add("resize", {"width": 640})
            out["with_events"] = await job.wait_until_finished(events, ttl=10)
        bad = await queue.add("resize", {"width": 0}, attempts=2, backoff=0)
        try:
            await bad.wait_until_finished(ttl=10)
        except JobFailed as exc:
            out["failed"] = exc.error
        await worker.close()
    print(out)
    return out


if __name__ == "__main__":
    from connect import run

    run(main, "Waiting for a job's result.")
