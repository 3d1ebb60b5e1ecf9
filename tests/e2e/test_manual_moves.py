"""Manual transitions: Cancel, Update, ChangePriority, Promote(Jobs), ChangeDelay,
MoveToDelayed, MoveToWait, Discard, and the token rule for active jobs."""

from __future__ import annotations

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
    assert (await client.call("MoveToDelayed", id=job_id, delay=5))["error"] == (
        "Job is not active (current state: delayed)")
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
