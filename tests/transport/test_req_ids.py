"""A frame the broker cannot decode is answered on its reqId when one is readable."""

from __future__ import annotations

import cbor2
import msgpack
import pytest
import trio

from trioqueue.server import Server
from trioqueue.testing import RawClient
from trioqueue.transport.codec import CBOR, MSGPACK
from trioqueue.transport.framing import encode_frame
from trioqueue.transport.req_ids import salvage_req_id


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
]


@pytest.mark.parametrize(("codec_name", "payload", "req_id"), [
    ("msgpack", MSGPACK_BAD[0], "ext"), ("msgpack", MSGPACK_BAD[1], "utf"),
    ("cbor", CBOR_BAD[0], "tag"), ("cbor", CBOR_BAD[1], "big"),
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
    assert salvage_req_id("json", b'{"reqId": "x"') is None
