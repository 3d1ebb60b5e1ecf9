"""A takeover as the workers and clients of a cluster see it (docs/scale-out.md,
"Takeover"): b0 is frozen (SIGSTOP) past its lease and the survivors take its queues.

- A worker connected to a surviving broker keeps its jobs: its heartbeats and ACKs with
  its tokens keep working on the new owner, and no job is delivered twice.
- Jobs held by a worker that is gone with b0 are served again once their locks run
  out, a lock's ttl after the takeover, not after the stall interval, and never before
  the lock the worker was given could have run out.
- A command forwarded to the frozen broker is answered (served by the new owner, or a
  retriable error) about a lease after the freeze, not when b0 resumes.

Needs a PostgreSQL server (``pg_dsn``); skipped, saying why, without one.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from trioqueue.server.serve_exit import EXIT_LOST_OWNERSHIP
from trioqueue.testing import RawClient
from trioqueue.testing.cluster import BrokerCluster, cluster_status, queue_served_by

LEASE_S = 1.0
# Far longer than any of these tests waits: a job served again by the stall watch
# (the old behaviour) fails them.
STALL = {"stallInterval": 60_000, "gracePeriod": 0, "maxStalls": 50}


@asynccontextmanager
async def _cluster(tmp_path: Path, dsn: str) -> AsyncIterator[BrokerCluster]:
    async with BrokerCluster(dsn, 3, tmp_path, lease_s=LEASE_S) as cluster:
        with trio.fail_after(15):
            for broker in cluster.running():
                client = await RawClient.connect(broker.tcp_port)
                while len((await cluster_status(client))["live"]) != 3:
                    await trio.sleep(0.02)  # (polling ClusterStatus, under the deadline)
                await client.aclose()
        yield cluster
        if cluster[0].paused:  # (the test failed with b0 frozen: let it go)
            cluster[0].resume()


async def _taken_over(cluster: BrokerCluster, queue: str) -> float:
    """Wait until b1 or b2 serves ``queue`` and both see b0 gone (so either routes to
    the new owner); the time (monotonic) it was seen."""
    clients = [await RawClient.connect(cluster[i].tcp_port) for i in (1, 2)]
    try:
        with trio.fail_after(LEASE_S + 10):
            while True:
                statuses = [await cluster_status(client) for client in clients]
                if any(queue in s["queues"] for s in statuses) and all(
                        "b0" not in [b["brokerId"] for b in s["live"]] for s in statuses):
                    return time.monotonic()
                await trio.sleep(0.02)  # (polling ClusterStatus, under the deadline)
    finally:
        for client in clients:
            await client.aclose()


async def _push(client: RawClient, queue: str, count: int) -> list[str]:
    return [(await client.ok("PUSH", queue=queue, name="n", data=i, jobId=f"{queue}-{i}"))
            ["id"] for i in range(count)]


async def _fenced_exit(cluster: BrokerCluster) -> None:
    cluster[0].resume()
    assert await cluster[0].wait_exit() == EXIT_LOST_OWNERSHIP, cluster[0].log.decode()


async def test_a_live_worker_keeps_its_jobs_across_a_takeover(
        tmp_path: Path, pg_dsn: str) -> None:
    """A worker on b1 holds jobs of b0's queue (lock 5 s) and heartbeats every 0.5 s;
    b0 freezes past its lease. After the takeover its heartbeats with its tokens
    succeed, for longer than the lock, a worker on b2 gets none of its jobs, and its
    ACKs succeed."""
    queue = queue_served_by("b0", "live-")
    async with _cluster(tmp_path, pg_dsn) as cluster:
        before = await RawClient.connect(cluster[1].tcp_port)
        await before.ok("SetStallConfig", queue=queue, config=STALL)
        ids = await _push(before, queue, 4)
        pulled = await before.ok("PULLB", queue=queue, count=4, owner="w1", lockTtl=5000)
        tokens = dict(zip([j["id"] for j in pulled["jobs"]], pulled["tokens"], strict=True))
        assert sorted(tokens) == sorted(ids)

        cluster[0].pause()
        taken_at = await _taken_over(cluster, queue)
        worker = await RawClient.connect(cluster[1].tcp_port)  # (a fresh connection)
        other = await RawClient.connect(cluster[2].tcp_port)
        stolen: list[Any] = []
        while time.monotonic() < taken_at + 6.5:  # past the lock's 5 s, renewed
            for job_id, token in tokens.items():
                reply = await worker.call("JobHeartbeat", id=job_id, token=token)
                assert reply.get("ok") is True, (job_id, reply)
            got = await other.ok("PULL", queue=queue, timeout=500, owner="w2", lockTtl=5000)
            if got["job"] is not None:
                stolen.append(got["job"]["id"])
        assert stolen == []
        for job_id, token in tokens.items():
            await worker.ok("ACK", id=job_id, token=token, result="done")
        for job_id in ids:
            assert (await other.ok("GetState", id=job_id))["state"] == "completed"
        await _fenced_exit(cluster)


async def test_the_jobs_of_a_worker_gone_with_its_broker_come_back_at_their_lock_expiry(
        tmp_path: Path, pg_dsn: str) -> None:
    """A worker on b0 holds jobs (lock 3 s) and is frozen with it: after the takeover
    they are delivered again once their locks could have run out, within the lock's
    ttl after the takeover, with the stall interval a minute away."""
    queue = queue_served_by("b0", "gone-")
    async with _cluster(tmp_path, pg_dsn) as cluster:
        gone = await RawClient.connect(cluster[0].tcp_port)
        await gone.ok("SetStallConfig", queue=queue, config=STALL)
        ids = await _push(gone, queue, 3)
        pulled = await gone.ok("PULLB", queue=queue, count=3, owner="w0", lockTtl=3000)
        pulled_at = time.monotonic()
        assert sorted(j["id"] for j in pulled["jobs"]) == sorted(ids)

        cluster[0].pause()
        taken_at = await _taken_over(cluster, queue)
        other = await RawClient.connect(cluster[1].tcp_port)
        again: dict[str, float] = {}
        with trio.fail_after(3 + 10):  # the lock's ttl, and slack (not the minute)
            while len(again) < len(ids):
                got = await other.ok("PULL", queue=queue, timeout=1000, owner="w1",
                                     lockTtl=3000)
                if got["job"] is not None:
                    again[got["job"]["id"]] = time.monotonic()
        assert sorted(again) == sorted(ids)
        for job_id, at in again.items():
            assert at >= pulled_at + 3, (job_id, at - pulled_at)  # never early
            assert at <= taken_at + 3 + 2, (job_id, at - taken_at)  # ttl after it
        await _fenced_exit(cluster)


async def test_a_command_forwarded_to_a_frozen_broker_is_answered_before_it_resumes(
        tmp_path: Path, pg_dsn: str) -> None:
    """Commands through b1 for b0's queue, sent while b0 is frozen, are answered about
    a lease later: served by the new owner, or refused with an error saying to retry;
    b0 is only resumed after."""
    queue = queue_served_by("b0", "fwd-")
    async with _cluster(tmp_path, pg_dsn) as cluster:
        client = await RawClient.connect(cluster[1].tcp_port)
        await client.ok("PUSH", queue=queue, name="n", data=0, jobId="first")
        cluster[0].pause()
        frozen_at = time.monotonic()
        sent = [await client.send("PUSH", queue=queue, name="n", data=i, jobId=f"j{i}")
                for i in range(3)]
        sent.append(await client.send("GetJob", id="first"))
        replies: list[dict[str, Any]] = []
        with trio.fail_after(LEASE_S + 8):
            for req_id in sent:
                replies.append(await client.reply_to(req_id))
        answered_s = time.monotonic() - frozen_at
        for reply in replies:
            assert reply.get("ok") or "retry" in reply.get("error", ""), reply
        assert answered_s < LEASE_S + 8
        # whatever the replies said, a retry through b1 is served by the new owner
        for i in range(3):
            with trio.fail_after(10):
                while not (await client.call("PUSH", queue=queue, name="n", data=i,
                                             jobId=f"j{i}")).get("ok"):
                    await trio.sleep(0.05)
        await _fenced_exit(cluster)
