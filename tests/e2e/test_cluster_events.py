"""Live events in a cluster, as a user sees them: a client subscribed through any broker
gets the events of a queue another broker serves, each once and in order, over TCP,
WebSocket, SSE and our client's QueueEvents (docs/scale-out.md, "Events across
brokers"). Three real brokers on one PostgreSQL database (``pg_dsn``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from trioqueue.client import QueueEvents, open_connection
from trioqueue.cluster.rendezvous import preferred_owner
from trioqueue.testing import RawClient
from trioqueue.testing.cluster import BrokerCluster, queue_served_by

from .test_events import next_event

IDS = ["b0", "b1", "b2"]


# The tests that start, stop or count connections of brokers take a cluster of their
# own (``cluster``); those that use queues of their own share the module's
# (``shared_three_brokers``).
@pytest.fixture
async def cluster(tmp_path: Path, pg_dsn: str) -> AsyncIterator[BrokerCluster]:
    brokers = BrokerCluster(pg_dsn, 3, tmp_path)
    try:
        yield brokers
    finally:
        await brokers.stop()


async def started(cluster: BrokerCluster) -> list[RawClient]:
    """Every broker started, each seeing the three: a client of each."""
    await cluster.start()
    return await connected(cluster)


async def connected(cluster: BrokerCluster) -> list[RawClient]:
    """A client of each broker of a running cluster, once each sees the three."""
    clients = [await RawClient.connect(broker.tcp_port) for broker in cluster.brokers]
    await until_all(clients, lambda s: len(s["live"]) == 3, "every broker to see three")
    return clients


async def status(client: RawClient) -> dict[str, Any]:
    cluster: dict[str, Any] = (await client.ok("ClusterStatus"))["data"]["cluster"]
    return cluster


async def until_all(clients: list[RawClient], holds: Any, what: str,
                    timeout_s: float = 10.0) -> None:
    with trio.fail_after(timeout_s):
        while not all([holds(await status(client)) for client in clients]):
            await trio.sleep(0.02)  # (polling ClusterStatus, under the deadline)


async def a_job_through(client: RawClient, queue: str) -> tuple[str, str]:
    """A job pushed, pulled and acknowledged through ``client``; then a marker job
    pushed, whose event comes after any duplicate of the first job's would have."""
    job_id = (await client.ok("PUSH", queue=queue, name="n", data=1))["id"]
    assert (await client.ok("PULL", queue=queue, timeout=0))["job"]["id"] == job_id
    await client.ok("ACK", id=job_id, result="done")
    marker = (await client.ok("PUSH", queue=queue, name="marker", data=2))["id"]
    return job_id, marker


def lifecycle(job_id: str, marker: str) -> list[tuple[str, str]]:
    return [("pushed", job_id), ("pulled", job_id), ("drained", ""),
            ("completed", job_id), ("pushed", marker)]


async def test_subscribers_on_any_broker_see_each_event_once_in_order(
        shared_three_brokers: BrokerCluster) -> None:
    cluster = shared_three_brokers
    b0, b1, b2 = await connected(cluster)
    queue = queue_served_by("b1", "tcp")
    # one subscriber through another broker, one through the queue's own
    listeners = [await RawClient.connect(cluster[i].tcp_port) for i in (0, 1)]
    for listener in listeners:
        await listener.ok("SubscribeEvents", queue=queue)  # answered once relays are up
    job_id, marker = await a_job_through(b2, queue)
    assert queue in (await status(b1))["queues"]
    for listener in listeners:
        seen = [await next_event(listener) for _ in range(5)]
        assert [(e["eventType"], e["jobId"]) for e in seen] == lifecycle(job_id, marker)
        assert seen[3]["data"] == "done" and all(e["queue"] == queue for e in seen)


async def test_websocket_and_sse_subscribers_see_a_queue_another_broker_serves(
        shared_three_brokers: BrokerCluster) -> None:
    cluster = shared_three_brokers
    b0, _, b2 = await connected(cluster)
    queue = queue_served_by("b1", "ws")
    port = cluster[0].ws_port
    async with open_websocket_url(f"ws://127.0.0.1:{port}/ws/queues/{queue}") as ws, \
            httpx.AsyncClient(timeout=10) as http, \
            http.stream("GET", f"http://127.0.0.1:{port}/events/queues/{queue}") as sse:
        # no acknowledgement to wait for here: b0's connections to its peers are up
        await until_all([b0], lambda s: s["eventLinks"] == 2, "b0's event links")
        job_id, marker = await a_job_through(b2, queue)
        with trio.fail_after(10):
            raw = [json.loads(await ws.get_message()) for _ in range(5)]
            names = []
            async for line in sse.aiter_lines():
                if line.startswith("event: job:") or line == "event: queue:drained":
                    names.append(line.removeprefix("event: "))
                if len(names) == 5:
                    break
    assert [(e["eventType"], e["jobId"]) for e in raw] == lifecycle(job_id, marker)
    assert names == ["job:pushed", "job:active", "queue:drained", "job:completed",
                     "job:pushed"]


