"""WaitJob settles on a job's final outcome (bunqueue's shape, plus the last error)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio

from trioqueue.testing import RawClient

# on both stores (the representative PostgreSQL run in CI; tests/conftest.py)
pytestmark = pytest.mark.engines("lmdb", "postgres")


async def test_wait_resolves_on_completion_even_after_a_retry(
    connect: Callable[..., Any],
) -> None:
    waiter: RawClient = await connect()
    worker: RawClient = await connect()
    pushed = await worker.ok("PUSH", queue="w", name="n", data=1, backoff=0)
    wait = await waiter.send("WaitJob", id=pushed["id"], timeout=5000)
    await worker.ok("PULL", queue="w")
    await worker.ok("FAIL", id=pushed["id"], error="first try")  # retried: still waiting
    await worker.ok("PULL", queue="w")
    await worker.ok("ACK", id=pushed["id"], result={"ok": 1})
    with trio.fail_after(5):
        reply = await waiter.reply_to(wait)
    assert reply["ok"] is True and reply["completed"] is True and reply["result"] == {"ok": 1}


async def test_wait_on_a_finished_job_answers_at_once(client: RawClient) -> None:
    done = await client.ok("PUSH", queue="w2", name="n", data=1)
    dead = await client.ok("PUSH", queue="w2", name="n", data=2, maxAttempts=1)
    for _ in range(2):
        job = (await client.ok("PULL", queue="w2"))["job"]
        if job["id"] == done["id"]:
            await client.ok("ACK", id=job["id"], result=None)
        else:
            await client.ok("FAIL", id=job["id"], error="boom")
    completed = await client.ok("WaitJob", id=done["id"], timeout=0)
    assert completed["completed"] is True and completed["result"] is None
    failed = await client.ok("WaitJob", id=dead["id"])
    assert failed["completed"] is False and failed["error"] == "boom"


async def test_wait_times_out_with_completed_false(client: RawClient) -> None:
    pushed = await client.ok("PUSH", queue="w3", name="n", data=1)
    reply = await client.ok("WaitJob", id=pushed["id"], timeout=50)
    assert reply["completed"] is False and "failed" not in reply
    assert (await client.call("WaitJob", id=pushed["id"], timeout=600_001))["ok"] is False


async def test_wait_on_an_unknown_or_expired_job(connect: Callable[..., Any]) -> None:
    client: RawClient = await connect()
    assert (await client.call("WaitJob", id="nope"))["error"] == "Job nope not found"
    pushed = await client.ok("PUSH", queue="w4", name="n", data=1, ttl=1)
    wait = await client.send("WaitJob", id=pushed["id"], timeout=5000)
    await trio.sleep(0.01)  # the ttl running out is the thing under test
    assert (await client.ok("PULL", queue="w4"))["job"] is None  # expired at pull
    with trio.fail_after(5):
        reply = await client.reply_to(wait)
    assert reply["error"] == f"Job {pushed['id']} not found"


async def test_removed_on_complete_result_is_retained_for_late_waits(
    client: RawClient,
) -> None:
    pushed = await client.ok("PUSH", queue="w5", name="n", data=1, removeOnComplete=True)
    await client.ok("PULL", queue="w5")
    await client.ok("ACK", id=pushed["id"], result="kept")
    assert (await client.ok("GetState", id=pushed["id"]))["state"] == "unknown"
    late = await client.ok("WaitJob", id=pushed["id"])
    assert late["completed"] is True and late["result"] == "kept"


async def test_holds_beyond_the_limit_are_answered_not_starved(
    start_server: Callable[..., Any],
) -> None:
    server = await start_server(max_wait_holds_per_connection=2)
    client = await RawClient.connect(server.tcp_port)
    pushed = await client.ok("PUSH", queue="w6", name="n", data=1)
    held = [await client.send("WaitJob", id=pushed["id"], timeout=5000) for _ in range(2)]
    third = await client.ok("WaitJob", id=pushed["id"], timeout=5000)
    assert third["completed"] is False  # answered at once, not parked
    await client.ok("PULL", queue="w6")
    await client.ok("ACK", id=pushed["id"], result=3)
    with trio.fail_after(5):
        for req in held:
            assert (await client.reply_to(req))["result"] == 3
