"""A stored value encoded a piece at a time (storage/value_pieces.py) is, joined, exactly
what ``encode_value`` stores, read back in slices it is what ``decode_value`` gives, and
no piece or slice is a long step."""

from __future__ import annotations

import time
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trioqueue.storage import value_pieces as vp
from trioqueue.storage.keys import decode_value, encode_value
from trioqueue.storage.value_pieces import unpacked_steps, value_pieces

_SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
            | st.floats(allow_nan=False) | st.text(max_size=8) | st.binary(max_size=8))
# sizes around msgpack's header widths, and small containers nested deep (opened by the
# values they hold, not by their members)
_COUNTS = [0, 1, 15, 16, 31, 32, 33, 70]


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


#: A slice aims at 0.2 ms; the bound leaves room for a loaded machine, a long list's
#: growth (a few ms at millions of members) and a large map's (the dict's last resize,
#: about 12 ms at 600,000 keys), against 35-230 ms for one call.
SLICE_S = 0.020




def _nest(width: int, depth: int) -> Any:
    """``depth`` levels of lists of ``width`` members, floats at the bottom."""
    if depth == 1:
        return [0.5 + k for k in range(width)]
    return [_nest(width, depth - 1) for _ in range(width)]


def _joined(value: Any) -> bytes:
    return b"".join(value_pieces(value))


@settings(max_examples=200, deadline=None)
@given(_VALUES)
def test_pieces_joined_are_encode_value_s_bytes(data: Any) -> None:
    _check_round_trip({"d": data})


def _check_round_trip(value: Any) -> None:
    """``value``'s pieces joined are ``encode_value``'s bytes, read back equal."""
    try:
        joined = _joined(value)
    except (OverflowError, TypeError, ValueError):
        # what msgpack cannot hold: encode_value stores it as CBOR, never these pieces
        assert encode_value(value)[0] >= 0xA0
        return
    assert joined == encode_value(value)
    assert decode_value(joined) == value
    assert _unpacked(joined) == value


def _unpacked(raw: bytes, limit: int = 1_000_000) -> Any:
    """``unpacked_steps``'s value, driven to its end."""
    steps = unpacked_steps(raw)
    for _ in range(limit):
        try:
            next(steps)
        except StopIteration as done:
            return done.value
    raise AssertionError("never done")


@settings(max_examples=100, deadline=None)
@given(_VALUES)
def test_read_back_in_slices_is_decode_value_s_value(data: Any) -> None:
    raw = encode_value({"d": data})  # (CBOR too, for what msgpack cannot hold)
    assert _unpacked(raw) == decode_value(raw)


@settings(max_examples=200, deadline=None)
@given(_VALUES)
def test_with_small_bounds_every_container_may_be_opened_and_the_bytes_are_the_same(
        data: Any) -> None:
    # runs of at most 8 values and a window of 64 bytes: the opening of containers by
    # the values (bytes) they hold, at every depth, on data hypothesis can make quickly
    with patch.object(vp, "RUN_MAX_VALUES", 8), patch.object(vp, "WINDOW_BYTES", 64):
        _check_round_trip({"d": data})


@pytest.mark.parametrize("data", [
    [7] * 3_000_000,
    [{"a": 1}] * 1_000_000,
    {str(i): 0 for i in range(600_000)},
    [[[[i, [i]] for i in range(20)]] for _ in range(30_000)],
    {"x": [[list(range(100)) for _ in range(100)] for _ in range(50)]},
], ids=["ints", "maps", "map", "nested", "wrapped"])
def test_data_of_many_values_comes_in_short_pieces(data: Any, served_gc: None) -> None:
    # encode_value takes 30-120 ms for these in one call, decode_value 35-230 ms; a
    # piece and a slice of reading back aim at 0.2 ms
    _check_short_pieces({"d": data}, SLICE_S)


#: A piece or a slice of reading back, for the values below (one call: 15-40 ms).
DEEP_SLICE_S = 0.005


@pytest.mark.parametrize("data", [
    _nest(15, 5),
    _nest(31, 4),
    {str(i): {str(j): _nest(31, 2) for j in range(31)} for i in range(31)},
    {"x": [[[[0.5 + k for k in range(1_000_000)]]]]},
], ids=["lists15", "lists31", "maps31", "one-member-wraps"])
def test_a_million_values_in_small_containers_come_in_short_pieces(
        data: Any, served_gc: None) -> None:
    # containers of at most 31 members (or of one) holding up to a million values
    # between them: opened by what they hold, not by how many members they have
    _check_short_pieces({"d": data}, DEEP_SLICE_S)


def _check_short_pieces(value: Any, bound_s: float) -> None:
    """``value`` encoded by :func:`value_pieces` as ``encode_value`` encodes it and read
    back equal by :func:`unpacked_steps`, no piece nor slice taking ``bound_s`` of CPU."""
    pieces = []
    longest = 0.0
    for piece in _timed(value_pieces(value)):
        if isinstance(piece, float):
            longest = max(longest, piece)
        else:
            pieces.append(piece)
    raw = b"".join(pieces)
    assert raw == encode_value(value)
    assert longest < bound_s, f"a piece took {longest * 1e3:.1f} ms"
    steps = unpacked_steps(raw)
    longest = 0.0
    while True:
        began = time.thread_time()
        try:
            next(steps)
        except StopIteration as done:
            back = done.value
            break
        finally:
            longest = max(longest, time.thread_time() - began)
    assert back == value
    assert longest < bound_s, f"a slice of reading back took {longest * 1e3:.1f} ms"


def _timed(pieces: Any) -> Any:
    """Each piece, and before it the CPU seconds its making took."""
    while True:
        began = time.thread_time()
        try:
            piece = next(pieces)
        except StopIteration:
            return
        yield time.thread_time() - began
        yield piece
