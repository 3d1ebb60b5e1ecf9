"""Keep freed memory for reuse rather than hand it back to the OS (standalone broker).

A large job passes through a few buffers of its own size: the frame, the string its
data decodes to, its storage record, LMDB's dirty pages, the PULL reply. With glibc's
defaults each of them is fresh memory every time. A block past the (dynamic) mmap
threshold is its own mapping, unmapped when freed; a block from the heap is given back
once more than twice that threshold is free at the top. So every large job faulted in
thousands of new pages per buffer, and those page faults were most of the broker's
longest steps.

:func:`keep_freed_heap` therefore fixes glibc's mmap threshold at its largest (32 MiB,
so every block up to that size comes from the heap: a job's data is at most 10 MB),
maps no larger block on its own either (``M_MMAP_MAX`` 0: a frame's 40 MB string comes
from the heap too, and its free is not an unmapping on the event loop), and lets the
heap keep ``keep_bytes`` of free memory at its top. The price is resident
memory: after a burst of large jobs the process keeps up to ``keep_bytes`` it no longer
uses, and reuses it for the next ones.

Only the standalone broker calls it (``server.serve``), as only it calls ``tune_gc``:
an embedded broker leaves its host program's allocator alone. Off glibc (musl,
macOS) it does nothing and says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

log = logging.getLogger("trioqueue")

# mallopt parameters, from glibc's malloc.h.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
#: glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): a larger
#: value is refused by mallopt.
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024


def keep_freed_heap(keep_bytes: int) -> bool:
    """Set glibc's mmap and trim thresholds (see the module docstring); True when they
    were set. ``keep_bytes`` 0 leaves glibc's defaults."""
    if keep_bytes <= 0:
        return False
    mallopt = _glibc_mallopt()
    if mallopt is None:
        log.info("heap_keep_bytes: not glibc, the allocator's defaults are kept")
        return False
    # mallopt returns 1 on success, 0 on a value out of range
    trim_set = mallopt(_M_TRIM_THRESHOLD, min(keep_bytes, 2**31 - 1)) == 1
    mmap_set = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    # Nor is a larger block mapped on its own: a 40 MB string of a frame, freed, was
    # unmapped on the event loop (3-4 ms each time, the kernel freeing its pages);
    # from the heap it is kept, within keep_bytes at the top, for the next one.
    mmap_max_set = mallopt(_M_MMAP_MAX, 0) == 1
    if not (trim_set and mmap_set and mmap_max_set):
        log.warning("heap_keep_bytes: glibc refused the thresholds (trim %s, mmap %s, "
                    "mmap max %s)", trim_set, mmap_set, mmap_max_set)
    return trim_set and mmap_set and mmap_max_set


def _glibc_mallopt() -> Callable[[int, int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt  # type: ignore[no-any-return]
