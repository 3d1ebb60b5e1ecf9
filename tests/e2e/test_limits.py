"""A queue's rate limit and concurrency cap over real TCP: the commands with both codecs,
the gates under trio's MockClock (a parked pull is answered at the next token or freed
slot, and only one pull gets it), persistence, and Obliterate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio
import trio.testing

from trioqueue.config import Config
from trioqueue.testing import RawClient
from trioqueue.testing.served import served

Q = "lim"


async def limits(client: RawClient, queue: str = Q, **fields: Any) -> dict[str, Any]:
    reply = await client.ok("GetQueueLimits", queue=queue, **fields)
    got: dict[str, Any] = reply["data"]["limits"]
    return got


async def push(client: RawClient, n: int, queue: str = Q) -> list[str]:
    reply = await client.ok("PUSHB", queue=queue,
                            jobs=[{"name": "n", "data": i} for i in range(n)])
    ids: list[str] = reply["ids"]
    return ids


async def test_no_limits_by_default(client: RawClient) -> None:
    assert await limits(client) == {"rateLimit": None, "rateLimitTtl": -2,
                                     "concurrencyLimit": None, "maxed": False}


async def test_rate_limit_set_read_and_cleared(client: RawClient) -> None:
    await client.ok("RateLimit", queue=Q, limit=5, duration=2000)
    got = await limits(client)
    assert got["rateLimit"] == {"max": 5, "duration": 2000}
    assert got["rateLimitTtl"] == 0  # the window starts empty: a job may start now
    await push(client, 8)
    pulled = await client.ok("PULLB", queue=Q, count=8)
    assert len(pulled["jobs"]) == 5  # a partial fill, never an error
    wait = (await limits(client, maxJobs=1))["rateLimitTtl"]
    assert 1900 < wait <= 2000  # the five leave the window 2 s after they started
    await client.ok("RateLimitClear", queue=Q)
    assert (await limits(client))["rateLimit"] is None
    assert len((await client.ok("PULLB", queue=Q, count=8))["jobs"]) == 3


async def test_rate_limit_validation_and_degraded_defaults(client: RawClient) -> None:
    for bad in ("5", None, float("inf"), [1]):
        reply = await client.call("RateLimit", queue=Q, limit=bad)
        assert (reply["ok"], reply["error"]) == (False, "limit must be a finite number")
    # a bad duration or ttl falls back to the defaults (1 s, no ttl) without an error
    await client.ok("RateLimit", queue=Q, limit=3, duration="x", ttl=-5)
    got = await limits(client)
    assert got["rateLimit"] == {"max": 3, "duration": 1000}
    assert got["rateLimitTtl"] == 0
    bad_queue = await client.call("RateLimit", queue="no spaces", limit=1)
    assert bad_queue["error"] == "Queue name contains invalid characters"


async def test_limit_zero_blocks_the_queue(client: RawClient) -> None:
    await push(client, 2)
    await client.ok("RateLimit", queue=Q, limit=0)
    assert (await client.ok("PULL", queue=Q))["job"] is None
    assert (await limits(client))["rateLimitTtl"] == -1  # no token will ever come
    await client.ok("SetConcurrency", queue=Q, limit=0)
    await client.ok("RateLimitClear", queue=Q)
    assert (await client.ok("PULL", queue=Q))["job"] is None
    assert (await limits(client))["maxed"] is True
    await client.ok("ClearConcurrency", queue=Q)
    assert (await client.ok("PULL", queue=Q))["job"] is not None


async def test_concurrency_caps_active_jobs_until_they_leave_active(
        client: RawClient) -> None:
    await client.ok("SetConcurrency", queue=Q, limit=2)
    assert (await limits(client))["concurrencyLimit"] == 2
    ids = await push(client, 6)
    first = await client.ok("PULLB", queue=Q, count=5, owner="w")
    assert len(first["jobs"]) == 2
    assert (await limits(client))["maxed"] is True
    assert (await client.ok("PULL", queue=Q))["job"] is None
    # every way out of active gives the slot back: ACK, FAIL (a retry), MoveToWait
    a, b = first["jobs"]
    await client.ok("ACK", id=a["id"], token=first["tokens"][0])
    c = await client.ok("PULL", queue=Q, owner="w")
    assert c["job"] is not None
    await client.ok("FAIL", id=b["id"], token=first["tokens"][1], error="x")
    d = await client.ok("PULL", queue=Q, owner="w")
    assert d["job"] is not None
    await client.ok("MoveToWait", id=c["job"]["id"], token=c["token"])
    assert (await client.ok("PULL", queue=Q))["job"] is not None
    assert (await limits(client))["maxed"] is True
    counts = (await client.ok("GetJobCounts", queue=Q))["counts"]
    # a completed, b retried later (its backoff), two active, the rest waits
    assert (counts["completed"], counts["delayed"], counts["active"]) == (1, 1, 2)
    assert counts["waiting"] == len(ids) - 4 == 2
    await client.ok("ClearConcurrency", queue=Q)
    assert (await limits(client))["concurrencyLimit"] is None
    rest = await client.ok("PULLB", queue=Q, count=10)
    assert len(rest["jobs"]) == 2
    assert (await client.call("SetConcurrency", queue=Q, limit="2"))["error"] == (
        "limit must be a finite number")


async def test_a_slot_freed_wakes_one_parked_pull(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    admin = await RawClient.connect(server.tcp_port)
    await admin.ok("SetConcurrency", queue=Q, limit=1)
    await push(admin, 3)
    holder = await RawClient.connect(server.tcp_port)
    held = await holder.ok("PULL", queue=Q, owner="h")
    answers: list[tuple[str, float, Any]] = []
    parked: list[RawClient] = []  # kept open: a closed one would give its job back

    async def park(name: str) -> None:
        client = await RawClient.connect(server.tcp_port)
        parked.append(client)
        reply = await client.ok("PULL", queue=Q, timeout=10_000)
        answers.append((name, trio.current_time(), reply["job"]))

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(park, "first")
        await trio.sleep(0.5)
        nursery.start_soon(park, "second")
        await trio.sleep(2)
        assert answers == []  # both wait: the slot is taken
        await holder.ok("ACK", id=held["job"]["id"], token=held["token"])
        freed = trio.current_time()
    # the first parked pull got the slot at once; the second waited out its timeout,
    # since the first job it would take is still active
    (name1, at1, job1), (name2, at2, job2) = answers
    assert (name1, name2) == ("first", "second")
    assert job1 is not None and at1 - freed < 0.05
    assert job2 is None and at2 - start >= 10.4


async def test_a_parked_pull_is_answered_when_the_window_frees(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    await client.ok("RateLimit", queue=Q, limit=4, duration=1000)
    await push(client, 20)
    burst = await client.ok("PULLB", queue=Q, count=10)
    assert len(burst["jobs"]) == 4  # the whole window at once
    times = []
    for _ in range(6):  # then four a second: each window's first pull waits for it
        start = trio.current_time()
        reply = await client.ok("PULL", queue=Q, timeout=5_000)
        assert reply["job"] is not None
        times.append(trio.current_time() - start)
    waited = [t for t in times if t >= 0.95]
    assert len(waited) == 2 and all(t <= 1.05 for t in waited), times
    assert times[0] >= 0.95 and times[4] >= 0.95, times  # the 5th and 9th jobs waited


async def test_a_rate_limit_ttl_ends_it(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    await client.ok("RateLimit", queue=Q, limit=0, ttl=3000)
    await push(client, 1)
    got = await limits(client)
    assert got["rateLimit"] == {"max": 0, "duration": 1000}
    assert 2900 <= got["rateLimitTtl"] <= 3000
    start = trio.current_time()
    reply = await client.ok("PULL", queue=Q, timeout=10_000)
    assert reply["job"] is not None  # answered when the limit ended
    assert 2.9 <= trio.current_time() - start <= 3.1
    assert (await limits(client))["rateLimit"] is None


async def test_limits_survive_a_restart_and_obliterate_resets_them(
        configure: Callable[..., Config]) -> None:
    config = configure()  # LMDB, in this test's directory
    async with served(config) as client:
        await client.ok("RateLimit", queue=Q, limit=7, duration=500, ttl=3_600_000)
        await client.ok("SetConcurrency", queue=Q, limit=3)
    async with served(config) as client:
        got = await limits(client)
        assert got["rateLimit"] == {"max": 7, "duration": 500}
        assert 3_500_000 < got["rateLimitTtl"] <= 3_600_000
        assert got["concurrencyLimit"] == 3
        await client.ok("Obliterate", queue=Q)
        assert await limits(client) == {"rateLimit": None, "rateLimitTtl": -2,
                                         "concurrencyLimit": None, "maxed": False}



async def next_event(client: RawClient) -> dict[str, Any]:
    with trio.fail_after(5):
        while True:
            if client.events:
                event: dict[str, Any] = client.events.pop(0)
                return event
            msg = await client.receive()
            if msg.get("type") == "event":
                return msg["event"]  # type: ignore[no-any-return]


async def test_limit_changes_and_clean_are_reported_to_subscribers(
        connect: Callable[..., Any]) -> None:
    listener: RawClient = await connect()
    admin: RawClient = await connect()
    await listener.ok("SubscribeEvents", queue=Q)
    await admin.ok("RateLimit", queue=Q, limit=5, duration=100)
    await admin.ok("RateLimitClear", queue=Q)
    await admin.ok("SetConcurrency", queue=Q, limit=2)
    await admin.ok("ClearConcurrency", queue=Q)
    await push(admin, 2)
    await admin.ok("Clean", queue=Q, grace=0)
    seen: list[dict[str, Any]] = []
    while not seen or seen[-1]["eventType"] != "cleaned":
        event = await next_event(listener)
        if event["eventType"] != "pushed":
            seen.append(event)
    assert [e["eventType"] for e in seen] == [
        "ratelimit-set", "ratelimit-cleared", "concurrency-set", "concurrency-cleared",
        "cleaned"]
    assert (seen[0]["max"], seen[0]["duration"], seen[2]["limit"]) == (5, 100, 2)
    assert (seen[4]["count"], seen[4]["state"]) == (2, "wait")
