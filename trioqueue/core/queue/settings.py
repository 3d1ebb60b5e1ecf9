"""A queue's own settings: one record, persisted, restored and reset in one place.

Everything a queue keeps about itself, as opposed to its jobs (paused, the stall
detector's configuration; rate limits, concurrency and DLQ settings land here next),
is a field of :class:`QueueSettings`. Its stored form is the queue's meta row
(:meth:`to_meta` / :meth:`from_meta`), Obliterate is :meth:`QueueSettings` anew, and a
setting that needs the queue to wake at some time says so in :meth:`next_wakeup`, which
the queue's ``next_deadline`` asks. A new setting is one field plus those methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .dlq_config import DlqConfig

DEFAULT_MAX_STALLS = 3
DEFAULT_STALL_CONFIG: dict[str, Any] = {
    "enabled": True, "stallInterval": 30_000, "maxStalls": DEFAULT_MAX_STALLS,
    "gracePeriod": 5_000,
}


def _default_stall() -> dict[str, Any]:
    return dict(DEFAULT_STALL_CONFIG)


@dataclass(slots=True)
class QueueSettings:
    paused: bool = False
    # bunqueue's stall configuration (SetStallConfig), as the client sent it.
    stall: dict[str, Any] = field(default_factory=_default_stall)
    # the dead-letter queue's (SetDlqConfig); its timers are the DLQ index's (dlq.py)
    dlq: DlqConfig = field(default_factory=DlqConfig)

    def to_meta(self) -> dict[str, Any]:
        """The stored form (the queue's meta row); a copy, safe to keep."""
        return {"paused": self.paused, "stall": dict(self.stall), "dlq": self.dlq.to_wire()}

    @classmethod
    def from_meta(cls, meta: dict[str, Any] | None) -> QueueSettings:
        """Settings from a stored meta row; missing keys keep their defaults, so a row
        written before a setting existed still loads."""
        settings = cls()
        if meta:
            settings.paused = bool(meta.get("paused", False))
            settings.stall.update(meta.get("stall") or {})
            settings.dlq = DlqConfig.from_wire(meta.get("dlq"))
        return settings

    @property
    def max_stalls(self) -> int:
        """Stalls after which a job is buried (what 0 means depends on the cause, see
        :mod:`trioqueue.core.attempts`)."""
        return int(self.stall["maxStalls"])

    # True when a setting has a timer of its own (next_wakeup is then asked at every
    # step); none has yet, so the step skips the call.
    timed = False

    def next_wakeup(self) -> int | None:
        """When a setting needs the queue to wake (epoch ms); None: no setting does.

        Pause and the stall configuration have no timer of their own (the stall sweep
        is armed by the jobs that become active); a rate limit's refill will.
        """
        return None
