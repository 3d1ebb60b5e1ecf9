"""Replies framed as parts (transport/tcp/send_queue.py): a large payload is sent as it was
encoded, not copied into one buffer with the rest, and a write the socket took part of
leaves exactly the bytes after it, with the end of the frame it began."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from trioqueue.transport.tcp.send_queue import (
    COALESCE_BYTES,
    frame_parts,
    rest_of_parts,
    unsent_parts,
)
from trioqueue.transport.wire.codec import CBOR, MSGPACK, encode_frames
from trioqueue.transport.wire.framing import HEADER_SIZE

SIZES = st.lists(st.sampled_from([0, 10, 300, COALESCE_BYTES - 40, COALESCE_BYTES, 200_000]),
                 min_size=1, max_size=6)


def replies(sizes: list[int]) -> list[dict[str, Any]]:
    return [{"ok": True, "reqId": str(i), "data": "x" * n} for i, n in enumerate(sizes)]


def frame_ends(wire: bytes) -> list[int]:
    ends, pos = [], 0
    while pos < len(wire):
        pos += HEADER_SIZE + int.from_bytes(wire[pos:pos + HEADER_SIZE], "big")
        ends.append(pos)
    return ends


@given(SIZES, st.sampled_from([MSGPACK, CBOR]))
def test_parts_are_the_frames_encoding_them_together_gives(sizes: list[int], codec: Any
                                                            ) -> None:
    objs = replies(sizes)
    parts = frame_parts(codec, objs)
    wire = encode_frames(codec, objs)
    assert b"".join(parts) == wire
    # every large payload is a part of its own (it was not copied into a joined one)
    payloads = [codec.encode(obj) for obj in objs]
    for payload in payloads:
        if len(payload) >= COALESCE_BYTES:
            assert any(part is not None and part == payload for part in parts)


@given(SIZES, st.data())
def test_a_partial_write_leaves_the_rest_and_the_end_of_its_frame(sizes: list[int],
                                                                  data: st.DataObject) -> None:
    parts = frame_parts(MSGPACK, replies(sizes))
    wire = b"".join(parts)
    ends = frame_ends(wire)
    written = data.draw(st.integers(0, len(wire)))
    assert b"".join(bytes(c) for c in unsent_parts(parts, written)) == wire[written:]
    rest = rest_of_parts(parts, written)
    if written == 0 or written in ends:
        assert rest == 0
    else:
        assert written + rest in ends and not any(written < e < written + rest for e in ends)
