"""A live event listener: every lifecycle event of a queue, as it happens.

    python examples/live_events.py --embedded
"""

from __future__ import annotations

import anyio

from trioqueue.client import Connection, Job, Queue, QueueEvents, Worker


async def flaky(job: Job) -> str:
    if job.attempts_made == 0:
        raise RuntimeError("first attempt fails")
    return "ok"


async def main(conn: Connection) -> list[str]:
    names: list[str] = []
    async with QueueEvents("mail", conn) as events:
        job = await Queue("mail", conn).add("send", {"to": "a@b.c"}, backoff=0)
        worker = Worker("mail", flaky, conn)
        async with anyio.create_task_group() as tasks:
            await tasks.start(worker.run)
            async for event in events:
                extra = f" terminal={event.terminal}" if event.name == "failed" else ""
                print(f"{event.name:<10} {event.job_id or ''}{extra}")
                names.append(event.name)
                if event.name == "completed" and event.job_id == job.id:
                    break
            await worker.close()
    return names


if __name__ == "__main__":
    from connect import run

    run(main, "Listen to a queue's events.")
