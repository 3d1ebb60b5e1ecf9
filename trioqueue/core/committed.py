"""A broker command's answer that changed durable state: its reply waits for its writes.

Broker handlers (route ``BROKER``) answer at once with a plain reply when they change
nothing durable (the workers registry lives in memory). A handler that changes the
broker's own records (webhooks, cron schedules) returns :class:`Committed` instead: the
router submits ``writes`` to the storage writer and releases ``reply`` only after they
are committed, as queue actors do with theirs, so a client never sees an
acknowledgement a kill -9 could undo.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .writes import Writes


@dataclass(frozen=True, slots=True)
class Committed:
    reply: dict[str, Any]
    writes: Writes
    #: Dashboard events of the change (core/broker_events.py), published once committed.
    events: tuple[dict[str, Any], ...] = ()
