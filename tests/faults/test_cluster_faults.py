"""Three brokers on one database under faults: one killed under load (failover), one
frozen past its lease (fencing). The history checker of tests/faults/test_crashes.py
judges what the clients saw, plus: no job held by two live workers at once.

Needs a PostgreSQL server (``pg_dsn``); skipped, saying why, without one.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from trioqueue.server.serve_exit import EXIT_LOST_OWNERSHIP
from trioqueue.testing import RawClient
from trioqueue.testing.cluster import BrokerCluster, queue_served_by, queues_served_by
from trioqueue.testing.history import ADD, OK, History, check, two_live_holders

from .test_crashes import AMBIGUOUS, LOCK_TTL_MS, drain_and_read, producer, worker

LEASE_S = 2.0
IDS = ["b0", "b1", "b2"]


async def _cluster_status(port: int) -> dict[str, Any]:
    client = await RawClient.connect(port)
    try:
        status: dict[str, Any] = (await client.ok("ClusterStatus"))["data"]["cluster"]
        return status
    finally:
        await client.aclose()


async def _wait_for_members(cluster: BrokerCluster, count: int) -> None:
    with trio.fail_after(15):
        for broker in cluster.running():
            while len((await _cluster_status(broker.tcp_port))["live"]) != count:
                await trio.sleep(0.05)


async def test_kill_9_of_one_of_three_brokers_under_load_loses_nothing(
        tmp_path: Path, pg_dsn: str) -> None:
    await _kill_one_of_three_under_load(tmp_path, pg_dsn, jobs_per_queue=120)


@pytest.mark.slow
async def test_kill_9_of_one_of_three_brokers_under_heavier_load(
        tmp_path: Path, pg_dsn: str) -> None:
    await _kill_one_of_three_under_load(tmp_path, pg_dsn, jobs_per_queue=1000)


async def _kill_one_of_three_under_load(tmp_path: Path, pg_dsn: str, *,
                                        jobs_per_queue: int) -> None:
    """Producers and workers through all three brokers, on queues each broker serves;
    b0 is killed: its queues are served again by b1 and b2 within the lease plus their
    rebuild, no acknowledged job is lost, and no job has two live holders."""
    cluster = BrokerCluster(pg_dsn, 3, tmp_path, lease_s=LEASE_S)
    history = History()
    queues = [q for owner in IDS for q in queues_served_by(owner, 2, "load-")]
    await cluster.start()
    try:
        await _wait_for_members(cluster, 3)
        # A job active at the takeover keeps its lock (10 s here, renewed by nobody
        # once its worker is gone with b0); the stall watch retries it sooner, after
        # 2 s (docs/scale-out.md, "Takeover").
        client = await RawClient.connect(cluster[1].tcp_port)
        for queue in queues:
            await client.ok("SetStallConfig", queue=queue, config={
                "stallInterval": 2000, "gracePeriod": 0, "maxStalls": 50})
        await client.aclose()
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            for i, queue in enumerate(queues):  # each queue: a producer through one
                # broker, a worker through another (b0 among them: they lose it)
                via_push = cluster[i % 3].tcp_port
                via_pull = cluster[(i + 1) % 3].tcp_port
                nursery.start_soon(producer, history, via_push, f"producer-{i}", f"j{i}",
                                   jobs_per_queue, 8, queue)
                nursery.start_soon(worker, history, via_pull, f"worker-{i}", stop, queue)
                nursery.start_soon(worker, history, cluster[2].tcp_port, f"worker-b2-{i}",
                                   stop, queue)
            first = jobs_per_queue  # (some load through everything first)
            with trio.fail_after(30):
                while sum(1 for op in history.ops if op.kind == ADD and op.status == OK) < first:
                    await trio.sleep(0.02)
            await cluster[0].kill(signal.SIGKILL)
            killed_at = time.monotonic()
            # b0's queues served again: a PUSH through b1 is answered for each
            served_again = await _served_again(history, cluster[1].tcp_port,
                                               queues_served_by("b0", 2, "load-"))
            failover_s = served_again - killed_at
            with trio.fail_after(60):  # the producers through b1 and b2 finish
                while any(op.kind == ADD and op.status == "invoke" for op in history.ops):
                    await trio.sleep(0.05)
            stop.set()
        final = await drain_and_read(history, cluster[1].tcp_port, tuple(queues))
        status = await _cluster_status(cluster[1].tcp_port)
    finally:
        await cluster.stop()
    result = check(history, final)
    result.assert_valid()
    assert two_live_holders(history, LOCK_TTL_MS) == []
    assert [b["brokerId"] for b in status["live"]] == ["b1", "b2"]
    assert failover_s < LEASE_S + 5, failover_s  # the lease, then the rebuild
    assert result.stats["adds acknowledged"] >= first


async def _served_again(history: History, port: int, queues: list[str]) -> float:
    """The moment a PUSH to each of ``queues`` through the broker at ``port`` is
    acknowledged (retrying while the queues move); the probes go in the history."""
    client = await RawClient.connect(port)
    try:
        with trio.fail_after(30):
            for queue in queues:
                for attempt in range(10_000):
                    op = history.invoke("probe", ADD, f"probe-{queue}-{attempt}")
                    reply = await client.call("PUSH", queue=queue, name="probe", data=0,
                                              jobId=op.job_id)
                    if reply.get("ok"):
                        history.ok(op, reply["id"])
                        break
                    if AMBIGUOUS in reply.get("error", ""):
                        history.unknown(op, reply["error"])
                    else:
                        history.fail(op, reply.get("error", ""))
                    await trio.sleep(0.02)
        return time.monotonic()
    finally:
        await client.aclose()


async def test_a_broker_frozen_past_its_lease_is_fenced_off(
        tmp_path: Path, pg_dsn: str) -> None:
    """SIGSTOP b0 past its lease with a PUSH for its queue in its socket; the others
    take its queues; SIGCONT: its late write is refused by the epoch check (or it finds
    its heartbeat stale first, and commits nothing more): its client gets an error that
    says why and to retry, not an acknowledgement nor a dropped connection; it exits
    with status 5, and the job is nowhere."""
    cluster = BrokerCluster(pg_dsn, 3, tmp_path, lease_s=LEASE_S)
    queue = queue_served_by("b0", "load-")
    await cluster.start()
    try:
        await _wait_for_members(cluster, 3)
        direct = await RawClient.connect(cluster[0].tcp_port)
        await direct.ok("PUSH", queue=queue, name="before", data=1, jobId="before")
        assert queue in (await _cluster_status(cluster[0].tcp_port))["queues"]
        cluster[0].pause()
        late = await direct.send("PUSH", queue=queue, name="late", data=2, jobId="late")
        survivor = await RawClient.connect(cluster[1].tcp_port)
        # the survivors take b0's queue once its heartbeat is older than the lease
        with trio.fail_after(LEASE_S + 10):
            while not (await survivor.call("PUSH", queue=queue, name="after", data=3,
                                           jobId="after")).get("ok"):
                await trio.sleep(0.05)
        cluster[0].resume()
        with trio.fail_after(20):
            code = await cluster[0].wait_exit()
        assert code == EXIT_LOST_OWNERSHIP, cluster[0].log.decode()
        replies = await direct.drain_until_closed()
        [answer] = [r for r in replies if r.get("reqId") == late]
        assert answer["ok"] is False, replies
        assert answer["error"].startswith("Not applied: "), answer
        assert answer["error"].endswith("; retry"), answer
        for job_id, there in (("before", True), ("late", False), ("after", True)):
            found = await survivor.call("GetJob", id=job_id)
            assert (found.get("ok") and found.get("job") is not None) == there, job_id
        assert b"stopped:" in cluster[0].log
    finally:
        await cluster.stop()
