"""PUSH/PUSHB job inputs: every option rule, stored form and error text of parse_job_input."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trioqueue.core import options
from trioqueue.core.errors import Refused
from trioqueue.core.fields import MAX_DURATION_MS
from trioqueue.core.job import _FIELDS, JobRecord
from trioqueue.core.options import (
    DATA_NOT_SERIALIZABLE,
    DATA_TOO_LARGE,
    MAX_ATTEMPTS,
    MAX_DATA_CHARS,
    NAME_ERROR,
    parse_job_input,
    validate_job_data,
)

INF = math.inf
NAN = math.nan
JOB_ATTRS = {attr for _, attr, _ in _FIELDS}
# What a spec carries besides a job's attributes: when it is due, and the group's size
# cap, which admission takes out (core/queue/producing.py)
NOT_JOB_ATTRS = {"delay", "timestamp", "group_max_size"}


def parse(fields: dict[str, Any], key: str = "jobId", **kwargs: Any) -> dict[str, Any]:
    return parse_job_input(fields, custom_id_key=key, **kwargs)


def error_of(fields: dict[str, Any], key: str = "jobId", **kwargs: Any) -> str:
    with pytest.raises(Refused) as info:
        parse(fields, key, **kwargs)
    return info.value.message


def only(result: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: result[k] for k in keys}


def test_constants() -> None:
    assert options.DEFAULT_MAX_ATTEMPTS == 3
    assert options.DEFAULT_BACKOFF_MS == 1000
    assert MAX_DATA_CHARS == 10 * 1024 * 1024


# ------------------------------------------------------------------ shape and keys


def test_minimal_input_gets_defaults_and_nothing_else() -> None:
    assert parse({}) == {"name": "default", "data": None, "delay": 0.0, "timestamp": None}


def test_transport_and_unknown_keys_are_ignored() -> None:
    result = parse({"cmd": "PUSH", "queue": "q", "reqId": "7", "whatever": [1], "name": "j"})
    assert result == {"name": "j", "data": None, "delay": 0.0, "timestamp": None}


def test_none_means_not_given_for_options() -> None:
    given_none = {key: None for key in options.OPTION_KEYS}
    assert parse({**given_none, "jobId": None, "name": "j"}) == parse({"name": "j"})


def test_result_builds_a_job() -> None:
    spec = parse(
        {
            "name": "j",
            "data": {"a": 1},
            "priority": 2,
            "delay": 10,
            "maxAttempts": 5,
            "backoff": {"type": "fixed", "delay": 10},
            "ttl": 100,
            "timeout": 50,
            "uniqueKey": "u",
            "jobId": "custom",
            "dependsOn": ["d"],
            "parentId": "p",
            "childrenIds": ["c"],
            "tags": ["t"],
            "groupId": "g",
            "lifo": 1,
            "removeOnComplete": True,
            "removeOnFail": 0,
            "durable": True,
            # (no repeat: a repeat job has no custom id nor links; test_repeats.py)
            "stallTimeout": 5,
            "stackTraceLimit": 3,
            "keepLogs": 4,
            "sizeLimit": 5,
            "failParentOnFailure": True,
            "dedup": {"ttl": 5, "extend": True, "replace": False},
            "debounceId": "db",
            "debounceTtl": 9,
            "timestamp": 1_700_000_000_000,
            "groupMaxSize": 10,
        }
    )
    extras = {"delay", "timestamp", "group_max_size"}  # admission takes them out
    assert spec["group_max_size"] == 10
    assert set(spec) - extras <= JOB_ATTRS
    attrs = {k: v for k, v in spec.items() if k not in extras}
    job = JobRecord(id="custom", queue="q", **attrs)
    assert job.lifo is True and job.remove_on_fail is False and job.group_id == "g"
    assert job.custom_id == "custom" and job.parent_id == "p"
    assert job.deduplication_ttl == 5 and job.deduplication_extend is True
    assert spec["delay"] == 10.0 and spec["timestamp"] == 1_700_000_000_000
    # The push path's constructor builds the same job, lists as fresh lists.
    timeline = [{"state": "waiting", "timestamp": 1.0}]
    admitted = JobRecord.admit("custom", "q", 7, 9, 3, timeline, dict(attrs))
    built = JobRecord(id="custom", queue="q", created_at=7, run_at=9, last_heartbeat=7, seq=3,
                timeline=timeline, **attrs)
    for attr in JobRecord.__slots__:
        assert getattr(admitted, attr) == getattr(built, attr), attr
        assert type(getattr(admitted, attr)) is type(getattr(built, attr)), attr
    assert admitted.tags is not attrs["tags"] and admitted.timeline is timeline
    plain = JobRecord.admit("p", "q", 7, 7, 1, timeline, {"name": "n", "data": None})
    assert plain.tags == () and plain.depends_on == () and plain.max_attempts == 3


# ----------------------------------------------------------------------------- name


def test_name() -> None:
    assert parse({"name": "email"})["name"] == "email"
    assert parse({"name": "n" * 256})["name"] == "n" * 256
    for bad in (None, "", 5, True, ["a"], "n" * 257, "😀" * 129):
        assert error_of({"name": bad}) == NAME_ERROR


def test_legacy_name_moves_out_of_a_copy_of_data() -> None:
    data = {"name": "email", "to": "x@y"}
    snapshot = copy.deepcopy(data)
    result = parse({"data": data})
    assert result["name"] == "email"
    assert result["data"] == {"to": "x@y"}
    assert data == snapshot  # the caller's map is not mutated


def test_legacy_name_only_when_name_is_absent() -> None:
    data = {"name": "inner", "x": 1}
    result = parse({"name": "outer", "data": data})
    assert result["name"] == "outer" and result["data"] == {"name": "inner", "x": 1}
    # An explicit nil name is an error, not a fallback to data.name.
    assert error_of({"name": None, "data": data}) == NAME_ERROR


def test_legacy_name_needs_a_string() -> None:
    data = {"name": 5, "x": 1}
    result = parse({"data": data})
    assert result["name"] == "default" and result["data"] == {"name": 5, "x": 1}
    assert parse({"data": ["name"]})["name"] == "default"
    assert error_of({"data": {"name": ""}}) == NAME_ERROR
    assert error_of({"data": {"name": "n" * 257}}) == NAME_ERROR


# ----------------------------------------------------------------------------- data


def test_data_of_plain_types_is_accepted_unchanged() -> None:
    data = {"s": "x", "i": 1, "f": 1.5, "b": True, "n": None, "l": [1, [2, {"d": 3}]], "t": (1,)}
    assert parse({"data": data})["data"] is data
    for value in ("text", 5, 2.5, None, [1, 2], True):
        assert parse({"data": value})["data"] == value


def test_data_accepts_bytes_and_nan() -> None:
    parse({"data": {"blob": b"\x00\x01", "arr": bytearray(b"x"), "top": [b""]}})
    parse({"data": b"raw"})
    parse({"data": {"nan": NAN, "inf": INF, "ninf": -INF}})


def test_data_accepts_json_key_types_and_subclasses() -> None:
    from collections import OrderedDict

    parse({"data": {1: "int key", None: "null key", 2.5: "float key"}})
    parse({"data": OrderedDict(a=1)})
    parse({"data": 2**70})


@pytest.mark.parametrize(
    "data",
    [
        {"s": {1, 2}},
        {"o": object()},
        [complex(1, 2)],
        {(1, 2): "tuple key"},
        {b"k": "bytes key"},
    ],
    ids=["set", "object", "complex", "tuple-key", "bytes-key"],
)
def test_data_not_serializable(data: Any) -> None:
    assert error_of({"data": data}) == DATA_NOT_SERIALIZABLE


def test_data_int_beyond_pythons_text_limit_is_refused() -> None:
    assert error_of({"data": {"n": 10**5000}}) == DATA_NOT_SERIALIZABLE


def test_data_cycle_and_extreme_nesting_are_refused() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    assert error_of({"data": cyclic}) == DATA_NOT_SERIALIZABLE
    deep: list[Any] = []
    node = deep
    for _ in range(100_000):
        node.append([])
        node = node[0]
    assert error_of({"data": deep}) == DATA_NOT_SERIALIZABLE


def test_moderate_nesting_beyond_the_fast_walk_is_fine() -> None:
    deep: list[Any] = []
    node = deep
    for _ in range(300):
        node.append([])
        node = node[0]
    parse({"data": deep})


def test_data_too_large_over_10_mib() -> None:
    big = "x" * (MAX_DATA_CHARS - 2)  # JSON adds the two quotes: exactly at the limit
    parse({"data": big})
    assert error_of({"data": big + "x"}) == DATA_TOO_LARGE
    assert error_of({"data": {"payload": "y" * MAX_DATA_CHARS}}) == DATA_TOO_LARGE


def test_data_size_counts_json_text() -> None:
    limit = 100
    parse({"data": "a" * 98}, max_data_bytes=limit)
    assert error_of({"data": "a" * 99}, max_data_bytes=limit) == DATA_TOO_LARGE
    # Escapes count as JSON text: a control character is 6 characters ("\u0001").
    assert error_of({"data": "\x01" * 17}, max_data_bytes=limit) == DATA_TOO_LARGE
    parse({"data": "\x01" * 16}, max_data_bytes=limit)
    # Characters outside the BMP are two UTF-16 units, as JS counts them.
    assert error_of({"data": "😀" * 50}, max_data_bytes=limit) == DATA_TOO_LARGE
    parse({"data": "😀" * 49}, max_data_bytes=limit)
    # Bytes count as the Buffer JSON JavaScript would write: {"type":"Buffer","data":[..]}.
    assert error_of({"data": b"\xff" * 20}, max_data_bytes=limit) == DATA_TOO_LARGE
    parse({"data": b"\x01" * 20}, max_data_bytes=limit)


def test_frame_bytes_shortcut_skips_the_size_check() -> None:
    assert options.JSON_CHARS_PER_WIRE_BYTE == 28
    limit = 20 * 28
    data = "z" * 1000  # too large on its own
    assert error_of({"data": data}, max_data_bytes=limit) == DATA_TOO_LARGE
    # A frame of 20 bytes cannot hold more than 560 JSON characters: no size computed
    # (the data here did not come from such a frame: that is how we see it was skipped).
    parse({"data": data}, max_data_bytes=limit, frame_bytes=20)
    # A frame of 21 bytes might: the size is measured.
    assert error_of({"data": data}, max_data_bytes=limit, frame_bytes=21) == DATA_TOO_LARGE


def test_frame_shortcut_factor_covers_byte_strings() -> None:
    # The worst case: an array of empty byte strings, 1 CBOR byte each, each one written
    # as {"type":"Buffer","data":[]} plus a comma by JSON.stringify.
    count = 100
    wire_bytes = 2 + count  # CBOR: array header (2 bytes for 100 items) + 1 byte per item
    data = [b""] * count
    json_chars = len('{"type":"Buffer","data":[]}') * count + (count - 1) + 2
    assert json_chars <= wire_bytes * options.JSON_CHARS_PER_WIRE_BYTE
    assert error_of({"data": data}, max_data_bytes=json_chars - 1) == DATA_TOO_LARGE
    parse({"data": data}, max_data_bytes=json_chars)


def test_json_bound_shortcut_skips_the_size_check() -> None:
    limit = 1000
    data = "z" * 2000  # too large on its own
    # The transport measured the data's JSON text at no more than the limit, in a walk
    # that checked its types: the data is not walked again (a wrong bound would be a
    # transport bug). Over the limit, or without a bound, the core decides.
    parse({"data": data}, max_data_bytes=limit, json_bound=limit)
    assert error_of({"data": data}, max_data_bytes=limit, json_bound=limit + 1) \
        == DATA_TOO_LARGE
    assert error_of({"data": {1, 2}}, max_data_bytes=limit, json_bound=limit + 1) \
        == DATA_NOT_SERIALIZABLE


def _json_units(data: Any) -> int:
    def buffer(value: Any) -> Any:
        if isinstance(value, bytes):
            return {"type": "Buffer", "data": list(value)}
        raise TypeError(value)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=buffer)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.binary(max_size=10),
    lambda children: st.lists(children, max_size=6)
    | st.dictionaries(st.text(max_size=6), children, max_size=6),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(data=json_data, slack=st.integers(-40, 40))
def test_the_size_verdict_is_the_json_text_length_near_the_limit(data: Any, slack: int
                                                                 ) -> None:
    # Around the exact length, where the bounds (the fast upper one, the lower one that
    # refuses without encoding) cannot decide alone, the verdict is still exact.
    limit = max(1, _json_units(data) + slack)
    verdict = "ok" if _json_units(data) <= limit else DATA_TOO_LARGE
    try:
        validate_job_data(data, max_chars=limit)
        got = "ok"
    except Refused as exc:
        got = exc.message
    assert got == verdict


def test_frame_bytes_shortcut_still_checks_serializability() -> None:
    assert error_of({"data": {1, 2}}, frame_bytes=10) == DATA_NOT_SERIALIZABLE


def test_validate_job_data_without_limit() -> None:
    validate_job_data("x" * 200, max_chars=None)
    with pytest.raises(Refused, match="serializable"):
        validate_job_data({object()}, max_chars=None)


# ------------------------------------------------------------------------- priority


def test_priority() -> None:
    assert parse({"priority": 5})["priority"] == 5
    assert parse({"priority": -3.5})["priority"] == -3.5
    assert parse({"priority": " 7 "})["priority"] == 7
    assert type(parse({"priority": 4.0})["priority"]) is int
    assert error_of({"priority": NAN}) == "priority must be a finite number"
    assert error_of({"priority": INF}) == "priority must be a finite number"
    assert error_of({"priority": True}) == "priority must be a number"
    assert error_of({"priority": "high"}) == "priority must be a number"
    assert error_of({"priority": "1e3"}) == "priority must be a number"


def test_group_priority() -> None:
    grouped = {"groupId": "g"}
    assert parse({**grouped, "priority": 0})["priority"] == 0
    assert parse({**grouped, "priority": 2_097_151})["priority"] == 2_097_151
    assert parse({**grouped, "priority": "12"})["priority"] == 12
    assert parse({**grouped, "priority": 3.0})["priority"] == 3
    between = "group.priority must be between 0 and 2097151"
    assert error_of({**grouped, "priority": -1}) == between
    assert error_of({**grouped, "priority": 2_097_152}) == between
    assert error_of({**grouped, "priority": 1.5}) == "group.priority must be an integer"
    for bad in (NAN, INF, "x", True):
        assert error_of({**grouped, "priority": bad}) == "group.priority must be a finite number"


def test_group_id_option() -> None:
    assert parse({"groupId": "g"})["group_id"] == "g"
    assert error_of({"groupId": 5}) == "groupId must be a string"
    assert error_of({"groupId": ""}) == "groupId must be a non-empty string"
    assert error_of({"groupId": "g" * 257}) == "groupId must be at most 256 characters"
    assert error_of({"groupId": "a\0"}) == "groupId must not contain NUL characters"
    # nil groupId is "no group": the ungrouped priority rule applies.
    result = parse({"groupId": None, "priority": -5})
    assert "group_id" not in result and result["priority"] == -5


def test_group_max_size_is_validated_and_passed_to_admission() -> None:
    result = parse({"groupId": "g", "groupMaxSize": "10"})
    assert result["group_max_size"] == 10 and "groupMaxSize" not in result
    assert options.group_max_size("10") == 10
    assert options.group_max_size(None) is None
    for bad in (0, -1, 1.5, "x", 2**53, INF, True):
        assert error_of({"groupMaxSize": bad}) == "group.maxSize must be a positive safe integer"


# ---------------------------------------------------------------------------- delay


def test_delay() -> None:
    assert parse({"delay": 1000})["delay"] == 1000.0
    assert type(parse({"delay": 1000})["delay"]) is float
    assert parse({"delay": "-500"})["delay"] == -500.0  # negative: ready with a past runAt
    assert parse({"delay": 1e300})["delay"] == float(MAX_DURATION_MS)
    assert parse({"delay": -1e300})["delay"] == -float(MAX_DURATION_MS)
    assert parse({"delay": 10**30})["delay"] == float(MAX_DURATION_MS)
    assert error_of({"delay": INF}) == "delay must be a finite number"
    assert error_of({"delay": NAN}) == "delay must be a finite number"
    assert error_of({"delay": "later"}) == "delay must be a number"
    assert error_of({"delay": False}) == "delay must be a number"


# ---------------------------------------------------------------------- maxAttempts


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        (3, 3),
        (1, 1),
        (0, 1),
        (-5, 1),
        (0.5, 1),
        (1.5, 2),
        (2.5, 3),
        (2.0, 2),
        ("4", 4),
        (" 2.1 ", 3),
        (INF, MAX_ATTEMPTS),
        (-INF, 1),
        (2_147_483_646, 2_147_483_646),
        (2_147_483_646.5, MAX_ATTEMPTS),
        (2_147_483_647, MAX_ATTEMPTS),
        (1e12, MAX_ATTEMPTS),
        (10**40, MAX_ATTEMPTS),
    ],
)
def test_max_attempts_normalisation(given: Any, stored: int) -> None:
    result = parse({"maxAttempts": given})["max_attempts"]
    assert result == stored and type(result) is int


@pytest.mark.parametrize("bad", [NAN, "Infinity", "many", True, [3], ""])
def test_max_attempts_refused(bad: Any) -> None:
    assert error_of({"maxAttempts": bad}) == "maxAttempts must be a number"


# -------------------------------------------------------------------------- backoff


def test_backoff_number() -> None:
    result = parse({"backoff": 500})
    assert result["backoff"] == 500 and "backoff_config" not in result
    assert parse({"backoff": "250"})["backoff"] == 250
    assert parse({"backoff": 0})["backoff"] == 0
    assert parse({"backoff": 1e12})["backoff"] == 1e12  # no upper bound: maxDelay caps
    assert error_of({"backoff": -1}) == "backoff must be at least 0"
    assert error_of({"backoff": INF}) == "backoff must be a finite number"
    assert error_of({"backoff": "soon"}) == "backoff must be a number"
    assert error_of({"backoff": [1]}) == "backoff must be a number"


def test_backoff_object() -> None:
    result = parse({"backoff": {"type": "fixed"}})
    assert only(result, "backoff", "backoff_config") == {
        "backoff": 1000,
        "backoff_config": {"type": "fixed", "delay": 1000},
    }
    result = parse({"backoff": {"type": "exponential", "delay": "200", "maxDelay": 5000}})
    assert only(result, "backoff", "backoff_config") == {
        "backoff": 200,
        "backoff_config": {"type": "exponential", "delay": 200, "maxDelay": 5000},
    }
    result = parse({"backoff": {"type": "linear", "delay": 0, "maxDelay": None}})
    assert result["backoff_config"] == {"type": "linear", "delay": 0}
    # No type: anything but "fixed" backs off exponentially.
    assert parse({"backoff": {"delay": 10}})["backoff_config"]["type"] == "exponential"
    assert parse({"backoff": {"maxDelay": 86_400_000}})["backoff_config"]["maxDelay"] == 86400000


def test_backoff_object_errors() -> None:
    assert error_of({"backoff": {"delay": -1}}) == "backoff.delay must be at least 0"
    assert error_of({"backoff": {"delay": NAN}}) == "backoff.delay must be a finite number"
    assert error_of({"backoff": {"delay": "x"}}) == "backoff.delay must be a number"
    assert error_of({"backoff": {"maxDelay": -1}}) == "backoff.maxDelay must be at least 0"
    too_big = {"backoff": {"maxDelay": 86_400_001}}
    assert error_of(too_big) == "backoff.maxDelay must be at most 86400000"
    assert error_of({"backoff": {"maxDelay": "x"}}) == "backoff.maxDelay must be a number"
    assert error_of({"backoff": {"type": 5}}) == "backoff.type must be a string"


# ---------------------------------------------------------------- ttl and timeout


def test_ttl_and_timeout() -> None:
    assert parse({"ttl": 0})["ttl"] == 0
    assert parse({"ttl": "1500"})["ttl"] == 1500
    assert parse({"ttl": 1e300})["ttl"] == MAX_DURATION_MS
    assert parse({"timeout": 5000})["timeout"] == 5000
    assert parse({"timeout": " 50 "})["timeout"] == 50
    assert parse({"timeout": 0})["timeout"] is None  # 0 = no processing deadline
    assert parse({"timeout": 1e300})["timeout"] == MAX_DURATION_MS
    assert error_of({"ttl": -1}) == "ttl must be at least 0"
    assert error_of({"timeout": -0.5}) == "timeout must be at least 0"
    assert error_of({"ttl": INF}) == "ttl must be a finite number"
    assert error_of({"timeout": "x"}) == "timeout must be a number"


# ----------------------------------------------------------- other numeric options


@pytest.mark.parametrize(
    ("wire", "attr"),
    [
        ("stallTimeout", "stall_timeout"),
        ("stackTraceLimit", "stack_trace_limit"),
        ("keepLogs", "keep_logs"),
        ("sizeLimit", "size_limit"),
    ],
)
def test_finite_options(wire: str, attr: str) -> None:
    assert parse({wire: 5})[attr] == 5
    assert parse({wire: -5})[attr] == -5
    assert parse({wire: "2.5"})[attr] == 2.5
    assert parse({wire: 1e300})[attr] == 1e300  # not a duration: not clamped
    assert error_of({wire: NAN}) == f"{wire} must be a finite number"
    assert error_of({wire: -INF}) == f"{wire} must be a finite number"
    assert error_of({wire: "x"}) == f"{wire} must be a number"
    assert error_of({wire: True}) == f"{wire} must be a number"


def test_stack_trace_limit_default_is_the_jobs() -> None:
    assert "stack_trace_limit" not in parse({})
    assert JobRecord().stack_trace_limit == 10


def test_timestamp() -> None:
    assert parse({"timestamp": 1_700_000_000_000.0})["timestamp"] == 1_700_000_000_000
    assert type(parse({"timestamp": 1_700_000_000_000.0})["timestamp"]) is int
    assert parse({"timestamp": 1_700_000_000_000.7})["timestamp"] == 1_700_000_000_000
    assert parse({"timestamp": "123"})["timestamp"] == 123
    assert parse({"timestamp": -5})["timestamp"] == -5
    assert parse({"timestamp": 4.32e15})["timestamp"] == MAX_DURATION_MS
    assert error_of({"timestamp": 5e15}) == "timestamp must be at most 4320000000000000"
    assert error_of({"timestamp": -5e15}) == "timestamp must be at least -4320000000000000"
    assert error_of({"timestamp": INF}) == "timestamp must be a finite number"
    assert error_of({"timestamp": "now"}) == "timestamp must be a number"


def test_debounce() -> None:
    result = parse({"debounceId": "d", "debounceTtl": "100"})
    assert only(result, "debounce_id", "debounce_ttl") == {"debounce_id": "d", "debounce_ttl": 100}
    assert parse({"debounceTtl": -5})["debounce_ttl"] == -5  # already expired; any finite
    assert parse({"debounceTtl": 1e300})["debounce_ttl"] == MAX_DURATION_MS
    assert error_of({"debounceTtl": INF}) == "debounceTtl must be a finite number"
    assert error_of({"debounceTtl": "x"}) == "debounceTtl must be a number"
    assert error_of({"debounceId": 5}) == "debounceId must be a string"


def test_dedup() -> None:
    result = parse({"uniqueKey": "u", "dedup": {"ttl": 1000, "extend": 1, "replace": 0}})
    assert only(
        result, "unique_key", "deduplication_ttl", "deduplication_extend", "deduplication_replace"
    ) == {
        "unique_key": "u",
        "deduplication_ttl": 1000,
        "deduplication_extend": True,
        "deduplication_replace": False,
    }
    # Kept without uniqueKey too (dedup alone does nothing at admission).
    assert parse({"dedup": {"ttl": "50"}})["deduplication_ttl"] == 50
    assert parse({"dedup": {"ttl": -5}})["deduplication_ttl"] == -5
    assert parse({"dedup": {"ttl": -1e300}})["deduplication_ttl"] == -MAX_DURATION_MS
    assert error_of({"dedup": {"ttl": INF}}) == "dedup.ttl must be a finite number"
    assert error_of({"dedup": {"ttl": "x"}}) == "dedup.ttl must be a number"
    # A dedup that is not a map is ignored, as bunqueue reads nothing from it.
    assert "deduplication_ttl" not in parse({"dedup": 5})
    assert error_of({"uniqueKey": 5}) == "uniqueKey must be a string"


# --------------------------------------------------------------------------- repeat


def test_repeat() -> None:
    given_repeat = {"every": "1000", "limit": 5}
    result = parse({"repeat": given_repeat})["repeat"]
    assert result == {"every": 1000, "limit": 5, "count": 0}
    assert given_repeat == {"every": "1000", "limit": 5}  # input untouched
    kept = {"pattern": "*/5 * * * *", "tz": "UTC", "count": 2, "immediately": True}
    assert parse({"repeat": kept})["repeat"] == kept
    assert parse({"repeat": {"every": 1e300}})["repeat"]["every"] == MAX_DURATION_MS
    for bad in (0, -1, INF, NAN, "x", True):
        assert (
            error_of({"repeat": {"every": bad}}) == "repeat.every must be a positive finite number"
        )
    assert error_of({"repeat": "daily"}) == "repeat must be an object"


# ------------------------------------------------------------- ids, lists, strings


def test_custom_id_key_depends_on_the_command() -> None:
    assert parse({"jobId": "abc"})["custom_id"] == "abc"
    assert "custom_id" not in parse({"jobId": "abc"}, "customId")
    assert parse({"customId": "xyz"}, "customId")["custom_id"] == "xyz"
    assert "custom_id" not in parse({"jobId": ""})
    assert error_of({"jobId": 5}) == "jobId must be a string"
    assert error_of({"customId": 5}, "customId") == "customId must be a string"
    assert error_of({"jobId": "i" * 257}) == "Job id too long (max 256 characters)"
    assert parse({"jobId": "i" * 256})["custom_id"] == "i" * 256


@pytest.mark.parametrize(
    ("wire", "attr"),
    [("dependsOn", "depends_on"), ("childrenIds", "children_ids"), ("tags", "tags")],
)
def test_string_lists(wire: str, attr: str) -> None:
    given_list = ["a", "b"]
    result = parse({wire: given_list})[attr]
    assert result == ["a", "b"] and result is not given_list
    assert parse({wire: []})[attr] == []
    for bad in ("a", [1], ["a", None], {"a": 1}, 5):
        assert error_of({wire: bad}) == f"{wire} must be an array of strings"


def test_parent_id() -> None:
    assert parse({"parentId": "p"})["parent_id"] == "p"
    assert "parent_id" not in parse({"parentId": ""})  # bunqueue: only a truthy parentId
    assert error_of({"parentId": 5}) == "parentId must be a string"


# ---------------------------------------------------------------------------- flags


@pytest.mark.parametrize(
    ("wire", "attr"),
    [
        ("lifo", "lifo"),
        ("removeOnComplete", "remove_on_complete"),
        ("removeOnFail", "remove_on_fail"),
        ("durable", "durable"),
    ],
)
def test_flags_are_coerced_like_js_boolean(wire: str, attr: str) -> None:
    for value, expected in ((True, True), (1, True), ("yes", True), (False, False), (0, False)):
        assert parse({wire: value})[attr] is expected
    assert attr not in parse({})


def test_failure_policies_may_be_combined() -> None:
    """bunqueue accepts the four together (one acts: core.flows.failure_policy)."""
    names = [
        ("failParentOnFailure", "fail_parent_on_failure"),
        ("continueParentOnFailure", "continue_parent_on_failure"),
        ("ignoreDependencyOnFailure", "ignore_dependency_on_failure"),
        ("removeDependencyOnFailure", "remove_dependency_on_failure"),
    ]
    for wire, attr in names:
        assert parse({wire: True})[attr] is True
    both = parse({"failParentOnFailure": True, "ignoreDependencyOnFailure": 1})
    assert both["fail_parent_on_failure"] is True
    assert both["ignore_dependency_on_failure"] is True
    every = parse({wire: True for wire, _ in names})
    assert all(every[attr] is True for _, attr in names)
    result = parse({"failParentOnFailure": True, "continueParentOnFailure": False})
    assert result["fail_parent_on_failure"] is True
    assert result["continue_parent_on_failure"] is False


# -------------------------------------------------------------------------- order


def test_first_error_follows_bunqueues_order() -> None:
    bad = {
        "data": {1, 2},
        "groupId": 5,
        "priority": "x",
        "delay": "x",
        "timeout": "x",
        "maxAttempts": "x",
        "backoff": "x",
        "ttl": "x",
        "name": None,
        "tags": 5,
    }
    expected = [
        ("data", DATA_NOT_SERIALIZABLE),
        ("groupId", "groupId must be a string"),
        ("priority", "priority must be a number"),
        ("delay", "delay must be a number"),
        ("timeout", "timeout must be a number"),
        ("maxAttempts", "maxAttempts must be a number"),
        ("backoff", "backoff must be a number"),
        ("ttl", "ttl must be a number"),
        ("tags", "tags must be an array of strings"),
        ("name", NAME_ERROR),
    ]
    for key, text in expected:
        assert error_of(bad) == text
        del bad[key]
    parse(bad)


# ---------------------------------------------------------------------- robustness

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.from_regex(r"\A\s*[+-]?[0-9]{1,20}(\.[0-9]{1,5})?\s*\Z")
    | st.binary(max_size=8)
)
_json_like = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["type", "delay", "maxDelay", "ttl", "extend", "replace", "every", "name"]
            )
            | st.text(max_size=5),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)
_keys = st.sampled_from(
    sorted(options.OPTION_KEYS | {"name", "data", "jobId", "customId", "groupMaxSize"})
) | st.text(max_size=8)


@settings(max_examples=600, deadline=None)
@given(st.dictionaries(_keys, _json_like, max_size=12), st.sampled_from(["jobId", "customId"]))
@example({"groupMaxSize": 1}, "jobId")  # (once a failure of this test's own assertion)
def test_never_raises_anything_but_command_error(fields: dict[str, Any], key: str) -> None:
    snapshot = repr(fields)
    try:
        spec = parse_job_input(fields, custom_id_key=key)
    except Refused as exc:
        assert isinstance(exc.message, str) and exc.message
    else:
        assert set(spec) - NOT_JOB_ATTRS <= JOB_ATTRS
        assert isinstance(spec["name"], str) and 1 <= len(spec["name"]) <= 256
        assert isinstance(spec["delay"], float) and math.isfinite(spec["delay"])
        assert abs(spec["delay"]) <= MAX_DURATION_MS
        assert spec["timestamp"] is None or isinstance(spec["timestamp"], int)
        if "max_attempts" in spec:
            assert 1 <= spec["max_attempts"] <= MAX_ATTEMPTS
        attrs = {k: v for k, v in spec.items() if k not in NOT_JOB_ATTRS}
        JobRecord(**attrs)
    assert repr(fields) == snapshot  # the input is never mutated


_data_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.binary(max_size=10)
)
_data = st.recursive(
    _data_scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_data)
def test_fast_walk_bound_is_never_below_the_json_size(data: Any) -> None:
    # The walk's bound is what lets most data skip json.dumps: it must be an upper bound
    # of the JSON text's length in UTF-16 units, or too-large data would slip through.
    text = options._json_text(data)
    utf16 = len(text.encode("utf-16-le", "surrogatepass")) // 2
    assert options._json_bound(data, 0) >= utf16
