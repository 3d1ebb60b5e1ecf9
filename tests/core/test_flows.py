"""Flows and dependencies, the pure parts: PUSHF validation, cycle search, flow jobs, outcomes."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trioqueue.core import flows
from trioqueue.core.errors import Refused
from trioqueue.core.flows import (
    FlowItem,
    child_key,
    completed_outcome,
    failed_outcome,
    failure_policy,
    find_cycle,
    new_flow_job,
    parse_flow,
)
from trioqueue.core.job import QUEUED, WAITING_CHILDREN, JobRecord

NOW = 1_700_000_000_000


def job(job_id: str, queue: str = "a", **inputs: Any) -> dict[str, Any]:
    """One PUSHF item; ``data`` defaults to an empty object (flows require an object)."""
    return {"id": job_id, "queue": queue, "input": {"data": {}, **inputs}}


def error_of(msg: Mapping[str, Any], **kwargs: Any) -> str:
    with pytest.raises(Refused) as info:
        parse_flow(msg, **kwargs)
    return info.value.message


def tree() -> list[dict[str, Any]]:
    """Parent p (queue a) waiting on children c1 (queue b) and c2 (queue c)."""
    return [
        job("p", "a", name="parent", dependsOn=["c1", "c2"], childrenIds=["c1", "c2"]),
        job("c1", "b", parentId="p", data={"n": 1}),
        job("c2", "c", parentId="p", data={"n": 2}),
    ]


def assert_is_cycle(edges: Mapping[str, Sequence[str]], cycle: list[str] | None) -> None:
    """``cycle`` is a closed walk along ``edges`` that repeats no id but its first."""
    assert cycle is not None
    assert len(cycle) >= 2
    assert cycle[0] == cycle[-1]
    assert len(set(cycle[:-1])) == len(cycle) - 1
    for source, target in zip(cycle, cycle[1:], strict=False):
        assert target in edges[source], (source, target)


# ---------------------------------------------------------------- parse_flow: accepted


def test_valid_tree_parses_into_items_in_order() -> None:
    items = parse_flow({"jobs": tree()})
    assert [(item.id, item.queue) for item in items] == [("p", "a"), ("c1", "b"), ("c2", "c")]
    assert all(isinstance(item, FlowItem) for item in items)


def test_valid_tree_specs_carry_ids_and_links() -> None:
    parent, c1, c2 = parse_flow({"jobs": tree()})
    assert parent.spec["custom_id"] == "p"
    assert parent.spec["name"] == "parent"
    assert parent.spec["depends_on"] == ["c1", "c2"]
    assert parent.spec["children_ids"] == ["c1", "c2"]
    assert "parent_id" not in parent.spec
    for item, n in ((c1, 1), (c2, 2)):
        assert item.spec["custom_id"] == item.id
        assert item.spec["parent_id"] == "p"
        assert item.spec["data"] == {"n": n}
        assert item.spec["name"] == "default"
        assert "depends_on" not in item.spec


def test_matching_custom_id_is_accepted() -> None:
    (item,) = parse_flow({"jobs": [job("x", customId="x")]})
    assert item.spec["custom_id"] == "x"


def test_options_are_parsed_like_a_push() -> None:
    (item,) = parse_flow({"jobs": [job("x", priority="7", delay=250, maxAttempts=0)]})
    assert item.spec["priority"] == 7
    assert item.spec["delay"] == 250.0
    assert item.spec["max_attempts"] == 1


def test_child_may_carry_a_failure_policy() -> None:
    jobs = tree()
    jobs[1]["input"]["failParentOnFailure"] = True
    _, c1, _ = parse_flow({"jobs": jobs})
    assert c1.spec["fail_parent_on_failure"] is True


def test_extra_dependencies_between_flow_jobs_are_allowed() -> None:
    jobs = tree()
    jobs[2]["input"]["dependsOn"] = ["c1"]
    _, _, c2 = parse_flow({"jobs": jobs})
    assert c2.spec["depends_on"] == ["c1"]


def test_message_is_not_mutated() -> None:
    jobs = tree()
    jobs[0]["input"]["data"] = {"name": "legacy-envelope", "k": [1, 2]}
    del jobs[0]["input"]["name"]
    msg = {"jobs": jobs}
    before = copy.deepcopy(msg)
    parent, _, _ = parse_flow(msg)
    assert parent.spec["name"] == "legacy-envelope"
    assert msg == before


def test_flow_at_the_job_limit_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows, "MAX_FLOW_JOBS", 3)
    assert len(parse_flow({"jobs": tree()})) == 3


def test_long_chain_at_the_real_limit_parses() -> None:
    n = flows.MAX_FLOW_JOBS
    jobs = [job("j0")] + [job(f"j{i}", dependsOn=[f"j{i - 1}"]) for i in range(1, n)]
    items = parse_flow({"jobs": jobs})
    assert len(items) == n
    assert items[-1].spec["depends_on"] == [f"j{n - 2}"]


# ----------------------------------------------------------------- parse_flow: refused


@pytest.mark.parametrize(
    ("jobs", "text"),
    [
        (None, "flow jobs must be an array"),
        ({"0": job("x")}, "flow jobs must be an array"),
        ("x", "flow jobs must be an array"),
        ([], "flow jobs must not be empty"),
    ],
)
def test_jobs_must_be_a_non_empty_array(jobs: Any, text: str) -> None:
    assert error_of({"jobs": jobs}) == text


def test_missing_jobs_key_is_refused() -> None:
    assert error_of({}) == "flow jobs must be an array"


def test_flow_over_the_job_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows, "MAX_FLOW_JOBS", 3)
    jobs = [job(f"j{i}") for i in range(4)]
    assert error_of({"jobs": jobs}) == "flow exceeds the 3 job limit"


def test_real_job_limit_is_ten_thousand() -> None:
    jobs = [job(f"j{i}") for i in range(10_001)]
    assert error_of({"jobs": jobs}) == "flow exceeds the 10000 job limit"


@pytest.mark.parametrize("bad", [None, "x", 3, ["x"]])
def test_item_must_be_an_object(bad: Any) -> None:
    assert error_of({"jobs": [job("x"), bad]}) == "flow jobs[1] must be an object"


@pytest.mark.parametrize("bad", [None, "", 5])
def test_item_needs_an_id(bad: Any) -> None:
    item = job("x")
    item["id"] = bad
    assert error_of({"jobs": [item]}) == "flow job id is required"


def test_missing_id_is_refused() -> None:
    item = job("x")
    del item["id"]
    assert error_of({"jobs": [item]}) == "flow job id is required"


def test_id_over_256_characters_is_refused() -> None:
    assert error_of({"jobs": [job("x" * 257)]}) == "Job id too long (max 256 characters)"


def test_id_must_fit_beside_its_queue() -> None:
    queue = "q" * 256
    assert len(parse_flow({"jobs": [job("x" * 245, queue)]})) == 1
    assert error_of({"jobs": [job("x" * 246, queue)]}) == (
        f"Job id too long for queue {queue} (max 245 bytes)"
    )


def test_id_with_a_colon_is_refused() -> None:
    assert error_of({"jobs": [job("a:b")]}) == "flow job id cannot contain a colon: a:b"


def test_duplicate_id_is_refused() -> None:
    jobs = [job("x", "a"), job("y"), job("x", "b")]
    assert error_of({"jobs": jobs}) == "duplicate flow job id: x"


@pytest.mark.parametrize(
    ("queue", "reason"),
    [
        (None, "Queue name is required"),
        ("", "Queue name is required"),
        (7, "Queue name is required"),
        ("bad queue", "Queue name contains invalid characters"),
        ("q" * 257, "Queue name too long (max 256 characters)"),
    ],
)
def test_bad_queue_is_refused(queue: Any, reason: str) -> None:
    text = error_of({"jobs": [job("x", queue)]})
    assert text.startswith("invalid flow queue for")
    assert text == f"invalid flow queue for x: {reason}"


@pytest.mark.parametrize("bad", [None, "x", ["data"], 1])
def test_input_must_be_an_object(bad: Any) -> None:
    item = job("x")
    item["input"] = bad
    assert error_of({"jobs": [item]}) == "flow job input is invalid: x"


@pytest.mark.parametrize("custom", ["y", 5, ""])
def test_custom_id_must_equal_the_planned_id(custom: Any) -> None:
    assert error_of({"jobs": [job("x", customId=custom)]}) == (
        "custom id does not match planned id: x"
    )


@pytest.mark.parametrize(
    ("key", "value", "text"),
    [
        ("repeat", {"every": 1000}, "x: repeat is not supported inside an atomic flow"),
        ("repeat", {}, "x: repeat is not supported inside an atomic flow"),
        ("uniqueKey", "u", "x: deduplication is not supported inside an atomic flow"),
        ("dedup", {"ttl": 5}, "x: deduplication is not supported inside an atomic flow"),
        ("debounceId", "d", "x: debounce is not supported inside an atomic flow"),
        ("debounceTtl", 100, "x: debounce is not supported inside an atomic flow"),
    ],
)
def test_repeat_dedup_and_debounce_are_refused(key: str, value: Any, text: str) -> None:
    assert error_of({"jobs": [job("x", **{key: value})]}) == text


@pytest.mark.parametrize("data", [None, [1, 2], 3, "text", True])
def test_data_must_be_an_object(data: Any) -> None:
    assert error_of({"jobs": [job("x", data=data)]}) == "x: flow job data must be an object"


def test_missing_data_is_refused() -> None:
    item = job("x")
    del item["input"]["data"]
    assert error_of({"jobs": [item]}) == "x: flow job data must be an object"


@pytest.mark.parametrize(
    ("inputs", "text"),
    [
        ({"priority": "abc"}, "x: priority must be a number"),
        ({"maxAttempts": "many"}, "x: maxAttempts must be a number"),
        ({"dependsOn": "c"}, "x: dependsOn must be an array of strings"),
        ({"childrenIds": [1]}, "x: childrenIds must be an array of strings"),
        ({"parentId": 3}, "x: parentId must be a string"),
        ({"name": ""}, "x: Job name must be a non-empty string of at most 256 characters"),
        ({"data": {"f": {1, 2}}}, "x: Job data must be JSON serializable"),
    ],
)
def test_invalid_option_is_prefixed_with_the_job_id(inputs: dict[str, Any], text: str) -> None:
    assert error_of({"jobs": [job("x", **inputs)]}) == text


def test_data_limit_is_passed_through() -> None:
    msg = {"jobs": [job("x", data={"s": "y" * 100})]}
    assert len(parse_flow(msg, max_data_bytes=1000)) == 1
    assert error_of(msg, max_data_bytes=50) == "x: Job data too large (max 10MB)"


@pytest.mark.parametrize(
    "policy",
    [
        "failParentOnFailure",
        "continueParentOnFailure",
        "ignoreDependencyOnFailure",
        "removeDependencyOnFailure",
    ],
)
def test_failure_policy_requires_a_parent(policy: str) -> None:
    assert error_of({"jobs": [job("x", "a", **{policy: True})]}) == (
        "x: a flow failure policy requires a parent"
    )


def test_empty_parent_id_counts_as_no_parent_for_a_policy() -> None:
    assert error_of({"jobs": [job("x", parentId="", failParentOnFailure=True)]}) == (
        "x: a flow failure policy requires a parent"
    )


def test_false_policy_needs_no_parent() -> None:
    (item,) = parse_flow({"jobs": [job("x", failParentOnFailure=False)]})
    assert item.spec["fail_parent_on_failure"] is False


def test_two_failure_policies_are_taken() -> None:
    jobs = tree()
    jobs[1]["input"].update(failParentOnFailure=True, ignoreDependencyOnFailure=True)
    items = parse_flow({"jobs": jobs})
    spec = items[1].spec
    assert spec["fail_parent_on_failure"] is True
    assert spec["ignore_dependency_on_failure"] is True


def test_dependency_outside_the_flow_is_refused() -> None:
    jobs = [job("x", dependsOn=["y"]), job("z")]
    assert error_of({"jobs": jobs}) == "x depends on y, which is not in the flow"


def test_parent_outside_the_flow_is_refused() -> None:
    assert error_of({"jobs": [job("c", parentId="p")]}) == "parent p of c is not in the flow"


def test_child_outside_the_flow_is_refused() -> None:
    jobs = [job("p", dependsOn=["c"], childrenIds=["c", "d"]), job("c", parentId="p")]
    assert error_of({"jobs": jobs}) == "child d of p is not in the flow"


def test_parent_must_list_its_child() -> None:
    jobs = [job("p"), job("c", parentId="p")]
    assert error_of({"jobs": jobs}) == "parent p does not list c as a child"


def test_listed_child_must_name_its_parent() -> None:
    jobs = [job("p", dependsOn=["c"], childrenIds=["c"]), job("c")]
    assert error_of({"jobs": jobs}) == "child c does not name p as its parent"


def test_listed_child_naming_another_parent_is_refused() -> None:
    jobs = [
        job("p", dependsOn=["c"], childrenIds=["c"]),
        job("q", dependsOn=["c"], childrenIds=["c"]),
        job("c", parentId="q"),
    ]
    assert error_of({"jobs": jobs}) == "child c does not name p as its parent"


def test_parent_must_depend_on_each_child() -> None:
    jobs = [job("p", dependsOn=["c1"], childrenIds=["c1", "c2"]),
            job("c1", parentId="p"), job("c2", parentId="p")]
    assert error_of({"jobs": jobs}) == "p must depend on its child c2"


def test_self_dependency_is_refused() -> None:
    jobs = [job("y"), job("x", dependsOn=["y", "x"])]
    assert error_of({"jobs": jobs}) == "Job cannot depend on itself: x"


def test_cycle_is_refused_and_named() -> None:
    jobs = [job("a", dependsOn=["b"]), job("b", dependsOn=["c"]), job("c", dependsOn=["a"])]
    text = error_of({"jobs": jobs})
    prefix = "flow has a dependency cycle: "
    assert text.startswith(prefix)
    path = text[len(prefix):].split(" -> ")
    assert set(path) == {"a", "b", "c"}
    assert_is_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}, path)


def test_cycle_through_parent_and_child_is_refused() -> None:
    jobs = tree()
    jobs[1]["input"]["dependsOn"] = ["p"]
    text = error_of({"jobs": jobs})
    assert text.startswith("flow has a dependency cycle: ")
    assert set(text.removeprefix("flow has a dependency cycle: ").split(" -> ")) == {"p", "c1"}


def test_one_bad_job_refuses_the_whole_flow() -> None:
    jobs = [*tree(), job("late", data=[1])]
    assert error_of({"jobs": jobs}) == "late: flow job data must be an object"


# ------------------------------------------------------------------------- find_cycle


def test_find_cycle_empty_graph() -> None:
    assert find_cycle({}) is None


def test_find_cycle_diamond_is_acyclic() -> None:
    edges = {"top": ["l", "r"], "l": ["bottom"], "r": ["bottom"], "bottom": []}
    assert find_cycle(edges) is None


def test_find_cycle_ignores_edges_leaving_the_graph() -> None:
    edges = {"a": ["outside"], "b": ["a", "elsewhere"], "c": ["b", "outside"]}
    assert find_cycle(edges) is None


def test_find_cycle_two_cycle() -> None:
    edges = {"a": ["b"], "b": ["a"]}
    cycle = find_cycle(edges)
    assert_is_cycle(edges, cycle)
    assert cycle is not None and set(cycle) == {"a", "b"} and len(cycle) == 3


def test_find_cycle_three_cycle_behind_an_acyclic_part() -> None:
    edges = {"start": ["x"], "x": ["y", "ok"], "ok": [], "y": ["z"], "z": ["x"]}
    cycle = find_cycle(edges)
    assert_is_cycle(edges, cycle)
    assert cycle is not None and set(cycle) == {"x", "y", "z"} and len(cycle) == 4


def test_find_cycle_self_loop() -> None:
    assert find_cycle({"a": [], "b": ["a", "b"]}) == ["b", "b"]


def test_find_cycle_long_chain_does_not_recurse() -> None:
    n = 10_000
    edges: dict[str, list[str]] = {f"j{i}": [f"j{i - 1}"] if i else [] for i in range(n)}
    assert find_cycle(edges) is None
    # Same chain walked from its tail first (the deepest path from the first root).
    reversed_edges = dict(reversed(list(edges.items())))
    assert find_cycle(reversed_edges) is None
    edges["j0"] = [f"j{n - 1}"]
    cycle = find_cycle(edges)
    assert_is_cycle(edges, cycle)
    assert cycle is not None and len(cycle) == n + 1


class CountingEdges(Mapping[str, Sequence[str]]):
    """An edge map that fails once its adjacency lists were read more than ``budget`` times."""

    def __init__(self, edges: dict[str, list[str]], budget: int) -> None:
        self.edges = edges
        self.budget = budget
        self.reads = 0

    def __getitem__(self, key: str) -> list[str]:
        self.reads += 1
        assert self.reads <= self.budget, "adjacency lists read again: exponential walk"
        return self.edges[key]

    def __contains__(self, key: object) -> bool:
        return key in self.edges

    def __iter__(self) -> Iterator[str]:
        return iter(self.edges)

    def __len__(self) -> int:
        return len(self.edges)


def test_find_cycle_dense_dag_visits_each_node_once() -> None:
    # 40 layers of 3, each node depending on the whole layer below: 3**40 paths, so
    # this only finishes if finished nodes are not walked again.
    edges = {
        f"{layer}.{k}": [f"{layer - 1}.{m}" for m in range(3)] if layer else []
        for layer in range(40)
        for k in range(3)
    }
    counting = CountingEdges(edges, budget=len(edges))
    assert find_cycle(counting) is None
    assert counting.reads == len(edges)


@st.composite
def dags(draw: st.DrawFn) -> dict[str, list[str]]:
    """Random DAGs: node k depends only on lower-numbered nodes (and some outsiders)."""
    n = draw(st.integers(min_value=1, max_value=12))
    edges: dict[str, list[str]] = {}
    for k in range(n):
        lower = draw(st.lists(st.integers(0, k - 1), unique=True)) if k else []
        outside = draw(st.lists(st.sampled_from(["ext1", "ext2"]), max_size=1))
        edges[f"n{k}"] = [f"n{i}" for i in lower] + outside
    return edges


@settings(max_examples=300, deadline=None)
@given(dags(), st.data())
def test_find_cycle_property(edges: dict[str, list[str]], data: st.DataObject) -> None:
    assert find_cycle(edges) is None
    # Walk down from some node, then add the edge that leads back to it.
    start = data.draw(st.sampled_from(sorted(edges)))
    end = start
    while True:
        inside = [dep for dep in edges[end] if dep in edges]
        if not inside or not data.draw(st.booleans()):
            break
        end = data.draw(st.sampled_from(inside))
    edges[end] = [*edges[end], start]
    cycle = find_cycle(edges)
    assert_is_cycle(edges, cycle)


# ------------------------------------------------------------------------ new_flow_job


def test_job_with_dependencies_waits_for_children() -> None:
    parent, _, _ = parse_flow({"jobs": tree()})
    made = new_flow_job(parent, NOW)
    assert made.id == "p"
    assert made.queue == "a"
    assert made.custom_id == "p"
    assert made.name == "parent"
    assert made.state == WAITING_CHILDREN
    assert made.pending == ["c1", "c2"]
    assert made.depends_on == ["c1", "c2"]
    assert made.children_ids == ["c1", "c2"]
    assert made.created_at == NOW
    assert made.run_at == NOW
    assert made.last_heartbeat == NOW
    assert made.timeline == [{"state": "waiting-children", "timestamp": float(NOW)}]


def test_pending_drops_duplicates_and_keeps_order() -> None:
    item = FlowItem("p", "a", {"depends_on": ["c2", "c1", "c2", "c3", "c1"], "data": {}})
    made = new_flow_job(item, NOW)
    assert made.pending == ["c2", "c1", "c3"]
    assert made.depends_on == ["c2", "c1", "c2", "c3", "c1"]


def test_job_without_dependencies_is_queued_and_waiting() -> None:
    _, c1, _ = parse_flow({"jobs": tree()})
    made = new_flow_job(c1, NOW)
    assert made.state == QUEUED
    assert made.pending is None
    assert made.parent_id == "p"
    assert made.data == {"n": 1}
    assert made.run_at == NOW
    assert made.timeline == [{"state": "waiting", "timestamp": float(NOW)}]


def test_empty_depends_on_is_no_dependency() -> None:
    (item,) = parse_flow({"jobs": [job("x", dependsOn=[])]})
    made = new_flow_job(item, NOW)
    assert made.state == QUEUED
    assert made.pending is None


def test_delay_sets_run_at_and_shows_delayed() -> None:
    (item,) = parse_flow({"jobs": [job("x", delay=1500)]})
    made = new_flow_job(item, NOW)
    assert made.state == QUEUED
    assert made.created_at == NOW
    assert made.run_at == NOW + 1500
    assert isinstance(made.run_at, int)
    assert made.timeline == [{"state": "delayed", "timestamp": float(NOW)}]


def test_delayed_job_with_dependencies_still_waits_for_children() -> None:
    jobs = tree()
    jobs[0]["input"]["delay"] = 500
    parent, _, _ = parse_flow({"jobs": jobs})
    made = new_flow_job(parent, NOW)
    assert made.state == WAITING_CHILDREN
    assert made.run_at == NOW + 500
    assert made.timeline[0]["state"] == "waiting-children"


def test_timestamp_sets_created_at_and_run_at_base() -> None:
    (item,) = parse_flow({"jobs": [job("x", timestamp=NOW - 10_000, delay=4000)]})
    made = new_flow_job(item, NOW)
    assert made.created_at == NOW - 10_000
    assert made.last_heartbeat == NOW - 10_000
    assert made.run_at == NOW - 6000
    # runAt is already past: the job shows as waiting; the timeline entry is "now".
    assert made.timeline == [{"state": "waiting", "timestamp": float(NOW)}]


def test_future_timestamp_makes_the_job_delayed() -> None:
    (item,) = parse_flow({"jobs": [job("x", timestamp=NOW + 1000)]})
    made = new_flow_job(item, NOW)
    assert made.created_at == NOW + 1000
    assert made.run_at == NOW + 1000
    assert made.timeline[0]["state"] == "delayed"


def test_spec_is_not_mutated_and_item_can_be_reused() -> None:
    jobs = tree()
    jobs[0]["input"].update(delay=100, timestamp=NOW - 50)
    parent, _, _ = parse_flow({"jobs": jobs})
    before = copy.deepcopy(parent.spec)
    first = new_flow_job(parent, NOW)
    assert parent.spec == before
    first.pending.remove("c1")  # type: ignore[union-attr]
    first.depends_on.append("zzz")
    first.add_timeline("active", NOW + 1)
    assert parent.spec == before
    second = new_flow_job(parent, NOW + 7)
    assert parent.spec == before
    assert second.pending == ["c1", "c2"]
    assert second.depends_on == ["c1", "c2"]
    assert second.created_at == NOW - 50
    assert second.run_at == NOW + 50
    assert second.timeline == [{"state": "waiting-children", "timestamp": float(NOW + 7)}]


def test_flow_job_round_trips_through_its_record() -> None:
    parent, _, _ = parse_flow({"jobs": tree()})
    made = new_flow_job(parent, NOW)
    again = JobRecord.from_record(made.to_record())
    assert again.state == WAITING_CHILDREN
    assert again.pending == ["c1", "c2"]
    assert again.to_wire() == made.to_wire()


# ------------------------------------------------------------ outcomes, policies, keys


@pytest.mark.parametrize(
    ("flag", "policy"),
    [
        ("fail_parent_on_failure", flows.FAIL_PARENT),
        ("continue_parent_on_failure", flows.CONTINUE_PARENT),
        ("ignore_dependency_on_failure", flows.IGNORE_DEPENDENCY),
        ("remove_dependency_on_failure", flows.REMOVE_DEPENDENCY),
    ],
)
def test_failure_policy_of_a_job(flag: str, policy: str) -> None:
    assert failure_policy(JobRecord(id="c", queue="b", **{flag: True})) == policy


def test_failure_policy_values() -> None:
    assert (flows.FAIL_PARENT, flows.CONTINUE_PARENT, flows.IGNORE_DEPENDENCY,
            flows.REMOVE_DEPENDENCY) == ("fail", "continue", "ignore", "remove")


def test_no_failure_policy() -> None:
    assert failure_policy(JobRecord(id="c", queue="b")) is None


def test_failure_policy_of_a_parsed_flow_child() -> None:
    jobs = tree()
    jobs[2]["input"]["removeDependencyOnFailure"] = True
    _, c1, c2 = parse_flow({"jobs": jobs})
    assert failure_policy(new_flow_job(c1, NOW)) is None
    assert failure_policy(new_flow_job(c2, NOW)) == "remove"


def test_completed_outcome_without_result() -> None:
    assert completed_outcome("b", False, {"ignored": True}) == {
        "kind": "completed", "queue": "b"}


def test_completed_outcome_keeps_a_none_result() -> None:
    outcome = completed_outcome("b", True, None)
    assert outcome == {"kind": "completed", "queue": "b", "result": None}
    assert "result" in outcome


def test_completed_outcome_with_result_and_no_queue() -> None:
    assert completed_outcome(None, True, [1, 2]) == {
        "kind": "completed", "queue": None, "result": [1, 2]}


def test_completed_outcomes_are_independent() -> None:
    first = completed_outcome("b", False, None)
    first["result"] = 1
    assert completed_outcome("b", False, None) == {"kind": "completed", "queue": "b"}


def test_failed_outcome() -> None:
    assert failed_outcome("b", "boom", "fail") == {
        "kind": "failed", "queue": "b", "error": "boom", "policy": "fail"}
    assert failed_outcome("c", None, "ignore")["error"] is None


def test_detached_outcome() -> None:
    assert flows.DETACHED == {"kind": "detached"}


def test_child_key() -> None:
    assert child_key("emails", "c1") == "emails:c1"
    assert child_key(None, "c1") == "c1"
    assert child_key("", "c1") == ":c1"
