"""The ``repeat`` job option's rules (bunqueue's texts): what a repeat config must be and
what a repeat job cannot also be. What the broker does with it is
:mod:`trioqueue.core.queue.repeats`; this module stays apart so that option parsing
(:mod:`trioqueue.core.options`) needs nothing of the queue package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import Refused
from ..fields import MAX_SAFE_INTEGER, is_finite, is_number
from .expressions import parse_cron

# bunqueue's texts for what a repeat chain cannot be.
NEEDS_ONE = "repeat requires exactly one of every or pattern"
NO_CUSTOM_ID = "repeat jobs cannot use JobOptions.jobId; use repeat.jobId instead"
NO_LINKS = "repeat jobs cannot participate in parent or dependency relationships"
# Where a completed generation names the successor made for it (its record keeps it,
# so ``Update`` of the completed job reaches the pending one).
SUCCESSOR_KEY = "successorId"
_DATES = ("startDate", "endDate", "prevMillis", "offset")
MAX_DATE_MS = 8_640_000_000_000_000


def validate(repeat: dict[str, Any], fields: Mapping[str, Any]) -> None:
    """The rules of a repeat config beyond ``every``'s bound (checked by the caller),
    with bunqueue's texts; ``fields`` is the job input, for the links it cannot have.
    Bounds the dates and ``count`` (stored as an int), so that no slot computed from
    them leaves int64 (the store's integers) or the years a datetime holds."""
    has_every = repeat.get("every") is not None
    pattern = repeat.get("pattern")
    has_pattern = isinstance(pattern, str) and bool(pattern.strip())
    if has_every == has_pattern:
        raise Refused(NEEDS_ONE)
    if has_pattern:
        tz = repeat.get("tz")
        if tz is not None and not isinstance(tz, str):
            raise Refused("Invalid repeat pattern: Invalid timezone: " + str(tz))
        try:
            parse_cron(pattern, tz)
        except Refused as exc:
            raise Refused(f"Invalid repeat pattern: {exc.message}") from None
    for key in _DATES:
        value = repeat.get(key)
        # (JavaScript's range of dates: slots computed from it stay well inside int64)
        if value is not None and (not is_number(value) or not is_finite(value)
                                  or abs(value) > MAX_DATE_MS):
            raise Refused(f"repeat.{key} must be a finite timestamp")
    limit = repeat.get("limit")
    if limit is not None and (not is_number(limit) or limit != limit):
        raise Refused("repeat.limit must be a number")
    count = repeat["count"]
    if (not is_number(count) or not is_finite(count) or count != int(count)
            or not 0 <= count <= MAX_SAFE_INTEGER):
        raise Refused("repeat.count must be a non-negative integer")
    repeat["count"] = int(count)
    if fields.get("parentId") or fields.get("dependsOn") or fields.get("childrenIds"):
        raise Refused(NO_LINKS)
