"""This process's memory and CPU, read from the OS for the broker's numbers (``Stats``,
``Prometheus``, the dashboard, ``/health``): the reading is I/O, so it lives here and the
broker hands it to the sans-IO core (``BrokerStats.process``)."""

from __future__ import annotations

import os
import resource
import sys
import time

from .core.metrics.broker_stats import ProcessNumbers


def process_numbers() -> ProcessNumbers:
    """This process's memory and CPU (``resource``; the resident set from
    ``/proc/self/statm`` where there is one, else the peak)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # ru_maxrss: KiB on Linux, bytes on macOS
    peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    rss = peak
    try:
        with open("/proc/self/statm", "rb") as statm:
            rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    return ProcessNumbers(rss, peak, usage.ru_utime + usage.ru_stime, _START_TIME_S)


def _process_start_s() -> float:
    """When this process started (epoch seconds): from /proc where there is one, else
    when this module was first imported."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            ticks = int(stat.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/stat", "rb") as proc:
            boot = next(int(line.split()[1]) for line in proc if line.startswith(b"btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


_START_TIME_S = _process_start_s()
