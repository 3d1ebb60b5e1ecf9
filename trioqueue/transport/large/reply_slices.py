"""A reply with a long list of jobs, encoded a slice at a time by the sender task.

A PULLB of 1,000 jobs is one reply holding 1,000 job maps of about 50 fields each.
Encoded at once, in CBOR or msgpack, it was one long step inside the step that
released it, and every other client waited for all of it. So a TCP reply whose ``jobs``
list is longer than :data:`LONG_LIST_ITEMS` is not encoded by that step: it takes its
place in the connection's send queue as a :class:`SlicedFrame`, and the connection's
sender task encodes :data:`SLICE_ITEMS` jobs per scheduler pass, then sends the frame a
slice's bytes per pass (its length header, which needs the whole payload, in front of
the first). Replies released after it queue behind it, so the order on the wire is kept.
A WebSocket session does the same with :class:`SlicedPayload` (a binary message) or
:class:`SlicedJson` (a text message): its sender task steps them, then sends the
message.

The bytes are the ones encoding it at once gives: in both codecs a map is its header
followed by its keys and values in order, and an array its header followed by its
items, so the parts encoded one by one and joined are the same payload
(``tests/transport/test_reply_slices.py`` checks it, on both codecs).
"""

from __future__ import annotations

import struct
import sys
from collections import deque
from typing import Any

from ..wire.codec import CBOR, JSON, Codec
from ..wire.datamodel import ABSENT
from ..wire.framing import HEADER_SIZE, frame_header
from .value_slices import SlicedValue

# A reply whose ``jobs`` list is longer than this is encoded in slices (below it the
# whole reply takes at most a few milliseconds).
LONG_LIST_ITEMS = 200
# Jobs encoded per pass of the sender task: 1.6-3.5 ms here.
SLICE_ITEMS = 100
LIST_KEY = "jobs"


def is_long(reply: dict[str, Any]) -> bool:
    """Whether ``reply`` should be encoded in slices."""
    items = reply.get(LIST_KEY)
    return type(items) is list and len(items) > LONG_LIST_ITEMS


def _cbor_head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes((major << 5 | n,))
    if n < 1 << 8:
        return bytes((major << 5 | 24, n))
    if n < 1 << 16:
        return bytes((major << 5 | 25,)) + struct.pack(">H", n)
    if n < 1 << 32:
        return bytes((major << 5 | 26,)) + struct.pack(">I", n)
    return bytes((major << 5 | 27,)) + struct.pack(">Q", n)


def _msgpack_head(fix: int, wide: int, n: int) -> bytes:
    # fix: the fixmap / fixarray base (up to 15 entries); wide: the 16-bit form's
    # marker, followed by the 32-bit one's.
    if n < 16:
        return bytes((fix | n,))
    if n < 1 << 16:
        return bytes((wide,)) + struct.pack(">H", n)
    return bytes((wide + 1,)) + struct.pack(">I", n)


def map_header(codec: Codec, n: int) -> bytes:
    return _cbor_head(5, n) if codec is CBOR else _msgpack_head(0x80, 0xDE, n)


def array_header(codec: Codec, n: int) -> bytes:
    return _cbor_head(4, n) if codec is CBOR else _msgpack_head(0x90, 0xDC, n)


def per_item_bytes(encoded_len: int, item: Any) -> int:
    """What an item of a long list not encoded yet is counted for, from the first one:
    its encoded length, or its map's own size where that is more (a job with little
    data holds more memory as a map than as bytes)."""
    return max(encoded_len, sys.getsizeof(item))


