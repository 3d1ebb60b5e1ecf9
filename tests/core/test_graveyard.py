"""Large values let go of are taken apart a slice at a time (core/large_values/graveyard.py), never
while something else still holds them."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import pytest

from trioqueue.core.large_values.graveyard import HELD_TRIES, Graveyard


def _past(deadline: float) -> bool:
    return time.perf_counter() >= deadline


def _slices(graveyard: Graveyard, limit: int = 100_000) -> tuple[float, bool]:
    """Dismantle in slices of 0.5 ms until done or only held values remain: the
    longest slice's CPU seconds, and whether values are left held elsewhere."""
    longest = 0.0
    for _ in range(limit):
        if not graveyard.pending:
            return longest, False
        began = time.thread_time()
        held = graveyard.dismantle(partial(_past, time.perf_counter() + 0.0005))
        longest = max(longest, time.thread_time() - began)
        if held:
            return longest, True
    raise AssertionError("never done")


@pytest.mark.parametrize("make", [
    lambda: [{"a": i} for i in range(1_000_000)],
    lambda: {str(i): [i] for i in range(400_000)},
    lambda: [[[[[[[i, [i]] for i in range(20)]]]]] for _ in range(8_000)],
    lambda: {"x": [[list(range(100)) for _ in range(100)] for _ in range(50)]},
    # a million values (floats: each one freed) in containers of 31 members or fewer,
    # opened by what they hold
    lambda: [[[[0.5 + k for k in range(31)] for _ in range(31)] for _ in range(31)]
             for _ in range(31)],
    lambda: {str(i): {str(j): [[0.5 + k for k in range(31)] for _ in range(31)]
                      for j in range(31)} for i in range(31)},
    lambda: [[[[0.5 + k for k in range(1_000_000)]]]],
], ids=["maps", "map", "deep", "wrapped", "lists31", "maps31", "one-member-wraps"])
def test_a_large_value_is_taken_apart_in_short_slices(make: Any) -> None:
    value = make()
    once = time.thread_time()
    del value
    whole_s = time.thread_time() - once  # (freed in one call, for the message)
    graveyard = Graveyard()
    graveyard.bury(make())
    longest, held = _slices(graveyard)
    assert not held and not graveyard.pending
    assert graveyard.freed >= 1
    assert longest < 0.005, (
        f"a slice took {longest * 1e3:.1f} ms (freed whole: {whole_s * 1e3:.1f} ms)")


def test_a_value_held_elsewhere_is_not_touched_then_let_go_of() -> None:
    graveyard = Graveyard()
    kept = [{"a": i} for i in range(1000)]
    copy = [dict(m) for m in kept]
    graveyard.bury(kept)
    for _ in range(HELD_TRIES - 1):
        _longest, held = _slices(graveyard)
        assert held and graveyard.pending
    assert kept == copy  # never emptied while held
    _slices(graveyard)
    assert not graveyard.pending  # let go of after its tries: its holder frees it
    assert kept == copy and graveyard.freed == 0


def test_a_value_held_elsewhere_is_taken_apart_once_let_go_of() -> None:
    graveyard = Graveyard()
    woken = []
    graveyard.wake = lambda: woken.append(1)
    value: Any = [[i] * 20_000 for i in range(50)]  # (members holding many values)
    graveyard.bury(value)
    assert woken == [1]
    assert _slices(graveyard)[1] is True
    del value
    assert _slices(graveyard)[1] is False
    assert not graveyard.pending and graveyard.freed > 1  # nested lists opened too


def test_a_shared_member_is_left_whole() -> None:
    graveyard = Graveyard()
    shared = list(range(100))
    graveyard.bury([shared] * 1000)
    _slices(graveyard)
    assert shared == list(range(100))
    assert graveyard.freed == 1


def test_scalars_and_strings_are_not_buried() -> None:
    graveyard = Graveyard()
    graveyard.bury("s" * 10_000_000)
    graveyard.bury(7)
    assert not graveyard.pending


def test_a_value_buried_twice_is_still_taken_apart() -> None:
    """Its second holder let go of it while the first burial waits: one entry, not two
    that would each hold it from the other."""
    graveyard = Graveyard()
    value = [{"a": i} for i in range(1000)]
    graveyard.bury(value)
    graveyard.bury(value)
    del value
    _longest, held = _slices(graveyard)
    assert not held and not graveyard.pending
    assert graveyard.freed >= 1
