"""Command-field validators: accepted values, normalised results and bunqueue's exact texts."""

from __future__ import annotations

import math
from typing import Any

import pytest

from trioqueue.core import fields
from trioqueue.core.errors import Refused

INF = math.inf
NAN = math.nan


def error_of(func: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(Refused) as info:
        func(*args, **kwargs)
    return info.value.message


# ------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (60000, "60000"),
        (60000.0, "60000"),
        (0.5, "0.5"),
        (-2.5, "-2.5"),
        (4.32e15, "4320000000000000"),
        (1e16, "10000000000000000"),
        (1e21, "1e+21"),
        (1.5e300, "1.5e+300"),
        (1e-5, "0.00001"),
        (1.2345e-5, "0.000012345"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (INF, "Infinity"),
        (-INF, "-Infinity"),
        (NAN, "NaN"),
    ],
)
def test_js_number_str_formats_like_js(value: float, text: str) -> None:
    assert fields.js_number_str(value) == text


def test_js_length_counts_utf16_units() -> None:
    assert fields.js_length("abc") == 3
    assert fields.js_length("é" * 200) == 200
    assert fields.js_length("😀" * 100) == 100  # short strings are never measured twice
    assert fields.js_length("😀" * 200) == 400


# ---------------------------------------------------------------------- queue name


@pytest.mark.parametrize("name", ["q", "emails", "a-b_c.d:e", "A" * 256, "0"])
def test_queue_name_accepts(name: str) -> None:
    assert fields.queue_name(name) == name


@pytest.mark.parametrize("value", [None, "", 5, True, ["q"], b"q"])
def test_queue_name_required(value: Any) -> None:
    assert error_of(fields.queue_name, value) == "Queue name is required"


def test_queue_name_too_long() -> None:
    assert error_of(fields.queue_name, "a" * 257) == "Queue name too long (max 256 characters)"
    # Length is checked first, in UTF-16 units as JS counts it.
    assert error_of(fields.queue_name, "😀" * 200) == "Queue name too long (max 256 characters)"


@pytest.mark.parametrize("name", ["a b", "a/b", "é", "q\0", "q\n", "a*"])
def test_queue_name_invalid_characters(name: str) -> None:
    assert error_of(fields.queue_name, name) == "Queue name contains invalid characters"


# ------------------------------------------------------------------ ids and strings


def test_job_id() -> None:
    assert fields.job_id("abc") == "abc"
    assert fields.job_id("x" * 256) == "x" * 256
    for bad in (None, "", 5, True, ["a"]):
        assert error_of(fields.job_id, bad) == "id is required"
    assert error_of(fields.job_id, None, "customId") == "customId is required"
    assert error_of(fields.job_id, "x" * 257) == "Job id too long (max 256 characters)"
    assert error_of(fields.job_id, "😀" * 129) == "Job id too long (max 256 characters)"
    assert fields.job_id("x" * 257, check_length=False) == "x" * 257


def test_optional_str() -> None:
    assert fields.optional_str(None, "owner") is None
    assert fields.optional_str("w", "owner") == "w"
    assert error_of(fields.optional_str, 5, "owner") == "owner must be a string"
    assert error_of(fields.optional_str, False, "owner") == "owner must be a string"


def test_str_list_returns_a_new_list() -> None:
    given = ["a", "b"]
    result = fields.str_list(given, "ids")
    assert result == ["a", "b"] and result is not given
    assert fields.str_list(("a",), "ids") == ["a"]
    assert fields.str_list([], "ids") == []


@pytest.mark.parametrize("value", [None, "abc", [1], ["a", None], {"a": 1}, 5])
def test_str_list_refuses(value: Any) -> None:
    assert error_of(fields.str_list, value, "ids") == "ids must be an array of strings"


def test_group_id() -> None:
    assert fields.group_id("g") == "g"
    assert fields.group_id("g" * 256) == "g" * 256
    assert error_of(fields.group_id, 5) == "groupId must be a string"
    assert error_of(fields.group_id, None) == "groupId must be a string"
    assert error_of(fields.group_id, "") == "groupId must be a non-empty string"
    assert error_of(fields.group_id, "g" * 257) == "groupId must be at most 256 characters"
    assert error_of(fields.group_id, "😀" * 129) == "groupId must be at most 256 characters"
    assert error_of(fields.group_id, "a\0b") == "groupId must not contain NUL characters"


