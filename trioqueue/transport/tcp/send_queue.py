"""What a TCP connection has to send and the socket has not taken yet.

Encoded replies wait here as they were encoded (chunks of whole frames, but for the
head): never copied into one growing buffer. A long reply waits as a
:class:`~trioqueue.transport.large.reply_slices.SlicedFrame`, encoded a slice per
:meth:`SendQueue.next_chunk` by the sender task, then sent a piece per call; what
queues after it waits behind it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from ...core.job import JobWire
from ...utf8_views import utf8_view
from ..large.reply_slices import LIST_KEY, SlicedFrame, is_long
from ..large.text_splice import SPLICE_CHARS, spliced
from ..large.value_slices import SlicedValueFrame, heavy
from ..wire.codec import Codec
from ..wire.framing import HEADER_SIZE, frame_header

# A reply the sender encodes in slices: a long list of jobs, or one holding many values.
LongFrame = SlicedFrame | SlicedValueFrame

COALESCE_BYTES = 64 * 1024  # small queued replies are sent together up to this size

Chunk = bytes | memoryview


def long_frame(codec: Codec, reply: dict[str, Any]) -> LongFrame | None:
    """The reply as a frame the sender encodes in slices, or None for one encoded at
    once: a long list of jobs (:mod:`..large.reply_slices`), or a reply holding many values
    (a job whose data is a million small maps: :mod:`..large.value_slices`)."""
    if LIST_KEY in reply and is_long(reply):  # (the `in` first: the hot path)
        # (a list holding a heavy job too: a slice of jobs would encode it in one call)
        return SlicedValueFrame(codec, reply) if heavy(reply) else SlicedFrame(codec, reply)
    if heavy(reply):
        return SlicedValueFrame(codec, reply)
    return None


def frame_parts(codec: Codec, objs: Iterable[dict[str, Any]]) -> list[Chunk]:
    """Replies encoded and framed for one send: small frames joined into one chunk (all
    of them, commonly: one buffer, as before), a payload of ``COALESCE_BYTES`` or more
    left as it is behind its header (joining it would copy it once more, on the
    event loop), a job's long data string as a view of its own
    bytes (:mod:`..large.text_splice`). A frame header is never cut across two chunks."""
    parts: list[Chunk] = []
    run: list[bytes] = []
    append = run.append
    encode = codec.encode
    for obj in objs:
        # a reply carrying a job (PULL, GetJob) whose data is a long string: spliced
        if "job" in obj and type(job := obj["job"]) is JobWire and (
                type(text := job.get("data")) is str and len(text) >= SPLICE_CHARS
                and (pieces := _spliced(codec, obj, text)) is not None):
            size = sum(map(len, pieces))
        else:
            payload = encode(obj)
            size = len(payload)
            if size < COALESCE_BYTES:
                append(frame_header(size))
                append(payload)
                continue
            pieces = [payload]
        if run:
            parts.append(b"".join(run))
            run.clear()
        parts.append(frame_header(size))
        parts += pieces
    if run:
        parts.append(b"".join(run))
    return parts


def _spliced(codec: Codec, obj: dict[str, Any], text: str) -> list[Chunk] | None:
    # (the tests that pick the reply are inline in frame_parts: no call for the others)
    view = utf8_view(text)
    return None if view is None else spliced(codec, obj, text, view)


def rest_of_parts(parts: list[Chunk], written: int) -> int:
    """Bytes after ``written`` that finish the frame the socket took part of (0: none),
    read from the frame headers (rarely asked: a write the socket took part of)."""
    pos = 0  # where the next frame starts, in all of the parts one after the other
    base = index = 0  # parts[index] starts at base
    while pos < written:
        while base + len(parts[index]) <= pos:
            base += len(parts[index])
            index += 1
        at = pos - base
        pos += HEADER_SIZE + int.from_bytes(parts[index][at:at + HEADER_SIZE], "big")
    return pos - written


def unsent_parts(parts: list[Chunk], written: int) -> list[Chunk]:
    """What of ``parts`` is left after the socket took ``written`` bytes, not copied."""
    out: list[Chunk] = []
    for part in parts:
        if written >= len(part):
            written -= len(part)
        elif written:
            out.append(memoryview(part)[written:])
            written = 0
        else:
            out.append(part)
    return out


def _small(part: Chunk | LongFrame) -> bool:
    return not isinstance(part, LongFrame) and len(part) < COALESCE_BYTES


class SendQueue:
    """The queue, its size in bytes (a long reply's whole from the start: its estimate,
    then its bytes as its slices are encoded; see :class:`SlicedFrame`) and its head."""

    __slots__ = ("chunks", "bytes", "head")

    def __init__(self) -> None:
        self.chunks: deque[Chunk | LongFrame] = deque()
        self.bytes = 0
        self.head = 0  # bytes at the front that end a frame already begun on the wire

    def push(self, data: Chunk | LongFrame) -> None:
        self.chunks.append(data)
        self.bytes += data.unsent_bytes if isinstance(data, LongFrame) else len(data)

    def next_chunk(self) -> Chunk | None:
        """The next bytes to send: a large chunk as it is, small ones joined (up to
        ``COALESCE_BYTES``), so a client that fell behind is not sent one frame per
        ``send_all``. None after encoding a slice of a long reply not yet whole; a
        piece of it once it is (nothing goes between two pieces of one frame)."""
        chunks = self.chunks
        first = chunks.popleft()
        if isinstance(first, LongFrame):
            before = first.unsent_bytes
            piece = first.step()
            if piece is None:  # a slice more encoded: counted now
                self.bytes += first.unsent_bytes - before
                chunks.appendleft(first)
                return None
            self.bytes += first.unsent_bytes + len(piece) - before
            if not first.sent:  # its next piece comes next: nothing is joined to this one
                chunks.appendleft(first)
            first = piece
        data: Chunk = first
        self.head = 0  # the head, if any, is on its way
        if len(data) < COALESCE_BYTES and chunks and _small(chunks[0]):
            parts = [data]
            size = len(data)
            while chunks and size < COALESCE_BYTES and _small(chunks[0]):
                part = chunks.popleft()
                assert not isinstance(part, LongFrame)  # (_small said so)
                parts.append(part)
                size += len(part)
            data = b"".join(parts)
        self.bytes -= len(data)
        return data

    def slice_ahead_bytes(self) -> int:
        """What :meth:`next_chunk` holds beyond :attr:`bytes` while it makes a slice of
        the long reply in front (0: it makes none)."""
        first = self.chunks[0] if self.chunks else None
        return first.slice_ahead_bytes if isinstance(first, LongFrame) else 0

    def drop_unsent(self) -> None:
        """Forget the queued replies but the end of a frame already begun on the wire."""
        head: Chunk | LongFrame | None = None
        first = self.chunks[0] if self.chunks else None
        if isinstance(first, LongFrame):
            if first.begun:  # its other pieces
                head = first
        elif self.head and first is not None:  # (a head is of bytes half sent)
            head = bytes(memoryview(first)[:self.head])
        self.clear()
        if head is not None:
            self.push(head)

    def clear(self) -> None:
        self.chunks.clear()
        self.bytes = 0
