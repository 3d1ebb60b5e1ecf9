"""WebSocket messages of several megabytes, over a real socket: the broker sends a large
reply in pieces (a fragmented message, RFC 6455 section 5.4) and takes a large message
in pieces, so no step of the broker holds the event loop for the whole message, and
other connections are served meanwhile. The replies arrive whole and equal, to a client
made by hand that reads the frames as they come and to a WebSocket library."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from trio_websocket import open_websocket_url

from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.tasks import steps_watched
from trioqueue.testing.wire import websocket_upgrade
from trioqueue.transport.wire.codec import CBOR

from .large_data import NO_PIECES, held_to

StartServer = Callable[..., Awaitable[Server]]

pytestmark = pytest.mark.usefixtures("served_gc")  # (tests/conftest.py)

MIB = 1024 * 1024
# 200,000 small maps: 7.8 MB as JSON text, 7 MB as CBOR; many values, so that the reply
# is encoded in slices (transport/large/value_slices.py). Sent whole, one step took 23-27 ms of
# CPU for the JSON text, 7 ms for the CBOR (the WebSocket library's copies).
DATA = [{"k": "v" * 30}] * 200_000
# the broker's longest step of CPU while it sends or takes a large message
STEP_CPU_MS = 5.0

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class Frames:
    """A client made by hand: reads the broker's frames as they come (what a
    library's reassembly would hide), in the test's own task."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self._data = bytearray()

    @classmethod
    async def connect(cls, server: Server, path: str = "/ws") -> Frames:
        assert server.ws_port is not None
        stream = await trio.open_tcp_stream("127.0.0.1", server.ws_port)
        await stream.send_all(websocket_upgrade(path))
        frames = cls(stream)
        with trio.fail_after(5):
            while b"\r\n\r\n" not in frames._data:
                frames._data += await frames._receive()
        head, _, rest = bytes(frames._data).partition(b"\r\n\r\n")
        assert head.split()[1] == b"101", head
        frames._data = bytearray(rest)
        return frames

    async def _receive(self) -> bytes:
        chunk = await self.stream.receive_some(1 << 16)
        assert chunk, "the broker closed the connection"
        return chunk

    async def send(self, opcode: int, payload: bytes, *, fin: bool = True) -> None:
        """One frame, masked with a zero key (a valid mask: the payload unchanged)."""
        size = len(payload)
        if size < 126:
            length = bytes([0x80 | size])
        elif size < 1 << 16:
            length = bytes([0x80 | 126]) + size.to_bytes(2, "big")
        else:
            length = bytes([0x80 | 127]) + size.to_bytes(8, "big")
        await self.stream.send_all(bytes([(0x80 if fin else 0) | opcode]) + length
                                   + b"\0\0\0\0" + payload)

    async def frame(self) -> tuple[bool, int, bytes]:
        """The next frame: (FIN, opcode, payload)."""
        data = self._data
        while True:
            if len(data) >= 2:
                size, at = data[1] & 0x7F, 2
                if size >= 126:
                    width = 2 if size == 126 else 8
                    size = int.from_bytes(data[2:2 + width], "big") if len(
                        data) >= 2 + width else -1
                    at += width
                if size >= 0 and len(data) >= at + size:
                    fin, opcode = bool(data[0] & 0x80), data[0] & 0x0F
                    payload = bytes(data[at:at + size])
                    del data[:at + size]
                    return fin, opcode, payload
            data += await self._receive()

    async def message(self, on_frame: Callable[[int], None] | None = None
                      ) -> tuple[int, list[bytes]]:
        """The next data message as its kind and its frames' payloads, reassembled as
        RFC 6455 says: a first frame of its kind, continuations, the last with FIN;
        control frames may come between (a ping is answered)."""
        kind: int | None = None
        parts: list[bytes] = []
        while True:
            fin, opcode, payload = await self.frame()
            if opcode == PING:
                await self.send(PONG, payload)
                continue
            assert opcode not in (CLOSE, PONG), (opcode, payload[:100])
            if kind is None:
                assert opcode in (TEXT, BINARY), f"a message began with opcode {opcode}"
                kind = opcode
            else:
                assert opcode == CONTINUATION, (
                    f"opcode {opcode} inside a fragmented message: something interleaved")
            parts.append(payload)
            if on_frame is not None:
                on_frame(len(parts))
            if fin:
                return kind, parts


