"""This process's numbers as read from the OS (trioqueue/process_numbers.py)."""

from __future__ import annotations

import time

from trioqueue.core.metrics.broker_stats import ProcessNumbers
from trioqueue.process_numbers import process_numbers, resident_bytes


def test_process_numbers() -> None:
    proc = ProcessNumbers._make(process_numbers())
    assert proc.rss_bytes > 0 and proc.peak_rss_bytes > 0
    assert proc.cpu_seconds > 0
    assert 1_600_000_000 < proc.start_time_s <= time.time()


def test_resident_bytes_is_the_resident_set() -> None:
    """What /health and /heapstats show: the resident set, within the peak."""
    assert 0 < resident_bytes() <= ProcessNumbers._make(process_numbers()).peak_rss_bytes
