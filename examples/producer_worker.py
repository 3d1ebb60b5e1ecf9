"""A producer adds jobs; a worker with concurrency 4 processes them; results are read.

    python examples/producer_worker.py --embedded
"""

from __future__ import annotations

import anyio

from trioqueue.client import Connection, Job, Queue, Worker


async def add_numbers(job: Job) -> int:
    await anyio.sleep(0)  # a real processor would do I/O here
    return int(job.data["a"]) + int(job.data["b"])


async def main(conn: Connection) -> dict[str, int]:
    queue = Queue("sums", conn)
    jobs = await queue.add_bulk([{"name": "add", "data": {"a": i, "b": i * 10}}
                                 for i in range(10)])
    done = anyio.Event()
    finished: list[str] = []

    def on_completed(job: Job, result: int) -> None:
        finished.append(job.id)
        if len(finished) == len(jobs):
            done.set()

    worker = Worker("sums", add_numbers, conn, concurrency=4)
    worker.on("completed", on_completed)
    async with anyio.create_task_group() as tasks:
        await tasks.start(worker.run)
        await done.wait()
        await worker.close()
    results = {job.id: await queue.get_result(job.id) for job in jobs}
    for job in jobs:
        print(f"{job.data['a']} + {job.data['b']} = {results[job.id]}")
    return results


if __name__ == "__main__":
    from connect import run

    run(main, "A producer and a worker.")
