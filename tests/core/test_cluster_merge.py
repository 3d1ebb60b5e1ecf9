"""The merges of a cluster's broker-wide reads (cluster/merge.py): each broker's
real answer (the handlers over queues of the core), merged as the asking broker does."""

from __future__ import annotations

from typing import Any

from tests.core.test_prometheus import NOW, Scope
from tests.core.test_queue import Harness
from trioqueue.cluster.merge import (
    Answered,
    merge_dashboard_overview,
    merge_dashboard_queues,
    merge_list_webhooks,
    merge_list_workers,
    merge_metrics,
    merge_stats,
    merged_history,
)
from trioqueue.core.commands.dashboard import dashboard_overview, dashboard_queues
from trioqueue.core.commands.stats import metrics, stats
from trioqueue.core.commands.webhooks import list_webhooks
from trioqueue.core.queue import QueueState

THREE = Answered(["b0", "b1", "b2"], [])


class Broker(Scope):
    """One broker's router as its numbers read it (the queues it serves)."""

    def queue_state(self, name: str) -> QueueState | None:
        return self._queues.get(name)


def _queue(pushed: int, pulled: int = 0) -> QueueState:
    h = Harness()
    for _ in range(pushed):
        h.push(NOW)
    if pulled:
        h.pull(NOW, pulled)
    return h.q


def _brokers() -> list[Broker]:
    """Three brokers: b0 serves q0, b1 serves q1 and q2, b2 serves nothing."""
    b0 = Broker({"q0": _queue(3, 1)}, cap=100)
    b1 = Broker({"q1": _queue(2), "q2": _queue(4, 2)}, cap=100)
    b2 = Broker({}, cap=100)
    b1.stats.started_ms = NOW - 60_000  # (an older broker: its uptime is its own)
    return [b0, b1, b2]


def _register(scope: Broker, worker_id: str, now: int, **fields: Any) -> None:
    scope.workers.register({"name": worker_id, "workerId": worker_id, "queues": ["q0"],
                            **fields}, now, conn=object())


def test_stats_sum_every_brokers_jobs_and_keep_the_askers_uptime() -> None:
    replies = [stats(scope, {}, NOW, None) for scope in _brokers()]
    merged = merge_stats(replies, THREE)["stats"]
    assert merged["waiting"] == 2 + 2 + 2  # (q0: 3 - 1 pulled; q1: 2; q2: 4 - 2)
    assert merged["active"] == 1 + 2
    assert merged["totalPushed"] == 9 and merged["totalPulled"] == 3
    assert merged["uptime"] == 5_000  # b0's, the broker asked
    assert set(merged) == set(replies[0]["stats"])  # bunqueue's shape, nothing more


def test_rates_are_summed() -> None:
    replies = [{"stats": {"pushPerSec": 1.25, "pullPerSec": 0.5}},
               {"stats": {"pushPerSec": 2.5, "pullPerSec": 0.0}}]
    merged = merge_stats(replies, Answered(["b0", "b1"], []))["stats"]
    assert (merged["pushPerSec"], merged["pullPerSec"]) == (3.75, 0.5)


def test_legacy_metrics_sum_totals_and_weigh_averages() -> None:
    replies = [{"metrics": {"totalPushed": 10, "totalPulled": 10, "totalCompleted": 10,
                            "totalFailed": 1, "avgLatencyMs": 1.0, "avgProcessingMs": 10.0,
                            "memoryUsageMb": 50.0, "sqliteSizeMb": 3.0,
                            "storageSizeMb": 3.0, "activeConnections": 2}},
               {"metrics": {"totalPushed": 30, "totalPulled": 30, "totalCompleted": 30,
                            "totalFailed": 2, "avgLatencyMs": 3.0, "avgProcessingMs": 30.0,
                            "memoryUsageMb": 70.0, "sqliteSizeMb": 3.0,
                            "storageSizeMb": 3.0, "activeConnections": 5}}]
    merged = merge_metrics(replies, Answered(["b0", "b1"], []))["metrics"]
    assert merged["totalPushed"] == 40 and merged["totalFailed"] == 3
    assert merged["activeConnections"] == 7
    assert merged["avgProcessingMs"] == 25.0 and merged["avgLatencyMs"] == 2.5
    # the asker's process, and the one database's size (not three times it)
    assert merged["memoryUsageMb"] == 50.0 and merged["storageSizeMb"] == 3.0


def test_queue_metrics_come_from_the_broker_that_serves_the_queue() -> None:
    brokers = _brokers()
    h = Harness()
    for _ in range(2):
        h.push(NOW)
        job_id, token = h.take(NOW)
        h.ack(job_id, NOW, token=token)
    brokers[1]._queues["q1"] = h.q
    msg = {"queue": "q1", "type": "completed"}
    replies = [metrics(scope, msg, NOW, None) for scope in brokers]
    assert replies[0]["data"]["meta"]["count"] == 0  # (b0 does not know q1)
    assert merge_metrics(replies, THREE) == replies[1]
    assert replies[1]["data"]["meta"]["count"] == 2


