"""Queue handlers of the queue-wide limits: RateLimit, RateLimitClear, SetConcurrency,
ClearConcurrency and GetQueueLimits (the rules are :mod:`trioqueue.core.queue.limits`)."""

from __future__ import annotations

import math
from typing import Any

from .. import fields
from ..errors import Refused
from ..queue import QueueState
from ..queue.limits import DEFAULT_RATE_DURATION_MS
from .context import Ctx, Reply


def _limit(value: Any) -> int | float:
    """A limit: any finite number (bunqueue's one rule and text); below 0 it blocks the
    queue as 0 does."""
    if not fields.is_number(value) or not fields.is_finite(value):
        raise Refused("limit must be a finite number")
    return max(0, value)


def _positive_or(value: Any, default: int | None) -> int | None:
    """A duration or ttl in ms; anything but a positive finite number degrades to the
    default, as in bunqueue (no error)."""
    if fields.is_number(value) and fields.is_finite(value) and value > 0:
        return math.ceil(value)
    return default


def rate_limit(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    limit = _limit(msg.get("limit"))
    if isinstance(limit, float) and limit.is_integer():
        limit = int(limit)
    duration = _positive_or(msg.get("duration"), DEFAULT_RATE_DURATION_MS)
    assert duration is not None
    q.set_rate_limit(limit, duration, _positive_or(msg.get("ttl"), None), ctx.now)
    return {}


def rate_limit_clear(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    q.clear_rate_limit(ctx.now)
    return {}


def set_concurrency(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    q.set_concurrency(math.floor(_limit(msg.get("limit"))), ctx.now)
    return {}


def clear_concurrency(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    q.set_concurrency(None, ctx.now)
    return {}


def get_queue_limits(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    wanted = _positive_or(msg.get("maxJobs"), None)
    return {"data": {"limits": q.limits_reply(ctx.now, wanted)}}
