"""Three brokers on one PostgreSQL database, as a user sees them: any broker answers any
command, whichever broker serves the queue (docs/scale-out.md).

Needs a PostgreSQL server (``pg_dsn``); skipped, saying why, without one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from trioqueue.testing import RawClient
from trioqueue.testing.cluster import BrokerCluster

QUEUES = [f"q{i}" for i in range(8)]


@pytest.fixture
async def cluster(tmp_path: Path, pg_dsn: str) -> AsyncIterator[BrokerCluster]:
    brokers = BrokerCluster(pg_dsn, 3, tmp_path)
    try:
        await brokers.start()
        yield brokers
    finally:
        await brokers.stop()


async def _clients(cluster: BrokerCluster) -> list[RawClient]:
    return [await RawClient.connect(broker.tcp_port) for broker in cluster.brokers]


async def _status(client: RawClient) -> dict[str, Any]:
    status: dict[str, Any] = (await client.ok("ClusterStatus"))["data"]["cluster"]
    return status


async def test_the_brokers_see_each_other(cluster: BrokerCluster) -> None:
    clients = await _clients(cluster)
    for i, client in enumerate(clients):
        status = await _status(client)
        assert status["brokerId"] == f"b{i}"
        # (b0 saw the others join at its later beats: wait for its view)
        with trio.fail_after(10):
            while len(status["live"]) < 3:
                await trio.sleep(0.05)
                status = await _status(client)
        assert [b["brokerId"] for b in status["live"]] == ["b0", "b1", "b2"]
        assert status["live"][i]["address"] == f"127.0.0.1:{cluster[i].tcp_port}"


async def test_push_through_one_pull_through_another_ack_through_the_third(
        cluster: BrokerCluster) -> None:
    a, b, c = await _clients(cluster)
    await _wait_for_three(a)
    pushed = {q: (await a.ok("PUSH", queue=q, name="n", data={"q": q}))["id"] for q in QUEUES}
    for q in QUEUES:
        job = (await b.ok("PULL", queue=q, timeout=0))["job"]
        assert job["id"] == pushed[q] and job["data"] == {"q": q}
        await c.ok("ACK", id=job["id"], result=f"done {q}")
    for q, job_id in pushed.items():
        assert (await a.ok("GetState", id=job_id))["state"] == "completed"
        assert (await b.ok("GetResult", id=job_id))["result"] == f"done {q}"
        counts = (await c.ok("GetJobCounts", queue=q))["counts"]
        assert counts["completed"] == 1 and counts["waiting"] == 0
    for client in (a, b, c):  # every broker lists every queue (by its next beat)
        with trio.fail_after(10):
            while not set(QUEUES) <= set((await client.ok("ListQueues"))["queues"]):
                await trio.sleep(0.05)
    # each queue is served by exactly one broker, and the queues are spread out
    served = [set((await _status(client))["queues"]) for client in (a, b, c)]
    assert set().union(*served) >= set(QUEUES)
    assert sum(len(s & set(QUEUES)) for s in served) == len(QUEUES)
    assert sum(1 for s in served if s & set(QUEUES)) >= 2


async def test_a_batch_of_ids_across_brokers_is_split_and_merged(
        cluster: BrokerCluster) -> None:
    a, b, _ = await _clients(cluster)
    await _wait_for_three(a)
    ids = [(await a.ok("PUSH", queue=q, name="n", data=1))["id"] for q in QUEUES]
    pulled = []
    for q in QUEUES:
        pulled.append((await b.ok("PULL", queue=q, timeout=0))["job"]["id"])
    assert sorted(pulled) == sorted(ids)
    await b.ok("ACKB", ids=pulled, results=[{"n": i} for i in range(len(pulled))])
    for i, job_id in enumerate(pulled):
        assert (await a.ok("GetResult", id=job_id))["result"] == {"n": i}


async def _wait_for_three(client: RawClient) -> None:
    with trio.fail_after(10):
        while len((await _status(client))["live"]) < 3:
            await trio.sleep(0.05)
