"""Job options as bunqueue's SDKs name them (``Queue.add(name, data, opts)``), turned
into the PUSH fields that :func:`trioqueue.core.options.parse_job_input` checks.

A REST push may carry its options in ``opts`` (see docs/http.md), the shape SDK users
already write: ``attempts``, ``jobId``, ``deduplication: {id, ttl, extend, replace}``,
``debounce: {id, ttl}``, ``group: {id, priority, maxSize}``, ``parent: {id}``, and
every option under its wire name (``delay``, ``backoff: {type, delay, maxDelay}``,
``ttl``, ``tags``, ...). This module only renames; the values are judged by the one
validator every entry point shares, so a bad value is refused with the text a TCP
client gets for it (the wire name: ``maxAttempts must be a number``). Unknown keys are
ignored, as PUSH ignores them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trioqueue.core.errors import Refused
from trioqueue.core.options import OPTION_KEYS

OPTS_NOT_A_MAP = "opts must be an object"

# An SDK option that is one PUSH field under another name.
_RENAMED = {"attempts": "maxAttempts"}

# An SDK option that is a map whose keys are PUSH fields: (SDK key, PUSH field) pairs.
# The ``dedup`` part of ``deduplication`` is gathered into one map (below).
_SPREAD = {
    "deduplication": (("id", "uniqueKey"),),
    "debounce": (("id", "debounceId"), ("ttl", "debounceTtl")),
    "group": (("id", "groupId"), ("priority", "priority"), ("maxSize", "groupMaxSize")),
    "parent": (("id", "parentId"),),
}
_DEDUP_KEYS = ("ttl", "extend", "replace")


def push_fields(opts: Any, custom_id_key: str) -> dict[str, Any]:
    """The PUSH fields ``opts`` sets (``custom_id_key``: ``jobId`` for a PUSH,
    ``customId`` for a PUSHB job). ``None`` is no options; anything but a map is
    refused. Nil values are "not given", as on the wire."""
    if opts is None:
        return {}
    if not isinstance(opts, Mapping):
        raise Refused(OPTS_NOT_A_MAP)
    out: dict[str, Any] = {}
    for key, value in opts.items():
        if value is None:
            continue
        if key in _SPREAD:
            _spread(key, value, out)
        elif key == "jobId":
            out[custom_id_key] = value
        elif key in _RENAMED:
            out[_RENAMED[key]] = value
        elif key in OPTION_KEYS:
            out[key] = value
    return out


def _spread(key: str, value: Any, out: dict[str, Any]) -> None:
    if not isinstance(value, Mapping):
        raise Refused(f"{key} must be an object")
    for part, field in _SPREAD[key]:
        if value.get(part) is not None:
            out[field] = value[part]
    if key == "deduplication":
        dedup = {part: value[part] for part in _DEDUP_KEYS if value.get(part) is not None}
        if dedup:
            out["dedup"] = dedup
