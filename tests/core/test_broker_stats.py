"""The broker-wide numbers (core/metrics/broker_stats.py): connection gauges, the rate window,
histograms, the storage's health; explicit ``now``."""

from __future__ import annotations

from trioqueue.core.metrics.broker_stats import (
    DURATION_BUCKETS_S,
    HISTORY_POINTS,
    HISTORY_STEP_MS,
    ConnectionCounts,
    Histogram,
    RateWindow,
    StorageHealth,
    ThroughputHistory,
)


def test_connection_counts_per_transport() -> None:
    counts = ConnectionCounts()
    counts.open("tcp")
    counts.open("tcp")
    counts.open("sse")
    counts.close("tcp")
    assert counts.open_by_kind == {"tcp": 1, "websocket": 0, "sse": 1}
    assert counts.total == 2


def test_rate_window_slides() -> None:
    rates = RateWindow()
    assert rates.rates() == (0.0, 0.0)
    rates.sample(0, 0, 0)
    rates.sample(1_000, 100, 10)
    assert rates.rates() == (100.0, 10.0)
    for t in range(2_000, 12_001, 1_000):  # steady 50/s pushes, nothing pulled
        rates.sample(t, 100 + 50 * (t // 1_000 - 1), 10)
    assert rates.rates() == (50.0, 0.0)
    assert len(rates.samples) <= 7  # only the window's samples are kept
    rates.sample(12_000, 1_000, 10)  # the same instant again: replaced, not added
    assert rates.samples[-1] == (12_000, 1_000, 10)


def test_throughput_history_keeps_a_point_per_step_for_an_hour() -> None:
    history = ThroughputHistory()
    history.sample(1_000, 1, 0, 0)
    history.sample(9_999, 5, 2, 1)  # the same 10 s step: its latest totals
    history.sample(10_000, 8, 3, 1)
    assert history.as_list() == [{"t": 9_999.0, "pushed": 5, "completed": 2, "failed": 1},
                                 {"t": 10_000.0, "pushed": 8, "completed": 3, "failed": 1}]
    for step in range(2, HISTORY_POINTS + 10):
        history.sample(step * HISTORY_STEP_MS, step, 0, 0)
    points = history.as_list()
    assert len(points) == HISTORY_POINTS  # an hour, the oldest dropped
    assert points[-1]["t"] == (HISTORY_POINTS + 9) * HISTORY_STEP_MS
    assert points[0]["t"] == 10 * HISTORY_STEP_MS


def test_histogram_buckets_are_cumulative_with_inf() -> None:
    hist = Histogram()
    hist.observe(0.00005)
    hist.observe(0.0001)  # on a bound: counted under it (le)
    hist.observe(0.3, times=2)
    hist.observe(60)
    cumulative = dict(hist.cumulative())
    assert len(cumulative) == len(DURATION_BUCKETS_S) + 1
    assert cumulative["0.0001"] == 2
    assert cumulative["0.25"] == 2 and cumulative["0.5"] == 4
    assert cumulative["10.0"] == 4 and cumulative["+Inf"] == 5
    assert hist.count == 5 and abs(hist.sum_s - (0.00015 + 0.6 + 60)) < 1e-9


def test_storage_health_full_then_room() -> None:
    health = StorageHealth()
    assert not health.degraded and health.since is None
    health.note_room(True, 1_000)
    health.note_room(True, 2_000)  # still full: since stays
    assert health.degraded and health.disk_full and health.since == 1_000
    assert health.error is not None and "/" not in health.error
    health.note_room(False, 3_000)
    assert not health.degraded and health.since is None and health.error is None


def test_storage_failure_stays() -> None:
    health = StorageHealth()
    health.note_room(True, 1_000)
    health.note_failure("commit", 2_000)
    health.note_room(False, 3_000)
    assert health.degraded and health.failed and health.since == 1_000
    assert health.error == "storage commit failed"
