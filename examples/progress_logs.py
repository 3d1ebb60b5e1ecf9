"""Progress and logs: a long job reports progress and writes logs; a listener sees the
progress events as they happen; afterwards the logs are read back.

    python examples/progress_logs.py --embedded
"""

from __future__ import annotations

import anyio

from trioqueue.client import Connection, Job, Queue, QueueEvents, Worker


async def import_rows(job: Job) -> int:
    total = job.data["rows"]
    for step in range(1, 5):
        await job.update_progress(step * 25, f"imported {step * total // 4} rows")
        await job.log(f"step {step} done")
    return int(total)


async def main(conn: Connection) -> dict[str, object]:
    queue = Queue("imports", conn)
    seen: list[float] = []
    async with QueueEvents("imports", conn) as events:
        events.on("progress", lambda event: seen.append(event.progress or 0))
        job = await queue.add("import", {"rows": 1000})
        worker = Worker("imports", import_rows, conn)
        async with anyio.create_task_group() as tasks:
            await tasks.start(worker.run)
            result = await queue.wait_job_until_finished(job.id, events, ttl=30)
            await worker.close()
        with anyio.fail_after(5):  # the last progress events may still be on their way
            while len(seen) < 4:
                await anyio.sleep(0.01)
    logs = await queue.get_job_logs(job.id)
    for entry in logs["logs"]:
        print(entry["level"], entry["message"])
    print("progress seen:", seen, "result:", result)
    return {"progress": seen, "logs": [e["message"] for e in logs["logs"]], "result": result}


if __name__ == "__main__":
    from connect import run

    run(main, "Progress and logs of a running job.")
