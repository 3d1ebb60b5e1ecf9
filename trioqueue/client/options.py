"""Job options in Python names and Python types, checked here, sent in wire names.

:class:`JobOptions` lists every option of ``Queue.add`` (and of ``add_bulk``'s
``opts``, a flow node's ``opts``) with its type, so a type checker sees a typo or a
wrong type; :func:`job_options` checks the same at run time, before anything is sent,
and names the **Python argument** when it refuses one (``attempts must be an integer
of at least 1, not '3' (str)``), not the wire field.

The types are Python's, stricter than the wire's (which, for bunqueue's clients,
accepts numeric strings and fractions): times are whole milliseconds (``int``), counts
are ``int``, flags are ``bool`` and ids are non-empty ``str``. The two composite
options BullMQ users know are mapped: ``deduplication={"id", "ttl", "extend",
"replace"}`` becomes ``uniqueKey`` plus ``dedup``, and ``backoff={"type", "delay",
"max_delay"}`` renames ``max_delay``. ``None`` means "not given". An unknown option is
refused: a typo must not silently become "no option".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Required, TypedDict

from .errors import ValidationError
from .repeat import Repeat, repeat_option
from .tracing import check_trace_context


class Backoff(TypedDict, total=False):
    """``backoff`` as a mapping: the retry delay's shape (ms)."""

    type: Literal["fixed", "exponential"]
    delay: int
    max_delay: int


class Deduplication(TypedDict, total=False):
    """``deduplication``: BullMQ's shape; ``ttl`` in ms."""

    id: Required[str]
    ttl: int
    extend: bool
    replace: bool


class JobOptions(TypedDict, total=False):
    """Every option a job takes (all optional); times in milliseconds."""

    job_id: str
    priority: int
    delay: int
    attempts: int
    backoff: int | Backoff
    ttl: int
    timeout: int
    unique_key: str
    deduplication: Deduplication
    depends_on: Sequence[str]
    parent_id: str
    children_ids: Sequence[str]
    tags: Sequence[str]
    group_id: str
    group_max_size: int
    lifo: bool
    remove_on_complete: bool
    remove_on_fail: bool
    durable: bool
    repeat: Repeat
    stall_timeout: int
    stack_trace_limit: int
    keep_logs: int
    size_limit: int
    debounce_id: str
    debounce_ttl: int
    timestamp: int
    fail_parent_on_failure: bool
    remove_dependency_on_failure: bool
    continue_parent_on_failure: bool
    ignore_dependency_on_failure: bool
    trace_context: Mapping[str, str]


class BulkJob(TypedDict, total=False):
    """One item of ``Queue.add_bulk``: BullMQ's ``{name, data, opts}``."""

    name: Required[str]
    data: Any
    opts: JobOptions


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


# check_int, check_ms and check_flag are also the checks of Queue's and Job's other
# methods (queue.py): one copy of each rule, naming the Python argument.
def check_int(name: str, value: Any, minimum: int | None = None, unit: str = "") -> int:
    if type(value) is not int or (minimum is not None and value < minimum):
        floor = "" if minimum is None else f" of at least {minimum}"
        raise ValidationError(f"{name} must be {unit or 'an integer'}{floor}, "
                              f"not {_show(value)}")
    return value


def _count(minimum: int) -> Callable[[str, Any], int]:
    return lambda name, value: check_int(name, value, minimum)


def check_ms(name: str, value: Any) -> int:
    return check_int(name, value, 0, "whole milliseconds (an int)")


def _any_int(name: str, value: Any) -> int:
    return check_int(name, value, None)


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{name} must be a non-empty string, not {_show(value)}")
    return value


def _texts(name: str, value: Any) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not all(
            isinstance(item, str) and item for item in value):
        raise ValidationError(f"{name} must be a list of non-empty strings, "
                              f"not {_show(value)}")
    return list(value)


