"""Giving freed memory back to the system after long work removed many jobs.

glibc keeps what Python frees in its arenas; after a million jobs are drained the
broker's RSS stays ~100 MB above what it holds. ``malloc_trim(0)`` returns it (it took
0.3-1.6 ms after a million-job drain here), so the queue actor calls it when a long
command ends. Elsewhere (no glibc) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable

# Long work of at least this many slices (SLICE_JOBS, 400 jobs each: about 64k jobs) is
# followed by a trim.
TRIM_AFTER_SLICES = 160


def _load_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    return trim


_TRIM = _load_trim()


def give_back_free_memory() -> bool:
    """Return the allocator's free memory to the system; False where it cannot."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True
