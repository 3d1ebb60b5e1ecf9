"""The cluster's Prometheus scrape (cluster/prometheus.py): the brokers' real
expositions merged, parsed back by prometheus_client's parser."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.core.test_prometheus import NOW, Scope, _queues
from trioqueue.cluster.merge import Answered
from trioqueue.cluster.prometheus import merge_prometheus, parse
from trioqueue.core.metrics.broker_stats import ProcessNumbers
from trioqueue.core.metrics.prometheus import Exposition, exposition


def _scrape(*scopes: Scope, missing: tuple[str, ...] = ()) -> dict[str, Any]:
    replies = [{"data": {"metrics": exposition(scope, NOW)}} for scope in scopes]
    answered = Answered([f"b{i}" for i in range(len(scopes))], list(missing))
    text = merge_prometheus(replies, answered)["data"]["metrics"]
    assert isinstance(text, str)
    return {"text": text,
            "families": {f.name: f for f in text_string_to_metric_families(text)}}


def _values(family: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}


def _brokers() -> list[Scope]:
    b0, b1 = Scope(_queues("alpha"), cap=10), Scope(_queues("beta", "gamma"), cap=10)
    b0.stats.process = lambda: ProcessNumbers(100, 200, 1.5, 1_000.0)
    b1.stats.process = lambda: ProcessNumbers(900, 900, 9.0, 2_000.0)
    b1.stats.started_ms = NOW - 60_000
    b0.stats.timings["push"].observe(0.002)
    b1.stats.timings["push"].observe(0.002, 3)
    b1.stats.timings["push"].observe(0.2)
    b0.stats.connections.open("tcp")
    b1.stats.connections.open("tcp")
    b1.stats.connections.open("websocket")
    return [b0, b1]


def test_every_queue_once_and_totals_summed() -> None:
    families = _scrape(*_brokers())["families"]
    waiting = {s.labels["queue"]: s.value
               for s in families["bunqueue_queue_jobs_waiting"].samples}
    # _queues gives its i-th queue i + 1 jobs
    assert waiting == {"alpha": 1, "beta": 1, "gamma": 2}
    assert families["bunqueue_jobs_waiting"].samples[0].value == 4
    assert families["bunqueue_jobs_pushed"].samples[0].value == 4
    assert families["bunqueue_queue_metrics_exported"].samples[0].value == 3
    connections = {s.labels["transport"]: s.value
                   for s in families["bunqueue_connections"].samples}
    assert connections == {"tcp": 2, "websocket": 1, "sse": 0}


def test_process_uptime_and_storage_are_the_askers() -> None:
    families = _scrape(*_brokers())["families"]
    assert families["process_resident_memory_bytes"].samples[0].value == 100
    assert families["process_cpu_seconds"].samples[0].value == 1.5
    assert families["bunqueue_uptime_seconds"].samples[0].value == 5
    assert len(families["bunqueue_build_info"].samples) == 1
    assert families["bunqueue_storage_used_bytes"].samples[0].value == 0


def test_webhooks_are_the_askers_every_broker_holds_them_all() -> None:
    brokers = _brokers()
    for scope in brokers:
        scope.webhooks.load([{"id": "w", "url": "http://h/", "events": ["job.pushed"],
                              "queue": None, "createdAt": NOW}])
    families = _scrape(*brokers)["families"]
    assert families["bunqueue_webhooks_registered"].samples[0].value == 1
    assert families["bunqueue_webhooks_enabled"].samples[0].value == 1


def test_histograms_add_up_bucket_by_bucket() -> None:
    families = _scrape(*_brokers())["families"]
    push = _values(families["bunqueue_push_duration_seconds"])
    assert push[("bunqueue_push_duration_seconds_count", ())] == 5
    assert push[("bunqueue_push_duration_seconds_bucket", (("le", "0.005"),))] == 4
    assert push[("bunqueue_push_duration_seconds_bucket", (("le", "+Inf"),))] == 5
    assert abs(push[("bunqueue_push_duration_seconds_sum", ())] - 0.208) < 1e-9


def test_one_series_per_name_and_labels_and_help_type_once() -> None:
    text = _scrape(*_brokers(), Scope(_queues("alpha"), cap=10))["text"]
    samples = [line.rsplit(" ", 1)[0] for line in text.splitlines()
               if line and not line.startswith("#")]
    assert len(samples) == len(set(samples))
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    helps = [line.split()[2] for line in text.splitlines() if line.startswith("# HELP")]
    assert types == helps and len(types) == len(set(types))
    assert text.endswith("\n")


def test_each_broker_says_whether_it_answered() -> None:
    families = _scrape(*_brokers(), missing=("b2",))["families"]
    up = {s.labels["broker"]: s.value for s in families["bunqueue_cluster_broker_up"].samples}
    assert up == {"b0": 1, "b1": 1, "b2": 0}


def test_labels_with_escapes_survive_the_round_trip() -> None:
    nasty = 'q"1\\x\ny,}{'
    out = Exposition()
    out.family("bunqueue_queue_jobs_waiting", "gauge", "per queue",
               [("", {"queue": nasty}, 3), ("", {"queue": "plain"}, 1)])
    [family] = parse(out.text()).values()
    assert family.samples == {("bunqueue_queue_jobs_waiting", (("queue", nasty),)): 3.0,
                              ("bunqueue_queue_jobs_waiting", (("queue", "plain"),)): 1.0}
    merged = merge_prometheus([{"data": {"metrics": out.text()}}], Answered(["b0"], []))
    parsed = {f.name: f for f in text_string_to_metric_families(merged["data"]["metrics"])}
    assert {s.labels["queue"] for s in parsed["bunqueue_queue_jobs_waiting"].samples} == {
        nasty, "plain"}
