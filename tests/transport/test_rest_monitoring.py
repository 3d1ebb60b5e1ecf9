"""The monitoring REST routes over real HTTP: /stats, /metrics, /prometheus,
/dashboard, /dashboard/queues, /dashboard/queues/{queue} and /storage.

Their commands (Stats, Metrics, Prometheus, DashboardOverview, DashboardQueues,
DashboardQueue, StorageStatus) come from the ``stats`` branch: until it is merged the
broker does not know them, and these tests are skipped (they run by themselves once
the commands exist)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from trioqueue.transport.wire.commands import ROUTES as COMMAND_ROUTES

from .rest_client import http_fixture, push, rest_client

MONITORING = ("Stats", "Metrics", "Prometheus", "DashboardOverview", "DashboardQueues",
              "DashboardQueue", "StorageStatus")
pytestmark = pytest.mark.skipif(
    not all(cmd in COMMAND_ROUTES for cmd in MONITORING),
    reason="the monitoring commands are not in this build yet (branch stats)")

http = http_fixture()


async def test_stats_and_metrics(http: httpx.AsyncClient) -> None:
    await push(http)
    stats = await http.get("/stats")
    assert stats.status_code == 200 and stats.json()["stats"]["waiting"] == 1
    metrics = await http.get("/metrics")
    assert metrics.status_code == 200 and metrics.json()["metrics"]["totalPushed"] == 1


async def test_prometheus_is_text_a_scraper_parses(http: httpx.AsyncClient) -> None:
    await push(http)
    scrape = await http.get("/prometheus")
    assert scrape.status_code == 200
    assert scrape.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    names = {family.name for family in text_string_to_metric_families(scrape.text)}
    assert "bunqueue_jobs_waiting" in names


async def test_prometheus_with_metrics_auth(start_server: Callable[..., Any]) -> None:
    async with rest_client(start_server, auth_tokens=["t"], metrics_auth=True) as http:
        assert (await http.get("/prometheus")).status_code == 401
        allowed = await http.get("/prometheus", headers={"Authorization": "Bearer t"})
        assert allowed.status_code == 200
    async with rest_client(start_server, auth_tokens=["t"]) as http:
        assert (await http.get("/prometheus")).status_code == 200  # ungated by default


async def test_dashboard_routes(http: httpx.AsyncClient) -> None:
    for queue in ("a", "b", "c"):
        await push(http, queue)
    overview = await http.get("/dashboard")
    assert overview.status_code == 200 and overview.json()["ok"] is True
    page = await http.get("/dashboard/queues?limit=2&offset=1")
    assert page.status_code == 200
    body = page.json()
    queues = body.get("data", body)["queues"]
    assert len(queues) == 2
    one = await http.get("/dashboard/queues/a?includeJobs=true")
    assert one.status_code == 200
    detail = one.json().get("data", one.json())
    assert detail["name"] == "a" and "jobs" in detail
    without = (await http.get("/dashboard/queues/a")).json()
    assert "jobs" not in without.get("data", without)


async def test_storage_status(http: httpx.AsyncClient) -> None:
    storage = await http.get("/storage")
    assert storage.status_code == 200 and storage.json()["data"]["diskFull"] is False