class Pinger:
    """Another connection sending Pings one after another; ``answered`` counts the
    replies, so a test can tell whether they came while something else was under way."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        self.answered = 0
        self.stop = trio.Event()

    async def run(self) -> None:
        while not self.stop.is_set():
            with trio.fail_after(10):
                await self.client.ok("Ping")
            self.answered += 1


async def a_job_of_many_values(server: Server) -> str:
    assert server.tcp_port is not None
    client = await RawClient.connect(server.tcp_port)
    pushed = await client.ok("PUSH", queue="q", data=DATA)
    await client.aclose()
    return str(pushed["id"])


@pytest.mark.parametrize("kind", [TEXT, BINARY], ids=["json-text", "cbor-binary"])
async def test_a_large_reply_is_sent_in_pieces_and_other_connections_are_served_meanwhile(
    start_server: StartServer, kind: int,
) -> None:
    """A GetJob reply of 200,000 small maps (7.8 MB of JSON text; 7 MB of CBOR) goes out as
    a fragmented message: it arrives whole and equal, the broker takes no step of
    STEP_CPU_MS or more while it sends, a Ping on another connection is answered while
    the message is on its way, and the next reply of the same connection comes after
    the whole message, not inside it."""
    server = await start_server(memory=True)
    job_id = await a_job_of_many_values(server)
    ws = await Frames.connect(server)
    assert server.tcp_port is not None
    pinger = Pinger(await RawClient.connect(server.tcp_port))
    encode: Callable[[Any], bytes] = (
        (lambda m: json.dumps(m).encode()) if kind == TEXT else CBOR.encode)
    answered_at: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pinger.run)
        async with steps_watched() as steps:
            await ws.send(kind, encode({"cmd": "GetJob", "id": job_id, "reqId": "big"}))
            await ws.send(kind, encode({"cmd": "Ping", "reqId": "after"}))
            with trio.fail_after(60):
                got_kind, parts = await ws.message(
                    lambda _: answered_at.append(pinger.answered))
                ping_kind, ping = await ws.message()
        pinger.stop.set()
    assert got_kind == ping_kind == kind
    payload = b"".join(parts)
    reply = json.loads(payload) if kind == TEXT else CBOR.decode(payload)
    assert reply["ok"] is True and reply["reqId"] == "big"
    assert reply["job"]["id"] == job_id and reply["job"]["data"] == DATA
    pong = json.loads(b"".join(ping)) if kind == TEXT else CBOR.decode(b"".join(ping))
    assert pong["ok"] is True and pong["reqId"] == "after"
    steps.check("a large WebSocket reply", STEP_CPU_MS)
    assert answered_at[-1] > answered_at[0], (
        f"no Ping of another connection answered while the message was sent "
        f"({len(parts)} frames)")
    # A WebSocket library reassembles the same message whole.
    async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws",
                                  max_message_size=64 * MIB) as library:
        await library.send_message(
            json.dumps({"cmd": "GetJob", "id": job_id, "reqId": 1}) if kind == TEXT
            else CBOR.encode({"cmd": "GetJob", "id": job_id, "reqId": 1}))
        with trio.fail_after(60):
            whole = await library.get_message()
        assert isinstance(whole, str if kind == TEXT else bytes)
        again = json.loads(whole) if kind == TEXT else CBOR.decode(whole)  # type: ignore[arg-type]
        assert again["job"]["data"] == DATA


async def test_a_large_message_is_taken_in_pieces(start_server: StartServer) -> None:
    """A 32 MB text message (a Ping carrying a long string), sent as one frame or as
    many fragments, is taken a piece at a time: it is answered, and the broker takes no
    step of STEP_CPU_MS or more while it reads it; before, it was assembled and
    encoded whole in one step."""
    server = await start_server(memory=True, ws_max_message_bytes=48 * MIB)
    ws = await Frames.connect(server)
    text = json.dumps({"cmd": "Ping", "reqId": "whole", "pad": "p" * (32 * MIB)}).encode()
    async with steps_watched() as whole:
        await ws.send(TEXT, text)
        with trio.fail_after(60):
            kind, parts = await ws.message()
    assert kind == TEXT and json.loads(b"".join(parts))["reqId"] == "whole"
    text = text.replace(b'"whole"', b'"parts"', 1)
    pieces = [text[i:i + MIB] for i in range(0, len(text), MIB)]
    async with steps_watched() as steps:
        for i, piece in enumerate(pieces):
            await ws.send(TEXT if i == 0 else CONTINUATION, piece,
                          fin=i == len(pieces) - 1)
        with trio.fail_after(60):
            kind, parts = await ws.message()
    assert kind == TEXT and json.loads(b"".join(parts))["reqId"] == "parts"
    held_to(whole, "a large WebSocket message received", STEP_CPU_MS, NO_PIECES)
    held_to(steps, "a large fragmented WebSocket message received", STEP_CPU_MS, NO_PIECES)
