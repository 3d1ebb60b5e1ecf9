"""Length-prefixed framing of bunqueue's TCP protocol, without any I/O.

Each frame is a 4-byte unsigned big-endian length followed by that many payload
bytes. Keeping the parser free of sockets lets the connection actor own all I/O
and timeouts while this module stays trivially testable and fast.

The decoder sits on the broker's hot path (it runs once per socket read), so it
parses every complete frame of a read in one loop with ``struct.unpack_from``,
slicing payloads straight out of the read. Only the bytes of a frame that is
still incomplete at the end of a read are copied into the decoder's buffer.

The body of a frame of at least :data:`BODY_STREAM_BYTES` that spans reads is written
into an anonymous ``mmap`` of its size instead, which is handed over as the payload
(bytes-like: length, indexing, slicing, the buffer protocol; and file-like). A growing
buffer is copied whole each time it outgrows its memory (8 times its final size in
all) and the payload then copied out of it once more, all on the event loop; the mmap
is never copied, and its pages are zero-filled by the kernel as the reads reach them.
"""

from __future__ import annotations

import mmap
import struct
from typing import NoReturn

__all__ = [
    "BODY_STREAM_BYTES",
    "HEADER_SIZE",
    "MAX_WIRE_LENGTH",
    "FrameDecoder",
    "Payload",
    "FrameTooLarge",
    "encode_frame",
    "frame_header",
]

_HEADER = struct.Struct(">I")
_unpack_header = _HEADER.unpack_from
_pack_header = _HEADER.pack

HEADER_SIZE = _HEADER.size
#: The largest length the 4-byte header can express.
MAX_WIRE_LENGTH = 2**32 - 1
#: A frame body at least this long that spans reads is gathered in an mmap of its size
#: (below it, the copies of a growing buffer cost well under a millisecond).
BODY_STREAM_BYTES = 1 << 20

#: One frame's payload: bytes, or for a large frame the mmap it was gathered in.
Payload = bytes | mmap.mmap