def check_states(name: str, value: Any) -> list[str] | None:
    """A state name, a sequence of them, or None (every state)."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if (isinstance(value, (list, tuple, set, frozenset))
            and all(isinstance(state, str) for state in value)):
        return list(value)
    raise ValidationError(f"{name} must be a state name or a list of state names, "
                          f"not {_show(value)}")


def check_flag(name: str, value: Any) -> bool:
    if type(value) is not bool:
        raise ValidationError(f"{name} must be True or False, not {_show(value)}")
    return value


# Python name -> (wire name, check). The check returns the value to send.
_Check = Callable[[str, Any], Any]
_SIMPLE: dict[str, tuple[str, _Check]] = {
    "priority": ("priority", _any_int),
    "delay": ("delay", check_ms),
    "attempts": ("maxAttempts", _count(1)),
    "ttl": ("ttl", check_ms),
    "timeout": ("timeout", check_ms),
    "unique_key": ("uniqueKey", _text),
    "depends_on": ("dependsOn", _texts),
    "parent_id": ("parentId", _text),
    "children_ids": ("childrenIds", _texts),
    "tags": ("tags", _texts),
    "group_id": ("groupId", _text),
    "group_max_size": ("groupMaxSize", _count(1)),
    "lifo": ("lifo", check_flag),
    "remove_on_complete": ("removeOnComplete", check_flag),
    "remove_on_fail": ("removeOnFail", check_flag),
    "durable": ("durable", check_flag),
    "repeat": ("repeat", repeat_option),
    "stall_timeout": ("stallTimeout", check_ms),
    "stack_trace_limit": ("stackTraceLimit", _count(0)),
    "keep_logs": ("keepLogs", _count(0)),
    "size_limit": ("sizeLimit", _count(1)),
    "debounce_id": ("debounceId", _text),
    "debounce_ttl": ("debounceTtl", check_ms),
    "timestamp": ("timestamp", _count(0)),
    "fail_parent_on_failure": ("failParentOnFailure", check_flag),
    "remove_dependency_on_failure": ("removeDependencyOnFailure", check_flag),
    "continue_parent_on_failure": ("continueParentOnFailure", check_flag),
    "ignore_dependency_on_failure": ("ignoreDependencyOnFailure", check_flag),
    "trace_context": ("traceContext", check_trace_context),
}
#: Python name -> wire name, for every option (``job_id``'s depends on the command).
JOB_OPTIONS: dict[str, str] = {
    **{name: wire for name, (wire, _) in _SIMPLE.items()},
    "job_id": "jobId", "backoff": "backoff", "deduplication": "uniqueKey",
}
_BACKOFF_TYPES = ("fixed", "exponential")


def job_options(options: Mapping[str, Any], *, custom_id_key: str = "jobId"
                ) -> dict[str, Any]:
    """Wire fields for ``options``; ``job_id`` goes out as ``custom_id_key`` (``jobId``
    for PUSH, ``customId`` in PUSHB and PUSHF). ``None`` values are left out."""
    wire: dict[str, Any] = {}
    for name, value in options.items():
        if value is None:
            continue
        simple = _SIMPLE.get(name)
        if simple is not None:
            wire[simple[0]] = simple[1](name, value)
        elif name == "job_id":
            wire[custom_id_key] = _text(name, value)
        elif name == "deduplication":
            wire.update(_deduplication(value))
        elif name == "backoff":
            wire["backoff"] = (_backoff(value) if isinstance(value, Mapping)
                               else check_ms(name, value))
        else:
            raise ValidationError(f"unknown job option: {name}")
    return wire


def _deduplication(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or "id" not in value:
        raise ValidationError("deduplication must be a mapping with an 'id'")
    unknown = set(value) - {"id", "ttl", "extend", "replace"}
    if unknown:
        raise ValidationError(f"unknown deduplication option: {sorted(unknown)[0]}")
    wire: dict[str, Any] = {"uniqueKey": _text("deduplication['id']", value["id"])}
    dedup: dict[str, Any] = {}
    if value.get("ttl") is not None:
        dedup["ttl"] = check_ms("deduplication['ttl']", value["ttl"])
    for key in ("extend", "replace"):
        if value.get(key) is not None:
            dedup[key] = check_flag(f"deduplication[{key!r}]", value[key])
    if dedup:
        wire["dedup"] = dedup
    return wire


def _backoff(value: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, item in value.items():
        if name == "type":
            if item not in _BACKOFF_TYPES:
                raise ValidationError(f"backoff['type'] must be 'fixed' or 'exponential', "
                                      f"not {_show(item)}")
            out["type"] = item
        elif name in ("delay", "max_delay"):
            out["delay" if name == "delay" else "maxDelay"] = check_ms(f"backoff[{name!r}]", item)
        else:
            raise ValidationError(f"unknown backoff option: {name}")
    return out