# -------------------------------------------------------------------------- numbers


def test_strict_number_refuses_strings_and_bools() -> None:
    for value in ("5", " 5 ", "", "abc"):
        assert error_of(fields.strict_number, value, "limit") == "limit must be a number"
    for value in (True, False):
        assert error_of(fields.strict_number, value, "limit") == "limit must be a number"
    for value in ([1], {"a": 1}, b"1"):
        assert error_of(fields.strict_number, value, "limit") == "limit must be a number"


def test_strict_number_bounds_and_texts() -> None:
    sn = fields.strict_number
    assert sn(5, "x") == 5
    assert sn(2.5, "x") == 2.5
    assert sn(None, "x") is None
    assert sn(None, "x", default=7) == 7
    assert error_of(sn, None, "x", required=True) == "x is required"
    assert error_of(sn, NAN, "x") == "x must be a finite number"
    assert error_of(sn, INF, "x") == "x must be a finite number"
    assert error_of(sn, -INF, "x") == "x must be a finite number"
    assert error_of(sn, 10**400, "x") == "x must be a finite number"
    assert error_of(sn, 1.5, "x", integer=True) == "x must be an integer"
    assert sn(3.0, "x", integer=True) == 3.0
    assert error_of(sn, -1, "x", minimum=0) == "x must be at least 0"
    assert error_of(sn, 10, "x", maximum=5.0) == "x must be at most 5"
    assert error_of(sn, 0.5, "x", minimum=1.5) == "x must be at least 1.5"
    # Order: finiteness before integrality before bounds (bunqueue's numberError).
    assert error_of(sn, INF, "x", integer=True, maximum=5) == "x must be a finite number"
    assert error_of(sn, 9.5, "x", integer=True, maximum=5) == "x must be an integer"


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("3", 3),
        (" -2.5 ", -2.5),
        ("+7", 7),
        ("007", 7),
        ("-0", 0),
        ("1.0", 1),
        ("\t12\n", 12),
        ("\u00a05\u3000", 5),  # JS whitespace is not only ASCII
        ("\ufeff8", 8),
        ("123456789012345678901234567890", 1.2345678901234568e29),
    ],
)
def test_lenient_number_accepts_plain_decimal_strings(text: str, number: float) -> None:
    result = fields.lenient_number(text, "x")
    assert result == number
    assert type(result) is type(number)


@pytest.mark.parametrize(
    "text", ["", "   ", "1e3", "0x10", ".5", "5.", "1_000", "Infinity", "NaN", "abc", "1 2", "٣"]
)
def test_lenient_number_refuses_other_strings(text: str) -> None:
    assert error_of(fields.lenient_number, text, "priority") == "priority must be a number"


def test_lenient_number_overflowing_string_is_not_finite() -> None:
    assert error_of(fields.lenient_number, "9" * 400, "x") == "x must be a finite number"


def test_lenient_number_bools_are_not_numbers() -> None:
    assert error_of(fields.lenient_number, True, "x") == "x must be a number"
    assert error_of(fields.lenient_number, False, "x") == "x must be a number"


def test_lenient_number_applies_bounds_after_coercion() -> None:
    assert error_of(fields.lenient_number, "-1", "ttl", minimum=0) == "ttl must be at least 0"
    assert error_of(fields.lenient_number, "2.5", "n", integer=True) == "n must be an integer"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, False),
        (False, False),
        (True, True),
        (0, False),
        (0.0, False),
        (-0.0, False),
        (NAN, False),
        ("", False),
        (1, True),
        (-1, True),
        (0.1, True),
        ("false", True),
        ("0", True),
        ([], True),
        ({}, True),
        (b"", True),
    ],
)
def test_lenient_bool_is_js_boolean(value: Any, expected: bool) -> None:
    assert fields.lenient_bool(value) is expected


# ------------------------------------------------------------------ command fields


def test_pull_timeout() -> None:
    assert fields.pull_timeout(None) == 0
    assert fields.pull_timeout(0) == 0
    assert fields.pull_timeout(60000) == 60000
    assert fields.pull_timeout(1500.5) == 1500.5
    assert error_of(fields.pull_timeout, 60001) == "timeout must be at most 60000"
    assert error_of(fields.pull_timeout, 60000.5) == "timeout must be at most 60000"
    assert error_of(fields.pull_timeout, -1) == "timeout must be at least 0"
    assert error_of(fields.pull_timeout, "1000") == "timeout must be a number"
    assert error_of(fields.pull_timeout, True) == "timeout must be a number"
    assert error_of(fields.pull_timeout, INF) == "timeout must be a finite number"


