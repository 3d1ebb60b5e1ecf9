"""Job groups over real TCP with both codecs: the 14 group commands with their replies
and error texts, PUSH's groupId and groupMaxSize, PULL's group field, fairness, and the
settings across a restart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from trioqueue.config import Config
from trioqueue.testing import RawClient
from trioqueue.testing.served import served

Q = "grp"


async def push(client: RawClient, group: str, n: int, **fields: Any) -> list[str]:
    jobs = [{"name": "n", "data": i, "groupId": group, **fields} for i in range(n)]
    ids: list[str] = (await client.ok("PUSHB", queue=Q, jobs=jobs))["ids"]
    return ids


async def data(client: RawClient, cmd: str, **fields: Any) -> Any:
    return (await client.ok(cmd, queue=Q, **fields))["data"]


async def groups_of(client: RawClient, count: int, **fields: Any) -> list[str]:
    jobs = (await client.ok("PULLB", queue=Q, count=count, **fields))["jobs"]
    return [j["groupId"] for j in jobs]


async def test_small_groups_get_their_fair_share(client: RawClient) -> None:
    await push(client, "big", 1000)
    await push(client, "s1", 10)
    await push(client, "s2", 10)
    claimed: list[str] = []
    for _ in range(6):
        claimed += await groups_of(client, 10)
    assert claimed[:30].count("s1") == claimed[:30].count("s2") == 10
    assert set(claimed[30:]) == {"big"}


async def test_counts_and_group_max_size(client: RawClient) -> None:
    await push(client, "a", 2)
    await push(client, "a", 1, delay=60_000)
    await push(client, "b", 1)
    assert await data(client, "GetGroupJobsCount", groupId="a") == {"count": 3}
    assert await data(client, "GetGroupsJobsCount") == {"count": 4}
    assert await data(client, "GetGroupsJobsCount", maxCount=2) == {"count": 2}
    refused = await client.call("PUSH", queue=Q, name="n", data=0, groupId="a",
                                groupMaxSize=3)
    assert (refused["ok"], refused["error"]) == (False, "Group a is full (maxSize 3)")
    whole = await client.call("PUSHB", queue=Q, jobs=[
        {"name": "n", "data": 0, "groupId": "b"},
        {"name": "n", "data": 0, "groupId": "a", "groupMaxSize": 3}])
    assert whole["ok"] is False
    assert await data(client, "GetGroupsJobsCount") == {"count": 4}  # nothing admitted
    await client.ok("PULLB", queue=Q, count=10)
    assert await data(client, "GetGroupActiveCount", groupId="a") == {"count": 2}
    bad = await client.call("GetGroupJobsCount", queue=Q)
    assert bad["error"] == "groupId must be a string"


async def test_group_concurrency_and_pause(client: RawClient) -> None:
    await push(client, "a", 3)
    await push(client, "b", 3)
    await client.ok("SetGroupConcurrency", queue=Q, groupId="a", concurrency=1)
    assert await data(client, "GetGroupConcurrency", groupId="a") == {"concurrency": 1}
    assert await data(client, "PauseGroup", groupId="b") == {"changed": True}
    assert await data(client, "IsGroupPaused", groupId="b") == {"paused": True}
    assert await groups_of(client, 10) == ["a"]
    assert await data(client, "ResumeGroup", groupId="b") == {"changed": True}
    assert await groups_of(client, 10) == ["b", "b", "b"]
    assert await data(client, "RemoveGroupConcurrency", groupId="a") == {"removed": 1}
    assert await data(client, "RemoveGroupConcurrency", groupId="a") == {"removed": 0}
    assert await groups_of(client, 10) == ["a", "a"]
    bad = await client.call("SetGroupConcurrency", queue=Q, groupId="a", concurrency=0)
    assert bad["error"] == "concurrency must be a positive safe integer"


async def test_pull_group_field_is_the_groups_default(client: RawClient) -> None:
    await push(client, "a", 3)
    await push(client, "b", 3)
    got = await groups_of(client, 10, group={"concurrency": 1})
    assert sorted(got) == ["a", "b"]
    bad = await client.call("PULL", queue=Q, group={"concurrency": -1})
    assert bad["error"] == "group.concurrency must be a positive safe integer"
    bad = await client.call("PULL", queue=Q, group="x")
    assert bad["error"] == "group must be an object"


async def test_group_rate_limits(client: RawClient) -> None:
    await push(client, "a", 4)
    await client.ok("SetGroupRateLimit", queue=Q, groupId="a", max=2, duration=60_000)
    assert await data(client, "GetGroupRateLimit", groupId="a") == {
        "limit": {"max": 2, "duration": 60_000}}
    assert await groups_of(client, 10) == ["a", "a"]
    ttl = (await data(client, "GetGroupRateLimitTtl", groupId="a"))["ttl"]
    assert 59_000 < ttl <= 60_000
    assert await data(client, "RemoveGroupRateLimit", groupId="a") == {"removed": 1}
    assert await data(client, "GetGroupRateLimit", groupId="a") == {"limit": None}
    assert await data(client, "GetGroupRateLimitTtl", groupId="a") == {"ttl": -2}
    await client.ok("RateLimitGroup", queue=Q, groupId="a", duration=60_000)
    assert await groups_of(client, 10) == []
    assert (await data(client, "GetGroupRateLimitTtl", groupId="a"))["ttl"] > 59_000
    bad = await client.call("SetGroupRateLimit", queue=Q, groupId="a", max=1, duration=1.5)
    assert bad["error"] == "duration must be a positive safe integer"


async def test_a_group_held_by_time_wakes_a_parked_pull(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    await push(client, "a", 2)
    await client.ok("RateLimitGroup", queue=Q, groupId="a", duration=2_000)
    start = trio.current_time()
    reply = await client.ok("PULL", queue=Q, timeout=10_000)
    assert reply["job"]["groupId"] == "a"
    assert 1.99 <= trio.current_time() - start <= 2.05


async def test_group_settings_survive_a_restart(configure: Callable[..., Config]) -> None:
    config = configure()
    async with served(config) as client:
        await push(client, "a", 3)
        await client.ok("SetGroupConcurrency", queue=Q, groupId="a", concurrency=2)
        await client.ok("SetGroupRateLimit", queue=Q, groupId="b", max=5, duration=100)
        await client.ok("PauseGroup", queue=Q, groupId="c")
        await client.ok("PULLB", queue=Q, count=10, owner="w")
    async with served(config) as client:
        assert await data(client, "GetGroupConcurrency", groupId="a") == {"concurrency": 2}
        assert await data(client, "GetGroupRateLimit", groupId="b") == {
            "limit": {"max": 5, "duration": 100}}
        assert await data(client, "IsGroupPaused", groupId="c") == {"paused": True}
        # the two active jobs were charged by the restart and wait out their backoff
        assert await data(client, "GetGroupJobsCount", groupId="a") == {"count": 3}
        await client.ok("Obliterate", queue=Q)
        assert await data(client, "GetGroupConcurrency", groupId="a") == {"concurrency": None}
        assert await data(client, "IsGroupPaused", groupId="c") == {"paused": False}
