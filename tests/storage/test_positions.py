"""The position index of finished-job ranges, against a plain sorted list of keys.

:class:`Positions` never sees the keys themselves, only what a store reader hands it
(anchors every few keys); here that reader is a sorted Python list, so every position
it answers can be checked against the list.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from itertools import islice

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trioqueue.storage.positions import Positions, check_page_limit, page_window

PREFIX = b"q\x00c"


class SortedKeys:
    """A store's key range as a sorted list, read the way the LMDB adapter reads it."""

    def __init__(self, keys: list[bytes]) -> None:
        self.keys = sorted(keys)
        self.walked = 0  # keys the reader walked past, to check the work stays bounded

    def keys_every(self, anchor: bytes, step: int, count: int) -> list[bytes]:
        start = bisect_left(self.keys, anchor)
        self.walked += count
        return list(islice(self.keys, start + step, start + count, step))

    def key_at(self, positions: Positions, position: int) -> bytes:
        anchor, skip = positions.locate(position)
        return self.keys[bisect_left(self.keys, anchor) + skip]


def key(n: int) -> bytes:
    return PREFIX + n.to_bytes(4, "big")


def check(positions: Positions, store: SortedKeys) -> None:
    assert sum(positions.counts) == len(store.keys) == positions.total
    assert len(positions.anchors) == len(positions.counts)
    assert positions.anchors[0] == PREFIX
    for p in range(len(store.keys)):
        assert store.key_at(positions, p) == store.keys[p], p


@pytest.mark.parametrize("total", [0, 1, 7, 8, 9, 40])
def test_build_then_every_position(total: int) -> None:
    store = SortedKeys([key(n) for n in range(total)])
    positions = Positions(PREFIX, total, store.keys_every, block=4)
    check(positions, store)
    assert all(n <= 4 for n in positions.counts)


def test_appends_split_the_last_block_and_stay_bounded() -> None:
    store = SortedKeys([])
    positions = Positions(PREFIX, 0, store.keys_every, block=4)
    for n in range(200):  # a finish lands at the end: createdAt grows
        insort(store.keys, key(n))
        positions.move([key(n)], [])
        positions.settle(store.keys_every)
        assert max(positions.counts) <= 8
    check(positions, store)
    assert len(positions.anchors) <= 200 // 4 + 1
    # each split walks the block it splits, once: about one walk per key overall
    assert store.walked <= 2 * 200 * 2


def test_deletes_merge_blocks_and_empty_ranges_shrink_back() -> None:
    store = SortedKeys([key(n) for n in range(400)])
    positions = Positions(PREFIX, 400, store.keys_every, block=4)
    for n in range(0, 400, 3):  # a third of everything, spread out
        store.keys.remove(key(n))
        positions.move([], [key(n)])
    positions.settle(store.keys_every)
    check(positions, store)
    for n in range(400):  # then all of it, oldest first (retention does this)
        if key(n) in store.keys:
            store.keys.remove(key(n))
            positions.move([], [key(n)])
            positions.settle(store.keys_every)
    check(positions, store)
    assert len(positions.anchors) <= 2


moves = st.lists(st.tuples(st.booleans(), st.integers(0, 300)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 60), st.lists(moves, max_size=12), st.integers(2, 6))
def test_random_inserts_and_deletes_match_the_sorted_list(
    initial: int, commits: list[list[tuple[bool, int]]], block: int
) -> None:
    store = SortedKeys([key(n * 5) for n in range(initial)])
    positions = Positions(PREFIX, initial, store.keys_every, block=block)
    for commit in commits:
        added: list[bytes] = []
        removed: list[bytes] = []
        for insert, n in commit:
            k = key(n)
            if insert and k not in store.keys:
                insort(store.keys, k)
                added.append(k)
            elif not insert and k in store.keys:
                store.keys.remove(k)
                removed.append(k)
        positions.move(added, removed)
        positions.settle(store.keys_every)
        check(positions, store)
        assert max(positions.counts) <= 2 * block
        # small neighbours merge: blocks stay about half full on average at least
        assert len(positions.counts) <= 2 * len(store.keys) // block + 2 + len(commit)


def test_a_block_must_hold_two_keys() -> None:
    with pytest.raises(ValueError):
        Positions(PREFIX, 0, SortedKeys([]).keys_every, block=1)


@pytest.mark.parametrize("asc", [True, False])
def test_page_window_is_the_slice_of_the_ordered_range(asc: bool) -> None:
    for total in range(7):
        ordered = list(range(total)) if asc else list(range(total))[::-1]
        for offset in range(-2, total + 2):
            for limit in range(-1, total + 2):
                start, take = page_window(total, asc=asc, offset=offset, limit=limit)
                page = sorted(range(total))[start : start + take]
                if not asc:
                    page.reverse()
                assert page == ordered[max(offset, 0) :][: max(limit, 0)], (offset, limit)


def test_page_limit_must_be_positive() -> None:
    check_page_limit(1)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="positive"):
            check_page_limit(bad)
