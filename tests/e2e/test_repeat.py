"""Job-level ``repeat`` over real TCP, with both codecs: the chain of generations, the
refusals with bunqueue's texts, Update of a completed generation, a restart, and the
schedule under trio's MockClock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from trioqueue.config import Config
from trioqueue.testing import RawClient
from trioqueue.testing.served import served

Q = "rep"


async def job_of(client: RawClient, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = (await client.ok("GetJob", id=job_id))["job"]
    return job


async def run_one(client: RawClient) -> dict[str, Any]:
    """Pull the ready job and ACK it; returns the job as pulled."""
    pulled = await client.ok("PULL", queue=Q, owner="w")
    assert pulled["job"] is not None
    await client.ok("ACK", id=pulled["job"]["id"], token=pulled["token"], result="ok")
    job: dict[str, Any] = pulled["job"]
    return job


async def test_an_ack_creates_the_next_generation(client: RawClient) -> None:
    first = (await client.ok("PUSH", queue=Q, name="tick", data={"n": 1},
                             repeat={"every": 60_000, "limit": 5}))["id"]
    pushed = await job_of(client, first)
    assert pushed["repeat"]["count"] == 0 and pushed["repeat"]["every"] == 60_000
    assert pushed["repeat"]["prevMillis"] == pushed["runAt"]
    await run_one(client)
    done = await job_of(client, first)
    assert done["state"] == "completed"
    successor_id = done["repeat"]["successorId"]
    successor = await job_of(client, successor_id)
    assert successor["state"] == "delayed" and successor["name"] == "tick"
    assert successor["data"] == {"n": 1} and successor["attempts"] == 0
    assert successor["repeat"]["count"] == 1 and "successorId" not in successor["repeat"]
    assert successor["runAt"] == pushed["runAt"] + 60_000
    # Update of the completed generation reaches the pending one.
    await client.ok("Update", id=first, data={"n": 2})
    assert (await job_of(client, successor_id))["data"] == {"n": 2}
    assert (await job_of(client, first))["data"] == {"n": 1}
    # Cancelling the pending generation ends the chain.
    await client.ok("Cancel", id=successor_id)
    counts = (await client.ok("GetJobCounts", queue=Q))
    assert counts["counts"]["delayed"] == 0 and counts["counts"]["waiting"] == 0
    gone = await client.call("Update", id=first, data={})
    assert gone["error"] == "Job not found or cannot be updated"


@pytest.mark.parametrize(("fields", "text"), [
    ({"repeat": {}}, "repeat requires exactly one of every or pattern"),
    ({"repeat": {"every": 0}}, "repeat.every must be a positive finite number"),
    ({"repeat": {"pattern": "61 * * * *"}},
     "Invalid repeat pattern: Invalid cron expression: 61 * * * *"),
    ({"repeat": {"pattern": "@daily", "tz": "Nowhere/City"}},
     "Invalid repeat pattern: Invalid timezone: Nowhere/City"),
    ({"repeat": {"every": 10}, "jobId": "mine"},
     "repeat jobs cannot use JobOptions.jobId; use repeat.jobId instead"),
    ({"repeat": {"every": 10}, "parentId": "p"},
     "repeat jobs cannot participate in parent or dependency relationships"),
    ({"repeat": {"every": 10}, "dependsOn": ["d"]},
     "repeat jobs cannot participate in parent or dependency relationships"),
])
async def test_refusals(client: RawClient, fields: dict[str, Any], text: str) -> None:
    reply = await client.call("PUSH", queue=Q, name="n", data=1, **fields)
    assert reply["ok"] is False and reply["error"] == text
    item = {"name": "n", "data": 1, **fields}
    if "jobId" in item:
        item["customId"] = item.pop("jobId")
    batch = await client.call("PUSHB", queue=Q, jobs=[{"name": "ok", "data": 0}, item])
    assert batch["ok"] is False and batch["error"] == f"jobs[1]: {text}"
    counts = (await client.ok("GetJobCounts", queue=Q))["counts"]
    assert counts["waiting"] == 0 and counts["delayed"] == 0


async def test_pushf_refuses_repeat(client: RawClient) -> None:
    reply = await client.call("PUSHF", jobs=[{"id": "f1", "queue": Q, "input": {
        "name": "n", "data": {}, "repeat": {"every": 1000}}}])
    assert reply["ok"] is False
    assert reply["error"].endswith("repeat is not supported inside an atomic flow")


async def test_the_pending_generation_survives_a_restart(
        configure: Callable[..., Config]) -> None:
    config = configure()  # LMDB, in this test's directory
    async with served(config) as client:
        first = (await client.ok("PUSH", queue=Q, name="n", data=1,
                                 repeat={"every": 1000, "limit": 1}))["id"]
        await run_one(client)
        successor_id = (await job_of(client, first))["repeat"]["successorId"]
    async with served(config) as client:
        successor = await job_of(client, successor_id)
        assert successor["state"] in ("delayed", "waiting")
        assert successor["repeat"]["count"] == 1
        await client.ok("Update", id=first, data=2)
        assert (await job_of(client, successor_id))["data"] == 2
        with trio.fail_after(5):
            pulled = await client.ok("PULL", queue=Q, owner="w", timeout=5000)
        assert pulled["job"]["id"] == successor_id
        await client.ok("ACK", id=successor_id, token=pulled["token"])
        # limit 1: one successor only, so the chain ends here
        done = await job_of(client, successor_id)
        assert "successorId" not in done["repeat"]
        counts = (await client.ok("GetJobCounts", queue=Q))["counts"]
        assert counts["delayed"] == 0 and counts["waiting"] == 0


async def test_every_1000_limit_3_runs_four_times_on_time(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    start = trio.current_time()
    await client.ok("PUSH", queue=Q, name="n", data=1, repeat={"every": 1000, "limit": 3})
    ran: list[float] = []
    with trio.fail_after(20):  # the last PULL waits out its 10 s: no fifth run
        while True:
            pulled = await client.ok("PULL", queue=Q, owner="w", timeout=10_000)
            if pulled["job"] is None:
                break
            ran.append(trio.current_time() - start)
            await client.ok("ACK", id=pulled["job"]["id"], token=pulled["token"])
    assert len(ran) == 4
    for at, expected in zip(ran, (0.0, 1.0, 2.0, 3.0), strict=True):
        assert expected - 0.001 <= at < expected + 0.05  # (ms rounding of the clock)


async def test_retried_generations(client: RawClient) -> None:
    """A dead-lettered generation ends the chain until RetryDlq: completing it then
    resumes the chain. A completed generation run again (RetryCompleted) does not fork
    it: its successor already exists."""
    first = (await client.ok("PUSH", queue=Q, name="n", data=1, maxAttempts=1,
                             repeat={"every": 3_600_000}))["id"]
    pulled = await client.ok("PULL", queue=Q, owner="w")
    await client.ok("FAIL", id=first, token=pulled["token"], error="boom")
    assert (await job_of(client, first))["state"] == "failed"
    counts = (await client.ok("GetJobCounts", queue=Q))["counts"]
    assert counts["delayed"] == 0 and counts["waiting"] == 0  # the chain stopped
    assert (await client.ok("RetryDlq", queue=Q, jobId=first))["count"] == 1
    await run_one(client)
    successor_id = (await job_of(client, first))["repeat"]["successorId"]
    assert (await job_of(client, successor_id))["state"] == "delayed"
    assert (await client.ok("RetryCompleted", queue=Q, id=first))["count"] == 1
    await run_one(client)  # the first generation once more
    assert (await job_of(client, first))["repeat"]["successorId"] == successor_id
    counts = (await client.ok("GetJobCounts", queue=Q))["counts"]
    assert counts["delayed"] == 1 and counts["waiting"] == 0  # one chain, not two