class SlicedPayload:
    """One long reply on its way to bytes: :meth:`step` encodes a slice, and returns
    the whole payload once the last one is done (None before). A WebSocket binary
    message carries the payload as it is.

    ``estimate_bytes`` is what it is counted for before it is encoded (the budget of
    unsent replies sees it whole from the moment a connection is handed it): the
    first item is encoded at once, and every item counted as it (:func:`per_item_bytes`).
    """

    __slots__ = ("_codec", "_items", "_done", "_parts", "_rest", "_first", "_per_item",
                 "estimate_bytes")

    def __init__(self, codec: Codec, reply: dict[str, Any]) -> None:
        self._codec = codec
        items: list[Any] = reply[LIST_KEY]
        self._items = items
        # The map's header, and every entry before the list's, with its key and header.
        encode = codec.encode
        entries = [(k, v) for k, v in reply.items() if v is not ABSENT]  # (encode's rule)
        parts = [map_header(codec, len(entries))]
        self._parts = parts
        self._rest: list[bytes] = []
        seen_list = False
        for key, value in entries:
            target = self._rest if seen_list else parts
            target.append(encode(key))
            if key == LIST_KEY:
                parts.append(array_header(codec, len(items)))
                seen_list = True
            else:
                target.append(encode(value))
        # the first item, encoded ahead (it begins the first slice)
        self._first = encode(items[0])
        self._done = 1
        self._per_item = per_item_bytes(len(self._first), items[0])
        self.estimate_bytes = (sum(map(len, parts)) + sum(map(len, self._rest))
                               + self._per_item * len(items))

    def _encode_slice(self) -> list[bytes]:
        """The next :data:`SLICE_ITEMS` items, encoded (the first slice with the item
        encoded ahead)."""
        items = self._items
        end = min((self._done // SLICE_ITEMS + 1) * SLICE_ITEMS, len(items))
        encode = self._codec.encode
        encoded = [encode(item) for item in items[self._done:end]]
        if self._first:
            encoded.insert(0, self._first)
            self._first = b""
        self._done = end
        return encoded

    def step(self) -> bytes | None:
        parts = self.step_parts()
        return None if parts is None else b"".join(parts)

    def step_parts(self) -> list[bytes] | None:
        """:meth:`step`, the payload given as its parts, not joined (a WebSocket sender
        sends them a piece at a time: joining megabytes is a long step)."""
        self._parts.extend(self._encode_slice())
        if self._done < len(self._items):
            return None
        self._items = []  # encoded: the items are not needed any more
        return self._parts + self._rest


class SlicedFrame(SlicedPayload):
    """A long reply on its way to the wire as one TCP frame, in pieces.

    :meth:`step` encodes a slice per call (None), then gives the frame a piece per
    call: a slice's bytes each, the length header (which needs the whole payload) and
    the map's head in front of the first, the entries after the list behind the last.
    The sender sends each piece in a pass of its own. Joined whole, a PULLB of 1,000
    jobs is one buffer of about 800 KB, copied twice more (the join, then the header
    in front), and sent in one system call; at a million jobs in the broker those
    copies and that send were most of the final step (fresh heap pages, the
    kernel's copy and loopback delivery), where a piece of 100 jobs costs a tenth. The
    first piece is made with room for the header, written once the length is known,
    and the last with the entries after the list: no piece is copied again.

    ``unsent_bytes`` is what the frame will hold until it is on the wire, known from
    the start: the bytes encoded and not yet given, and for each job not encoded yet
    the estimate (``estimate_bytes``), so that the broker-wide reply budget sees a long
    reply whole the moment a connection is handed it, not as a client that reads
    nothing lets it be encoded. The jobs are let go once encoded, each piece once given.
    """

    __slots__ = ("_pieces", "unsent_bytes", "_head", "_tail", "_lead", "_slices")

    def __init__(self, codec: Codec, reply: dict[str, Any]) -> None:
        super().__init__(codec, reply)
        self._head = b"".join(self._parts)  # the map's head, up to the list's items
        self._tail = b"".join(self._rest)  # the entries after the list
        self._parts = self._rest = []  # (the slices below, instead)
        # the first slice encoded (its header written at the end), then the others
        self._lead: bytearray | None = None
        self._slices: list[bytes] = []
        self._pieces: deque[bytes | memoryview] | None = None  # once encoded, what is still to give
        # (the first job too: each job counts the estimate until its slice is encoded)
        self.unsent_bytes = HEADER_SIZE + self.estimate_bytes

    @property
    def begun(self) -> bool:
        """Whether a piece has been given: the rest of the frame must follow it."""
        return self._pieces is not None

    @property
    def sent(self) -> bool:
        """Whether every piece has been given."""
        return self._pieces is not None and not self._pieces

    @property
    def slice_ahead_bytes(self) -> int:
        """What the next slice's jobs are counted for (0 once the frame is whole): while
        the slice is made, its jobs' encodings and the joined slice are both held."""
        if self._pieces is not None:
            return 0
        return self._per_item * (min(len(self._items), self._done - bool(self._first)
                                     + SLICE_ITEMS) - self._done + bool(self._first))

    def encode_slice(self) -> bool:
        """Encode the next slice (none once all are); True when the frame is whole."""
        if self._pieces is not None:
            return True
        counted = self._per_item * (bool(self._first) - self._done)
        encoded = self._encode_slice()
        counted += self._per_item * self._done
        lead = self._lead
        if lead is None:  # room for the frame's header, then the map's head
            encoded[:0] = (bytes(HEADER_SIZE), self._head)
            counted += HEADER_SIZE + len(self._head)
        whole = self._done >= len(self._items)
        if whole:
            encoded.append(self._tail)
            counted += len(self._tail)
        if lead is None:
            lead = self._lead = bytearray().join(encoded)
            self.unsent_bytes += len(lead) - counted
        else:
            part = b"".join(encoded)
            self._slices.append(part)
            self.unsent_bytes += len(part) - counted
        del encoded
        if not whole:
            return False
        lead[:HEADER_SIZE] = frame_header(self.unsent_bytes - HEADER_SIZE)
        self._pieces = deque((memoryview(lead), *self._slices))
        # encoded: the jobs are not needed any more, each piece once given
        self._lead, self._slices, self._items = None, [], []
        return True

    def step(self) -> bytes | memoryview | None:  # type: ignore[override]
        if self._pieces is None and not self.encode_slice():
            return None
        pieces = self._pieces
        assert pieces is not None  # (encode_slice made them)
        piece = pieces.popleft()
        self.unsent_bytes -= len(piece)
        return piece


class SlicedJson:
    """A long reply to a WebSocket text message, as JSON text a slice at a time.

    JSON has no length headers, so the text around the list is fixed at the start:
    ``{`` and the entries before the list, the list's items joined by commas, then
    the entries after it and ``}``, with the separators the JSON codec writes; an
    item whose values JSON cannot carry as they are is rewritten by the codec alone,
    as the whole reply would have been.
    """

    __slots__ = ("_items", "_done", "_parts", "_head", "_tail", "estimate_bytes")

    def __init__(self, reply: dict[str, Any]) -> None:
        encode = JSON.encode_text
        items: list[Any] = reply[LIST_KEY]
        self._items = items
        before: list[str] = []
        after: list[str] = []
        target = before
        for key, value in reply.items():
            if key == LIST_KEY:
                target = after
            elif value is not ABSENT:  # (encode's rule)
                target.append(f"{encode(key)}:{encode(value)}")
        self._head = "{" + "".join(entry + "," for entry in before) + encode(LIST_KEY) + ":["
        self._tail = "]" + "".join("," + entry for entry in after) + "}"
        # the first item, encoded ahead: what each is counted for (see SlicedPayload)
        first = encode(items[0])
        self._parts: list[str] = [first]
        self._done = 1
        self.estimate_bytes = (len(self._head) + len(self._tail)
                               + (per_item_bytes(len(first), items[0]) + 1) * len(items))

    def step(self) -> str | None:
        parts = self.step_parts()
        return None if parts is None else "".join(parts)

    def step_parts(self) -> list[str] | None:
        """:meth:`step`, the text given as its parts, not joined (see SlicedPayload)."""
        items = self._items
        end = min((self._done // SLICE_ITEMS + 1) * SLICE_ITEMS, len(items))
        encode = JSON.encode_text
        self._parts.extend(encode(item) for item in items[self._done:end])
        self._done = end
        if end < len(items):
            return None
        self._items = []
        parts = [self._head]
        for item in self._parts:
            parts += (item, ",")
        parts[-1] = self._tail  # (the last comma's place)
        return parts


# What a WebSocket sender steps until whole (see Session.send_frames): a long list, or
# a reply holding many values (value_slices.py).
SlicedMessage = SlicedPayload | SlicedJson | SlicedValue
