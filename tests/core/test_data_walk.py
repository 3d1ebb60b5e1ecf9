"""The C walks of trioqueue.core._data_walk answer as the Python ones do, for every input.

``datamodel.validated`` (C where built) is held to ``datamodel.validated_py`` (the Python
walk alone), and ``job_data._json_bound`` to ``job_data._json_bound_py``, on trees full
of what the C form hands back to Python: odd keys, absent markers, subclasses, unknown
types, huge ints, nesting past the limits.
"""

from __future__ import annotations

import copy
import math
import os
import sys
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trioqueue.core import job_data, native
from trioqueue.transport.wire import datamodel
from trioqueue.transport.wire.datamodel import ABSENT, MAX_DEPTH, DecodeError

# The C and Python walks compared on 300 generated values by default;
# TRIOQUEUE_MODEL_SCALE=10 compares ten times as many (README).
EXAMPLES = 300 * int(os.environ.get("TRIOQUEUE_MODEL_SCALE", "1"))


class MyInt(int):
    pass


class MyStr(str):
    pass


class MyDict(dict):  # type: ignore[type-arg]
    pass


class MyList(list):  # type: ignore[type-arg]
    pass


HUGE = 10**5000  # str() of it raises ValueError (Python's digit limit), so does repr():
# not generated (hypothesis describes what it generates), tested below by name.
EDGE_INTS = [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 2**200, -(2**200),
             10**4000, -(10**4000)]

plain_leaves = st.one_of(
    st.text(max_size=5), st.integers(), st.floats(), st.booleans(), st.none(),
    st.binary(max_size=4), st.sampled_from(EDGE_INTS))
odd_leaves = st.one_of(
    st.sampled_from([ABSENT, cbor2.undefined, complex(1, 2), Decimal(1), frozenset({1})]),
    st.binary(max_size=4).map(bytearray), st.integers().map(MyInt),
    st.text(max_size=3).map(MyStr))
plain_keys = st.text(max_size=4)
odd_keys = st.one_of(
    st.integers(), st.sampled_from(EDGE_INTS), st.floats(), st.booleans(), st.none(),
    st.binary(max_size=3), st.tuples(st.integers(0, 3)), st.text(max_size=3).map(MyStr))


def trees(leaves: st.SearchStrategy[Any], keys: st.SearchStrategy[Any],
          odd: bool) -> st.SearchStrategy[Any]:
    def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        forms = [st.dictionaries(keys, children, max_size=4), st.lists(children, max_size=4)]
        if odd:
            forms += [st.lists(children, max_size=3).map(tuple),
                      st.dictionaries(keys, children, max_size=3).map(MyDict),
                      st.lists(children, max_size=3).map(MyList)]
        return st.one_of(*forms)
    return st.recursive(leaves, containers, max_leaves=25)


def wrap(tree: Any, kinds: list[str]) -> Any:
    """``tree`` nested in one container per kind (deep nesting the generator seldom makes)."""
    for kind in kinds:
        tree = {"k": tree} if kind == "d" else [tree] if kind == "l" else (tree,)
    return tree