def test_pullb_count() -> None:
    assert fields.pullb_count(1) == 1
    assert fields.pullb_count(1000) == 1000
    assert fields.pullb_count(10.0) == 10
    assert fields.pullb_count(2.5) == 3
    assert error_of(fields.pullb_count, 0) == "count must be at least 1"
    assert error_of(fields.pullb_count, 1001) == "count must be at most 1000"
    assert error_of(fields.pullb_count, "10") == "count must be a number"
    assert error_of(fields.pullb_count, None) == "count is required"
    assert error_of(fields.pullb_count, NAN) == "count must be a finite number"


def test_lock_ttl() -> None:
    assert fields.lock_ttl(None) == 30000
    assert fields.lock_ttl(0) == 0  # legal: the lease is already expired
    assert fields.lock_ttl(-5) == -5
    assert fields.lock_ttl(1e12) == 1e12
    assert error_of(fields.lock_ttl, INF) == "lockTtl must be a finite number"
    assert error_of(fields.lock_ttl, NAN) == "lockTtl must be a finite number"
    assert error_of(fields.lock_ttl, "5000") == "lockTtl must be a number"
    assert error_of(fields.lock_ttl, True) == "lockTtl must be a number"


def test_lock_duration() -> None:
    assert fields.lock_duration(None) is None
    assert fields.lock_duration(5000) == 5000
    assert error_of(fields.lock_duration, "5") == "duration must be a number"
    assert error_of(fields.lock_duration, -INF) == "duration must be a finite number"


def test_wait_timeout() -> None:
    assert fields.wait_timeout(None) == 30000
    assert fields.wait_timeout(0) == 0
    assert fields.wait_timeout(600000) == 600000
    assert error_of(fields.wait_timeout, 600001) == "timeout must be at most 600000"
    assert error_of(fields.wait_timeout, -1) == "timeout must be at least 0"
    assert error_of(fields.wait_timeout, "100") == "timeout must be a number"


def test_priority_change() -> None:
    assert fields.priority_change(None) == 0
    assert fields.priority_change(5) == 5
    assert fields.priority_change(-3.5) == -3.5
    assert fields.priority_change(" 7 ") == 7
    assert error_of(fields.priority_change, NAN) == "priority must be a finite number"
    assert error_of(fields.priority_change, INF) == "priority must be a finite number"
    assert error_of(fields.priority_change, "high") == "priority must be a number"
    assert error_of(fields.priority_change, True) == "priority must be a number"


def test_delay_required() -> None:
    assert fields.delay_required(1000) == 1000
    assert fields.delay_required("-250") == -250
    assert fields.delay_required(1e300) == fields.MAX_DURATION_MS
    assert fields.delay_required(-1e300) == -fields.MAX_DURATION_MS
    assert error_of(fields.delay_required, None) == "delay is required"
    assert error_of(fields.delay_required, INF) == "delay must be a finite number"
    assert error_of(fields.delay_required, NAN) == "delay must be a finite number"
    assert error_of(fields.delay_required, "soon") == "delay must be a number"


def test_keep_logs_argument() -> None:
    assert fields.keep_logs_argument(None) is None
    assert fields.keep_logs_argument(0) == 0
    assert fields.keep_logs_argument(-3) == 0
    assert fields.keep_logs_argument(1.5) == 1
    assert fields.keep_logs_argument("4") == 4
    assert fields.keep_logs_argument(INF) == 2**53 - 1
    assert error_of(fields.keep_logs_argument, NAN) == "keepLogs must be a number"
    assert error_of(fields.keep_logs_argument, "all") == "keepLogs must be a number"


def test_fail_stack() -> None:
    assert fields.fail_stack(None) is None
    assert fields.fail_stack("line") is None
    assert fields.fail_stack([]) is None
    assert fields.fail_stack([1, None]) is None
    assert fields.fail_stack(["a", 1, "b"]) == ["a", "b"]
    assert fields.fail_stack([str(i) for i in range(150)]) == [str(i) for i in range(100)]
