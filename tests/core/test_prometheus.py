"""The text exposition (core/metrics/prometheus.py): escaping, HELP/TYPE lines, the per-queue
cap and its order, parsed back by prometheus_client's parser."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.core.test_queue import Harness
from trioqueue.core.metrics.broker_stats import BrokerStats
from trioqueue.core.metrics.prometheus import Exposition, escape_label, exposition
from trioqueue.core.queue import QueueState
from trioqueue.core.webhooks.registry import WebhookRegistry
from trioqueue.core.workers import WorkerRegistry

NOW = 1_700_000_000_000


def test_escape_label() -> None:
    assert escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_escaped_labels_parse_back() -> None:
    out = Exposition()
    nasty = 'q"1\\x\ny'
    out.one("bunqueue_queue_jobs_waiting", "gauge", "per queue", 3, {"queue": nasty})
    text = out.text()
    assert text.endswith("\n")
    assert text.splitlines()[:2] == ["# HELP bunqueue_queue_jobs_waiting per queue",
                                     "# TYPE bunqueue_queue_jobs_waiting gauge"]
    [family] = text_string_to_metric_families(text)
    assert family.samples[0].labels == {"queue": nasty}
    assert family.samples[0].value == 3


class Scope:
    """The router as the exposition reads it, over QueueStates of the core."""

    def __init__(self, queues: dict[str, QueueState], cap: int) -> None:
        self._queues = queues
        self.stats = BrokerStats(started_ms=NOW - 5_000, metrics_max_queues=cap)
        self.workers = WorkerRegistry()
        self.webhooks = WebhookRegistry()
        self.crons: Any = None

    def queue_states(self) -> list[tuple[str, QueueState]]:
        return list(self._queues.items())

    def stored_count(self, queue: str, state: str) -> int:
        return 0

    def finished_jobs(self, queue: str) -> int:
        return 0

    def forget_expired_retained(self, now: int) -> int:
        return 0

    def compact_index(self) -> int:
        return 0


def _queues(*names: str) -> dict[str, QueueState]:
    queues = {}
    for i, name in enumerate(names):
        h = Harness()
        for _ in range(i + 1):
            h.push(NOW)
        queues[name] = h.q
    return queues


def test_cap_takes_the_first_queues_by_name() -> None:
    scope = Scope(_queues("zeta", "alpha", "mid"), cap=2)
    families = {f.name: f for f in text_string_to_metric_families(exposition(scope, NOW))}
    waiting = [(s.labels["queue"], s.value)
               for s in families["bunqueue_queue_jobs_waiting"].samples]
    assert waiting == [("alpha", 2), ("mid", 3)]
    assert families["bunqueue_queue_metrics_exported"].samples[0].value == 2
    assert families["bunqueue_queue_metrics_omitted"].samples[0].value == 1
    assert families["bunqueue_jobs_waiting"].samples[0].value == 6
    assert families["bunqueue_jobs_pushed"].samples[0].value == 6
    assert families["bunqueue_uptime_seconds"].samples[0].value == 5


def test_cap_zero_exports_no_queue() -> None:
    scope = Scope(_queues("a"), cap=0)
    families = {f.name: f for f in text_string_to_metric_families(exposition(scope, NOW))}
    assert families["bunqueue_queue_jobs_waiting"].samples == []
    assert families["bunqueue_queue_metrics_omitted"].samples[0].value == 1


def test_every_family_has_help_and_type_once() -> None:
    text = exposition(Scope(_queues("a"), cap=10), NOW)
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    helps = [line.split()[2] for line in text.splitlines() if line.startswith("# HELP")]
    assert names == helps and len(names) == len(set(names))
    assert "bunqueue_sqlite_database_size_bytes" not in names
