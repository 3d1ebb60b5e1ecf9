"""A queue's dead-letter configuration (``SetDlqConfig`` / ``GetDlqConfig``).

Kept in the queue's settings record (:class:`~.settings.QueueSettings`), so it is
persisted in the queue's meta row, restored after a restart and reset by Obliterate
with the rest of the settings. What it promises is kept by :mod:`.dead_letters` (the
entries and their order) and :mod:`.dlq` (eviction, expiry and auto-retry, run by the
queue's own timer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import fields

DEFAULT_AUTO_RETRY_INTERVAL_MS = 3_600_000
DEFAULT_MAX_AUTO_RETRIES = 3
DEFAULT_MAX_AGE_MS = 604_800_000  # 7 days
DEFAULT_MAX_ENTRIES = 10_000
# 2^this is the largest backoff factor: interval * 2^62 is past any clock already.
_MAX_BACKOFF_EXPONENT = 62
_NUMBERS = ("autoRetryInterval", "maxAutoRetries", "maxEntries")


@dataclass(slots=True)
class DlqConfig:
    auto_retry: bool = False
    auto_retry_interval: int = DEFAULT_AUTO_RETRY_INTERVAL_MS
    max_auto_retries: int = DEFAULT_MAX_AUTO_RETRIES
    max_age: int | None = DEFAULT_MAX_AGE_MS  # None: entries never expire
    max_entries: int = DEFAULT_MAX_ENTRIES

    def to_wire(self) -> dict[str, Any]:
        """The config as bunqueue names it (``GetDlqConfig``; also the stored form)."""
        return {"autoRetry": self.auto_retry, "autoRetryInterval": self.auto_retry_interval,
                "maxAutoRetries": self.max_auto_retries, "maxAge": self.max_age,
                "maxEntries": self.max_entries}

    def update(self, config: dict[str, Any]) -> None:
        """Apply what ``config`` says, bunqueue's way: numeric strings count as their
        number, and a value of the wrong kind (or a negative or non-finite number) is
        dropped, leaving that setting as it was. ``maxAge: null`` means never."""
        auto = config.get("autoRetry")
        if isinstance(auto, bool):
            self.auto_retry = auto
        numbers = {key: _count(config.get(key)) for key in _NUMBERS}
        if numbers["autoRetryInterval"] is not None:
            self.auto_retry_interval = numbers["autoRetryInterval"]
        if numbers["maxAutoRetries"] is not None:
            self.max_auto_retries = numbers["maxAutoRetries"]
        if numbers["maxEntries"] is not None:
            self.max_entries = numbers["maxEntries"]
        if "maxAge" in config:
            if config["maxAge"] is None:
                self.max_age = None
            else:
                max_age = _count(config["maxAge"])
                if max_age is not None:
                    self.max_age = max_age

    @classmethod
    def from_wire(cls, stored: dict[str, Any] | None) -> DlqConfig:
        config = cls()
        if stored:
            config.update(stored)
        return config

    def retry_delay(self, retry_count: int) -> int:
        """How long after entering (or after its last auto-retry) an entry retried
        ``retry_count`` times already is retried again: ``autoRetryInterval *
        2^(n-1)`` for the n-th auto-retry, bunqueue's backoff."""
        return self.auto_retry_interval << min(retry_count, _MAX_BACKOFF_EXPONENT)


def _count(value: Any) -> int | None:
    """A non-negative finite number (a numeric string counts) as an int; None for
    anything else (dropped, not refused)."""
    value = fields.coerce_numeric_string(value)
    if not fields.is_number(value) or not fields.is_finite(value) or value < 0:
        return None
    return int(value)
