"""bunqueue's SDK option names (a REST push's ``opts``) as the PUSH fields the one
validator judges."""

from __future__ import annotations

import pytest

from trioqueue.core.caller_options import push_fields
from trioqueue.core.errors import Refused
from trioqueue.core.options import parse_job_input


def test_sdk_names_become_push_fields() -> None:
    fields = push_fields({
        "attempts": 4, "jobId": "j", "deduplication": {"id": "u", "ttl": 10, "extend": True},
        "debounce": {"id": "d", "ttl": 20}, "group": {"id": "g", "priority": 3, "maxSize": 9},
        "parent": {"id": "p", "queue": "q"}, "backoff": {"delay": 5, "maxDelay": 50},
        "delay": None, "unknown": 1}, "customId")
    assert fields == {
        "maxAttempts": 4, "customId": "j", "uniqueKey": "u",
        "dedup": {"ttl": 10, "extend": True}, "debounceId": "d", "debounceTtl": 20,
        "groupId": "g", "priority": 3, "groupMaxSize": 9, "parentId": "p",
        "backoff": {"delay": 5, "maxDelay": 50}}


@pytest.mark.parametrize(("opts", "text"), [
    ([1], "opts must be an object"),
    ({"group": "g"}, "group must be an object"),
    ({"deduplication": True}, "deduplication must be an object"),
])
def test_a_shape_that_is_not_a_map_is_refused(opts: object, text: str) -> None:
    with pytest.raises(Refused, match=f"^{text}$"):
        push_fields(opts, "jobId")


def test_the_values_are_judged_with_the_wire_texts() -> None:
    spec = {"name": "n", "data": None, **push_fields({"group": {"id": "g", "priority": 1.5}},
                                                     "jobId")}
    with pytest.raises(Refused, match="^group.priority must be an integer$"):
        parse_job_input(spec, custom_id_key="jobId")
