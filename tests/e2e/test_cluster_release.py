"""Jobs a client pulled through a broker that forwarded its PULLs come back when the
client goes, as on one broker: at once, uncharged, not when their locks run out
(docs/scale-out.md, "Clients across brokers").

Three brokers on one PostgreSQL database; each test's queue is served by b1 and its
worker connects to b0. Needs a PostgreSQL server (``pg_dsn``); skipped without one.
"""

from __future__ import annotations

import signal
from typing import Any

import trio

from trioqueue.testing import RawClient
from trioqueue.testing.cluster import BrokerCluster, connect_all, queue_served_by

LOCK_TTL_MS = 60_000  # far longer than any test: a job back sooner was released
BACK_WITHIN_S = 2.0
# The test that kills a broker starts three of its own (``three_brokers``); the others
# share the module's (``shared_three_brokers``), each with a queue of its own.


async def _connect(three_brokers: BrokerCluster, index: int) -> RawClient:
    return await RawClient.connect(three_brokers[index].tcp_port)


async def _push(client: RawClient, queue: str, count: int) -> list[str]:
    return [(await client.ok("PUSH", queue=queue, name="n", data={"i": i}))["id"]
            for i in range(count)]


async def _pull(client: RawClient, queue: str) -> dict[str, Any]:
    job: dict[str, Any] = (await client.ok("PULL", queue=queue, timeout=0,
                                           lockTtl=LOCK_TTL_MS))["job"]
    assert job is not None, f"no job waiting in {queue}"
    return job


async def _pull_back(client: RawClient, queue: str, count: int) -> list[dict[str, Any]]:
    """``count`` jobs pulled from ``queue`` as they come back (long-polled: each PULL is
    answered as soon as a job is waiting), within BACK_WITHIN_S."""
    jobs = []
    with trio.fail_after(BACK_WITHIN_S):
        while len(jobs) < count:
            reply = await client.ok("PULL", queue=queue, timeout=int(BACK_WITHIN_S * 1000))
            if reply["job"] is not None:
                jobs.append(reply["job"])
    return jobs


async def _nothing_waiting(client: RawClient, queue: str) -> bool:
    return (await client.ok("PULL", queue=queue, timeout=0))["job"] is None


async def test_a_client_that_closes_gives_back_what_it_pulled_through_another_broker(
        shared_three_brokers: BrokerCluster) -> None:
    """A worker on b0 pulls two jobs of b1's queue, then its connection closes: both
    are waiting again at once (pulled through b2), their attempts unchanged."""
    other = (await connect_all(shared_three_brokers))[2]
    queue = queue_served_by("b1", "release-")
    pushed = await _push(other, queue, 2)
    worker = await _connect(shared_three_brokers, 0)
    held = [await _pull(worker, queue), await _pull(worker, queue)]
    assert sorted(j["id"] for j in held) == sorted(pushed)
    assert await _nothing_waiting(other, queue)  # (held, under a 60 s lock)

    await worker.aclose()
    back = await _pull_back(other, queue, 2)
    assert sorted(j["id"] for j in back) == sorted(pushed)
    assert [j["attempts"] for j in back] == [j["attempts"] for j in held] == [0, 0]


async def test_one_client_closing_releases_only_its_own_jobs(
        shared_three_brokers: BrokerCluster) -> None:
    """Two workers on b0 pull from the same queue of b1 (one peer link carries both):
    the one that closes gives back its job alone; the other still acknowledges its
    own, and nothing else is waiting."""
    other = (await connect_all(shared_three_brokers))[2]
    queue = queue_served_by("b1", "two-clients-")
    await _push(other, queue, 2)
    leaving = await _connect(shared_three_brokers, 0)
    staying = await _connect(shared_three_brokers, 0)
    left_job, kept_job = await _pull(leaving, queue), await _pull(staying, queue)

    await leaving.aclose()
    (back,) = await _pull_back(other, queue, 1)
    assert back["id"] == left_job["id"]
    assert await _nothing_waiting(other, queue)
    await staying.ok("ACK", id=kept_job["id"], token=kept_job.get("token"), result="kept")
    assert (await other.ok("GetState", id=kept_job["id"]))["state"] == "completed"


async def test_jobs_held_through_a_killed_broker_come_back_when_its_link_closes(
        three_brokers: BrokerCluster) -> None:
    """b0 is killed (SIGKILL) while its worker holds two jobs of b1's queue: b1 sees
    b0's peer link close and the jobs are waiting again, long before their locks (60 s)
    or b0's lease would run out."""
    other = (await connect_all(three_brokers))[2]
    queue = queue_served_by("b1", "killed-")
    pushed = await _push(other, queue, 2)
    worker = await _connect(three_brokers, 0)
    held = [await _pull(worker, queue), await _pull(worker, queue)]

    await three_brokers[0].kill(signal.SIGKILL)
    back = await _pull_back(other, queue, 2)
    assert sorted(j["id"] for j in back) == sorted(pushed)
    assert [j["attempts"] for j in back] == [j["attempts"] for j in held]
