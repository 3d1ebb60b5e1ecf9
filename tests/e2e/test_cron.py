"""Cron schedules over real TCP: the four commands with both codecs, firings under
MockClock, the registry across a restart and across kill -9s, and one real-time run."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
import trio.testing

from trioqueue.config import Config
from trioqueue.testing import RawClient
from trioqueue.testing.process import BrokerProcess
from trioqueue.testing.served import served

Q = "cq"


async def count(client: RawClient, queue: str = Q) -> int:
    counts = (await client.ok("GetJobCounts", queue=queue))["counts"]
    return int(sum(counts.values()))


async def test_commands_and_errors(client: RawClient) -> None:
    made = await client.ok("Cron", name="daily", queue=Q, schedule="0 3 * * *",
                           timezone="Europe/Rome", data={"k": 1}, maxLimit=5)
    info = made["cron"]
    assert (info["name"], info["jobName"], info["schedule"], info["timezone"]) == (
        "daily", "daily", "0 3 * * *", "Europe/Rome")
    assert (info["executions"], info["maxLimit"], info["repeatEvery"]) == (0, 5, None)
    assert (await client.ok("CronGet", name="daily"))["cron"] == info
    await client.ok("Cron", name="often", queue=Q, repeatEvery=60_000, jobName="j")
    listed = (await client.ok("CronList"))["crons"]
    assert [c["name"] for c in listed] == ["daily", "often"]
    assert (await client.ok("CronDelete", name="often")) == {"ok": True, "reqId": "r5"}
    for cmd in ("CronGet", "CronDelete"):
        missing = await client.call(cmd, name="often")
        assert (missing["ok"], missing["error"]) == (False, "Cron job not found")
    bad = await client.call("Cron", name="x", queue=Q, schedule="61 * * * *")
    assert bad["error"] == "Invalid cron expression: 61 * * * *"
    bad = await client.call("Cron", name="x", queue=Q, repeatEvery=10,
                            jobOptions={"timeout": "soon"})
    assert bad["error"] == "jobOptions.timeout must be a number"
    bad = await client.call("Cron", name="x", queue=Q)
    assert bad["error"] == "Cron needs a schedule or repeatEvery"


async def test_firings_on_their_slots(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    await client.ok("SubscribeEvents", queue=Q)
    start = trio.current_time()
    await client.ok("Cron", name="t", queue=Q, repeatEvery=1000, preventOverlap=False,
                    data={"hello": "cron"})
    pushed: list[float] = []
    while len(pushed) < 5:
        msg = await client.receive()
        if msg.get("type") == "event" and msg["event"]["eventType"] == "pushed":
            pushed.append(trio.current_time() - start)
    assert [round(t, 2) for t in pushed] == [1.0, 2.0, 3.0, 4.0, 5.0]
    info = (await client.ok("CronGet", name="t"))["cron"]
    assert info["executions"] == 5
    jobs = (await client.ok("GetJobs", queue=Q))["jobs"]
    assert {j["data"]["hello"] for j in jobs} == {"cron"} and len(jobs) == 5


async def test_prevent_overlap_and_max_limit(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    await client.ok("Cron", name="o", queue=Q, repeatEvery=1000, maxLimit=3)
    await trio.sleep(3.5)
    # preventOverlap (the default): the later firings met the first job still waiting
    assert await count(client) == 1
    job = (await client.ok("PULL", queue=Q, owner="w"))
    assert job["job"]["name"] == "o"
    await client.ok("ACK", id=job["job"]["id"], token=job["token"])
    await trio.sleep(2)
    # three firings counted, then maxLimit removed the schedule
    assert (await client.call("CronGet", name="o"))["error"] == "Cron job not found"
    assert await count(client) == 1  # the completed one


async def test_a_schedule_deleted_at_its_max_limit_is_committed_at_once(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    """The deletion at maxLimit has no reply to wait for: it is committed at once, not
    left for some later command's commit (meanwhile a shutdown waited for it)."""
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    await client.ok("Cron", name="once", queue=Q, repeatEvery=1000, maxLimit=1)
    await trio.sleep(2.5)  # fired at 1 s, deleted at 2 s
    assert (await client.call("CronGet", name="once"))["error"] == "Cron job not found"
    with trio.fail_after(1):  # (nothing left to commit: settled at once)
        await server.broker.settle()
    assert "once" not in server.broker.storage.load().broker_records.get("cron", {})


