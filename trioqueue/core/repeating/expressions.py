"""Cron expressions and time zones: when a schedule fires next.

The expressions are evaluated by cronsim (a small, maintained evaluator) rather than
croniter: on the day a zone falls back, cronsim runs a fixed-time job once (``30 2 * *
*`` in Europe/Rome fires at 02:30 CEST, not again at 02:30 CET), as cron itself does,
and on the day it springs forward it runs a job of the skipped hour at the first valid
instant (03:00); croniter fired the fall-back job twice. Both take the optional leading
seconds field (six fields); the ``@`` shortcuts are expanded here (cronsim has none).

Zones are IANA names from the standard ``zoneinfo`` (the ``tzdata`` package supplies the
database where the system has none). Times in and out are epoch milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..errors import Refused

SHORTCUTS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MAX_EXPRESSION_CHARS = 256


@lru_cache(maxsize=256)
def zone(name: str | None) -> tzinfo:
    """The zone called ``name`` (None: UTC); ``Invalid timezone: <name>`` otherwise."""
    if name is None:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise Refused(f"Invalid timezone: {name}") from None


@dataclass(frozen=True, slots=True)
class CronSchedule:
    expression: str  # as given (a shortcut stays a shortcut)
    fields: str  # what cronsim evaluates
    zone: tzinfo

    def next_after(self, at_ms: int) -> int | None:
        """The first firing strictly after ``at_ms`` (epoch ms); None if there is none
        (an expression that names no real day, such as ``0 0 30 2 *``)."""
        start = datetime.fromtimestamp(at_ms / 1000, tz=self.zone)
        try:
            fire = next(CronSim(self.fields, start))
        except (StopIteration, CronSimError):
            return None
        return int(fire.timestamp() * 1000)

    def fields_sets(self) -> tuple[list[int], list[int], list[int]] | None:
        """The seconds, minutes and hours the expression fires at, sorted (cronsim's
        parse; None if a version of it keeps them otherwise)."""
        sim = CronSim(self.fields, datetime(2000, 1, 1, tzinfo=self.zone))
        found: list[list[int]] = []
        for name in ("seconds", "minutes", "hours"):
            values = getattr(sim, name, None)
            if not isinstance(values, (list, set, tuple)) or not values:
                return None
            found.append(sorted(values))
        return found[0], found[1], found[2]


def parse_cron(expression: object, tz: str | None = None) -> CronSchedule:
    """A cron expression (5 fields, or 6 with seconds first, or an ``@`` shortcut) in
    the zone ``tz``; ``Invalid cron expression: <expr>`` otherwise."""
    if not isinstance(expression, str) or not expression.strip():
        raise Refused("Invalid cron expression: schedule must be a non-empty string")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise Refused(f"Invalid cron expression: longer than {MAX_EXPRESSION_CHARS} "
                      f"characters")
    text = " ".join(expression.split())
    fields = SHORTCUTS.get(text.lower(), text)
    where = zone(tz)
    try:
        CronSim(fields, datetime(2000, 1, 1, tzinfo=where))
    except CronSimError:
        raise Refused(f"Invalid cron expression: {expression}") from None
    return CronSchedule(expression, fields, where)
