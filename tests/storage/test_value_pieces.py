"""A stored value encoded a piece at a time (storage/value_pieces.py) is, joined, exactly
what ``encode_value`` stores, and no piece is a long step."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trioqueue.storage.keys import decode_value, encode_value
from trioqueue.storage.value_pieces import OPEN_MIN_MEMBERS, value_pieces

_SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
            | st.floats(allow_nan=False) | st.text(max_size=8) | st.binary(max_size=8))
# sizes around the count past which a container is opened, and the header widths
_COUNTS = [0, 1, 15, 16, OPEN_MIN_MEMBERS, OPEN_MIN_MEMBERS + 1, 70]


@st.composite
def _values(draw: st.DrawFn, budget: int = 3000, depth: int = 0) -> Any:
    """A value of at most about ``budget`` members in all, nested up to 5 deep."""
    counts = [c for c in _COUNTS if c <= budget]
    if depth >= 5 or draw(st.integers(0, 2)) == 0:
        return draw(_SCALARS)
    count = draw(st.sampled_from(counts))
    # a few members drawn, repeated to the count (drawing 70 each took seconds)
    drawn = [draw(_values(budget // max(count, 1), depth + 1))
             for _ in range(draw(st.integers(1, 3)))]
    members = [drawn[i % len(drawn)] for i in range(count)]
    if draw(st.booleans()):
        return members
    prefix = draw(st.text(max_size=3))
    return {prefix + str(i): member for i, member in enumerate(members)}


_VALUES = _values()


def _joined(value: Any) -> bytes:
    return b"".join(value_pieces(value))


@settings(max_examples=200, deadline=None)
@given(_VALUES)
def test_pieces_joined_are_encode_value_s_bytes(data: Any) -> None:
    value = {"d": data}
    try:
        joined = _joined(value)
    except (OverflowError, TypeError, ValueError):
        # what msgpack cannot hold: encode_value stores it as CBOR, never these pieces
        assert encode_value(value)[0] >= 0xA0
        return
    assert joined == encode_value(value)
    assert decode_value(joined) == value


@pytest.mark.parametrize("data", [
    [7] * 3_000_000,
    [{"a": 1}] * 1_000_000,
    {str(i): 0 for i in range(600_000)},
    [[[[i, [i]] for i in range(20)]] for _ in range(30_000)],
    {"x": [[list(range(100)) for _ in range(100)] for _ in range(50)]},
], ids=["ints", "maps", "map", "nested", "wrapped"])
def test_data_of_many_values_comes_in_short_pieces(data: Any) -> None:
    value = {"d": data}
    pieces = []
    longest = 0.0
    began = time.thread_time()
    for piece in value_pieces(value):
        now = time.thread_time()
        longest = max(longest, now - began)
        pieces.append(piece)
        began = time.thread_time()
    assert b"".join(pieces) == encode_value(value)
    # encode_value takes 30-120 ms for these in one call; a piece aims at 0.2 ms
    assert longest < 0.005, f"a piece took {longest * 1e3:.1f} ms"