async def test_queue_events_through_one_broker_sees_a_job_another_serves_complete(
        shared_three_brokers: BrokerCluster) -> None:
    cluster = shared_three_brokers
    _, b1, _ = await connected(cluster)
    queue = queue_served_by("b2", "qe")
    async with open_connection(port=cluster[0].tcp_port) as conn, \
            QueueEvents(queue, conn) as events:
        job_id = (await b1.ok("PUSH", queue=queue, name="n", data={"x": 1}))["id"]
        await b1.ok("PULL", queue=queue, timeout=0)
        await b1.ok("ACK", id=job_id, result={"sum": 2})
        with trio.fail_after(10):
            async for event in events:
                if event.name == "completed":
                    break
    assert event.job_id == job_id and event.return_value == {"sum": 2}


async def test_event_connections_are_held_only_while_a_client_listens(
        cluster: BrokerCluster) -> None:
    clients = await started(cluster)
    nothing = {"eventLinks": 0, "eventStreams": 0}
    await until_all(clients, lambda s: {k: s[k] for k in nothing} == nothing,
                    "no event connections")
    listener = await RawClient.connect(cluster[0].tcp_port)
    await listener.ok("SubscribeEvents", queue="anything")
    b0, b1, b2 = [await status(client) for client in clients]
    assert (b0["eventLinks"], b0["eventStreams"]) == (2, 0)
    # the others stream to b0, and do not start listening to each other for it
    assert [(s["eventLinks"], s["eventStreams"]) for s in (b1, b2)] == [(0, 1), (0, 1)]
    await listener.aclose()
    await until_all(clients, lambda s: {k: s[k] for k in nothing} == nothing,
                    "the event connections to close")


@pytest.mark.slow  # (CI runs the rest of the cluster suite: README)
async def test_a_queue_that_moves_to_a_broker_that_joined_keeps_its_subscribers(
        cluster: BrokerCluster) -> None:
    for broker in cluster.brokers[:2]:
        await broker.start()
    b0, b1 = [await RawClient.connect(broker.tcp_port) for broker in cluster.brokers[:2]]
    await until_all([b0, b1], lambda s: len(s["live"]) == 2, "b0 and b1 to see each other")
    # served by b1 until b2 joins, then by b2
    queue = next(q for q in (f"mv{i}" for i in itertools.count())
                 if preferred_owner(q, IDS[:2]) == "b1" and preferred_owner(q, IDS) == "b2")
    listener = await RawClient.connect(cluster[0].tcp_port)
    await listener.ok("SubscribeEvents", queue=queue)
    first = (await b1.ok("PUSH", queue=queue, name="n", data=1))["id"]
    assert (await next_event(listener))["jobId"] == first
    await cluster[2].start()
    b2 = await RawClient.connect(cluster[2].tcp_port)
    await until_all([b2], lambda s: queue in s["queues"], "b2 to take the queue", 15)
    await until_all([b0], lambda s: s["eventLinks"] == 2, "b0's link to b2")
    second = (await b2.ok("PUSH", queue=queue, name="n", data=2))["id"]
    event = await next_event(listener)
    assert (event["eventType"], event["jobId"]) == ("pushed", second)
    assert listener.events == []


async def test_a_broker_wide_event_reaches_a_websocket_of_another_broker(
        tmp_path: Path, pg_dsn: str) -> None:
    """A dashboard event that belongs to no queue (worker:connected, cron:created) told
    by one broker reaches a WebSocket pattern subscriber of the other, once."""
    async with BrokerCluster(pg_dsn, 2, tmp_path) as brokers:
        b0, b1 = [await RawClient.connect(broker.tcp_port) for broker in brokers.brokers]
        await until_all([b0, b1], lambda s: len(s["live"]) == 2, "both brokers live")
        port = brokers[0].ws_port
        async with open_websocket_url(f"ws://127.0.0.1:{port}/ws") as ws:
            await ws.send_message(json.dumps({"cmd": "Subscribe", "reqId": "s",
                                              "events": ["worker:*", "cron:created"]}))
            assert json.loads(await ws.get_message())["ok"] is True
            await until_all([b0], lambda s: s["eventLinks"] == 1, "b0's event link")
            worker = (await b1.ok("RegisterWorker", name="far", queues=["q"]))["data"]
            await b1.ok("Cron", name="far-cron", queue="q", repeatEvery=60_000)
            with trio.fail_after(10):
                frames = [json.loads(await ws.get_message()) for _ in range(2)]
    assert [f["event"] for f in frames] == ["worker:connected", "cron:created"]
    assert frames[0]["data"]["workerId"] == worker["workerId"]
    assert frames[0]["data"]["name"] == "far" and "queue" not in frames[0]["data"]
    assert frames[1]["data"]["name"] == "far-cron"
