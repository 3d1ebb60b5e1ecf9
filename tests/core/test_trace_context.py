"""The traceContext job option: what is kept, what is refused and with which error."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core.errors import Refused
from trioqueue.core.options import parse_job_input
from trioqueue.core.trace_context import (
    BAD_KEYS,
    BAD_TRACEPARENT,
    BAD_TRACESTATE,
    MAX_TRACEPARENT_CHARS,
    MAX_TRACESTATE_CHARS,
    NOT_A_MAP,
    trace_context,
)

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_kept_as_given_and_copied() -> None:
    given = {"traceparent": PARENT, "tracestate": "congo=t61rcWkgMzE"}
    kept = parse_job_input({"data": 1, "traceContext": given}, custom_id_key="jobId")
    assert kept["trace_context"] == given
    assert kept["trace_context"] is not given
    # an empty tracestate is no tracestate; a later version's extra field is kept
    assert trace_context({"traceparent": PARENT, "tracestate": ""}) == {"traceparent": PARENT}
    assert trace_context({"traceparent": "01" + PARENT[2:] + "-future"})


def test_absent_or_nil_is_no_context() -> None:
    assert "trace_context" not in parse_job_input({"data": 1}, custom_id_key="jobId")
    assert "trace_context" not in parse_job_input({"data": 1, "traceContext": None},
                                                  custom_id_key="jobId")


@pytest.mark.parametrize(("value", "error"), [
    ("00-abc", NOT_A_MAP),
    ([PARENT], NOT_A_MAP),
    ({"tracestate": "a=b"}, NOT_A_MAP),
    ({"traceparent": PARENT, "baggage": "x"}, BAD_KEYS),
    ({"traceparent": 5}, BAD_TRACEPARENT),
    ({"traceparent": "not-a-traceparent"}, BAD_TRACEPARENT),
    ({"traceparent": PARENT.upper()}, BAD_TRACEPARENT),
    ({"traceparent": PARENT + "-" + "x" * MAX_TRACEPARENT_CHARS}, BAD_TRACEPARENT),
    ({"traceparent": PARENT, "tracestate": 3}, BAD_TRACESTATE),
    ({"traceparent": PARENT, "tracestate": "k=\u00e9"}, BAD_TRACESTATE),
    ({"traceparent": PARENT, "tracestate": "k=\n"}, BAD_TRACESTATE),
    ({"traceparent": PARENT, "tracestate": "k=" + "v" * MAX_TRACESTATE_CHARS}, BAD_TRACESTATE),
])
def test_refused_with_a_clear_error(value: Any, error: str) -> None:
    with pytest.raises(Refused) as refused:
        parse_job_input({"data": 1, "traceContext": value}, custom_id_key="jobId")
    assert refused.value.message == error
