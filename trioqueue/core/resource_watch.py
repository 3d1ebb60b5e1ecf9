"""``storage:size-warning`` and ``server:memory-warning``: the store's used bytes and
the process's resident memory against their thresholds (bunqueue's
``STORAGE_WARNING_MB`` and ``MEMORY_WARNING_MB``).

Each is told once when its figure reaches the threshold, and again only after it fell
below nine tenths of it (bunqueue's rule: a figure hovering at the threshold is not a
warning a second). The broker hands the figures in, read at most once a second and only
while someone listens; reading them is I/O, so it is not done here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .broker_events import broker_event

MIB = 1024 * 1024
# Below this share of its threshold a figure may be told again.
REARM_SHARE = 0.9


class Threshold:
    """One figure against its threshold, told once per crossing."""

    __slots__ = ("mib", "told")

    def __init__(self, mib: int) -> None:
        self.mib = mib  # 0: never told
        self.told = False

    def crossed(self, value_bytes: int) -> bool:
        """Whether ``value_bytes`` is a new crossing (to be told now)."""
        limit = self.mib * MIB
        if value_bytes >= limit:
            if self.told:
                return False
            self.told = True
            return True
        if value_bytes < limit * REARM_SHARE:
            self.told = False
        return False


def mib(value_bytes: int) -> int:
    """Whole MiB, rounded as bunqueue rounds its figures."""
    return (value_bytes + MIB // 2) // MIB


class ResourceWatch:
    __slots__ = ("storage", "memory")

    def __init__(self, storage_mib: int, memory_mib: int) -> None:
        self.storage = Threshold(storage_mib)
        self.memory = Threshold(memory_mib)

    @property
    def on(self) -> bool:
        return bool(self.storage.mib or self.memory.mib)

    def look(self, now: int, used_bytes: Callable[[], int],
             rss_bytes: Callable[[], int]) -> list[dict[str, Any]]:
        """The events the figures call for now; each figure read only if watched."""
        events: list[dict[str, Any]] = []
        if self.storage.mib and self.storage.crossed(used := used_bytes()):
            events.append(broker_event("storage:size-warning", now, sizeMB=mib(used),
                                       thresholdMB=self.storage.mib))
        if self.memory.mib and self.memory.crossed(rss := rss_bytes()):
            # Python has no heap figure of its own apart from the resident set:
            # heapUsedMB, which bunqueue's dashboard shows, is the resident set too.
            events.append(broker_event("server:memory-warning", now, heapUsedMB=mib(rss),
                                       rssMB=mib(rss), thresholdMB=self.memory.mib))
        return events
