"""A queue's own settings: one record, persisted, restored and reset in one place.

Everything a queue keeps about itself, as opposed to its jobs (paused, the stall
detector's configuration, the rate limit and the concurrency cap),
is a field of :class:`QueueSettings`. Its stored form is the queue's meta row
(:meth:`to_meta` / :meth:`from_meta`), Obliterate is :meth:`QueueSettings` anew, and a
setting that needs the queue to wake at some time says so in :meth:`next_wakeup`, which
the queue's ``next_deadline`` asks. A new setting is one field plus those methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .dlq_config import DlqConfig
from .groups import GroupSettings
from .limits import RateLimit

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
    # RateLimit / SetConcurrency (core/queue/limits.py); None: unlimited.
    rate: RateLimit | None = None
    concurrency: int | None = None
    # Job groups' own settings (only groups with one set), and the defaults the pulls'
    # ``group`` field sets for the rest (core/queue/groups.py).
    groups: dict[str, GroupSettings] = field(default_factory=dict)
    group_defaults: GroupSettings = field(default_factory=GroupSettings)
    # the dead-letter queue's (SetDlqConfig); its timers are the DLQ index's (dlq.py)
    dlq: DlqConfig = field(default_factory=DlqConfig)
    # Whether a pull must ask limits.allowance: kept by regate(), so that a queue with
    # no limit pays one attribute test per pull.
    gated: bool = False

    def regate(self) -> None:
        self.gated = self.rate is not None or self.concurrency is not None

    def to_meta(self) -> dict[str, Any]:
        """The stored form (the queue's meta row); a copy, safe to keep."""
        meta: dict[str, Any] = {"paused": self.paused, "stall": dict(self.stall),
                                "dlq": self.dlq.to_wire()}
        if self.rate is not None:
            meta["rateLimit"] = self.rate.to_meta()
        if self.concurrency is not None:
            meta["concurrency"] = self.concurrency
        if self.groups:
            meta["groups"] = {name: g.to_meta() for name, g in self.groups.items()}
        if not self.group_defaults.empty():
            meta["groupDefaults"] = self.group_defaults.to_meta()
        return meta

    @classmethod
    def from_meta(cls, meta: dict[str, Any] | None) -> QueueSettings:
        """Settings from a stored meta row; missing keys keep their defaults, so a row
        written before a setting existed still loads."""
        settings = cls()
        if meta:
            settings.paused = bool(meta.get("paused", False))
            settings.stall.update(meta.get("stall") or {})
            settings.dlq = DlqConfig.from_wire(meta.get("dlq"))
            rate = meta.get("rateLimit")
            if rate is not None:
                # an expired one is dropped at the first pull or read, as when it ran
                settings.rate = RateLimit.from_meta(rate)
            settings.concurrency = meta.get("concurrency")
            settings.groups = {name: GroupSettings.from_meta(g)
                               for name, g in (meta.get("groups") or {}).items()}
            settings.group_defaults = GroupSettings.from_meta(
                meta.get("groupDefaults") or {})
            settings.regate()
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