def test_workers_are_listed_from_every_broker_once() -> None:
    b0, b1, b2 = _brokers()
    _register(b0, "w0", NOW, concurrency=2)
    _register(b1, "w1", NOW, concurrency=3)
    _register(b1, "moved", NOW - 10_000)  # (seen by b1 first, then by b2)
    _register(b2, "moved", NOW)
    b2.workers.heartbeat({"id": "moved", "processed": 7}, NOW)
    replies = [scope.workers.list(NOW) for scope in (b0, b1, b2)]
    data = merge_list_workers(replies, THREE)["data"]
    assert sorted(w["id"] for w in data["workers"]) == ["moved", "w0", "w1"]
    [moved] = [w for w in data["workers"] if w["id"] == "moved"]
    assert moved["processedJobs"] == 7  # b2's entry: the one seen last
    assert data["stats"] == {"total": 3, "active": 3, "totalProcessed": 7,
                             "totalFailed": 0, "activeJobs": 0, "concurrencySlots": 6}


def test_dashboard_queues_are_joined_by_name() -> None:
    replies = [dashboard_queues(scope, {}, NOW, None) for scope in _brokers()]
    data = merge_dashboard_queues(replies, THREE)["data"]
    assert [row["name"] for row in data["queues"]] == ["q0", "q1", "q2"]
    assert [row["waiting"] for row in data["queues"]] == [2, 2, 2]
    assert data["timestamp"] == float(NOW)


def test_a_queue_named_by_two_brokers_is_listed_once() -> None:
    rows = [{"data": {"queues": [{"name": "q", "waiting": 1}]}},
            {"data": {"queues": [{"name": "q", "waiting": 9}, {"name": "a", "waiting": 0}]}}]
    data = merge_dashboard_queues(rows, Answered(["b0", "b1"], []))["data"]
    assert data["queues"] == [{"name": "a", "waiting": 0}, {"name": "q", "waiting": 1}]


def test_dashboard_overview_sums_counts_and_keeps_the_askers_process() -> None:
    brokers = _brokers()
    _register(brokers[2], "w2", NOW)
    replies = [dashboard_overview(scope, {}, NOW, None) for scope in brokers]
    data = merge_dashboard_overview(replies, THREE)["data"]
    assert data["stats"]["waiting"] == 6 and data["stats"]["uptime"] == 5_000
    assert data["collections"] == {"queues": 3, "liveJobs": 9}
    assert data["workers"]["total"] == 1 and data["workers"]["list"][0]["id"] == "w2"
    assert data["memory"] == replies[0]["data"]["memory"]
    assert data["storage"] == replies[0]["data"]["storage"]
    assert set(data) == set(replies[0]["data"])


def test_history_points_are_summed_per_step() -> None:
    older = [{"t": 10_001.0, "pushed": 5, "completed": 1, "failed": 0},
             {"t": 20_002.0, "pushed": 8, "completed": 2, "failed": 1},
             {"t": 40_003.0, "pushed": 9, "completed": 3, "failed": 1}]
    younger = [{"t": 30_500.0, "pushed": 100, "completed": 10, "failed": 0}]
    merged = merged_history([older, younger])
    assert merged == [
        {"t": 10_001.0, "pushed": 5, "completed": 1, "failed": 0},
        {"t": 20_002.0, "pushed": 8, "completed": 2, "failed": 1},
        # older has no point at 30 s: its totals then were those of 20 s
        {"t": 30_500.0, "pushed": 108, "completed": 12, "failed": 1},
        {"t": 40_003.0, "pushed": 109, "completed": 13, "failed": 1}]


def test_brokers_field() -> None:
    assert Answered(["b0", "b1"], ["b2"]).wire() == {"answered": 2, "missing": ["b2"]}


def test_webhooks_are_the_askers_with_every_brokers_delivery_counts() -> None:
    """Every broker holds the table's webhooks; each counts the deliveries it made (the
    events of the queues it serves): the list is the asker's, the counts summed."""
    scopes = [Broker({}, cap=100) for _ in range(3)]
    for scope in scopes:
        scope.webhooks.load([
            {"id": "w1", "url": "http://h/1", "events": ["job.pushed"], "queue": None,
             "createdAt": NOW},
            {"id": "w2", "url": "http://h/2", "events": ["job.failed"], "queue": "q1",
             "createdAt": NOW, "enabled": False}])
    for i, scope in enumerate(scopes):
        hook = scope.webhooks.hooks["w1"]
        hook.success_count, hook.failure_count, hook.dropped_count = i, 1, i * 2
        hook.last_triggered = None if i == 0 else NOW + i
    scopes[2].webhooks.load([{"id": "w3", "url": "http://h/3", "events": ["job.pushed"],
                              "queue": None, "createdAt": NOW}])  # (a moment ahead)
    replies = [list_webhooks(scope, {}, NOW, None) for scope in scopes]
    merged = merge_list_webhooks(replies, THREE)["data"]
    w1, w2 = merged["webhooks"]
    assert (w1["id"], w1["successCount"], w1["failureCount"], w1["droppedCount"],
            w1["lastTriggered"]) == ("w1", 0 + 1 + 2, 3, 0 + 2 + 4, NOW + 2)
    assert (w2["id"], w2["successCount"], w2["enabled"], w2["lastTriggered"]) == (
        "w2", 0, False, None)
    assert merged["stats"] == {"total": 2, "enabled": 1}
