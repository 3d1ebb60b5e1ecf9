"""The operator's settings survive a kill -9: every acknowledged change to a queue's
limits, its groups and its dead-letter queue is there after the restart, and Obliterate
resets all of it."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from trioqueue.testing import RawClient
from trioqueue.testing.process import BrokerProcess

from ..conftest import StoreEngine

pytestmark = pytest.mark.engines("lmdb", "postgres")

Q = "ops"


async def test_limits_groups_and_dlq_survive_kill_9(
        tmp_path: Path, store_engine: StoreEngine) -> None:
    broker = BrokerProcess(tmp_path / "data", storage_url=store_engine.storage_url)
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        await client.ok("RateLimit", queue=Q, limit=40, duration=2000, ttl=3_600_000)
        await client.ok("SetConcurrency", queue=Q, limit=6)
        await client.ok("SetGroupConcurrency", queue=Q, groupId="t1", concurrency=2)
        await client.ok("SetGroupRateLimit", queue=Q, groupId="t2", max=3, duration=500)
        await client.ok("PauseGroup", queue=Q, groupId="t3")
        await client.ok("SetDlqConfig", queue=Q, config={"maxEntries": 7, "autoRetry": False})
        pushed = await client.ok("PUSHB", queue=Q, jobs=[
            {"name": "n", "data": i, "groupId": "t3", "maxAttempts": 1} for i in range(2)])
        await client.ok("ResumeGroup", queue=Q, groupId="t3")
        taken = await client.ok("PULL", queue=Q, owner="w")
        await client.ok("FAIL", id=taken["job"]["id"], token=taken["token"], error="boom")
        await client.ok("PauseGroup", queue=Q, groupId="t3")
        # the moment the last change is acknowledged, the broker dies
        await broker.kill(signal.SIGKILL)
        await client.aclose()

        await broker.start()
        client = await RawClient.connect(broker.tcp_port)
        limits = (await client.ok("GetQueueLimits", queue=Q))["data"]["limits"]
        assert limits["rateLimit"] == {"max": 40, "duration": 2000}
        assert limits["concurrencyLimit"] == 6
        group = await client.ok("GetGroupConcurrency", queue=Q, groupId="t1")
        assert group["data"] == {"concurrency": 2}
        rate = await client.ok("GetGroupRateLimit", queue=Q, groupId="t2")
        assert rate["data"] == {"limit": {"max": 3, "duration": 500}}
        paused = await client.ok("IsGroupPaused", queue=Q, groupId="t3")
        assert paused["data"] == {"paused": True}
        assert (await client.ok("PULL", queue=Q))["job"] is None  # its group is paused
        config = (await client.ok("GetDlqConfig", queue=Q))["config"]
        assert config["maxEntries"] == 7
        dead = await client.ok("Dlq", queue=Q)
        assert [e["job"]["id"] for e in dead["entries"]] == [taken["job"]["id"]]
        assert dead["entries"][0]["error"] == "boom"
        assert (await client.ok("GetGroupJobsCount", queue=Q, groupId="t3"))["data"] == {
            "count": len(pushed["ids"]) - 1}

        await client.ok("Obliterate", queue=Q)
        limits = (await client.ok("GetQueueLimits", queue=Q))["data"]["limits"]
        assert limits["rateLimit"] is None and limits["concurrencyLimit"] is None
        paused = await client.ok("IsGroupPaused", queue=Q, groupId="t3")
        assert paused["data"] == {"paused": False}
        assert (await client.ok("GetDlqConfig", queue=Q))["config"]["maxEntries"] == 10_000
        assert (await client.ok("Dlq", queue=Q))["entries"] == []
        await client.aclose()
    finally:
        await broker.stop()