def deep(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.builds(wrap, inner, st.lists(st.sampled_from("dlt"), min_size=55, max_size=70))


plain = trees(plain_leaves, plain_keys, odd=False)
mixed = trees(st.one_of(plain_leaves, odd_leaves), st.one_of(plain_keys, odd_keys), odd=True)


@st.composite
def one_odd(draw: st.DrawFn) -> Any:
    """A plain tree with one odd key or member put in one of its maps or lists: the
    C walk meets it alone, after and before plain siblings."""
    tree = draw(st.one_of(plain, deep(plain)))
    spots: list[Any] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if type(node) in (dict, list):
            spots.append(node)
        if isinstance(node, dict):
            todo.extend(node.values())
        elif isinstance(node, list | tuple):
            todo.extend(node)
    if not spots:
        return tree
    spot = spots[draw(st.integers(0, len(spots) - 1))]
    if type(spot) is list:
        spot.insert(draw(st.integers(0, len(spot))), draw(st.one_of(odd_leaves, mixed)))
    elif draw(st.booleans()):
        spot[draw(odd_keys)] = draw(plain_leaves)
    else:
        spot[draw(plain_keys)] = draw(st.one_of(odd_leaves, mixed))
    return tree


values = st.one_of(plain, mixed, deep(plain), deep(mixed), one_odd(), one_odd(),
                   st.builds(wrap, plain, st.lists(st.sampled_from("dl"), max_size=8)))


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (NaN equal to itself)."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            same(ka, kb) and same(va, vb)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(same, a, b))
    if a is ABSENT or a is cbor2.undefined:
        return a is b
    return bool(a == b)


def fresh(value: Any) -> Any:
    # cbor2.undefined cannot be copied: it is a singleton, kept as it is.
    return copy.deepcopy(value, {id(cbor2.undefined): cbor2.undefined})


def outcome(fn: Callable[[Any], Any], value: Any) -> tuple[Any, ...]:
    """What ``fn`` made of ``value``: its answer (and whether it is ``value`` itself) or
    its error, with ``value`` as left after the call (the walk changes it in place)."""
    try:
        out = fn(value)
    except Exception as exc:  # noqa: BLE001 - the error itself is compared
        return ("raised", type(exc), str(exc), value)
    return ("returned", out is value, out, value)


def assert_same_outcome(c: tuple[Any, ...], py: tuple[Any, ...]) -> None:
    assert len(c) == len(py)
    assert c[:3] == py[:3] if c[0] == "raised" else c[:2] == py[:2]
    assert all(same(x, y) for x, y in zip(c[2:], py[2:], strict=True))


def test_the_c_form_is_built() -> None:
    # Without a compiler the package falls back to the Python walks, which are correct
    # but cost the broker a few hundred bytecodes per job: CI must have the C form (and
    # runs the suite again on the Python one, on purpose).
    if native.PURE_PYTHON:
        assert datamodel.IMPLEMENTATION == job_data.IMPLEMENTATION == "Python"
        assert datamodel.validated is datamodel.validated_py
        assert job_data._json_bound is job_data._json_bound_py
        return
    assert datamodel.IMPLEMENTATION == "C"
    assert job_data.IMPLEMENTATION == "C"
    assert datamodel.validated is not datamodel.validated_py
    assert job_data._json_bound is not job_data._json_bound_py


@settings(max_examples=EXAMPLES, deadline=None)
@given(value=values)
def test_validated_in_c_is_the_python_walk(value: Any) -> None:
    assert_same_outcome(outcome(datamodel.validated, fresh(value)),
                        outcome(datamodel.validated_py, fresh(value)))


def bound_or_unsure(fn: Callable[[Any, int], int], value: Any, depth: int) -> int | str:
    try:
        return fn(value, depth)
    except job_data._Unsure:
        return "unsure"


@settings(max_examples=EXAMPLES, deadline=None)
@given(value=values, depth=st.one_of(st.just(0), st.integers(-3, 70)))
def test_json_bound_in_c_is_the_python_bound(value: Any, depth: int) -> None:
    c = bound_or_unsure(job_data._json_bound, value, depth)
    assert c == bound_or_unsure(job_data._json_bound_py, value, depth)
    assert type(c) in (int, str)


@pytest.mark.parametrize("value", [
    {"a": {1: 2}, "b": Decimal(1)},  # a cleaned child, then a refusal in its parent
    {"a": [ABSENT, {2.5: ABSENT}], 3: {"x": cbor2.undefined}},
    {1: "a", "1": "b", "c": [[ABSENT]]},  # the rebuilt keys collide
    {"a": 1, (1,): 2},  # refused while rebuilt: the map is left half rebuilt
    {"a": {HUGE: 1}},  # str() of the key raises ValueError
    {"a": [HUGE, -HUGE]},
    [1, [2, [ABSENT, {}]], MyDict()],
    ABSENT, cbor2.undefined, MyStr("s"), Decimal(2), 3, b"x", None,
])
def test_odd_cases_come_out_as_in_python(value: Any) -> None:
    assert_same_outcome(outcome(datamodel.validated, fresh(value)),
                        outcome(datamodel.validated_py, fresh(value)))


def nest(levels: int, kind: str) -> Any:
    return wrap(1, [kind] * levels)


@pytest.mark.parametrize("kind", ["d", "l"])
def test_the_depth_limits_are_those_of_python(kind: str) -> None:
    assert datamodel.validated(nest(MAX_DEPTH, kind)) == nest(MAX_DEPTH, kind)
    with pytest.raises(DecodeError, match=f"nesting deeper than {MAX_DEPTH}"):
        datamodel.validated(nest(MAX_DEPTH + 1, kind))
    for levels in (job_data._FAST_DEPTH, job_data._FAST_DEPTH + 1, job_data._FAST_DEPTH + 2):
        assert (bound_or_unsure(job_data._json_bound, nest(levels, kind), 0)
                == bound_or_unsure(job_data._json_bound_py, nest(levels, kind), 0))


def test_cycles_and_shared_parts() -> None:
    cyclic: dict[str, Any] = {"a": 1}
    cyclic["self"] = cyclic
    looped: list[Any] = [ABSENT]
    looped.append(looped)
    for value in (cyclic, looped):
        with pytest.raises(DecodeError, match="nesting deeper"):
            datamodel.validated(value)
        with pytest.raises(job_data._Unsure):
            job_data._json_bound(value, 0)
    shared = {1: ABSENT, 2: "x"}
    tree = {"a": shared, "b": [shared, shared]}
    assert datamodel.validated(tree) == {"a": {"2": "x"}, "b": [{"2": "x"}, {"2": "x"}]}
    assert tree["a"] is tree["b"][0] is shared


def test_json_bound_hands_python_what_it_does_not_take() -> None:
    # Depths C does not walk from go to the Python function, which answers the same.
    for depth in (-1, 2**70):
        assert job_data._json_bound("ab", depth) == job_data._json_bound_py("ab", depth) == 14
    assert job_data._json_bound({"k": [1, "é"]}, 0) == 2 + 6 + 4 + (2 + 25 + 9)


def test_no_reference_is_leaked() -> None:
    inner = {1: 2}
    marker = "a leaf"
    value = {"a": [marker, inner, ABSENT, {"d": [1.5]}], "b": marker}
    datamodel.validated(value)  # cleaned once: what follows walks it without a change
    odd = {"x": marker, "y": object()}
    data = {"a": [marker, HUGE], "b": (b"x",)}
    watched = [value, value["a"], inner, marker, odd, data]
    before = [sys.getrefcount(x) for x in watched]
    for _ in range(100):
        datamodel.validated(value)
        datamodel.validated(inner)
        with pytest.raises(DecodeError):
            datamodel.validated(odd)
        with pytest.raises(job_data._Unsure):
            job_data._json_bound(data, 0)
        job_data._json_bound(value, 0)
    assert [sys.getrefcount(x) for x in watched] == before
