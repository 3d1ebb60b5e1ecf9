"""A frame the broker cannot decode is answered on its reqId when one is readable."""

from __future__ import annotations

import time

import cbor2
import msgpack
import pytest
import trio

from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.transport.wire.codec import CBOR, MSGPACK
from trioqueue.transport.wire.framing import encode_frame
from trioqueue.transport.wire.req_ids import salvage_req_id


async def connect(server: Server, codec_name: str) -> RawClient:
    assert server.tcp_port is not None
    return await RawClient.connect(server.tcp_port, codec_name)


# Payloads the strict decode refuses, each with a readable reqId.
MSGPACK_BAD = [
    msgpack.packb({"cmd": "PUSH", "queue": "q", "data": msgpack.ExtType(5, b"x"),
                   "reqId": "ext"}),
    b"\x83\xa3cmd\xa4PUSH\xa4data\xa2\xff\xfe\xa5reqId\xa3utf",  # bad UTF-8 in data
]
CBOR_BAD = [
    cbor2.dumps({"cmd": "PUSH", "queue": "q", "data": cbor2.CBORTag(1, 0),
                 "reqId": "tag"}),
    cbor2.dumps({"cmd": "PUSH", "queue": "q", "data": {"n": 2 ** 1000}, "reqId": "big"}),
    # nested past MAX_DEPTH (64): the lenient decode has the same limit; the walk reads it
    b"\xa4\x63cmd\x64PUSH\x65queue\x61q\x64data" + b"\x81" * 100 + b"\x01"
    + b"\x65reqId\x64deep",
]


@pytest.mark.parametrize(("codec_name", "payload", "req_id"), [
    ("msgpack", MSGPACK_BAD[0], "ext"), ("msgpack", MSGPACK_BAD[1], "utf"),
    ("cbor", CBOR_BAD[0], "tag"), ("cbor", CBOR_BAD[1], "big"),
    ("cbor", CBOR_BAD[2], "deep"),
])
async def test_a_refused_frame_is_answered_on_its_req_id(
    server: Server, codec_name: str, payload: bytes, req_id: str,
) -> None:
    client = await connect(server, codec_name)
    codec = MSGPACK if codec_name == "msgpack" else CBOR
    # a good command first (the connection's codec is detected from it), then the bad
    await client.ok("Ping")
    await client.send_raw(encode_frame(payload) + client.frame({"cmd": "Ping",
                                                                  "reqId": "after"}))
    with trio.fail_after(10):
        reply = await client.reply_to(req_id)
    assert reply == {"ok": False, "error": "Invalid command format", "reqId": req_id}
    assert (await client.reply_to("after"))["ok"] is True
    assert codec.name == codec_name


def test_no_req_id_is_made_up() -> None:
    assert salvage_req_id("msgpack", b"\xc1") is None
    assert salvage_req_id("msgpack", b"\x91" * 5_000 + b"\xc0") is None  # not a map
    assert salvage_req_id("msgpack", msgpack.packb({"reqId": 5, "x": msgpack.ExtType(1, b"")})
                          ) is None  # not a string
    assert salvage_req_id("msgpack", msgpack.packb({"reqId": "r" * 300})) is None
    assert salvage_req_id("cbor", b"\xa1") is None  # truncated
    assert salvage_req_id("json", b'{"reqId": x}') is None  # not a string
    assert salvage_req_id("json", b'[{"reqId": "x"}]') is None  # not a top-level map
    assert salvage_req_id("cbor", b"\xa1\x65reqId\x01") is None  # not a string


def nested(depth: int) -> list[object]:
    value: list[object] = [1]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("first", [True, False], ids=["reqId-first", "reqId-last"])
def test_a_cbor_frame_nested_past_the_depth_limit_keeps_its_req_id(first: bool) -> None:
    rest = {"cmd": "PUSH", "data": nested(200), "tag": cbor2.CBORTag(99, [b"x", "y"])}
    msg = {"reqId": "deep", **rest} if first else {**rest, "reqId": "deep"}
    assert salvage_req_id("cbor", cbor2.dumps(msg)) == "deep"


def test_an_indefinite_length_cbor_map_keeps_its_req_id() -> None:
    # {_ "a": [_ [[...200 deep...]]], "reqId": "r"}: indefinite map and array, each
    # closed by a break, around a value too deep for the lenient decode
    payload = b"\xbf\x61a\x9f" + b"\x81" * 200 + b"\x01\xff\x65reqId\x61r\xff"
    assert salvage_req_id("cbor", payload) == "r"


@pytest.mark.parametrize("text", [
    '{"cmd": "PUSH", "data": {"x": NaN}, "reqId": "json-nan"}',
    '{"data": ' + "[" * 200 + "]" * 200 + ', "reqId": "json-nan"}',
    '{"a": "q\\"{[", "reqId": "json-\\u006ean"}',  # brackets and escapes in strings
    '{"reqId": "json-nan", "data": [',  # unreadable after it
])
def test_a_json_text_frame_keeps_its_req_id(text: str) -> None:
    assert salvage_req_id("json", text.encode()) == "json-nan"


def test_a_frame_of_nothing_but_nesting_is_walked_in_one_pass() -> None:
    started = time.perf_counter()
    for codec_name, payload in (("cbor", b"\xa1\x61a" + b"\x81" * 60_000),
                                ("json", b'{"a": ' + b"[" * 60_000)):
        assert salvage_req_id(codec_name, payload) is None  # no RecursionError
    assert time.perf_counter() - started < 2  # about 30 ms here: one pass, not a search
