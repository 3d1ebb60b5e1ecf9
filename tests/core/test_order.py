"""Listing orders (trioqueue.core.queue.order) against a sorted list."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trioqueue.core.queue import order as order_mod
from trioqueue.core.queue.order import SPAN_BITS, CreationOrder, page

T0 = 1_700_000_000_000
# Creation times that share milliseconds and spans, and cross span boundaries.
CREATED = st.one_of(
    st.integers(T0, T0 + 3),
    st.integers(T0, T0 + 5 * (1 << SPAN_BITS)),
    st.integers(-(1 << 40), 1 << 42),
)
OPS = st.lists(st.tuples(st.booleans(), CREATED, st.integers(0, 40), st.integers(0, 2)),
               max_size=120)


def build(ops: list[tuple[bool, int, int, int]]) -> tuple[list[CreationOrder],
                                                         list[set[tuple[int, str]]]]:
    """Apply adds/removes to three disjoint orders and their reference sets."""
    orders = [CreationOrder() for _ in range(3)]
    refs: list[set[tuple[int, str]]] = [set(), set(), set()]
    placed: dict[str, tuple[int, int]] = {}  # id -> (order, createdAt)
    for add, created, n, which in ops:
        job_id = f"j{n:03d}"
        if add and job_id not in placed:
            orders[which].add(created, job_id)
            refs[which].add((created, job_id))
            placed[job_id] = (which, created)
        elif not add and job_id in placed:
            where, at = placed.pop(job_id)
            orders[where].discard(at, job_id)
            refs[where].discard((at, job_id))
    return orders, refs


@settings(max_examples=300, deadline=None)
@given(ops=OPS, offset=st.integers(0, 130), limit=st.integers(0, 50), asc=st.booleans(),
       pick=st.sets(st.integers(0, 2), min_size=1), purge=st.booleans())
def test_page_matches_a_sorted_slice(ops: list[tuple[bool, int, int, int]], offset: int,
                                     limit: int, asc: bool, pick: set[int],
                                     purge: bool) -> None:
    kept = order_mod.EMPTY_SLACK
    order_mod.EMPTY_SLACK = 0 if purge else kept  # drop emptied groups at once, or keep
    try:
        orders, refs = build(ops)
    finally:
        order_mod.EMPTY_SLACK = kept
    chosen = sorted(pick)
    merged = sorted(set().union(*(refs[i] for i in chosen)), reverse=not asc)
    got = page([orders[i] for i in chosen], asc=asc, offset=offset, limit=limit)
    assert got == merged[offset:offset + limit]
    for order, ref in zip(orders, refs, strict=True):
        assert len(order) == len(ref)
        assert list(order.ids()) == [job_id for _, job_id in sorted(ref)]


def test_removing_the_last_job_of_a_millisecond_and_span_leaves_nothing_behind(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(order_mod, "EMPTY_SLACK", 0)  # emptied groups are dropped at once
    order = CreationOrder()
    order.add(T0, "a")
    order.add(T0 + (1 << SPAN_BITS), "b")
    order.discard(T0, "a")
    order.discard(T0 + (1 << SPAN_BITS), "b")
    order.discard(T0, "never-added")
    assert len(order) == 0
    assert (order._groups, order._spans, order._span_n, order._span_ms) == ({}, [], {}, {})


def test_a_page_far_into_a_large_order_touches_one_span() -> None:
    order = CreationOrder()
    for i in range(50_000):
        order.add(T0 + i // 10, f"{i:06d}")
    assert page([order], asc=True, offset=25_000, limit=3) == [
        (T0 + 2500, "025000"), (T0 + 2500, "025001"), (T0 + 2500, "025002")]
    assert page([order], asc=False, offset=0, limit=2) == [
        (T0 + 4999, "049999"), (T0 + 4999, "049998")]


def test_emptied_groups_are_dropped_a_few_per_removal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs pushed one per millisecond make a group each; pulling them all empties every
    group. Empty groups are dropped DROP_PER_CALL per removal once more than
    EMPTY_SLACK are left, so no removal walks the order (the sweep that dropped them
    all at once held the loop for a walk of every group: 1M of them for jobs pushed
    over hours), and at most EMPTY_SLACK + 1 empty groups are kept."""
    monkeypatch.setattr(order_mod, "EMPTY_SLACK", 10)
    order = CreationOrder()
    for i in range(1_000):
        order.add(T0 + i, f"{i:06d}")
    def groups() -> int:
        return sum(map(len, order._groups.values()))

    dropped = []
    for i in range(1_000):
        before = groups()
        order.discard(T0 + i, f"{i:06d}")
        dropped.append(before - groups())
        assert groups() - (999 - i) <= 11  # empty groups kept
    assert max(dropped) <= order_mod.DROP_PER_CALL
    assert len(order) == 0 and groups() <= 11
    # An emptied group filled again is skipped, not dropped.
    order.add(T0 + 995, "again")
    for i in range(20):
        order.add(T0 + 5_000 + i, f"x{i}")
        order.discard(T0 + 5_000 + i, f"x{i}")
    assert list(order.ids()) == ["again"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0, 1, 5, 1 << SPAN_BITS,
                                                               3 << SPAN_BITS]),
                          st.text("abc", min_size=1, max_size=3)), max_size=40),
       st.lists(st.tuples(st.sampled_from([-1, 0, 1, 5, 6, 1 << SPAN_BITS, 9 << SPAN_BITS]),
                          st.text("abc", max_size=3)), max_size=12))
def test_ranks_count_the_jobs_before_each_key(
        jobs: list[tuple[int, int, str]], keys: list[tuple[int, str]]) -> None:
    """``ranks`` of keys held or not, across several orders (with createdAt ties that
    ids order), equals counting the merged order by hand."""
    orders = [CreationOrder() for _ in range(3)]
    held: dict[str, int] = {}
    for which, created, job_id in jobs:
        if job_id not in held:  # a job is in one place
            held[job_id] = created
            orders[which].add(created, job_id)
    merged = sorted((created, job_id) for job_id, created in held.items())
    keys = sorted(set(keys))
    want = [sum(1 for job in merged if job < key) for key in keys]
    assert order_mod.ranks(orders, keys) == want
