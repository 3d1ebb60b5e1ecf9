"""PUSH / PUSHB job inputs: validation and normalisation of a job's data and options.

:func:`parse_job_input` turns one decoded job input (the PUSH command map, or one item
of PUSHB ``jobs``) into the attribute names of :class:`trioqueue.core.job.Job`, applying
bunqueue's bounds, error texts and stored forms (reference §2.1, gotcha 19):

* numeric options accept plain decimal numeric strings; durations beyond +-4.32e15 ms
  are clamped rather than refused; ``maxAttempts`` is normalised to ``1..2**31-1``;
* ``name`` defaults to ``"default"``; when it is absent and ``data`` is a map with a
  string ``name``, that key moves out of (a copy of) ``data`` (the pre-v3 envelope);
* the data must be JSON-serialisable and at most 10 MiB of JSON text (the check is
  :func:`trioqueue.core.job_data.validate_job_data`).

Errors are raised as :class:`Refused` with the field's wire name; PUSHB's
``jobs[i]: `` prefix is the caller's job. ``None`` (nil) means "not given" for every
option except ``name``, where nil is an error (the codecs drop map entries holding
JavaScript ``undefined``, so those are simply absent).

This runs once per pushed job, so the common input (a name, small data, few options)
is handled without ``json.dumps`` and without visiting options that were not sent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from trioqueue.core.errors import Refused
from trioqueue.core.fields import (
    MAX_DURATION_MS,
    MAX_NAME_LENGTH,
    MAX_SAFE_INTEGER,
    check_job_id_length,
    coerce_numeric_string,
    group_id,
    is_finite,
    is_number,
    js_length,
    lenient_bool,
    lenient_number,
    optional_str,
    positive_safe_integer,
    str_list,
)

# The job data rules live in job_data; their names stay importable from here (the
# handlers and the tests of the data check import them from options).
from trioqueue.core.job_data import DATA_NOT_SERIALIZABLE as DATA_NOT_SERIALIZABLE
from trioqueue.core.job_data import DATA_TOO_LARGE as DATA_TOO_LARGE
from trioqueue.core.job_data import JSON_CHARS_PER_WIRE_BYTE as JSON_CHARS_PER_WIRE_BYTE
from trioqueue.core.job_data import MAX_DATA_CHARS, validate_job_data
from trioqueue.core.job_data import _json_bound as _json_bound
from trioqueue.core.job_data import _json_text as _json_text
from trioqueue.core.repeating.job_option import NO_CUSTOM_ID as REPEAT_CUSTOM_ID
from trioqueue.core.repeating.job_option import SUCCESSOR_KEY
from trioqueue.core.repeating.job_option import validate as validate_repeat
from trioqueue.core.trace_context import trace_context

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF_MS = 1000
DEFAULT_JOB_NAME = "default"

MAX_ATTEMPTS = 2_147_483_647
MAX_BACKOFF_DELAY_MS = 86_400_000
MAX_GROUP_PRIORITY = 2_097_151

NAME_ERROR = "Job name must be a non-empty string of at most 256 characters"

_MISSING: Any = object()


# -------------------------------------------------------------------------- options

_SAFE_FLOAT = float(MAX_SAFE_INTEGER)
# Integers from here up are Infinity as a JS double.
_INT_OVERFLOW = 2**1024 - 2**970


def _finite(value: Any, field: str, minimum: float | None = None) -> int | float:
    """A lenient finite option; integral floats are stored as ints, as msgpackr would.

    Plain ints and finite floats (what clients send) are checked inline; everything else
    goes through :func:`lenient_number` for string coercion and the exact error text.
    """
    kind = type(value)
    if kind is int:
        if -_INT_OVERFLOW < value < _INT_OVERFLOW and (minimum is None or value >= minimum):
            return value  # type: ignore[no-any-return]
    elif kind is float:
        if value - value == 0.0 and (minimum is None or value >= minimum):
            if value.is_integer() and -_SAFE_FLOAT <= value <= _SAFE_FLOAT:
                return int(value)
            return value  # type: ignore[no-any-return]
    number = lenient_number(value, field, minimum=minimum)
    assert number is not None
    if isinstance(number, float) and number.is_integer() and abs(number) <= _SAFE_FLOAT:
        return int(number)
    return number


def _clamped(value: Any, field: str, minimum: float | None = None) -> int | float:
    """A duration: finite, then clamped to +-4.32e15 ms instead of refused."""
    number = _finite(value, field, minimum)
    if number > MAX_DURATION_MS:
        return MAX_DURATION_MS
    if number < -MAX_DURATION_MS:
        return -MAX_DURATION_MS
    return number


def max_attempts(value: Any, field: str = "maxAttempts") -> int:
    """``maxAttempts``: any number incl. +-Infinity (not NaN), stored in 1..2**31-1.

    <=1 runs once; a fraction rounds up (2.5 ran 3 attempts on bunqueue 2.9.10);
    +Infinity and anything from 2**31-1 up are the maximum ("retry forever").
    """
    number = coerce_numeric_string(value)
    if not is_number(number) or number != number:
        raise Refused(f"{field} must be a number")
    if number <= 1:
        return 1
    if number >= MAX_ATTEMPTS:
        return MAX_ATTEMPTS
    return math.ceil(number)


def group_priority(value: Any) -> int:
    """The intra-group priority of a grouped job: an integer 0..2097151 (0 runs first)."""
    number = coerce_numeric_string(value)
    if not is_number(number) or not is_finite(number):
        raise Refused("group.priority must be a finite number")
    if isinstance(number, float) and not number.is_integer():
        raise Refused("group.priority must be an integer")
    if number < 0 or number > MAX_GROUP_PRIORITY:
        raise Refused(f"group.priority must be between 0 and {MAX_GROUP_PRIORITY}")
    return int(number)


def group_max_size(value: Any) -> int | None:
    """``groupMaxSize``: a positive safe integer, or ``None`` when not given.

    Not a Job attribute (it bounds the group at admission): :func:`parse_job_input`
    passes it as ``group_max_size``, which admission takes out of the spec.
    """
    if value is None:
        return None
    return positive_safe_integer(coerce_numeric_string(value), "group.maxSize")


# One handler per option: (value, out, fields) -> None, called only for a non-None value.
# ``fields`` is there for the one cross-field rule (priority depends on groupId).
_Handler = Callable[[Any, dict[str, Any], Mapping[str, Any]], None]


def _group_id(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    out["group_id"] = group_id(value)


def _priority(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    if fields.get("groupId") is not None:
        out["priority"] = group_priority(value)
    else:
        out["priority"] = _finite(value, "priority")


def _delay(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    kind = type(value)
    if (kind is int or kind is float) and -MAX_DURATION_MS <= value <= MAX_DURATION_MS:
        out["delay"] = float(value)  # finite and in range: the common case, inline
    else:
        out["delay"] = float(_clamped(value, "delay"))


def _timeout(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    timeout = _clamped(value, "timeout", minimum=0)
    # 0 means no processing deadline; storing None keeps that in one spelling.
    out["timeout"] = timeout if timeout > 0 else None


def _max_attempts(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    if type(value) is int and 1 <= value < MAX_ATTEMPTS:
        out["max_attempts"] = value  # what clients send: no normalisation needed
    else:
        out["max_attempts"] = max_attempts(value)


def _backoff(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    if not isinstance(value, Mapping):
        out["backoff"] = _finite(value, "backoff", minimum=0)
        return
    raw_delay = value.get("delay")
    delay = DEFAULT_BACKOFF_MS if raw_delay is None else _finite(raw_delay, "backoff.delay", 0)
    raw_cap = value.get("maxDelay")
    cap = None
    if raw_cap is not None:
        cap = _finite(raw_cap, "backoff.maxDelay", minimum=0)
        if cap > MAX_BACKOFF_DELAY_MS:
            raise Refused(f"backoff.maxDelay must be at most {MAX_BACKOFF_DELAY_MS}")
    kind = value.get("type")
    if kind is None:
        # Only "fixed" is special; any other type, or none, backs off exponentially.
        kind = "exponential"
    elif not isinstance(kind, str):
        raise Refused("backoff.type must be a string")
    config: dict[str, Any] = {"type": kind, "delay": delay}
    if cap is not None:
        config["maxDelay"] = cap
    out["backoff"] = delay
    out["backoff_config"] = config


def _ttl(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    out["ttl"] = _clamped(value, "ttl", minimum=0)


def _timestamp(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    stamp = lenient_number(value, "timestamp", minimum=-MAX_DURATION_MS, maximum=MAX_DURATION_MS)
    assert stamp is not None
    # Job timestamps are int ms; a fractional override is floored.
    out["timestamp"] = math.floor(stamp)


def _group_max_size(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    # not a Job attribute: admission takes it out (queue/groups.py, Groups.admit)
    out["group_max_size"] = group_max_size(value)


def _dedup(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    # Kept even without uniqueKey (bunqueue stores them; only uniqueKey triggers dedup).
    # A dedup that is not a map is ignored, as bunqueue reads no field from it.
    if not isinstance(value, Mapping):
        return
    if (ttl := value.get("ttl")) is not None:
        out["deduplication_ttl"] = _clamped(ttl, "dedup.ttl")
    if (extend := value.get("extend")) is not None:
        out["deduplication_extend"] = lenient_bool(extend)
    if (replace := value.get("replace")) is not None:
        out["deduplication_replace"] = lenient_bool(replace)


def _debounce_ttl(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    out["debounce_ttl"] = _clamped(value, "debounceTtl")


def _repeat(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    if not isinstance(value, Mapping):
        raise Refused("repeat must be an object")
    repeat = dict(value)
    every = repeat.get("every")
    if every is not None:
        number = coerce_numeric_string(every)
        if not is_number(number) or not is_finite(number) or number <= 0:
            raise Refused("repeat.every must be a positive finite number")
        repeat["every"] = min(number, MAX_DURATION_MS)
    if repeat.get("count") is None:
        # The Job shows repeat.count (successors made so far); it starts at 0.
        repeat["count"] = 0
    repeat.pop(SUCCESSOR_KEY, None)  # the broker's own mark (queue/repeats.py)
    validate_repeat(repeat, fields)
    out["repeat"] = repeat


def _parent_id(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    # bunqueue links a parent only for a truthy parentId: "" means none.
    if optional_str(value, "parentId"):
        out["parent_id"] = value


def _trace_context(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
    out["trace_context"] = trace_context(value)


def _finite_option(wire: str, attr: str) -> _Handler:
    def handle(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
        out[attr] = _finite(value, wire)

    return handle


def _str_option(wire: str, attr: str) -> _Handler:
    def handle(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
        out[attr] = optional_str(value, wire)

    return handle


def _str_list_option(wire: str, attr: str) -> _Handler:
    def handle(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
        out[attr] = str_list(value, wire)

    return handle


def _bool_option(attr: str) -> _Handler:
    def handle(value: Any, out: dict[str, Any], fields: Mapping[str, Any]) -> None:
        out[attr] = value if value is True or value is False else lenient_bool(value)

    return handle


_POLICIES = (
    ("failParentOnFailure", "fail_parent_on_failure"),
    ("continueParentOnFailure", "continue_parent_on_failure"),
    ("ignoreDependencyOnFailure", "ignore_dependency_on_failure"),
    ("removeDependencyOnFailure", "remove_dependency_on_failure"),
)

# Every option by wire name, in bunqueue's validation order: groupId, then the bounded
# numeric options in validateJobOptions' order, then the fields bunqueue's TS types
# promise but never check. On an error, this order decides which error is reported.
_HANDLERS: dict[str, _Handler] = {
    "groupId": _group_id,
    "priority": _priority,
    "delay": _delay,
    "timeout": _timeout,
    "maxAttempts": _max_attempts,
    "backoff": _backoff,
    "ttl": _ttl,
    "stallTimeout": _finite_option("stallTimeout", "stall_timeout"),
    "timestamp": _timestamp,
    "stackTraceLimit": _finite_option("stackTraceLimit", "stack_trace_limit"),
    "keepLogs": _finite_option("keepLogs", "keep_logs"),
    "sizeLimit": _finite_option("sizeLimit", "size_limit"),
    "groupMaxSize": _group_max_size,
    "dedup": _dedup,
    "debounceTtl": _debounce_ttl,
    "repeat": _repeat,
    "uniqueKey": _str_option("uniqueKey", "unique_key"),
    "dependsOn": _str_list_option("dependsOn", "depends_on"),
    "childrenIds": _str_list_option("childrenIds", "children_ids"),
    "tags": _str_list_option("tags", "tags"),
    "parentId": _parent_id,
    "debounceId": _str_option("debounceId", "debounce_id"),
    "lifo": _bool_option("lifo"),
    "removeOnComplete": _bool_option("remove_on_complete"),
    "removeOnFail": _bool_option("remove_on_fail"),
    "durable": _bool_option("durable"),
    **{wire: _bool_option(attr) for wire, attr in _POLICIES},
    "traceContext": _trace_context,  # ours: bunqueue has none (core/trace_context.py)
}
_RANK = {wire: rank for rank, wire in enumerate(_HANDLERS)}
# One set intersection with the input finds the options present, so an input without
# options costs nothing per option; transport keys (cmd, reqId, queue) and unknown keys
# are ignored.
OPTION_KEYS = frozenset(_HANDLERS)


def _apply(fields: Mapping[str, Any], keys: Iterable[str], out: dict[str, Any]) -> None:
    handlers = _HANDLERS
    for key in keys:
        value = fields[key]
        if value is not None:
            handlers[key](value, out, fields)


def _options(fields: Mapping[str, Any], present: frozenset[str], out: dict[str, Any]) -> None:
    try:
        # Happy path: in whatever order the set yields, no sorting.
        _apply(fields, present, out)
    except Refused:
        if len(present) == 1:
            raise
        # Several options and one is bad: report the error bunqueue would report first
        # (handlers are pure apart from ``out``, so running them again is harmless).
        _apply(fields, sorted(present, key=_RANK.__getitem__), {})
        raise


def _custom_id(value: Any, field: str) -> str | None:
    if value is None or value == "":
        # An empty custom id is no custom id (bunqueue tests it for truthiness).
        return None
    if not isinstance(value, str):
        raise Refused(f"{field} must be a string")
    check_job_id_length(value)
    return value


def _job_name(value: Any) -> str:
    if not isinstance(value, str) or not value or js_length(value) > MAX_NAME_LENGTH:
        raise Refused(NAME_ERROR)
    return value


def parse_job_input(
    fields: Mapping[str, Any],
    *,
    custom_id_key: str,
    max_data_bytes: int = MAX_DATA_CHARS,
    frame_bytes: int | None = None,
    json_bound: int | None = None,
) -> dict[str, Any]:
    """Validate one job input and return the Job attributes it sets.

    ``custom_id_key`` is ``"jobId"`` for PUSH and ``"customId"`` for PUSHB items.
    ``max_data_bytes`` is the data limit in JSON characters; ``frame_bytes`` the size of
    the frame the input came in and ``json_bound`` an upper bound of its JSON text, if
    the transport measured one (both enable size-check shortcuts).

    The result always has ``name``, ``data``, ``delay`` (float ms, 0.0 by default) and
    ``timestamp`` (int ms, or None for "now"); ``delay`` and ``timestamp`` are not Job
    attributes: the caller turns them into ``created_at``/``run_at``. Other keys appear
    only when given (or derived, as ``backoff_config``). ``groupMaxSize`` is validated
    but not returned (see :func:`group_max_size`). Checks run in bunqueue's order:
    data, groupId, numeric options, then the rest, then the name.
    """
    data = fields.get("data")
    validate_job_data(data, max_chars=max_data_bytes, frame_bytes=frame_bytes,
                      json_bound=json_bound)

    out: dict[str, Any] = {"delay": 0.0, "timestamp": None}
    present = OPTION_KEYS.intersection(fields)
    if present:
        _options(fields, present, out)

    custom = fields.get(custom_id_key)
    if custom is not None:
        custom = _custom_id(custom, custom_id_key)
        if custom is not None:
            if "repeat" in out:
                raise Refused(REPEAT_CUSTOM_ID)
            out["custom_id"] = custom

    name = fields.get("name", _MISSING)
    if name is _MISSING:
        name = DEFAULT_JOB_NAME
        if isinstance(data, Mapping) and isinstance(legacy := data.get("name"), str):
            # Pre-v3 envelope (bunqueue-client 0.1.5 still sends it): the name rides in
            # data. Move it out of a copy; the caller's map is never mutated.
            name = legacy
            data = {key: item for key, item in data.items() if key != "name"}
    out["name"] = _job_name(name)
    out["data"] = data
    return out
