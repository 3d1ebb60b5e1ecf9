"""Queue over every mode (TCP and embedded, LMDB and memory)."""

from __future__ import annotations

from trioqueue.client import Connection, JobNotFound, Queue


async def test_add_and_read_back(conn: Connection) -> None:
    queue = Queue("q-add", conn)
    job = await queue.add("send", {"to": "a@b.c"}, priority=2, attempts=5, job_id="m1")
    assert job.id == "m1" and job.name == "send" and job.data == {"to": "a@b.c"}
    got = await queue.get_job("m1")
    assert got is not None and got.priority == 2 and got.max_attempts == 5
    assert got.state == "prioritized" and await queue.get_job_state("m1") == "prioritized"
    assert await queue.get_job("nope") is None
    again = await queue.add("send", {"other": True}, job_id="m1")  # idempotent
    assert again.id == "m1" and (await queue.get_job("m1")).data == {"to": "a@b.c"}
    assert await queue.count() == 1
    try:
        await queue.remove("nope")
    except JobNotFound:
        pass
    else:
        raise AssertionError("removing a missing job did not raise")
