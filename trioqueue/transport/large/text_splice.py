"""A reply whose job data is one long string, encoded around that string.

Encoding an 8.5 MB job's PULL reply copied its data twice (into msgpack's buffer, then
into the ``bytes`` returned), each copy milliseconds of the event loop. Here the reply
is encoded with a short placeholder in the data's place; the placeholder's bytes are
found in the result and replaced, as separate buffers, by the string's own head and its
UTF-8 bytes (:func:`~trioqueue.utf8_views.utf8_view`, no copy), which the socket's
``writev`` sends as they are. The bytes on the wire are exactly those of encoding the
reply whole (tests/transport/test_text_splice.py).

The placeholder holds a random token drawn when the broker starts, so no client can
put the same text elsewhere in a reply and have its own bytes taken for it.
"""

from __future__ import annotations

import secrets
import struct
from typing import Any, Final

from ..wire.codec import CBOR, MSGPACK, Codec

__all__ = ["SPLICE_CHARS", "spliced"]

#: A job's data string at least this long is spliced (below it, the copies are cheap).
#: Which replies are: one whose ``job`` is a JobWire with such a string as its data
#: (send_queue.frame_parts asks, inline).
SPLICE_CHARS: Final = 64 * 1024
_PLACEHOLDER: Final = "\x00trioqueue-long-text-" + secrets.token_hex(16)


def _msgpack_head(size: int) -> bytes:
    # a spliced string is at least SPLICE_CHARS bytes: str16 or str32
    return (b"\xda" + struct.pack(">H", size) if size < 1 << 16
            else b"\xdb" + struct.pack(">I", size))


def _cbor_head(size: int) -> bytes:
    # major type 3 (text); 4 or 8 bytes of length at these sizes
    return (b"\x7a" + struct.pack(">I", size) if size < 1 << 32
            else b"\x7b" + struct.pack(">Q", size))


_HEADS = {MSGPACK: _msgpack_head, CBOR: _cbor_head}


def spliced(codec: Codec, obj: dict[str, Any], text: str, view: memoryview
            ) -> list[bytes | memoryview] | None:
    """The encoding of ``obj`` as buffers, ``text`` (its job's data) given as ``view``
    (its UTF-8 bytes); None when this codec is not spliced (JSON)."""
    head = _HEADS.get(codec)
    if head is None:
        return None
    job = obj["job"]
    stand_in = type(job)(job)  # (a JobWire stays one: the codec treats it as such)
    stand_in["data"] = _PLACEHOLDER
    reply = dict(obj)
    reply["job"] = stand_in
    payload = codec.encode(reply)
    marker = codec.encode(_PLACEHOLDER)
    at = payload.find(marker)
    if at < 0:  # never: the placeholder is encoded as any string is
        raise AssertionError("the placeholder is missing from the encoded reply")
    return [payload[:at], head(len(view)), view, payload[at + len(marker):]]
