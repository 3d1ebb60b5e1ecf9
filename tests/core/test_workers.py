"""The workers registry: registration, heartbeats, staleness, reaping, connection ties."""

from __future__ import annotations

import pytest

from trioqueue.core.errors import Refused
from trioqueue.core.workers import WORKER_TIMEOUT_MS, WorkerRegistry

NOW = 1_764_000_000_000


def test_register_then_list_reports_active_worker() -> None:
    reg = WorkerRegistry()
    reply = reg.register({"name": "w", "queues": ["a", "b"], "concurrency": 4,
                          "hostname": "h", "pid": 7}, NOW, conn="c1")["data"]
    assert reply["status"] == "active" and reply["queues"] == ["a", "b"]
    listed = reg.list(NOW + 1)["data"]
    assert [w["workerId"] for w in listed["workers"]] == [reply["workerId"]]
    assert listed["stats"] == {"total": 1, "active": 1, "totalProcessed": 0,
                               "totalFailed": 0, "activeJobs": 0, "concurrencySlots": 4}


def test_reregister_keeps_counters_and_heartbeat_sets_absolute_values() -> None:
    reg = WorkerRegistry()
    reg.register({"name": "w", "queues": ["a"], "workerId": "w1"}, NOW, conn="c1")
    reg.heartbeat({"id": "w1", "activeJobs": 2, "processed": 10, "failed": 1}, NOW + 5)
    reg.register({"name": "w2", "queues": ["a"], "workerId": "w1"}, NOW + 6, conn="c2")
    (worker,) = reg.list(NOW + 7)["data"]["workers"]
    assert worker["name"] == "w2" and worker["processedJobs"] == 10
    assert worker["failedJobs"] == 1 and worker["activeJobs"] == 2


def test_stale_after_timeout_and_reaped_after_three() -> None:
    reg = WorkerRegistry()
    reg.register({"name": "w", "queues": [], "workerId": "w1"}, NOW, conn="c1")
    (worker,) = reg.list(NOW + WORKER_TIMEOUT_MS)["data"]["workers"]
    assert worker["status"] == "stale"
    assert reg.list(NOW + 3 * WORKER_TIMEOUT_MS)["data"]["workers"] == []


def test_closed_connection_unregisters_its_workers_only() -> None:
    reg = WorkerRegistry()
    reg.register({"name": "a", "queues": [], "workerId": "a"}, NOW, conn="c1")
    reg.register({"name": "b", "queues": [], "workerId": "b"}, NOW, conn="c2")
    reg.connection_closed("c1", 1_000)
    assert [w["workerId"] for w in reg.list(NOW)["data"]["workers"]] == ["b"]


def test_errors() -> None:
    reg = WorkerRegistry()
    with pytest.raises(Refused, match="Worker not found"):
        reg.heartbeat({"id": "nope"}, NOW)
    with pytest.raises(Refused, match="Worker not found"):
        reg.unregister({"workerId": "nope"}, 1_000)
    with pytest.raises(Refused, match="name is required"):
        reg.register({"queues": []}, NOW, conn=None)
    with pytest.raises(Refused, match="queues must be"):
        reg.register({"name": "w", "queues": "a"}, NOW, conn=None)
