"""``queue:idle`` and ``queue:threshold``: what a queue's counters say after each step.

bunqueue looks at every queue every ten seconds; here each queue looks at its own
counters once per step (the ready and active counts, no job visited) and names the
moment its idle event falls due in ``next_deadline``, so a queue that went idle wakes
once for it and a busy queue never does.

When each is told:

- ``queue:idle`` once the queue held no job ready (waiting or prioritized) nor active
  for ``idle_ms``; once per idle spell (bunqueue tells it again every threshold while
  the queue stays idle: a broker of many idle queues would wake for each of them every
  threshold, to say nothing new). Delayed jobs do not keep a queue busy, as in bunqueue.
- ``queue:threshold`` when the ready jobs reach ``size_jobs``; again only after they
  fell below it, as bunqueue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .state import QueueState


class QueueWatch:
    __slots__ = ("idle_ms", "size_jobs", "on", "idle_since", "idle_at", "over")

    def __init__(self, idle_ms: int = 0, size_jobs: int = 0) -> None:
        self.idle_ms = idle_ms  # 0: queue:idle never told
        self.size_jobs = size_jobs  # 0: queue:threshold never told
        self.on = bool(idle_ms or size_jobs)
        self.idle_since: int | None = None  # since when nothing was ready or active
        self.idle_at: int | None = None  # when queue:idle is due (None: told, or busy)
        self.over = False  # queue:threshold told, the ready jobs not below it since

    def next_wakeup(self) -> int | None:
        """When queue:idle is due (None: told already, or the queue is busy)."""
        return self.idle_at

    def look(self, q: QueueState, now: int) -> None:
        """After a step: tell what the counters crossed (O(1))."""
        c = q.c
        ready = c.waiting + c.prioritized
        if self.size_jobs:
            if ready < self.size_jobs:
                self.over = False
            elif not self.over:
                self.over = True
                q.announce("queue:threshold", now, size=ready, threshold=self.size_jobs)
        if not self.idle_ms:
            return
        if ready or c.active:
            self.idle_since = self.idle_at = None
        elif self.idle_since is None:
            self.idle_since = now
            self.idle_at = now + self.idle_ms
        elif self.idle_at is not None and now >= self.idle_at:
            self.idle_at = None
            q.announce("queue:idle", now, idleSeconds=(now - self.idle_since) // 1000)