async def test_skip_if_no_worker_fires_only_with_a_registered_worker(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    await client.ok("Cron", name="w", queue=Q, repeatEvery=1000, skipIfNoWorker=True,
                    preventOverlap=False)
    await trio.sleep(3.5)
    assert await count(client) == 0  # three slots skipped, not counted
    assert (await client.ok("CronGet", name="w"))["cron"]["executions"] == 0
    worker = await RawClient.connect(server.tcp_port)
    await worker.ok("RegisterWorker", name="wk", queues=[Q])
    await trio.sleep(2)
    assert await count(client) == 2
    await worker.aclose()  # its registration goes with its connection
    await trio.sleep(2)
    assert await count(client) == 2


async def test_the_registry_survives_a_restart(configure: Callable[..., Config]) -> None:
    config = configure()
    async with served(config) as client:
        await client.ok("Cron", name="keep", queue=Q, repeatEvery=3_600_000,
                        immediately=True, preventOverlap=False)
        with trio.fail_after(5):
            while await count(client) < 1:
                await client.ok("Ping")
        before = (await client.ok("CronGet", name="keep"))["cron"]
    async with served(config) as client:
        after = (await client.ok("CronGet", name="keep"))["cron"]
        assert after == before and after["executions"] == 1
        assert await count(client) == 1  # not fired again by the restart


async def test_repeat_every_fires_five_times_in_five_seconds(
        start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    made = await client.ok("Cron", name="rt", queue=Q, repeatEvery=1000,
                           preventOverlap=False)
    first = made["cron"]["nextRun"]
    await trio.sleep(5.05)  # the test is the schedule's own real time
    jobs = (await client.ok("GetJobs", queue=Q, limit=10))["jobs"]
    assert 4 <= len(jobs) <= 6
    # each job pushed within 50 ms of its slot (first + k * 1000)
    late = [job["createdAt"] - (first + k * 1000) for k, job in enumerate(jobs)]
    assert all(0 <= ms < 50 for ms in late), late


async def test_kill_9_neither_fires_a_slot_twice_nor_loses_one(tmp_path: Path) -> None:
    """Five kill -9s while a schedule of 200 ms fires. Every job is matched to its slot
    (``first + k * 200``; a job is pushed within 200 ms of its slot): no slot has two
    jobs, every slot of the times the broker ran has its job, and only the slots of the
    times it was down are missing (skipMissedOnRestart, the default)."""
    every = 200
    broker = BrokerProcess(tmp_path / "data", "--cron-min-interval-ms", str(every))
    await broker.start()
    up: list[tuple[float, float]] = []  # (from, to) wall ms the broker was surely up
    try:
        client = await RawClient.connect(broker.tcp_port)
        made = await client.ok("Cron", name="k9", queue=Q, repeatEvery=every,
                               preventOverlap=False)
        first = made["cron"]["nextRun"]
        started = time.time() * 1000
        for _ in range(5):
            with trio.fail_after(10):  # let it fire a few times, then kill it mid-run
                while (await client.ok("CronGet", name="k9"))["cron"]["executions"] < (
                        len(up) + 1) * 4:
                    await client.ok("Ping")
            up.append((started, time.time() * 1000))
            await broker.kill(signal.SIGKILL)
            await client.aclose()
            await broker.start()
            client = await RawClient.connect(broker.tcp_port)
            started = time.time() * 1000
            # every counted firing has its job, and no job is without its count (the
            # jobs counted between two reads of the count, as it keeps firing)
            before = (await client.ok("CronGet", name="k9"))["cron"]["executions"]
            jobs = await count(client)
            after = (await client.ok("CronGet", name="k9"))["cron"]["executions"]
            assert before <= jobs <= after
        await client.ok("CronDelete", name="k9")
        jobs_seen = (await client.ok("GetJobs", queue=Q, limit=1000))["jobs"]
        await client.aclose()
    finally:
        await broker.stop()
    slots = [int((job["createdAt"] - first) // every) for job in jobs_seen]
    assert len(slots) == len(set(slots)), "a slot fired twice"
    for begin, end in up:  # the slots well inside each life of the broker all fired
        expected = range(int((begin - first) // every) + 2, int((end - first) // every) - 1)
        missing = [k for k in expected if k not in set(slots)]
        assert not missing, (missing, begin, end)
