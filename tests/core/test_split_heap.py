"""SplitHeap answers as heapq does, and no list it holds outgrows one chunk."""

from __future__ import annotations

import heapq
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trioqueue.core.split_heap import CHUNK_ENTRIES, SplitHeap

entries = st.tuples(st.integers(-50, 50), st.integers(0, 5))
ops = st.lists(st.one_of(st.tuples(st.just("push"), entries),
                         st.tuples(st.just("pop"), st.none()),
                         st.tuples(st.just("first"), st.none())), max_size=300)


@given(ops, st.integers(1, 6), st.lists(entries, max_size=40))
def test_answers_as_heapq(script: list[tuple[str, tuple[int, int] | None]],
                          chunk: int, initial: list[tuple[int, int]]) -> None:
    heap = SplitHeap(initial, chunk_entries=chunk)
    model = list(initial)
    heapq.heapify(model)
    for op, item in script:
        if op == "push":
            assert item is not None
            heap.push(item)
            heapq.heappush(model, item)
        elif op == "pop":
            assert heap.pop() == (heapq.heappop(model) if model else None)
        else:
            assert heap.first() == (model[0] if model else None)
        assert len(heap) == len(model)
        assert all(n <= chunk for n in heap.chunk_lengths())
    assert [heap.pop() for _ in range(len(model))] == sorted(model)
    assert heap.pop() is None and heap.first() is None and len(heap) == 0


@given(st.lists(entries, max_size=120), st.integers(1, 6), st.integers(0, 130),
       st.integers(0, 40))
def test_trim_drops_that_many_and_leaves_a_heap(items: list[tuple[int, int]], chunk: int,
                                                most: int, pops_first: int) -> None:
    heap: SplitHeap[tuple[int, int]] = SplitHeap(chunk_entries=chunk)
    for item in items:
        heap.push(item)
    left = Counter(items)
    for _ in range(min(pops_first, len(items))):
        popped = heap.pop()
        assert popped is not None
        left[popped] -= 1
    before = len(heap)
    more = heap.trim(most)
    assert len(heap) == max(0, before - most) and more == (len(heap) > 0)
    rest = [e for _ in range(len(heap)) if (e := heap.pop()) is not None]
    assert len(rest) == max(0, before - most) and rest == sorted(rest)
    assert not Counter(rest) - left  # only entries that were there


def test_a_million_pushes_never_grow_a_list_past_one_chunk() -> None:
    # The point of the heap: a list that grows copies itself whole, so none may grow
    # with the queue (a heapq list of a million entries copies 8 MB at a time).
    heap: SplitHeap[tuple[int, int]] = SplitHeap()
    for i in range(300_000):
        heap.push((i % 1000, i))
    assert max(heap.chunk_lengths()) <= CHUNK_ENTRIES
    assert len(heap.chunk_lengths()) >= 300_000 // CHUNK_ENTRIES
    assert heap.first() == (0, 0)
    assert [heap.pop() for _ in range(3)] == [(0, 0), (0, 1000), (0, 2000)]


def test_from_items_equals_pushing_them() -> None:
    items = [(i * 7919 % 1000, i) for i in range(3000)]
    built = SplitHeap(items, chunk_entries=64)
    assert len(built) == 3000 and max(built.chunk_lengths()) <= 64
    assert [built.pop() for _ in range(3000)] == sorted(items)


def test_chunk_entries_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk_entries must be at least 1"):
        SplitHeap(chunk_entries=0)


@given(st.lists(entries, max_size=150), st.integers(1, 8), st.integers(0, 40),
       st.integers(-50, 50), st.lists(entries, max_size=30))
def test_sweep_drops_what_keep_refuses_one_list_a_call(
        items: list[tuple[int, int]], chunk: int, pops_first: int, cut: int,
        pushed_between: list[tuple[int, int]]) -> None:
    heap: SplitHeap[tuple[int, int]] = SplitHeap(chunk_entries=chunk)
    left: Counter[tuple[int, int]] = Counter()
    for item in items:
        heap.push(item)
        left[item] += 1
    for _ in range(min(pops_first, len(items))):
        popped = heap.pop()
        assert popped is not None
        left[popped] -= 1

    def keep(entry: tuple[int, int]) -> bool:
        return entry[0] >= cut

    refused = sum(n for e, n in left.items() if not keep(e))
    # One list a call: a sweep never examines more than a chunk's worth.
    lists = len(heap.chunk_lengths())
    dropped = 0
    for i in range(lists):
        before = len(heap)
        went = heap.sweep(keep)
        assert 0 <= went <= chunk and len(heap) == before - went
        dropped += went
        if i == 0:  # the heap stays a heap between two calls: pushes and pops go on
            for item in pushed_between:
                heap.push(item)
                left[item] += 1
                refused += not keep(item)
    rest = [e for _ in range(len(heap)) if (e := heap.pop()) is not None]
    assert rest == sorted(rest)
    assert not Counter(rest) - left
    # every entry the sweeps passed over that keep refuses went (pushes made after the
    # first call may land in lists already swept this round)
    assert dropped + sum(1 for e in rest if not keep(e)) == refused
    assert all(n <= chunk for n in heap.chunk_lengths())


def test_sweeps_go_round_every_list_and_merge_thinned_chunks() -> None:
    heap: SplitHeap[tuple[int, int]] = SplitHeap(chunk_entries=100)
    for i in range(1000):
        heap.push((i, i))
    assert len(heap.chunk_lengths()) == 10  # the tail (full, not yet sealed) + 9 sealed
    drops = [heap.sweep(lambda e: e[0] % 10 == 0) for _ in range(10)]
    assert sorted(drops) == [90] * 10  # one list a call, each list once in the round
    assert len(heap) == 100
    # chunks left under a quarter full were merged: 100 entries in at most two lists
    assert len(heap.chunk_lengths()) <= 2
    assert [heap.pop() for _ in range(100)] == [(i, i) for i in range(0, 1000, 10)]
