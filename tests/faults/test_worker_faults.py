"""Worker faults: a worker that dies mid-job, one that heartbeats and then goes silent,
late and duplicate ACKs, ACKs for jobs that do not exist.

Timers run on trio's MockClock (``autojump_clock``) against an in-process broker, so a
30 s lease passes in no real time. Each test records a history and runs the checker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from trioqueue.testing import RawClient
from trioqueue.testing.history import ACK, ADD, PULL, History, check

QUEUE = "wf"


async def final_state(client: RawClient, ids: list[str]) -> dict[str, dict[str, Any] | None]:
    out: dict[str, dict[str, Any] | None] = {}
    for job_id in ids:
        reply = await client.call("GetJob", id=job_id)
        out[job_id] = reply["job"] if reply.get("ok") else None
    return out


async def test_a_worker_that_dies_mid_job_is_redelivered_after_its_lease(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    history = History()
    producer = await RawClient.connect(server.tcp_port)
    op = history.invoke("producer", ADD, "j1")
    history.ok(op, (await producer.ok("PUSH", queue=QUEUE, name="n", data=1, jobId="j1",
                                      backoff=0))["id"])
    doomed = await RawClient.connect(server.tcp_port)
    first = await doomed.ok("PULL", queue=QUEUE, owner="doomed", lockTtl=30_000)
    history.ok(history.invoke("doomed", PULL, "j1"), "j1",
               attempts=first["job"]["attempts"], stallCount=first["job"]["stallCount"])
    # the worker process dies without a word: its socket just stays silent
    survivor = await RawClient.connect(server.tcp_port)
    started = trio.current_time()
    again = await survivor.ok("PULL", queue=QUEUE, owner="survivor", lockTtl=30_000,
                              timeout=60_000)
    assert again["job"]["id"] == "j1"
    assert trio.current_time() - started >= 29.9  # not before the lease ran out
    history.ok(history.invoke("survivor", PULL, "j1"), "j1",
               attempts=again["job"]["attempts"], stallCount=again["job"]["stallCount"])
    assert (again["job"]["attempts"], again["job"]["stallCount"]) == (1, 1)
    ack = history.invoke("survivor", ACK, "j1")
    await survivor.ok("ACK", id="j1", token=again["token"], result="done")
    history.ok(ack)
    # the dead worker's late ACK is fenced by its stale token
    late = await doomed.call("ACK", id="j1", token=first["token"], result="stale")
    assert late["ok"] is False
    assert (await survivor.ok("GetResult", id="j1"))["result"] == "done"
    check(history, await final_state(survivor, ["j1"])).assert_valid()


async def test_heartbeats_keep_a_job_then_silence_reclaims_it_once(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    await client.ok("PUSH", queue=QUEUE, name="n", data=1, jobId="hb", backoff=0)
    pulled = await client.ok("PULL", queue=QUEUE, owner="w", lockTtl=5_000)
    for _ in range(6):  # 30 s of heartbeats every 4 s: the lease never runs out
        await trio.sleep(4)
        await client.ok("JobHeartbeat", id="hb", token=pulled["token"])
    assert (await client.ok("GetState", id="hb"))["state"] == "active"
    await trio.sleep(6)  # silent past the lease: reclaimed (charged once)
    job = (await client.ok("GetJob", id="hb"))["job"]
    assert job["state"] == "waiting" and (job["attempts"], job["stallCount"]) == (1, 1)
    other = await client.ok("PULLB", queue=QUEUE, count=10, owner="w2")
    assert [j["id"] for j in other["jobs"]] == ["hb"]  # dispatched once, not twice
    assert (await client.ok("PULLB", queue=QUEUE, count=10, owner="w2"))["jobs"] == []


async def test_duplicate_and_unknown_acks_change_nothing(
        start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    await client.ok("PUSH", queue=QUEUE, name="n", data=1, jobId="d1")
    pulled = await client.ok("PULL", queue=QUEUE, owner="w")
    await client.ok("ACK", id="d1", token=pulled["token"], result="first")
    counts = (await client.ok("GetJobCounts", queue=QUEUE))["counts"]
    duplicate = await client.call("ACK", id="d1", token=pulled["token"], result="second")
    assert duplicate["ok"] is False  # the job is no longer in processing
    batch = await client.ok("ACKB", ids=["d1"], tokens=[pulled["token"]])
    assert batch["data"]["ignoredIds"] == ["d1"]  # a duplicate in a batch is a no-op
    unknown = await client.call("ACK", id="never-existed", result=1)
    assert unknown["error"] == "Job not found or not in processing state: never-existed"
    assert (await client.ok("GetResult", id="d1"))["result"] == "first"
    assert (await client.ok("GetJobCounts", queue=QUEUE))["counts"] == counts
    assert (await client.ok("GetState", id="never-existed"))["state"] == "unknown"
