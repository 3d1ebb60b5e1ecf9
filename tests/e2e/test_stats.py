"""The broker's numbers over real TCP: Stats, Metrics (both forms), StorageStatus,
Prometheus and the Dashboard commands, after known jobs were pushed, pulled, acked
and failed; their refusals."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import StoreEngine
from trioqueue.server.run import Server
from trioqueue.testing import RawClient


async def _work(client: RawClient) -> None:
    """Four jobs pushed to q1 (one delayed), two pulled: one acked, one failed for
    good; one pushed to q2."""
    for i in range(3):
        await client.ok("PUSH", queue="q1", data={"i": i}, maxAttempts=1)
    await client.ok("PUSH", queue="q1", data={"i": 3}, delay=60_000)
    await client.ok("PUSH", queue="q2", data={})
    first = await client.ok("PULL", queue="q1", owner="w")
    await client.ok("ACK", id=first["job"]["id"], token=first["token"], result={"r": 1})
    second = await client.ok("PULL", queue="q1", owner="w")
    await client.ok("FAIL", id=second["job"]["id"], token=second["token"], error="boom")


async def test_stats_counts_and_totals(client: RawClient) -> None:
    await _work(client)
    stats = (await client.ok("Stats"))["stats"]
    assert stats["waiting"] == 2  # q1's third job and q2's
    assert stats["delayed"] == 1
    assert stats["active"] == 0
    assert stats["completed"] == 1
    assert stats["dlq"] == 1
    assert stats["failed"] == 1
    assert stats["totalPushed"] == 5
    assert stats["totalPulled"] == 2
    assert stats["uptime"] >= 0
    assert isinstance(stats["pushPerSec"], float)
    assert isinstance(stats["pullPerSec"], float)


async def test_legacy_metrics(client: RawClient) -> None:
    await _work(client)
    metrics = (await client.ok("Metrics"))["metrics"]
    assert metrics["totalPushed"] == 5
    assert metrics["totalPulled"] == 2
    assert metrics["totalCompleted"] == 1
    assert metrics["totalFailed"] == 1
    assert metrics["avgLatencyMs"] >= 0
    assert metrics["avgProcessingMs"] >= 0
    assert metrics["memoryUsageMb"] > 0
    assert metrics["activeConnections"] == 1


async def test_queue_metrics_minutes(client: RawClient) -> None:
    await _work(client)
    completed = (await client.ok("Metrics", queue="q1", type="completed"))["data"]
    assert completed["meta"]["count"] == 1
    assert completed["meta"]["prevCount"] == 1
    assert completed["data"] == [1]
    assert completed["count"] == 1
    failed = (await client.ok("Metrics", queue="q1", type="failed"))["data"]
    assert failed["data"] == [1]
    none = (await client.ok("Metrics", queue="q2", type="failed"))["data"]
    assert none["data"] == [] and none["meta"]["count"] == 0
    unknown = (await client.ok("Metrics", queue="nope", type="completed"))["data"]
    assert unknown["count"] == 0


@pytest.mark.parametrize(("fields", "error"), [
    ({"type": "completed"}, "Metrics queue is required"),
    ({"queue": "q1"}, "Metrics type must be 'completed' or 'failed'"),
    ({"queue": "q1", "type": "waiting"}, "Metrics type must be 'completed' or 'failed'"),
])
async def test_queue_metrics_refusals(client: RawClient, fields: dict[str, Any],
                                      error: str) -> None:
    reply = await client.call("Metrics", **fields)
    assert reply == {"ok": False, "error": error, "reqId": reply["reqId"]}


@pytest.mark.engines("lmdb")  # (the PostgreSQL store's status: tests/e2e/test_postgres.py)
async def test_storage_status_lmdb(client: RawClient, server: Server) -> None:
    data = (await client.ok("StorageStatus"))["data"]
    assert data["diskFull"] is False
    assert data["error"] is None and data["since"] is None
    assert data["engine"] == "lmdb"
    assert data["path"].startswith("/")
    assert data["usedBytes"] > 0
    assert data["maxBytes"] >= data["mapBytes"] > 0
    assert data["diskFreeBytes"] > 0


async def test_storage_status_memory_and_full(start_server: Any) -> None:
    srv = await start_server(memory=True, store_max_bytes=64 * 1024,
                             store_reserve_bytes=8 * 1024)
    client = await RawClient.connect(srv.tcp_port)
    data = (await client.ok("StorageStatus"))["data"]
    assert data["engine"] == "memory" and data["path"] is None
    assert data["diskFreeBytes"] is None and data["diskFull"] is False
    refused = None
    for i in range(1000):
        reply = await client.call("PUSH", queue="big", data={"x": "y" * 1000, "i": i})
        if not reply["ok"]:
            refused = reply["error"]
            break
    assert refused is not None and refused.startswith("Storage full")
    data = (await client.ok("StorageStatus"))["data"]
    assert data["diskFull"] is True and data["degraded"] is True
    assert data["since"] is not None and "full" in data["error"]
    assert srv.broker.storage_health.degraded
    # room again once the jobs are gone
    await client.ok("Obliterate", queue="big")
    data = (await client.ok("StorageStatus"))["data"]
    assert data["diskFull"] is False and data["since"] is None
    await client.aclose()


async def test_prometheus_scrape(client: RawClient) -> None:
    await _work(client)
    for _ in range(40):  # enough batches for the sampled histograms
        await client.ok("PUSH", queue="q3", data={})
    text = (await client.ok("Prometheus"))["data"]["metrics"]
    assert text.endswith("\n")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["bunqueue_jobs_pushed"].type == "counter"
    assert families["bunqueue_jobs_pushed"].samples[0].value == 45
    assert families["bunqueue_jobs_waiting"].type == "gauge"
    assert families["bunqueue_jobs_completed"].samples[0].value == 1
    assert families["bunqueue_jobs_failed"].samples[0].value == 1
    per_queue = {s.labels["queue"]: s.value
                 for s in families["bunqueue_queue_jobs_waiting"].samples}
    assert per_queue == {"q1": 1, "q2": 1, "q3": 40}
    connections = {s.labels["transport"]: s.value
                   for s in families["bunqueue_connections"].samples}
    assert connections["tcp"] == 1 and connections["websocket"] == 0
    build = families["bunqueue_build_info"].samples[0]
    assert build.labels["version"] and build.labels["python_version"]
    push = families["bunqueue_push_duration_seconds"]
    assert push.type == "histogram"
    counts = {s.name: s.value for s in push.samples if not s.labels.get("le")}
    assert counts["bunqueue_push_duration_seconds_count"] >= 2
    buckets = [s for s in push.samples if s.labels.get("le")]
    assert buckets[-1].labels["le"] == "+Inf" and len(buckets) == 15
    assert families["bunqueue_queue_metrics_exported"].samples[0].value == 3
    assert families["bunqueue_queue_metrics_omitted"].samples[0].value == 0
    assert families["process_resident_memory_bytes"].samples[0].value > 0


async def test_prometheus_queue_cap(start_server: Any) -> None:
    srv = await start_server(memory=True, metrics_max_queues=2)
    client = await RawClient.connect(srv.tcp_port)
    for name in ("c", "a", "b"):
        await client.ok("PUSH", queue=name, data={})
    text = (await client.ok("Prometheus"))["data"]["metrics"]
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert [s.labels["queue"] for s in families["bunqueue_queue_jobs_waiting"].samples] == [
        "a", "b"]
    assert families["bunqueue_queue_metrics_omitted"].samples[0].value == 1
    await client.aclose()


async def test_dashboard_queues_and_overview(client: RawClient, store_engine: StoreEngine
                                             ) -> None:
    await _work(client)
    queues = (await client.ok("DashboardQueues"))["data"]
    assert [q["name"] for q in queues["queues"]] == ["q1", "q2"]
    q1 = queues["queues"][0]
    assert q1 == {"name": "q1", "waiting": 1, "prioritized": 0, "delayed": 1, "active": 0,
                  "dlq": 1, "paused": False, "rateLimit": None, "concurrency": None}
    overview = (await client.ok("DashboardOverview"))["data"]
    assert overview["stats"]["dlq"] == 1
    assert set(overview) >= {"stats", "throughput", "latency", "memory", "collections",
                             "workers", "crons", "storage", "timestamp"}
    assert overview["memory"]["rss"] > 0
    assert overview["storage"]["engine"] == ("lmdb" if store_engine.storage_url is None
                                             else "postgresql")


async def test_dashboard_overview_has_the_throughput_history(client: RawClient) -> None:
    """The broker samples its totals every second; the overview's history has them
    (one point per 10 s step: the step's latest totals, and when they were taken)."""
    await _work(client)
    with trio.fail_after(5):
        while True:
            history = (await client.ok("DashboardOverview"))["data"]["throughputHistory"]
            if history and history[-1]["pushed"] == 5:
                break
            await trio.sleep(0.1)
    assert history[-1]["completed"] == 1 and history[-1]["failed"] == 1


async def test_dashboard_queue(client: RawClient) -> None:
    await _work(client)
    data = (await client.ok("DashboardQueue", queue="q1"))["data"]
    assert data["name"] == "q1" and data["paused"] is False
    assert data["counts"]["waiting"] == 1 and data["counts"]["failed"] == 1
    assert "jobs" not in data
    assert len(data["dlqPreview"]) == 1
    assert data["dlqPreview"][0]["data"] == {"i": 1}
    assert set(data["dlqPreview"][0]) == {"id", "data", "attempts", "createdAt"}
    with_jobs = (await client.ok("DashboardQueue", queue="q1", includeJobs=True,
                                 jobsLimit=1))["data"]
    assert [j["data"] for j in with_jobs["jobs"]["waiting"]] == [{"i": 2}]
    assert [j["data"] for j in with_jobs["jobs"]["delayed"]] == [{"i": 3}]
    assert with_jobs["jobs"]["active"] == []
    bad = await client.call("DashboardQueue", queue="q1", jobsLimit="x")
    assert bad["ok"] is False
    assert (await client.call("DashboardQueue"))["ok"] is False


async def test_connection_gauges_and_snapshot_bodies(client: RawClient,
                                                     server: Server) -> None:
    from trio_websocket import open_websocket_url

    from trioqueue.core.commands.stats import health_status, stats_snapshot, storage_status_frame
    from trioqueue.testing.deadline import wait_until

    await _work(client)
    router = server.broker.router
    gauges = server.broker.open_connections
    now = server.broker.clock.now_ms()
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws") as ws:
        await ws.send_message('{"cmd": "Ping"}')
        await ws.get_message()
        health = health_status(router, now)
        assert health["ok"] is True
        assert health["connections"] == {"tcp": 1, "websocket": 1, "sse": 0}
        assert health["memory"]["rss"] > 0
    await wait_until(lambda: gauges.open_by_kind["websocket"] == 0, "the WebSocket gauge")
    snapshot = stats_snapshot(router, now)
    assert snapshot["totalPushed"] == 5 and snapshot["totalCompleted"] == 1
    assert snapshot["totalFailed"] == 1 and snapshot["dlq"] == 1
    assert snapshot["queues"]["q1"] == {"waiting": 1, "active": 0, "delayed": 1, "dlq": 1,
                                        "paused": False}
    assert snapshot["workers"] == {"total": 0, "active": 0} and snapshot["cronJobs"] == 0
    storage = storage_status_frame(router, now)
    assert storage["diskFull"] is False and storage["collections"]["liveJobs"] == 3
    await client.aclose()
    await wait_until(lambda: gauges.total == 0, "every gauge at 0")
