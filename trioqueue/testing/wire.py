"""A raw protocol client for tests: frames, either codec, pipelining and event frames.

It speaks the wire directly (no SDK in between), so tests see exactly what a bunqueue
client would: reply maps with ``ok``, ``error`` and ``reqId``, out-of-order replies, and
event frames without a ``reqId``. A WebSocket client made by hand (one that does what
a library would not) opens with :func:`websocket_upgrade`.
"""

from __future__ import annotations

import base64
import itertools
import os
import select
import socket
from typing import Any

import trio

from ..transport.wire.codec import CBOR, MSGPACK, Codec
from ..transport.wire.framing import FrameDecoder, encode_frame


class RawClient:
    def __init__(self, stream: trio.abc.Stream, codec: Codec = MSGPACK) -> None:
        self.stream = stream
        self.codec = codec
        self._decoder = FrameDecoder(1 << 30)
        self._ids = itertools.count(1)
        self._ready: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    @classmethod
    async def connect(cls, port: int, codec: str = "msgpack",
                      host: str = "127.0.0.1", rcvbuf: int = 0,
                      source: str | None = None) -> RawClient:
        """``rcvbuf``: a receive buffer this small (bytes), set before connecting, so a
        client that does not read holds back the broker's replies sooner. ``source``:
        the local address to connect from (``127.0.0.2``: another client address on
        loopback)."""
        if rcvbuf or source:
            sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if rcvbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            if source:
                await sock.bind((source, 0))
            await sock.connect((host, port))
            stream = trio.SocketStream(sock)
        else:
            stream = await trio.open_tcp_stream(host, port)
        return cls(stream, CBOR if codec == "cbor" else MSGPACK)

    async def aclose(self) -> None:
        await self.stream.aclose()

    def peer_closed(self) -> bool:
        """Whether the broker closed (or reset) this connection, without reading what it
        sent (a TCP stream only)."""
        assert isinstance(self.stream, trio.SocketStream)
        poller = select.poll()
        poller.register(self.stream.socket.fileno(), select.POLLRDHUP)
        return any(mask & (select.POLLRDHUP | select.POLLHUP | select.POLLERR)
                   for _, mask in poller.poll(0))

    def frame(self, msg: dict[str, Any]) -> bytes:
        return encode_frame(self.codec.encode(msg))

    async def send(self, cmd: str, **fields: Any) -> str:
        """Send one command without waiting; returns its reqId."""
        req_id = f"r{next(self._ids)}"
        await self.stream.send_all(self.frame({"cmd": cmd, "reqId": req_id, **fields}))
        return req_id

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    def ready_now(self) -> int:
        """How many frames have arrived, counting what the socket holds now, without
        waiting (a TCP stream only)."""
        assert isinstance(self.stream, trio.SocketStream)
        fd = self.stream.socket.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while poller.poll(0):
            data = os.read(fd, 1 << 16)
            if not data:
                break
            for payload in self._decoder.feed(data):
                self._ready.append(self.codec.decode(payload))
        return len(self._ready)

    async def receive(self) -> dict[str, Any]:
        """The next reply or event frame, in arrival order."""
        while not self._ready:
            data = await self.stream.receive_some(1 << 16)
            if not data:
                raise EOFError("connection closed by the broker")
            for payload in self._decoder.feed(data):
                self._ready.append(self.codec.decode(payload))
        return self._ready.pop(0)

    async def reply_to(self, req_id: str) -> dict[str, Any]:
        """Wait for the reply carrying ``req_id``; other replies stay queued, events kept."""
        for i, msg in enumerate(self._ready):
            if msg.get("reqId") == req_id:
                return self._ready.pop(i)
        pending: list[dict[str, Any]] = []
        try:
            while True:
                msg = await self.receive()
                if msg.get("type") == "event" and "reqId" not in msg:
                    self.events.append(msg)
                elif msg.get("reqId") == req_id:
                    return msg
                else:
                    pending.append(msg)
        finally:
            self._ready[:0] = pending

    async def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        return await self.reply_to(await self.send(cmd, **fields))

    async def ok(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Call and insist on success (the error text is in the assertion message)."""
        reply = await self.call(cmd, **fields)
        assert reply.get("ok") is True, f"{cmd} failed: {reply}"
        return reply

    async def drain_until_closed(self) -> list[dict[str, Any]]:
        """Read every frame the broker still sends until it closes the connection."""
        frames: list[dict[str, Any]] = list(self._ready)
        self._ready.clear()
        while True:
            try:
                data = await self.stream.receive_some(1 << 20)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return frames
            if not data:
                return frames
            frames.extend(self.codec.decode(p) for p in self._decoder.feed(data))

    async def is_closed(self) -> bool:
        """True once the broker has closed the connection (EOF or reset)."""
        try:
            data = await self.stream.receive_some(1 << 16)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return True
        return not data


def websocket_upgrade(path: str = "/ws") -> bytes:
    """The request that opens a WebSocket to ``path`` on a broker at 127.0.0.1 (RFC 6455
    section 4.1), with a fresh key."""
    key = base64.b64encode(os.urandom(16)).decode()
    return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n").encode()
