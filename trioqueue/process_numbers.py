"""This process's memory and CPU, read from the OS for the broker's numbers (``Stats``,
``Prometheus``, the dashboard, ``/health``): the reading is I/O, so it lives here and the
broker hands it to the sans-IO core (``BrokerStats.process``). A leaf: it imports
nothing of ours and gives plain numbers, so the actors and the transport both may use it.
"""

from __future__ import annotations

import os
import resource
import sys
import time


def process_numbers() -> tuple[int, int, float, float]:
    """This process's resident set and its peak (bytes), its CPU time (seconds) and
    when it started (epoch seconds), in the order of the core's ``ProcessNumbers``."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak = _peak_bytes(usage)
    return _resident_bytes(peak), peak, usage.ru_utime + usage.ru_stime, _START_TIME_S


def resident_bytes() -> int:
    """This process's resident set (``/proc/self/statm`` where there is one, else the
    peak)."""
    return _resident_bytes(_peak_bytes(resource.getrusage(resource.RUSAGE_SELF)))


def _peak_bytes(usage: resource.struct_rusage) -> int:
    # ru_maxrss: KiB on Linux, bytes on macOS
    return usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def _resident_bytes(peak: int) -> int:
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak


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
