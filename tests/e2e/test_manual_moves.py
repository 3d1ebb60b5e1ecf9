"""Manual transitions: Cancel, Update, ChangePriority, Promote(Jobs), ChangeDelay,
MoveToDelayed, MoveToWait, Discard, and the token rule for active jobs."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from trioqueue.server.run import Server
from trioqueue.testing import RawClient


async def test_cancel_update_and_change_priority(client: RawClient) -> None:
    a = (await client.ok("PUSH", queue="m", name="n", data=1))["id"]
    b = (await client.ok("PUSH", queue="m", name="n", data=2))["id"]
    await client.ok("Update", id=a, data={"new": True})
    assert (await client.ok("GetJob", id=a))["job"]["data"] == {"new": True}
    await client.ok("ChangePriority", id=b, priority=5)
    assert (await client.ok("GetState", id=b))["state"] == "prioritized"
    assert (await client.ok("PULL", queue="m"))["job"]["id"] == b  # jumped ahead
    assert (await client.call("ChangePriority", id=b, priority=1))["error"] == (
        "Job not found or not in queue")
    await client.ok("Cancel", id=a)
    assert (await client.ok("GetState", id=a))["state"] == "unknown"
    assert (await client.call("Cancel", id=b))["error"] == (
        "Job not found or cannot be cancelled")
    assert (await client.call("Update", id="nope", data=1))["error"] == (
        "Job not found or cannot be updated")


async def test_promote_and_change_delay(client: RawClient) -> None:
    d = (await client.ok("PUSH", queue="md", name="n", data=1, delay=60_000))["id"]
    e = (await client.ok("PUSH", queue="md", name="n", data=2, delay=60_000))["id"]
    await client.ok("Promote", id=d)
    assert (await client.ok("GetState", id=d))["state"] == "waiting"
    assert (await client.call("Promote", id=d))["error"] == "Job not found or not delayed"
    assert (await client.ok("PromoteJobs", queue="md"))["count"] == 1
    assert (await client.ok("GetState", id=e))["state"] == "waiting"
    await client.ok("ChangeDelay", id=e, delay=30_000)
    assert (await client.ok("GetState", id=e))["state"] == "delayed"
    assert (await client.call("ChangeDelay", id=e))["error"] == "delay is required"


async def test_active_moves_follow_the_token_rule(client: RawClient) -> None:
    job_id = (await client.ok("PUSH", queue="ma", name="n", data=1))["id"]
    pulled = await client.ok("PULL", queue="ma", owner="w")
    assert (await client.call("MoveToDelayed", id=job_id, delay=1000))["error"] == (
        f"Lock token required for job {job_id}")
    await client.ok("MoveToDelayed", id=job_id, delay=1000, token=pulled["token"])
    job = (await client.ok("GetJob", id=job_id))["job"]
    assert job["state"] == "delayed" and job["attempts"] == 0
    await client.ok("MoveToDelayed", id=job_id, delay=60_000)  # no lock: moved in place
    assert (await client.ok("GetState", id=job_id))["state"] == "delayed"
    await client.ok("MoveToWait", id=job_id)  # delayed -> waiting
    pulled = await client.ok("PULL", queue="ma", owner="w")
    await client.ok("MoveToWait", id=job_id, token=pulled["token"])
    assert (await client.ok("GetJob", id=job_id))["job"]["attempts"] == 0
    pulled = await client.ok("PULL", queue="ma", owner="w")
    await client.ok("Discard", id=job_id, token=pulled["token"])
    assert (await client.ok("GetState", id=job_id))["state"] == "failed"
    # MoveToWait of a dead-lettered job retries it as a fresh job with the same id
    await client.ok("MoveToWait", id=job_id)
    job = (await client.ok("GetJob", id=job_id))["job"]
    assert job["state"] == "waiting" and job["attempts"] == 0
    counts = (await client.ok("GetJobCounts", queue="ma"))["counts"]
    assert counts["failed"] == 0 and counts["waiting"] == 1


async def test_move_to_wait_of_a_completed_job_is_refused(client: RawClient) -> None:
    job_id = (await client.ok("PUSH", queue="mc", name="n", data=1))["id"]
    await client.ok("PULL", queue="mc")
    await client.ok("ACK", id=job_id)
    assert (await client.call("MoveToWait", id=job_id))["error"] == (
        "Cannot move job from state 'completed' to waiting")


async def test_stall_config_commands(client: RawClient) -> None:
    default = await client.ok("GetStallConfig", queue="sc")
    assert default["config"] == {"enabled": True, "stallInterval": 30000, "maxStalls": 3,
                                 "gracePeriod": 5000}
    await client.ok("SetStallConfig", queue="sc", config={"maxStalls": 5, "enabled": False})
    config = (await client.ok("GetStallConfig", queue="sc"))["config"]
    assert config["maxStalls"] == 5 and config["enabled"] is False
    bad = await client.call("SetStallConfig", queue="sc", config={"stallInterval": "x"})
    assert bad["error"] == "stallInterval must be a number"


async def test_drain_removes_queued_jobs_only(client: RawClient) -> None:
    waiting = (await client.ok("PUSH", queue="dr", name="n", data=1))["id"]
    delayed = (await client.ok("PUSH", queue="dr", name="n", data=2, delay=60_000))["id"]
    active = (await client.ok("PUSH", queue="dr", name="n", data=3, priority=9))["id"]
    assert (await client.ok("PULL", queue="dr"))["job"]["id"] == active
    parent = (await client.ok("PUSH", queue="dr", name="n", data=4,
                              dependsOn=[active]))["id"]
    assert (await client.ok("Drain", queue="dr"))["count"] == 2
    for job_id in (waiting, delayed):
        assert (await client.ok("GetState", id=job_id))["state"] == "unknown"
    assert (await client.ok("GetState", id=active))["state"] == "active"
    assert (await client.ok("GetState", id=parent))["state"] == "waiting-children"
    assert (await client.ok("Drain", queue="dr"))["count"] == 0


async def test_obliterate_removes_everything_of_the_queue(client: RawClient) -> None:
    ids = (await client.ok("PUSHB", queue="ob", jobs=[
        {"name": "n", "data": i, "maxAttempts": 1} for i in range(4)]))["ids"]
    await client.ok("PUSH", queue="ob-other", name="n", data=0, jobId="elsewhere")
    pulled = (await client.ok("PULLB", queue="ob", count=3, owner="w"))
    await client.ok("ACK", id=ids[0], token=pulled["tokens"][0], result="r")
    await client.ok("FAIL", id=ids[1], token=pulled["tokens"][1], error="e")
    await client.ok("AddLog", id=ids[3], message="hello")
    await client.ok("Pause", queue="ob")
    await client.ok("Obliterate", queue="ob")
    for job_id in ids:  # completed, failed, active and waiting: all gone
        assert (await client.ok("GetState", id=job_id))["state"] == "unknown"
    counts = (await client.ok("GetJobCounts", queue="ob"))["counts"]
    assert set(counts.values()) == {0}
    assert (await client.ok("IsPaused", queue="ob"))["paused"] is False
    assert (await client.ok("GetLogs", id=ids[3]))["data"]["count"] == 0
    late = await client.call("ACK", id=ids[2], token=pulled["tokens"][2])
    assert late["error"] == f"Job not found or not in processing state: {ids[2]}"
    assert (await client.ok("GetState", id="elsewhere"))["state"] == "waiting"
    # the custom ids are free again
    assert (await client.ok("PUSH", queue="ob", name="n", data=9, jobId=ids[0]))["id"] == (
        ids[0])


async def test_update_keeps_the_flow_keys_of_the_data(client: RawClient) -> None:
    parent = (await client.ok("PUSH", queue="uf", name="p", data={"v": 1}))["id"]
    child = (await client.ok("PUSH", queue="uf", name="c", data={"v": 1}))["id"]
    await client.ok("UpdateParent", childId=child, parentId=parent)
    await client.ok("Update", id=child, data={"v": 2, "__parentId": "forged"})
    data = (await client.ok("GetJob", id=child))["job"]["data"]
    assert data == {"v": 2, "__parentId": parent, "__parentQueue": "uf"}
    await client.ok("Update", id=child, data=[1, 2])  # not a map: taken as it is
    assert (await client.ok("GetJob", id=child))["job"]["data"] == [1, 2]


async def test_a_long_drain_lets_other_queues_in_between_its_slices(
        server: Server, connect: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Drain of a big queue runs in slices: a command on another queue, sent while the
    Drain is under way, is answered before the Drain is; the drained queue's next
    command sees the drain complete."""
    from trioqueue.core.queue import slices

    monkeypatch.setattr(slices, "SLICE_JOBS", 20)
    producer, drainer, other = await connect(), await connect(), await connect()
    for _ in range(4):
        await producer.ok("PUSHB", queue="big",
                          jobs=[{"name": "n", "data": i} for i in range(500)])
    actor = server.broker.router.actors["big"]
    order: list[str] = []

    async def drain() -> None:
        reply = await drainer.ok("Drain", queue="big")
        order.append(f"drain {reply['count']}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        with trio.fail_after(10):
            while actor._long is None:  # the Drain has begun its slices
                await trio.lowlevel.checkpoint()
        await other.ok("PUSH", queue="small", name="n", data=1)
        order.append("probe")
        assert actor._long is not None  # answered between two slices of the Drain
    assert order == ["probe", "drain 2000"]
    counts = (await producer.ok("GetJobCounts", queue="big"))["counts"]
    assert counts["waiting"] == 0
