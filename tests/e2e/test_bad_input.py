"""Bad input gets a clear error, never a crash, and the connection keeps working."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import cbor2
import msgpack
import trio

from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.transport.wire.framing import encode_frame


async def test_undecodable_payload(connect: Callable[..., Any]) -> None:
    client: RawClient = await connect("msgpack")
    await client.ok("Ping")  # fixes the codec
    await client.send_raw(encode_frame(b"\xc1\xc1\xc1"))
    reply = await client.receive()
    assert reply == {"ok": False, "error": "Invalid command format"}
    await client.ok("Ping")


async def test_first_payload_of_unknown_codec(server: Server) -> None:
    assert server.tcp_port is not None
    client = await RawClient.connect(server.tcp_port, "msgpack")
    await client.send_raw(encode_frame(b"hello"))
    assert (await client.receive())["error"] == "Invalid command format"
    await client.ok("Ping")
    await client.aclose()


async def test_non_map_and_missing_cmd(client: RawClient) -> None:
    await client.ok("Ping")  # the first map fixes the connection's codec
    await client.send_raw(encode_frame(client.codec.encode([1, 2, 3])))
    reply = await client.receive()
    assert reply["ok"] is False
    await client.send_raw(client.frame({"reqId": "x1", "queue": "q"}))
    assert await client.receive() == {"ok": False, "error": "Invalid command", "reqId": "x1"}
    reply = await client.call("Frobnicate")
    assert reply["error"] == "Unknown command: Frobnicate"
    await client.ok("Ping")


async def test_wrong_field_types(client: RawClient) -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("PUSH", {"queue": 5, "data": 1}),
        ("PUSHB", {"queue": "q", "jobs": "nope"}),
        ("PUSHB", {"queue": "q", "jobs": [1]}),
        ("PULLB", {"queue": "q", "count": "ten"}),
        ("ACK", {"id": 12}),
        ("ACKB", {"ids": "x"}),
        ("GetJobs", {"queue": "q", "limit": -1}),
        ("GetJobs", {"queue": "q", "state": 7}),
        ("GetLogs", {"id": None}),
        ("ExtendLock", {"id": "a", "duration": "long"}),
    ]
    for cmd, fields in cases:
        reply = await client.call(cmd, **fields)
        assert reply["ok"] is False and isinstance(reply["error"], str), (cmd, reply)
    pushed = await client.ok("PUSH", queue="still-fine", name="n", data=1)
    assert (await client.ok("Count", queue="still-fine"))["count"] == 1
    reply = await client.call("ClearLogs", id=pushed["id"], keepLogs="many")
    assert reply["error"] == "keepLogs must be a number"


async def test_oversized_frame_closes_before_allocation(config: Any, connect: Callable[..., Any],
                                                        server: Server) -> None:
    client: RawClient = await connect("msgpack")
    # a 1 GiB length followed by ten bytes: refused from the header alone
    await client.send_raw(struct.pack(">I", 1 << 30) + b"x" * 10)
    reply = await client.receive()
    assert reply["ok"] is False
    assert reply["error"] == (
        f"Frame too large: {1 << 30} bytes exceeds maximum {config.max_frame_bytes}")
    with trio.fail_after(5):
        assert await client.is_closed()
    other: RawClient = await connect()
    await other.ok("Ping")


async def test_disconnect_mid_frame_costs_nothing(connect: Callable[..., Any]) -> None:
    client: RawClient = await connect("msgpack")
    payload = msgpack.packb({"cmd": "PUSH", "queue": "torn", "name": "n", "data": 1})
    frame = encode_frame(payload)
    await client.send_raw(frame[: len(frame) // 2])
    await client.aclose()
    other: RawClient = await connect()
    assert (await other.ok("Count", queue="torn"))["count"] == 0
    await other.ok("PUSH", queue="torn", name="n", data=1)
    assert (await other.ok("Count", queue="torn"))["count"] == 1


async def test_cbor_tags_are_refused(connect: Callable[..., Any]) -> None:
    client: RawClient = await connect("cbor")
    await client.ok("Ping")
    tagged = cbor2.dumps({"cmd": "PUSH", "queue": "q", "data": cbor2.CBORTag(4242, [1])})
    await client.send_raw(encode_frame(tagged))
    assert (await client.receive())["error"] == "Invalid command format"
    await client.ok("Ping")


async def test_msgpack_ext0_is_absent(connect: Callable[..., Any]) -> None:
    client: RawClient = await connect("msgpack")
    frame = msgpack.packb({"cmd": "PUSH", "queue": "e0", "name": "n", "data": 1,
                           "priority": msgpack.ExtType(0, b"\x00"), "reqId": "e"})
    await client.send_raw(encode_frame(frame))
    reply = await client.receive()
    assert reply["ok"] is True
    job = (await client.ok("GetJob", id=reply["id"]))["job"]
    assert job["priority"] == 0


async def test_msgpack_timestamps_follow_int64_rule(connect: Callable[..., Any]) -> None:
    client: RawClient = await connect("msgpack")
    pushed = await client.ok("PUSH", queue="i64", name="n", data={"big": 2**40})
    await client.send_raw(client.frame({"cmd": "GetJob", "id": pushed["id"], "reqId": "g"}))
    raw = b""
    while len(raw) < 4 or len(raw) < 4 + struct.unpack(">I", raw[:4])[0]:
        raw += await client.stream.receive_some(65536)
    body = raw[4:]
    job = msgpack.unpackb(body)["job"]
    assert isinstance(job["createdAt"], float)
    assert job["data"]["big"] == 2**40 and isinstance(job["data"]["big"], float)


async def test_multi_id_commands_validate_even_for_unknown_ids(client: RawClient) -> None:
    reply = await client.call("ACKB", ids=["nope-1", "nope-2"], tokens=["t"])
    assert reply["error"] == "ACKB tokens length must match ids length"
    reply = await client.call("ExtendLocks", ids=["nope"], tokens=["t"], durations=["x"])
    assert reply["ok"] is False and reply["error"].startswith("durations[0]")
    reply = await client.ok("ACKB", ids=["nope"])
    assert reply["data"] == {"ignoredIds": ["nope"], "ignoredIndices": [0]}


async def test_custom_ids_must_fit_a_storage_key(client: RawClient) -> None:
    long_queue = "q" * 256
    too_long = "\u6f22" * 200  # 200 characters, 600 bytes of UTF-8
    reply = await client.call("PUSH", queue=long_queue, name="n", jobId=too_long)
    assert reply["error"] == f"Job id too long for queue {long_queue} (max 245 bytes)"
    reply = await client.call("PUSHB", queue=long_queue, jobs=[{"customId": "j" * 246}])
    assert reply["error"] == f"jobs[0]: Job id too long for queue {long_queue} (max 245 bytes)"
    fits = "i" * 245
    pushed = await client.ok("PUSH", queue=long_queue, name="n", jobId=fits)
    await client.ok("PULL", queue=long_queue)
    await client.ok("ACK", id=pushed["id"], result=1)
    assert (await client.ok("GetResult", id=fits))["result"] == 1
