"""Replies whose job data is a long string are framed around that string's own bytes
(transport/large/text_splice.py) and put exactly the bytes of the whole encoding on the wire."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trioqueue.core import native
from trioqueue.core.job import JobWire
from trioqueue.transport.large.text_splice import SPLICE_CHARS, spliced
from trioqueue.transport.tcp.send_queue import frame_parts
from trioqueue.transport.wire.codec import CBOR, JSON, MSGPACK, Codec, encode_frames
from trioqueue.utf8_views import utf8_view


def pull_reply(data: Any, **job: Any) -> dict[str, Any]:
    wire = JobWire({"id": "j1", "name": "n", "data": data, "attempts": 2,
                    "timestamp": 1.7e12, **job})
    return {"ok": True, "job": wire, "token": "t", "reqId": "7"}


def view_of(text: str) -> memoryview:
    """``text``'s UTF-8 bytes: the string's own (no copy), or under TRIOQUEUE_PURE_PYTHON,
    where there is no such view, a copy for the splice to be tested on all the same."""
    view = utf8_view(text)
    if native.PURE_PYTHON:
        assert view is None
        return memoryview(text.encode("utf-8", "surrogatepass"))
    assert view is not None
    return view


TEXTS = st.builds(lambda unit, n: unit * n,
                  st.sampled_from(["x", "é", "€", "😀", "a\x00\"\\"]),
                  st.integers(SPLICE_CHARS // 4, SPLICE_CHARS + 10))


@settings(max_examples=30, deadline=None)
@given(TEXTS, st.sampled_from([MSGPACK, CBOR]))
def test_the_spliced_reply_is_the_whole_encoding(text: str, codec: Codec) -> None:
    obj = pull_reply(text, opts={"big": 2**40})  # an int the msgpack codec rewrites
    whole = codec.encode(obj)
    if len(text) < SPLICE_CHARS:
        assert not any(isinstance(part, memoryview) for part in frame_parts(codec, [obj]))
        return
    view = view_of(text)
    pieces = spliced(codec, obj, text, view)
    assert pieces is not None and any(piece is view for piece in pieces)
    assert b"".join(pieces) == whole
    parts = frame_parts(codec, [{"ok": True, "reqId": "1"}, obj, {"ok": False}])
    assert b"".join(parts) == encode_frames(codec, [{"ok": True, "reqId": "1"}, obj,
                                                    {"ok": False}])


def test_a_client_cannot_plant_the_placeholder() -> None:
    text = "y" * SPLICE_CHARS
    obj = pull_reply(text, name="\x00trioqueue-long-text-" + "0" * 32)
    view = view_of(text)
    pieces = spliced(MSGPACK, obj, text, view)
    assert pieces is not None and b"".join(pieces) == MSGPACK.encode(obj)


def test_json_replies_and_short_or_other_data_are_not_spliced() -> None:
    text = "z" * SPLICE_CHARS
    view = view_of(text)
    assert spliced(JSON, pull_reply(text), text, view) is None
    for reply in (pull_reply({"t": text}), pull_reply("z" * (SPLICE_CHARS - 1)),
                  {"ok": True, "job": None}, {"ok": True, "job": {"data": text}}):
        assert not any(isinstance(part, memoryview) for part in frame_parts(MSGPACK, [reply]))
    spliced_parts = frame_parts(MSGPACK, [pull_reply(text)])
    # without the string's own bytes (pure Python) a reply is encoded whole, as before
    assert any(isinstance(part, memoryview) for part in spliced_parts) is not (
        native.PURE_PYTHON)
    assert b"".join(spliced_parts) == encode_frames(MSGPACK, [pull_reply(text)])


def test_a_view_keeps_its_string_alive() -> None:
    if native.PURE_PYTHON:
        assert utf8_view("q" * SPLICE_CHARS) is None  # no reach into the interpreter
        return
    view = utf8_view("".join(["q"] * SPLICE_CHARS))  # a string only the view holds
    gc.collect()
    assert view is not None and bytes(view) == b"q" * SPLICE_CHARS
    with pytest.raises(TypeError):
        view[0] = 1  # type: ignore[index]
