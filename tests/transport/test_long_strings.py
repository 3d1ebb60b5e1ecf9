"""Long strings of a large frame are made a piece at a time (transport/large/long_strings.py,
large/msgpack_steps.py, the CBOR walk): the same values as the codecs give, with a pause
possible after every piece, with and without the compiled helper."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.transport.large import long_strings
from trioqueue.transport.large.frames import decode_steps
from trioqueue.transport.large.long_strings import PIECE_BYTES
from trioqueue.transport.slicing import Slicer
from trioqueue.transport.wire.codec import CBOR, MSGPACK, Codec, DecodeError

NO_BOUND = 0
SIZE = 8 * PIECE_BYTES + 5

LONG_VALUES = {
    "ascii": "a" * SIZE,
    "latin": "é" * (SIZE // 2),
    "astral": "x" + "😀" * (SIZE // 4),  # 4-byte sequences cut across pieces
    "mixed": "a" * (PIECE_BYTES - 1) + "€" + "b" * SIZE,  # ASCII, then not
    "bytes": bytes(range(256)) * (SIZE // 256),
}


def paused_decode(codec: Codec, payload: bytes) -> tuple[Any, int]:
    """Decode with a slice of 0 s: a pause wherever the walk may pause."""
    steps = decode_steps(codec, payload, Slicer(slice_s=0.0), NO_BOUND)
    pauses = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value[0], pauses
        pauses += 1


@pytest.fixture(params=["compiled", "python"])
def helper(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "python":
        monkeypatch.setattr(long_strings, "HAVE_PIECES", False)
    elif not long_strings.HAVE_PIECES:
        pytest.skip("trioqueue.transport._pieces is not built here, or TRIOQUEUE_PURE_PYTHON "
                    "is set")
    return str(request.param)


@pytest.mark.parametrize("codec", [MSGPACK, CBOR], ids=lambda c: c.name)
@pytest.mark.parametrize("kind", list(LONG_VALUES))
def test_a_long_string_is_made_a_piece_at_a_time(codec: Codec, kind: str, helper: str) -> None:
    long = LONG_VALUES[kind]
    message = {"cmd": "PUSH", "queue": "q", "data": {"k": [1, long, "z"], "t": long}}
    payload = codec.encode(message)
    value, pauses = paused_decode(codec, payload)
    assert value == codec.decode(payload) == message
    assert type(value["data"]["t"]) is type(long)
    if kind in ("ascii", "bytes") and helper == "compiled":
        # a pause is possible after each piece of both strings
        assert pauses >= 2 * (len(codec.encode(long)) // PIECE_BYTES)


@pytest.mark.parametrize("codec", [MSGPACK, CBOR], ids=lambda c: c.name)
def test_bad_utf8_in_a_long_string_is_refused(codec: Codec, helper: str) -> None:
    good = codec.encode({"cmd": "PUSH", "data": "a" * SIZE})
    at = good.index(b"a" * 16) + SIZE // 2
    for bad in (b"\xff", b"\xc3", b"\xed\xa0\x80"):  # invalid, cut short, a surrogate
        payload = good[:at] + bad + good[at + len(bad):]
        with pytest.raises(DecodeError):
            codec.decode(payload)
        with pytest.raises(DecodeError):
            paused_decode(codec, payload)


def test_a_long_string_cut_short_is_refused() -> None:
    payload = MSGPACK.encode({"cmd": "PUSH", "data": "a" * SIZE})
    with pytest.raises(DecodeError):
        paused_decode(MSGPACK, payload[:-10])


def test_the_helper_fills_only_what_it_made() -> None:
    if not long_strings.HAVE_PIECES:
        pytest.skip("trioqueue.transport._pieces is not built here, or TRIOQUEUE_PURE_PYTHON "
                    "is set")
    from trioqueue.transport._pieces import fill, new_ascii

    shared = "".join(["q"] * 10)
    keep = [shared]
    with pytest.raises(ValueError, match="shared"):
        fill(shared, 0, b"x")
    assert keep == ["q" * 10]
    text = new_ascii(4)
    with pytest.raises(ValueError, match="does not fit"):
        fill(text, 2, b"xyz")
    assert fill(text, 0, b"\xc3\xa9") is False  # not ASCII: nothing written
    assert fill(text, 0, b"ab") and fill(text, 2, b"cd") and text == "abcd"
