"""Queue methods with no other test: logs clearing, promote_jobs, extend_job_lock."""

from __future__ import annotations

import anyio
import pytest

from trioqueue.client import Connection, FlowProducer, Job, LockError, Queue, Worker

pytestmark = pytest.mark.anyio


async def test_clear_job_logs_keeps_only_the_newest(conn: Connection) -> None:
    queue = Queue("cq-logs", conn)
    await queue.add("n", {}, job_id="l1")
    for i in range(3):
        await queue.add_job_log("l1", f"m{i}")
    await queue.clear_job_logs("l1", keep=1)
    logs = await queue.get_job_logs("l1")
    assert [e["message"] for e in logs["logs"]] == ["m2"]
    await queue.clear_job_logs("l1")
    assert (await queue.get_job_logs("l1"))["logs"] == []


async def test_promote_jobs_moves_delayed_jobs_to_waiting(conn: Connection) -> None:
    queue = Queue("cq-promote", conn)
    await queue.add("n", {}, job_id="d1", delay=60_000)
    await queue.add("n", {}, job_id="d2", delay=60_000)
    assert await queue.promote_jobs() == 2
    assert await queue.get_job_state("d1") == "waiting"
    assert await queue.get_job_state("d2") == "waiting"


async def test_extend_job_lock_rejects_a_wrong_token(conn: Connection) -> None:
    queue = Queue("cq-lock", conn)
    await queue.add("n", {}, job_id="k1")
    reply = await conn.call("PULL", queue=queue.name, owner="w")
    token = reply.get("token") or None
    await queue.extend_job_lock("k1", 60_000, token)
    with pytest.raises(LockError):
        await queue.extend_job_lock("k1", 60_000, "not-the-token")
    assert await queue.get_job_state("k1") == "active"


async def test_queue_remove_child_dependency_and_unprocessed_children(conn: Connection) -> None:
    node = await FlowProducer(conn).add({"queue_name": "cq-flow", "opts": {"job_id": "p"},
                                         "children": [
        {"queue_name": "cq-flow", "opts": {"job_id": "c1"}},
        {"queue_name": "cq-flow", "opts": {"job_id": "c2"}}]})
    queue = node.job.queue
    assert await queue.remove_child_dependency("c1") is True
    assert await queue.get_job_state("p") == "waiting-children"
    await queue.remove_unprocessed_children("p")
    assert await queue.get_job("c2") is None
    assert await queue.get_job_state("p") == "waiting"


async def test_worker_active_count_concurrency_setter_and_off(conn: Connection) -> None:
    queue = Queue("cq-worker", conn)
    for i in range(4):
        await queue.add("n", {"i": i}, job_id=f"w{i}")
    release = anyio.Event()

    async def processor(job: Job) -> int:
        await release.wait()
        return 1

    seen: list[str] = []

    def listener(job: Job, *rest: object) -> None:
        seen.append(job.id)

    worker = Worker("cq-worker", processor, conn, concurrency=1)
    worker.on("completed", listener)
    worker.off("completed", listener)
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run)
        with anyio.fail_after(5):
            while worker.active_count != 1:
                await anyio.sleep(0.01)
        worker.concurrency = 3
        assert worker.concurrency == 3
        with anyio.fail_after(5):
            while worker.active_count != 3:
                await anyio.sleep(0.01)
        assert (await queue.get_job_counts())["active"] == 3
        release.set()
        with anyio.fail_after(5):
            while (await queue.get_job_counts())["completed"] != 4:
                await anyio.sleep(0.01)
        await worker.close()
    assert worker.active_count == 0 and seen == []
