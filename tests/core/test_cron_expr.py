"""Cron expressions in time zones, across daylight-saving changes."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from trioqueue.core.errors import Refused
from trioqueue.core.repeating.expressions import parse_cron

ROME = ZoneInfo("Europe/Rome")


def ms(*args: int, tz: ZoneInfo = ROME) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


def firings(expr: str, tz: str | None, start: int, n: int) -> list[str]:
    schedule = parse_cron(expr, tz)
    out = []
    at = start
    for _ in range(n):
        nxt = schedule.next_after(at)
        assert nxt is not None
        out.append(datetime.fromtimestamp(nxt / 1000, ROME).isoformat())
        at = nxt
    return out


def test_spring_forward_fires_once_at_the_first_valid_instant() -> None:
    # 2026-03-29 02:00 CET -> 03:00 CEST: 02:30 does not exist that day
    assert firings("30 2 * * *", "Europe/Rome", ms(2026, 3, 28, 12), 3) == [
        "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00"]


def test_fall_back_fires_once_not_twice() -> None:
    # 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens twice that night
    assert firings("30 2 * * *", "Europe/Rome", ms(2026, 10, 24, 12), 3) == [
        "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00",
        "2026-10-27T02:30:00+01:00"]


def test_seconds_field_shortcuts_and_utc_default() -> None:
    utc = ZoneInfo("UTC")
    start = ms(2026, 1, 1, tz=utc)
    every5 = parse_cron("*/5 * * * * *")
    assert every5.next_after(start) == start + 5000
    assert parse_cron("@daily").next_after(start) == start + 86_400_000
    assert parse_cron("@HOURLY").next_after(start) == start + 3_600_000
    assert parse_cron("  0   12 * * *  ", "UTC").next_after(start) == start + 12 * 3_600_000


@pytest.mark.parametrize("bad", ["", "x", "61 * * * *", "* * * *", 5, None, "*" * 300])
def test_invalid_expressions(bad: object) -> None:
    with pytest.raises(Refused, match="^Invalid cron expression"):
        parse_cron(bad)


def test_invalid_timezone() -> None:
    with pytest.raises(Refused, match="^Invalid timezone: Mars/Olympus$"):
        parse_cron("* * * * *", "Mars/Olympus")
