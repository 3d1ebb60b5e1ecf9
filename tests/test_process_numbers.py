"""This process's numbers as read from the OS (trioqueue/process_numbers.py)."""

from __future__ import annotations

import time

from trioqueue.process_numbers import process_numbers


def test_process_numbers() -> None:
    proc = process_numbers()
    assert proc.rss_bytes > 0 and proc.peak_rss_bytes > 0
    assert proc.cpu_seconds > 0
    assert 1_600_000_000 < proc.start_time_s <= time.time()
