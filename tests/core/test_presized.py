"""core/presized.py: an empty dict sized for a known count, in C where built (a table
made for the count: no resize while it fills) and in Python (a plain dict), each a
dict like any other to the code that fills, reads, copies and frees it."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pytest

from trioqueue.core import native, presized
from trioqueue.transport.large.msgpack_steps import msgpack_steps
from trioqueue.transport.slicing import Slicer, run_steps

Made = Callable[[int], dict[Any, Any]]


@pytest.fixture(params=["C", "Python"])
def made(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Made]:
    """``presized_dict`` with the extension, and with its Python path alone."""
    if request.param == "C":
        if native.PURE_PYTHON:
            pytest.skip("TRIOQUEUE_PURE_PYTHON is set: the package loads no extension")
        if presized.IMPLEMENTATION != "C":
            pytest.fail("trioqueue.core._presized is not built (python setup.py build_ext)")
    else:
        monkeypatch.setattr(presized, "_made", presized._plain)
    yield presized.presized_dict


def _key(i: int) -> Any:
    # str keys mostly, and others a msgpack or CBOR map may have
    return (i, "t") if i % 7 == 0 else i if i % 3 == 0 else str(i)


@pytest.mark.parametrize("count", [0, 10, presized.MIN_PRESIZED, 100_000, 300_000])
def test_a_presized_dict_is_a_dict_like_any_other(made: Made, count: int) -> None:
    out = made(count)
    assert type(out) is dict and out == {} and len(out) == 0
    for i in range(count):
        out[_key(i)] = i
    assert len(out) == count
    assert list(out)[:3] == [_key(i) for i in range(min(3, count))]  # insertion order
    assert all(out[_key(i)] == i for i in range(0, count, 101))
    copied = out.copy()
    assert copied == out and copied is not out
    if count:
        assert out.popitem() == (_key(count - 1), count - 1)
        del out[_key(0)]
        assert len(out) == count - 2
        out[_key(0)] = "again"
        assert next(reversed(out)) == _key(0)
    out["cycle"] = [out]  # a container holding itself: freed by the collector
    del out, copied
    assert gc.collect() >= 1


def test_the_c_form_takes_its_count_without_growing() -> None:
    if native.PURE_PYTHON:
        pytest.skip("TRIOQUEUE_PURE_PYTHON is set: the package loads no extension")
    if presized.IMPLEMENTATION != "C":
        pytest.fail("trioqueue.core._presized is not built (python setup.py build_ext)")
    for count in (presized.MIN_PRESIZED, 87_382, 600_000, 1_000_000):
        out = presized.presized_dict(count)
        size = sys.getsizeof(out)
        for i in range(count):
            out[_key(i)] = i
        assert sys.getsizeof(out) == size, count  # no resize: the same table
        # an update into it (what the walks do) keeps that table too
        other = presized.presized_dict(count)
        presized.merge_into(other, {str(i): i for i in range(5_000)})
        presized.merge_into(other, {str(i): -i for i in range(4_000, 6_000)})
        assert sys.getsizeof(other) == size and len(other) == 6_000
        assert other["4500"] == -4500 and list(other)[0] == "0"


def test_the_python_form_is_a_plain_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(presized, "_made", presized._plain)
    assert presized.presized_dict(1_000_000) == {}
    with pytest.raises(ValueError):
        presized._plain(-1)


def test_a_count_from_the_wire_is_bounded_by_the_bytes_that_hold_it() -> None:
    assert presized.entries_bound(2**32 - 1, 1_000) == 500  # a header's claim, 1 KB left
    assert presized.entries_bound(600_000, 10**7) == 600_000
    assert presized.entries_bound(10**9, 10**10) == presized.MAX_PRESIZED
    assert presized.entries_bound(5, -3) == 0


def test_merge_into_is_update(made: Made) -> None:
    out = made(100_000)
    presized.merge_into(out, {})
    presized.merge_into(out, {"a": 1, "b": 2})
    presized.merge_into(out, {"b": 3, "c": 4})  # a later entry wins
    assert out == {"a": 1, "b": 3, "c": 4} and list(out) == ["a", "b", "c"]


def test_a_large_map_decodes_the_same_either_way(made: Made) -> None:
    data: dict[Any, Any] = {
        (str(i).encode() if i % 7 == 0 else i if i % 3 == 0 else str(i)): [i] if i % 5 == 0
        else i for i in range(120_000)}
    data["dup"] = 0
    payload = msgpack.packb({"cmd": "PUSH", "data": data}, use_bin_type=True)
    decoded = run_steps(msgpack_steps(payload, Slicer()))
    expected = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    assert decoded == expected
    assert list(decoded["data"]) == list(expected["data"])
