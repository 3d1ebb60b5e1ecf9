"""Length-prefixed framing: reassembly from arbitrary reads and the frame size limit."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trioqueue.transport.wire.framing import (
    FrameDecoder,
    FrameTooLarge,
    encode_frame,
    frame_header,
)

LIMIT = 1 << 20
GIB = 1 << 30


def feed_in_chunks(decoder: FrameDecoder, wire: bytes, cuts: list[int]) -> list[bytes]:
    out: list[bytes] = []
    previous = 0
    for cut in sorted(set(cuts)) + [len(wire)]:
        out.extend(decoder.feed(wire[previous:cut]))
        previous = cut
    return out


def test_encode_frame_is_big_endian_length_then_payload() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(b"x" * 258)[:4] == b"\x00\x00\x01\x02"


def test_single_frame_round_trips() -> None:
    decoder = FrameDecoder(LIMIT)
    assert decoder.feed(encode_frame(b"hello")) == [b"hello"]
    assert not decoder.has_partial
    assert decoder.buffered_bytes == 0


def test_many_frames_in_one_read_come_out_in_order() -> None:
    payloads = [f"frame-{i}".encode() for i in range(300)]
    decoder = FrameDecoder(LIMIT)
    frames = decoder.feed(b"".join(encode_frame(p) for p in payloads))
    assert frames == payloads
    assert all(type(frame) is bytes for frame in frames)
    assert not decoder.has_partial


def test_zero_length_frames_are_empty_payloads() -> None:
    assert encode_frame(b"") == b"\x00\x00\x00\x00"
    decoder = FrameDecoder(LIMIT)
    wire = encode_frame(b"") + encode_frame(b"a") + encode_frame(b"") + encode_frame(b"")
    assert decoder.feed(wire) == [b"", b"a", b"", b""]
    assert not decoder.has_partial


def test_zero_limit_still_accepts_empty_frames() -> None:
    decoder = FrameDecoder(0)
    assert decoder.feed(encode_frame(b"")) == [b""]
    with pytest.raises(FrameTooLarge):
        decoder.feed(encode_frame(b"a"))


def test_empty_read_returns_nothing() -> None:
    decoder = FrameDecoder(LIMIT)
    assert decoder.feed(b"") == []
    assert not decoder.has_partial


def test_every_split_point_reassembles() -> None:
    payloads = [b"", b"a", b"hello world", bytes(range(256)), b""]
    wire = b"".join(encode_frame(p) for p in payloads)
    for cut in range(len(wire) + 1):
        decoder = FrameDecoder(LIMIT)
        assert decoder.feed(wire[:cut]) + decoder.feed(wire[cut:]) == payloads, cut
        assert decoder.buffered_bytes == 0


def test_byte_by_byte_reassembles() -> None:
    payloads = [b"first", b"", b"third" * 50]
    wire = b"".join(encode_frame(p) for p in payloads)
    decoder = FrameDecoder(LIMIT)
    out: list[bytes] = []
    for i in range(len(wire)):
        out.extend(decoder.feed(wire[i : i + 1]))
    assert out == payloads
    assert not decoder.has_partial


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=7000), max_size=30),
)
def test_random_chunking_reassembles(payloads: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(encode_frame(p) for p in payloads)
    decoder = FrameDecoder(LIMIT)
    assert feed_in_chunks(decoder, wire, [c for c in cuts if c <= len(wire)]) == payloads
    assert not decoder.has_partial
    assert decoder.buffered_bytes == 0


def test_read_finishing_a_frame_and_carrying_more() -> None:
    wire = encode_frame(b"one") + encode_frame(b"two") + encode_frame(b"three")
    decoder = FrameDecoder(LIMIT)
    assert decoder.feed(wire[:5]) == []
    # The second read completes "one", carries "two" whole and starts "three".
    assert decoder.feed(wire[5:-2]) == [b"one", b"two"]
    assert decoder.has_partial
    assert decoder.feed(wire[-2:]) == [b"three"]


def test_accepts_bytearray_and_memoryview_reads() -> None:
    wire = encode_frame(b"abc") + encode_frame(b"def")
    decoder = FrameDecoder(LIMIT)
    assert decoder.feed(bytearray(wire[:5])) == []
    assert decoder.feed(memoryview(wire)[5:]) == [b"abc", b"def"]


def test_has_partial_tracks_incomplete_header_and_body() -> None:
    decoder = FrameDecoder(LIMIT)
    assert not decoder.has_partial
    wire = encode_frame(b"0123456789")
    decoder.feed(wire[:2])
    assert decoder.has_partial
    assert decoder.buffered_bytes == 2
    decoder.feed(wire[2:4])
    assert decoder.has_partial
    assert decoder.buffered_bytes == 4
    decoder.feed(wire[4:9])
    assert decoder.has_partial
    assert decoder.buffered_bytes == 9
    assert decoder.feed(wire[9:]) == [b"0123456789"]
    assert not decoder.has_partial
    assert decoder.buffered_bytes == 0


def test_frame_at_the_limit_is_accepted_one_more_byte_is_not() -> None:
    decoder = FrameDecoder(100)
    assert decoder.feed(encode_frame(b"x" * 100)) == [b"x" * 100]
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(encode_frame(b"x" * 101))
    assert (info.value.size, info.value.limit) == (101, 100)


def test_oversize_header_alone_raises_before_any_body_arrives() -> None:
    decoder = FrameDecoder(LIMIT)
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(struct.pack(">I", GIB))
    assert info.value.size == GIB
    assert info.value.limit == LIMIT
    assert decoder.buffered_bytes == 0


def test_oversize_header_followed_by_some_body_does_not_buffer_it() -> None:
    decoder = FrameDecoder(LIMIT)
    with pytest.raises(FrameTooLarge):
        decoder.feed(struct.pack(">I", GIB) + b"0123456789")
    assert decoder.buffered_bytes == 0
    assert not decoder.has_partial


def test_oversize_header_split_across_reads_raises_when_complete() -> None:
    decoder = FrameDecoder(LIMIT)
    header = struct.pack(">I", 0xFFFFFFFF)
    assert decoder.feed(header[:3]) == []
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(header[3:] + b"zz")
    assert info.value.size == 0xFFFFFFFF
    assert decoder.buffered_bytes == 0


def test_oversize_header_after_good_frames_in_one_read_raises() -> None:
    decoder = FrameDecoder(LIMIT)
    with pytest.raises(FrameTooLarge):
        decoder.feed(encode_frame(b"fine") + struct.pack(">I", GIB))


def test_decoder_stays_failed_after_frame_too_large() -> None:
    decoder = FrameDecoder(LIMIT)
    with pytest.raises(FrameTooLarge):
        decoder.feed(struct.pack(">I", GIB))
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(encode_frame(b"ok"))
    assert info.value.size == GIB


def test_frame_too_large_message_names_size_and_limit() -> None:
    error = FrameTooLarge(2000, 1000)
    assert "2000" in str(error) and "1000" in str(error)


def test_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(-1)


def test_frame_header_refuses_unframeable_lengths() -> None:
    assert frame_header(0xFFFFFFFF) == b"\xff\xff\xff\xff"
    with pytest.raises(ValueError):
        frame_header(-1)
    with pytest.raises(ValueError):
        frame_header(2**32)


# ------------------------------------------------------------------ a lower limit, raised later


def test_a_frame_over_the_lower_limit_is_held_with_the_frames_before_it_returned() -> None:
    decoder = FrameDecoder(LIMIT, limit_bytes=16)
    wire = encode_frame(b"auth") + encode_frame(b"x" * 100) + encode_frame(b"after")
    assert decoder.feed(wire) == [b"auth"]
    assert decoder.held == 100
    assert decoder.buffered_bytes == len(wire) - len(encode_frame(b"auth"))
    assert decoder.feed(b"\x00\x00") == []  # held: buffered, not parsed
    assert decoder.raise_limit(LIMIT) == [b"x" * 100, b"after"]
    assert decoder.held is None
    assert decoder.feed(b"") == []
    assert decoder.buffered_bytes == 2  # the start of the next header


def test_a_header_completed_over_the_lower_limit_is_held() -> None:
    decoder = FrameDecoder(LIMIT, limit_bytes=16)
    frame = encode_frame(b"y" * 50)
    assert decoder.feed(frame[:2]) == []
    assert decoder.feed(frame[2:10]) == []
    assert decoder.held == 50
    assert decoder.raise_limit(32) == []  # still over: held
    assert decoder.held == 50
    assert decoder.raise_limit(LIMIT) == []  # released, but incomplete
    assert decoder.held is None
    assert decoder.feed(frame[10:]) == [b"y" * 50]


def test_over_the_maximum_is_still_an_error_under_a_lower_limit() -> None:
    decoder = FrameDecoder(1000, limit_bytes=16)
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(frame_header(1001))
    assert (info.value.size, info.value.limit) == (1001, 1000)


def test_the_limit_never_rises_past_the_maximum() -> None:
    decoder = FrameDecoder(1000, limit_bytes=16)
    decoder.raise_limit(1 << 30)
    assert decoder.limit_bytes == 1000
    assert FrameDecoder(1000, limit_bytes=5000).limit_bytes == 1000
