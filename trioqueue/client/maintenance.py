"""Queue maintenance for :class:`~trioqueue.client.Queue`: BullMQ's ``clean``,
``getQueues``-style listing, ``trimEvents`` and the broker's ``CompactMemory``, in
Python names. A mixin: its methods call the queue's ``_call`` as the rest of Queue does.
"""

from __future__ import annotations

from typing import Any

from .errors import ValidationError
from .options import check_flag, check_int, check_ms
from .queue_commands import QueueCommands

# The states Clean understands (BullMQ's names and bunqueue's): the queued ones are
# judged by their creation time, ``completed`` by completion, ``failed`` (the
# dead-letter queue) by the time the job entered it; ``active`` removes nothing.
CLEAN_STATES = frozenset({"wait", "waiting", "delayed", "prioritized", "paused",
                          "completed", "failed", "active"})


class MaintenanceMixin(QueueCommands):
    """Clean, list queues, trim events, compact memory."""

    async def clean(self, grace_ms: int, limit: int = 1000,
                    state: str | None = None) -> list[str]:
        """Remove jobs older than ``grace_ms``, at most ``limit`` (1 to 100,000), oldest
        first; their ids (BullMQ's ``clean(grace, limit, type)``). ``state``: None
        (the queued jobs, as ``"wait"``, ``"delayed"``, ``"prioritized"`` and
        ``"paused"``), ``"completed"`` or ``"failed"``; ``"active"`` removes nothing."""
        fields: dict[str, Any] = {"queue": self.name, "grace": check_ms("grace_ms", grace_ms),
                                  "limit": check_int("limit", limit, 1)}
        if state is not None:
            if state not in CLEAN_STATES:
                raise ValidationError(f"state must be one of {sorted(CLEAN_STATES)}, "
                                      f"not {state!r}")
            fields["state"] = state
        reply = await self._call("Clean", **fields)
        return [str(job_id) for job_id in reply["ids"]]

    async def get_queues(self) -> list[str]:
        """The names of the broker's queues that hold jobs (live or finished) or
        settings of their own, sorted."""
        return [str(name) for name in (await self._call("ListQueues"))["queues"]]

    list_queues = get_queues

    async def trim_events(self, max_length: int) -> int:
        """BullMQ's ``trimEvents``: the broker keeps no event journal (events reach the
        subscribers connected at the time), so this removes nothing and returns 0."""
        reply = await self._queue_call("TrimEvents",
                                 maxLength=check_int("max_length", max_length, 0))
        return int(reply["data"]["removed"])

    async def compact_memory(self, collect_garbage: bool = False) -> dict[str, int]:
        """Ask the broker to give back memory it keeps past its use; what it freed
        (``retainedResults``, ``heapEntries``, ``bytes``, ``gcObjects``, ``queues``).
        ``collect_garbage`` also runs a full collection in the broker, which holds it
        for a time that grows with the jobs it holds."""
        fields = {"gc": True} if check_flag("collect_garbage", collect_garbage) else {}
        reply = await self._call("CompactMemory", **fields)
        return dict(reply.get("freed") or {})
