"""A flow: a report job waits for three chapter jobs in another queue, then adds up
their results, which it reads as its children's values.

    python examples/flow.py --embedded
"""

from __future__ import annotations

import anyio

from trioqueue.client import Connection, FlowProducer, Job, Queue, Worker


async def write_chapter(job: Job) -> int:
    return len(job.data["title"])  # pretend: the number of pages written


async def assemble_report(job: Job) -> dict[str, int]:
    pages = await job.get_children_values()  # {"chapters:<id>": pages, ...}
    return {"chapters": len(pages), "pages": sum(pages.values())}


async def main(conn: Connection) -> dict[str, int]:
    flow = FlowProducer(conn)
    node = await flow.add({
        "name": "report", "queue_name": "reports", "data": {"year": 2026},
        "children": [{"name": "chapter", "queue_name": "chapters", "data": {"title": t}}
                     for t in ("Intro", "Results", "Outlook")],
    })
    print("parent", node.job.id, await node.job.get_state())  # waiting-children
    chapters = Worker("chapters", write_chapter, conn, concurrency=3)
    reports = Worker("reports", assemble_report, conn)
    async with anyio.create_task_group() as tasks:
        await tasks.start(chapters.run)
        await tasks.start(reports.run)
        result = await Queue("reports", conn).wait_job_until_finished(node.job.id, ttl=30)
        await chapters.close()
        await reports.close()
    print("report:", result)
    return dict(result)


if __name__ == "__main__":
    from connect import run

    run(main, "A parent job that waits for its children.")
