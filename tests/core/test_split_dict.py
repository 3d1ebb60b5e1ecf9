"""SplitDict behaves as a dict in both its forms, and no bucket outgrows what one split
may copy."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trioqueue.core import native, split_dict
from trioqueue.core.split_dict import PySplitDictMapping, SplitDict

keys = st.one_of(st.integers(-300, 300), st.text(max_size=3),
                 st.tuples(st.integers(0, 3)))
ops = st.lists(st.tuples(st.sampled_from(["set", "del", "pop", "get", "in", "setdefault",
                                          "compact", "clear"]), keys, st.integers()),
               max_size=400)
FORMS = [pytest.param(SplitDict, id="installed"), pytest.param(PySplitDictMapping, id="py")]


def test_the_c_form_is_built() -> None:
    # Without a compiler the package falls back to the Python form, which is correct but
    # costs the broker about 12% per job: CI must have the C form (and runs the suite
    # again on the Python one, on purpose).
    assert split_dict.IMPLEMENTATION == ("Python" if native.PURE_PYTHON else "C")


@pytest.mark.parametrize("form", FORMS)
@settings(max_examples=200, deadline=None)
@given(operations=ops)
def test_it_answers_as_a_dict_does(form: Any, operations: list[tuple[str, Any, int]]) -> None:
    model: dict[Any, int] = {}
    split = form(bucket_max_entries=4)  # tiny buckets: many splits and doublings
    for op, key, value in operations:
        if op == "set":
            model[key] = value
            split[key] = value
        elif op == "del":
            if key in model:
                del model[key]
                del split[key]
            else:
                with pytest.raises(KeyError):
                    del split[key]
        elif op == "pop":
            assert split.pop(key, None) == model.pop(key, None)
        elif op == "get":
            assert split.get(key) == model.get(key)
            assert split.get(key, -1) == model.get(key, -1)
        elif op == "in":
            assert (key in split) == (key in model)
        elif op == "setdefault":
            assert split.setdefault(key, value) == model.setdefault(key, value)
        elif op == "clear":
            model.clear()
            split.clear()
        else:
            split.compact()
        assert len(split) == len(model)
    assert split == model
    assert sorted(split.items(), key=repr) == sorted(model.items(), key=repr)
    assert sorted(split.values()) == sorted(model.values())
    assert set(split) == set(model)


@pytest.mark.parametrize("form", FORMS)
def test_no_bucket_holds_more_than_one_split_copies(form: Any) -> None:
    split = form(bucket_max_entries=4)
    for i in range(5_000):
        split[f"job-{i}"] = i
    sizes = split.bucket_sizes()
    assert sum(sizes) == 5_000 == len(split)
    assert max(sizes) <= 4
    assert len(sizes) > 5_000 // 8  # it really split: buckets of at most 4, most half full
    assert all(split[f"job-{i}"] == i for i in range(5_000))


@pytest.mark.parametrize("form", FORMS)
def test_missing_keys_and_bad_arguments_raise(form: Any) -> None:
    split = form({"a": 1, (1, 2): 2})
    with pytest.raises(KeyError) as missing:
        split["zz"]
    assert missing.value.args == ("zz",)
    with pytest.raises(KeyError) as tuple_key:
        split.pop((3, 4))
    assert tuple_key.value.args == ((3, 4),)  # the tuple is the key, not the arguments
    with pytest.raises(TypeError):
        split[["unhashable"]] = 1
    with pytest.raises(ValueError):
        form(bucket_max_entries=0)
    assert split.pop("a") == 1 and split[(1, 2)] == 2
    with pytest.raises(TypeError):
        hash(split)


@pytest.mark.parametrize("form", FORMS)
def test_values_are_released_when_removed_or_the_map_goes(form: Any) -> None:
    value = object()
    split = form(bucket_max_entries=4)
    base = sys.getrefcount(value)
    for i in range(100):
        split[i] = value
    assert sys.getrefcount(value) == base + 100
    for i in range(50):
        del split[i]
    split.compact()
    assert sys.getrefcount(value) == base + 50
    del split
    gc.collect()
    assert sys.getrefcount(value) == base


@pytest.mark.parametrize("form", FORMS)
def test_a_cycle_through_it_is_collected(form: Any) -> None:
    class Holder:
        pass

    holder = Holder()
    split = form()
    split["me"] = holder
    holder.split = split  # type: ignore[attr-defined]
    del holder, split
    gc.collect()
    assert not any(type(o) is Holder for o in gc.get_objects())