class FrameTooLarge(Exception):
    """A peer announced a frame longer than the configured limit.

    Raised from the header alone, so a hostile "1 GiB follows" header never
    makes us buffer or allocate the body. The connection must be closed: the
    stream cannot be resynchronised once a frame is skipped.
    """

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class FrameDecoder:
    """Reassembles frames from arbitrarily chunked stream reads.

    ``limit_bytes`` (at most ``max_frame_bytes``) is a lower cap the caller can raise
    later, e.g. until a connection has authenticated. A frame over it but within
    ``max_frame_bytes`` is not an error: parsing stops in front of it and
    :attr:`held` gives its size; the caller either gives up on the connection or calls
    :meth:`raise_limit`, which parses on from there.
    """

    __slots__ = ("_buf", "_body", "_missing", "_limit", "_max", "_error", "held")

    def __init__(self, max_frame_bytes: int, limit_bytes: int | None = None) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self._buf = bytearray()
        # The body of a large frame being received (see BODY_STREAM_BYTES), and how many
        # of its bytes are still to come; _buf is empty meanwhile.
        self._body: mmap.mmap | None = None
        self._missing = 0
        self._max = max_frame_bytes
        self._limit = max_frame_bytes if limit_bytes is None else min(limit_bytes,
                                                                      max_frame_bytes)
        # Remembered so that a caller who keeps feeding a broken stream gets the
        # same error again instead of frames parsed from the middle of a body.
        self._error: FrameTooLarge | None = None
        #: The size of a frame over the current limit (not the maximum) parsing
        #: stopped at, or None. Its bytes, and any after them, stay buffered.
        self.held: int | None = None

    @property
    def limit_bytes(self) -> int:
        return self._limit

    @property
    def has_partial(self) -> bool:
        """Whether an incomplete header or body is waiting for more bytes.

        The connection uses this to arm its slow-sender timer only while a
        frame is half-received, not while the client is merely idle.
        """
        return bool(self._buf) or self._body is not None

    @property
    def buffered_bytes(self) -> int:
        body = self._body
        # the header counts too, as it does while the frame is in _buf
        return len(self._buf) if body is None else HEADER_SIZE + body.tell()

    def feed(self, data: bytes | bytearray | memoryview) -> list[Payload]:
        """Add ``data`` and return every payload it completed, in wire order.

        Raises :class:`FrameTooLarge` as soon as a header over the limit is
        seen; payloads that preceded it in the same call are discarded, since
        the connection is going to be closed anyway. The decoder then refuses
        all further input. A header over the current limit but within the
        maximum stops parsing instead (see :attr:`held`): the payloads before it
        are returned, the rest is kept.
        """
        if self._error is not None:
            raise FrameTooLarge(self._error.size, self._error.limit)
        if self.held is not None:
            self._buf += data
            return []
        if type(data) is not bytes:
            data = bytes(data)
        frames: list[Payload] = []
        start = 0
        if self._body is not None:
            start = self._continue_body(data, frames)
            if start < 0:
                return frames
        elif self._buf:
            start = self._complete_pending(data, frames)
            if start < 0:
                return frames
        # The buffer is now empty: parse the rest of this read in place, slicing
        # payloads straight out of it, and copy only an unfinished tail.
        consumed = self._parse(data, start, frames)
        if consumed < len(data):
            self._buf += memoryview(data)[consumed:]
        return frames

    def discard(self) -> mmap.mmap | None:
        """Drop whatever is buffered, at once (the connection is being closed); the
        large frame's mmap it was gathering, if any, for the caller to unmap."""
        body, self._body = self._body, None
        self._buf = bytearray()
        self.held = None
        return body

    def raise_limit(self, limit_bytes: int) -> list[Payload]:
        """Raise the cap (never past ``max_frame_bytes``); the payloads it releases.

        A frame held at the old cap, and every complete frame buffered behind it,
        are parsed now.
        """
        self._limit = max(self._limit, min(limit_bytes, self._max))
        if self.held is None or self.held > self._limit:
            return []
        self.held = None
        rest, self._buf = bytes(self._buf), bytearray()
        return self.feed(rest)

    def _complete_pending(self, data: bytes, frames: list[Payload]) -> int:
        """Feed ``data`` to the frame left unfinished by earlier reads.

        Returns how much of ``data`` that frame used, or -1 if it is still
        incomplete and all of ``data`` was buffered.
        """
        buf = self._buf
        used = 0
        if len(buf) < HEADER_SIZE:
            used = HEADER_SIZE - len(buf)
            buf += data[:used]
            if len(buf) < HEADER_SIZE:
                return -1
            (size,) = _unpack_header(buf)
            if size > self._limit:
                self._over_limit(size)
                buf += memoryview(data)[used:]  # held: kept for raise_limit
                return -1
        else:
            (size,) = _unpack_header(buf)
        missing = HEADER_SIZE + size - len(buf)
        if len(data) - used < missing:
            if size >= BODY_STREAM_BYTES:
                self._stream_body(memoryview(data)[used:], missing)
            else:
                buf += memoryview(data)[used:]
            return -1
        buf += memoryview(data)[used : used + missing]
        with memoryview(buf) as view:
            frames.append(bytes(view[HEADER_SIZE:]))
        buf.clear()
        return used + missing

    def _stream_body(self, more: memoryview, missing: int) -> None:
        """Go on gathering this frame's body in an mmap: ``more`` is the next part of
        it, ``missing`` how much of the body was still to come before ``more``."""
        buf = self._buf
        body = mmap.mmap(-1, len(buf) - HEADER_SIZE + missing)
        with memoryview(buf) as view:
            body.write(view[HEADER_SIZE:])
        body.write(more)
        buf.clear()
        self._body = body
        self._missing = missing - len(more)

    def _continue_body(self, data: bytes, frames: list[Payload]) -> int:
        """Feed ``data`` to the large frame being gathered; how much of ``data`` it used,
        or -1 if it is still incomplete."""
        body = self._body
        assert body is not None
        missing = self._missing
        if len(data) < missing:
            body.write(data)
            self._missing = missing - len(data)
            return -1
        body.write(memoryview(data)[:missing])
        self._body = None
        body.seek(0)  # read as a file from its start (cbor2 does)
        frames.append(body)
        return missing

    def _parse(self, data: bytes, offset: int, frames: list[Payload]) -> int:
        """Append the complete payloads of ``data[offset:]``; return where they end."""
        append = frames.append
        limit = self._limit
        end = len(data)
        while end - offset >= HEADER_SIZE:
            (size,) = _unpack_header(data, offset)
            if size > limit:
                self._over_limit(size)
                break  # held: this frame and the rest are kept for raise_limit
            start = offset + HEADER_SIZE
            stop = start + size
            if stop > end:
                break
            append(data[start:stop])
            offset = stop
        return offset

    def _over_limit(self, size: int) -> None:
        """A header over the current limit: an error past the maximum, else held."""
        if size > self._max:
            self._fail(size)
        self.held = size

    def _fail(self, size: int) -> NoReturn:
        # The error raised is never held by a name or by the decoder: its traceback
        # holds the frames it passed, which would then hold it (a reference cycle
        # that only a full pass of the cyclic GC frees).
        self._error = FrameTooLarge(size, self._max)
        # Drop whatever was buffered: nothing in it can ever be delivered.
        self._buf = bytearray()
        self._body = None
        raise FrameTooLarge(size, self._max)


def frame_header(length: int) -> bytes:
    """The 4-byte header announcing a payload of ``length`` bytes."""
    if not 0 <= length <= MAX_WIRE_LENGTH:
        raise ValueError(f"payload of {length} bytes cannot be framed")
    return _pack_header(length)


def encode_frame(payload: bytes) -> bytes:
    """One complete frame carrying ``payload``."""
    return frame_header(len(payload)) + payload
