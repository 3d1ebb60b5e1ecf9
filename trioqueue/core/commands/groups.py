"""Queue handlers of job groups: the 14 group commands, and the ``group`` field of
PULL/PULLB (the rules are :mod:`trioqueue.core.queue.groups`)."""

from __future__ import annotations

from typing import Any

from .. import fields
from ..errors import Refused
from ..queue import QueueState
from ..queue.groups import GroupSettings
from .context import Ctx, Reply


def _positive(msg: dict[str, Any], key: str) -> int:
    return fields.positive_safe_integer(msg.get(key), key)


def _group(msg: dict[str, Any]) -> str:
    return fields.group_id(msg.get("groupId"))


def _count_reply(count: int) -> Reply:
    return {"data": {"count": count}}


def pull_group(q: QueueState, value: Any) -> None:
    """PULL/PULLB's ``group`` (``{concurrency?, limit?: {max, duration}}``): the
    queue's defaults for groups without a limit of their own. Stored when it changes."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise Refused("group must be an object")
    concurrency = value.get("concurrency")
    if concurrency is not None:
        concurrency = fields.positive_safe_integer(concurrency, "group.concurrency")
    rate = None
    limit = value.get("limit")
    if limit is not None:
        if not isinstance(limit, dict):
            raise Refused("group.limit must be an object")
        rate = (fields.positive_safe_integer(limit.get("max"), "group.limit.max"),
                fields.positive_safe_integer(limit.get("duration"), "group.limit.duration"))
    if q.groups.set_defaults(concurrency, rate):
        q.store_settings()


# ------------------------------------------------------------------ counts


def get_group_jobs_count(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    g = q.groups.by_name.get(_group(msg))
    return _count_reply(g.pending if g is not None else 0)


def get_groups_jobs_count(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    count = q.groups.pending
    most = msg.get("maxCount")
    if most is not None:
        count = min(count, fields.positive_safe_integer(most, "maxCount"))
    return _count_reply(count)


def get_group_active_count(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    g = q.groups.by_name.get(_group(msg))
    return _count_reply(g.active if g is not None else 0)


# ------------------------------------------------------------------ limits


def _own(q: QueueState, name: str) -> GroupSettings:
    return q.groups.settings.get(name) or GroupSettings()


def _set_own(q: QueueState, name: str, attr: str, value: Any) -> bool:
    """Set one of the group's own settings (stored); False when it already was so."""
    if getattr(_own(q, name), attr) == value:
        return False
    setattr(q.groups.configure(name), attr, value)
    q.groups.configured(name)
    q.store_settings()
    return True


def set_group_rate_limit(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    name = _group(msg)
    rate = (_positive(msg, "max"), _positive(msg, "duration"))
    _set_own(q, name, "rate", rate)
    return {}


def get_group_rate_limit(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    rate = _own(q, _group(msg)).rate
    limit = None if rate is None else {"max": rate[0], "duration": rate[1]}
    return {"data": {"limit": limit}}


def remove_group_rate_limit(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"data": {"removed": int(_set_own(q, _group(msg), "rate", None))}}


def get_group_rate_limit_ttl(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    name = _group(msg)
    wanted = msg.get("maxJobs")
    max_jobs = 1 if wanted is None else fields.positive_safe_integer(wanted, "maxJobs")
    g = q.groups.by_name.get(name)
    if g is None:
        rate = _own(q, name).rate or q.groups.defaults.rate
        return {"data": {"ttl": -2 if rate is None else 0}}
    return {"data": {"ttl": q.groups.rate_ttl(g, ctx.now, max_jobs)}}


def rate_limit_group(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    duration = _positive(msg, "duration")
    q.groups.hold(_group(msg), ctx.now + duration)
    return {}


def set_group_concurrency(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    name = _group(msg)
    _set_own(q, name, "concurrency", _positive(msg, "concurrency"))
    return {}


def get_group_concurrency(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"data": {"concurrency": _own(q, _group(msg)).concurrency}}


def remove_group_concurrency(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"data": {"removed": int(_set_own(q, _group(msg), "concurrency", None))}}


# ------------------------------------------------------------------ pause


def pause_group(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"data": {"changed": _set_own(q, _group(msg), "paused", True)}}


def resume_group(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"data": {"changed": _set_own(q, _group(msg), "paused", False)}}


def is_group_paused(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"data": {"paused": _own(q, _group(msg)).paused}}
