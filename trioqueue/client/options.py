"""Job options in Python names, mapped to the wire names the broker knows.

Every option bunqueue's PUSH takes has a snake_case name here; values pass through
unchanged (the broker validates them and answers with a clear error), except the two
composite options BullMQ users know: ``deduplication={"id", "ttl", "extend",
"replace"}`` becomes ``uniqueKey`` plus ``dedup``, and ``backoff={"type", "delay",
"max_delay"}`` renames ``max_delay``. An unknown option is refused here, before anything
is sent: a typo must not silently become "no option".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ValidationError

# Python name -> wire name.
JOB_OPTIONS: dict[str, str] = {
    "priority": "priority",
    "delay": "delay",
    "attempts": "maxAttempts",
    "backoff": "backoff",
    "ttl": "ttl",
    "timeout": "timeout",
    "unique_key": "uniqueKey",
    "depends_on": "dependsOn",
    "parent_id": "parentId",
    "children_ids": "childrenIds",
    "tags": "tags",
    "group_id": "groupId",
    "group_max_size": "groupMaxSize",
    "lifo": "lifo",
    "remove_on_complete": "removeOnComplete",
    "remove_on_fail": "removeOnFail",
    "durable": "durable",
    "repeat": "repeat",
    "stall_timeout": "stallTimeout",
    "stack_trace_limit": "stackTraceLimit",
    "keep_logs": "keepLogs",
    "size_limit": "sizeLimit",
    "debounce_id": "debounceId",
    "debounce_ttl": "debounceTtl",
    "timestamp": "timestamp",
    "fail_parent_on_failure": "failParentOnFailure",
    "remove_dependency_on_failure": "removeDependencyOnFailure",
    "continue_parent_on_failure": "continueParentOnFailure",
    "ignore_dependency_on_failure": "ignoreDependencyOnFailure",
}
_DEDUP_KEYS = frozenset({"id", "ttl", "extend", "replace"})
_BACKOFF_KEYS = {"type": "type", "delay": "delay", "max_delay": "maxDelay"}


def job_options(options: Mapping[str, Any], *, custom_id_key: str = "jobId"
                ) -> dict[str, Any]:
    """Wire fields for ``options``; ``job_id`` goes out as ``custom_id_key`` (``jobId``
    for PUSH, ``customId`` in PUSHB and PUSHF). ``None`` values are left out."""
    wire: dict[str, Any] = {}
    for name, value in options.items():
        if value is None:
            continue
        if name == "job_id":
            wire[custom_id_key] = value
        elif name == "deduplication":
            wire.update(_deduplication(value))
        elif name == "backoff" and isinstance(value, Mapping):
            wire["backoff"] = _backoff(value)
        else:
            key = JOB_OPTIONS.get(name)
            if key is None:
                raise ValidationError(f"unknown job option: {name}")
            wire[key] = value
    return wire


def _deduplication(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or "id" not in value:
        raise ValidationError("deduplication must be a mapping with an 'id'")
    unknown = set(value) - _DEDUP_KEYS
    if unknown:
        raise ValidationError(f"unknown deduplication option: {sorted(unknown)[0]}")
    dedup = {k: value[k] for k in ("ttl", "extend", "replace") if value.get(k) is not None}
    wire: dict[str, Any] = {"uniqueKey": value["id"]}
    if dedup:
        wire["dedup"] = dedup
    return wire


def _backoff(value: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for name, item in value.items():
        key = _BACKOFF_KEYS.get(name)
        if key is None:
            raise ValidationError(f"unknown backoff option: {name}")
        out[key] = item
    return out
