"""Broker-wide reads across three real brokers on one PostgreSQL database: Stats,
Metrics, Prometheus and ListWorkers through any broker (or its HTTP API) answer for
the whole cluster; a broker that does not answer in time is left out and named
(docs/scale-out.md, "Broker-wide reads").

Needs a PostgreSQL server (``pg_dsn``); skipped, saying why, without one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from trioqueue.testing import RawClient
from trioqueue.testing.cluster import BrokerCluster

# q0 gets 1 job, q1 2, ... q7 8: 36 in all, on queues the three brokers share.
QUEUES = {f"q{i}": i + 1 for i in range(8)}
TOTAL = sum(QUEUES.values())
READ_TIMEOUT_S = 1.0
# Long enough that a broker paused for a read's bound is still live when resumed.
LEASE_S = 5.0


@pytest.fixture
async def cluster(tmp_path: Path, pg_dsn: str) -> AsyncIterator[BrokerCluster]:
    brokers = BrokerCluster(pg_dsn, 3, tmp_path, lease_s=LEASE_S, extra_args=(
        "--cluster-read-timeout-s", str(READ_TIMEOUT_S)))
    try:
        await brokers.start()
        yield brokers
    finally:
        await brokers.stop()


async def _clients(cluster: BrokerCluster) -> list[RawClient]:
    """A client of each broker, once every broker sees all three live (a read asks
    the brokers its broker saw at its last beat)."""
    clients = [await RawClient.connect(broker.tcp_port) for broker in cluster.brokers]
    for client in clients:
        with trio.fail_after(10):
            while len((await client.ok("ClusterStatus"))["data"]["cluster"]["live"]) < 3:
                await trio.sleep(0.05)
    return clients


async def _push_everywhere(client: RawClient, clients: list[RawClient]) -> dict[str, int]:
    """QUEUES' jobs pushed through ``client``; the waiting jobs each broker serves (by
    its id), which must be spread over more than one broker for the test to mean much."""
    for queue, count in QUEUES.items():
        for i in range(count):
            await client.ok("PUSH", queue=queue, name="n", data={"i": i})
    served: dict[str, int] = {}
    for other in clients:
        status = (await other.ok("ClusterStatus"))["data"]["cluster"]
        served[status["brokerId"]] = sum(QUEUES.get(q, 0) for q in status["queues"])
    assert sum(served.values()) == TOTAL
    assert sum(1 for jobs in served.values() if jobs) >= 2, served
    return served


async def test_stats_through_any_broker_count_every_brokers_queues(
        cluster: BrokerCluster) -> None:
    clients = await _clients(cluster)
    served = await _push_everywhere(clients[0], clients)
    await clients[1].ok("PULL", queue="q7", timeout=0)
    for i, client in enumerate(clients):
        reply = await client.ok("Stats")
        assert reply["brokers"] == {"answered": 3, "missing": []}
        stats = reply["stats"]
        assert (stats["waiting"], stats["active"]) == (TOTAL - 1, 1)
        assert (stats["totalPushed"], stats["totalPulled"]) == (TOTAL, 1)
        metrics = (await client.ok("Metrics"))["metrics"]
        assert metrics["totalPushed"] == TOTAL
        # ``local``: this broker's own queues only
        own = (await client.ok("Stats", local=True))["stats"]
        assert own["waiting"] + own["active"] == served[f"b{i}"]


async def test_the_http_api_of_one_broker_answers_for_the_cluster(
        cluster: BrokerCluster) -> None:
    clients = await _clients(cluster)
    served = await _push_everywhere(clients[2], clients)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{cluster[1].ws_port}",
                                 timeout=10.0) as http:
        stats = (await http.get("/stats")).json()
        assert stats["stats"]["waiting"] == TOTAL
        assert stats["brokers"] == {"answered": 3, "missing": []}
        metrics = (await http.get("/metrics")).json()
        assert metrics["metrics"]["totalPushed"] == TOTAL
        queues = (await http.get("/dashboard/queues")).json()["data"]
        assert [row["name"] for row in queues["queues"]] == sorted(QUEUES)
        assert queues["total"] == len(QUEUES)
        own = (await http.get("/stats", params={"local": "true"})).json()
        assert own["stats"]["waiting"] == served["b1"] and "brokers" not in own
        # the health probe is this broker's: it never waits for the others
        health = (await http.get("/health")).json()
        assert health["queues"]["waiting"] == served["b1"]


async def test_prometheus_has_every_queue_once(cluster: BrokerCluster) -> None:
    clients = await _clients(cluster)
    await _push_everywhere(clients[0], clients)
    text = (await clients[1].ok("Prometheus"))["data"]["metrics"]
    series = [line.rsplit(" ", 1)[0] for line in text.splitlines()
              if line and not line.startswith("#")]
    assert len(series) == len(set(series))  # one series per name and labels
    families = {f.name: f for f in text_string_to_metric_families(text)}
    waiting = {s.labels["queue"]: s.value
               for s in families["bunqueue_queue_jobs_waiting"].samples}
    assert waiting == QUEUES
    assert families["bunqueue_jobs_waiting"].samples[0].value == TOTAL
    up = {s.labels["broker"]: s.value for s in families["bunqueue_cluster_broker_up"].samples}
    assert up == {"b0": 1, "b1": 1, "b2": 1}


async def test_list_workers_through_one_broker_lists_every_brokers_workers(
        cluster: BrokerCluster) -> None:
    a, b, c = await _clients(cluster)
    ids = {}
    for name, client in (("on-b1", b), ("on-b2", c)):
        reply = await client.ok("RegisterWorker", name=name, queues=["q0"], concurrency=2)
        ids[name] = reply["data"]["workerId"]
    listed = await a.ok("ListWorkers")
    assert sorted(w["name"] for w in listed["data"]["workers"]) == ["on-b1", "on-b2"]
    assert {w["id"] for w in listed["data"]["workers"]} == set(ids.values())
    assert listed["data"]["stats"]["total"] == 2
    assert listed["data"]["stats"]["concurrencySlots"] == 4
    assert listed["brokers"] == {"answered": 3, "missing": []}


@pytest.mark.slow  # (CI runs the rest of the cluster suite: README)
async def test_a_paused_broker_is_left_out_within_the_bound(
        cluster: BrokerCluster) -> None:
    clients = await _clients(cluster)
    served = await _push_everywhere(clients[0], clients)
    assert served["b2"]  # (the paused broker's jobs are the ones left out)
    await clients[0].ok("Stats")  # (the peer links are open before the pause)
    cluster[2].pause()
    try:
        started = trio.current_time()
        reply = await clients[0].ok("Stats")
        elapsed = trio.current_time() - started
        assert reply["brokers"] == {"answered": 2, "missing": ["b2"]}
        assert reply["stats"]["waiting"] == TOTAL - served["b2"]
        assert READ_TIMEOUT_S * 0.9 <= elapsed < READ_TIMEOUT_S + 2.0
        workers = await clients[1].ok("ListWorkers")
        assert workers["brokers"] == {"answered": 2, "missing": ["b2"]}
    finally:
        cluster[2].resume()
    reply = await clients[0].ok("Stats")
    assert reply["brokers"] == {"answered": 3, "missing": []}
    assert reply["stats"]["waiting"] == TOTAL
