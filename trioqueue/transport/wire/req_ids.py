"""The ``reqId`` of a frame the broker refuses to decode, when one can still be read.

A client waits for the reply that carries its ``reqId``. A frame that fails decoding
(a value outside the protocol's data model: a CBOR tag, a msgpack extension type, bad
UTF-8 in some field, nesting past ``MAX_DEPTH``) used to be answered without one, so a
client with several commands in flight could not tell which failed and waited for its
timeout. When the strict decode fails, a lenient one (every tag, extension and bad
string read as a placeholder) looks for a top-level map with a string ``reqId``; the
error then goes to that request. Only small frames are tried (a large one is not decoded
twice), and only payloads that begin with a map.

Nesting past ``MAX_DEPTH`` defeats a decoder with that limit, and a decoder without one
recurses as deep as a hostile frame nests. So CBOR and JSON frames are read here by a
walk of the top-level map alone (:func:`_cbor_top_req_id`, :func:`_json_top_req_id`):
the other values are skipped with a counter per open container, never built, so the
cost is one pass over the frame however deep it nests.
"""

from __future__ import annotations

import io
import json
from typing import Any

import cbor2
import msgpack

from .codec import _CBOR_NATIVE_TAGS as CBOR_NATIVE_TAGS
from .datamodel import MAX_DEPTH
from .framing import Payload

# The longest reqId answered (bunqueue's clients send ids of a few dozen characters).
MAX_REQ_ID_CHARS = 256
# Larger payloads are not read a second time.
MAX_SALVAGE_BYTES = 64 * 1024


def _placeholder(*_args: Any) -> None:
    return None


# Every tag cbor2 would decode natively (dates, shared references that can make cycles,
# sets...), and the bignums, read as None; any other tag goes to the tag hook.
_CBOR_ANY_TAG = {tag: _placeholder for tag in (*CBOR_NATIVE_TAGS, 2, 3)}


def _msgpack_map(payload: Payload) -> Any:
    first = payload[0]
    if not (0x80 <= first <= 0x8F or first in (0xDE, 0xDF)):
        return None
    return msgpack.unpackb(payload, raw=False, strict_map_key=False,
                           ext_hook=_placeholder, unicode_errors="replace")


def _cbor_map(payload: Payload) -> Any:
    if payload[0] >> 5 != 5:  # major type 5: a map
        return None
    return cbor2.CBORDecoder(io.BytesIO(payload), tag_hook=_placeholder,
                             semantic_decoders=_CBOR_ANY_TAG, str_errors="replace",
                             max_depth=MAX_DEPTH).decode()


def _cbor_head(p: Payload, i: int) -> tuple[int, int | None, int]:
    """(major type, argument or None for indefinite length, next offset)."""
    first = p[i]
    major, info = first >> 5, first & 31
    if info < 24:
        return major, info, i + 1
    if info == 31:
        return major, None, i + 1
    if info > 27:
        raise ValueError("reserved CBOR additional information")
    width = 1 << (info - 24)
    if i + 1 + width > len(p):
        raise ValueError("truncated")
    return major, int.from_bytes(p[i + 1:i + 1 + width], "big"), i + 1 + width


def _cbor_skip(p: Payload, i: int) -> int:
    """The offset after the item at ``i``, without building it (see module docstring)."""
    owed = [1]  # items still owed by each open container; -1: until a break
    while owed:
        if owed[-1] == 0:
            owed.pop()
            continue
        if p[i] == 0xFF:  # the break of an indefinite-length container
            if owed.pop() != -1:
                raise ValueError("unexpected break")
            i += 1
            continue
        if owed[-1] > 0:
            owed[-1] -= 1
        major, arg, i = _cbor_head(p, i)
        if major in (2, 3):  # byte and text strings; indefinite ones are chunks
            if arg is None:
                owed.append(-1)
            else:
                i += arg
        elif major == 6:  # a tag: one item follows
            owed.append(1)
        elif major in (4, 5):  # arrays, and maps of two items a pair
            owed.append(-1 if arg is None else arg * (major - 3))
        if i > len(p):
            raise ValueError("truncated")
    return i


def _cbor_top_req_id(p: Payload) -> str | None:
    major, count, i = _cbor_head(p, 0)
    if major != 5:
        return None
    pairs = 0
    while count is None or pairs < count:
        if count is None and p[i] == 0xFF:
            return None
        key_major, length, at = _cbor_head(p, i)
        if key_major == 3 and length == 5 and bytes(p[at:at + 5]) == b"reqId":
            value_major, size, start = _cbor_head(p, at + 5)
            if value_major == 3 and size is not None:
                return bytes(p[start:start + size]).decode("utf-8")
            return None
        i = _cbor_skip(p, _cbor_skip(p, i))  # the key, then its value
        pairs += 1
    return None


def _json_string_end(s: str, i: int) -> int:
    """The offset after the JSON string that opens at ``i``."""
    i += 1
    while True:
        c = s[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        else:
            i += 1


def _json_space_end(s: str, i: int) -> int:
    """The offset of the first non-whitespace at or after ``i`` (no copy of the rest:
    a copy per key made the walk quadratic in a frame of many keys)."""
    n = len(s)
    while i < n and s[i] in " \t\n\r":
        i += 1
    return i


def _json_top_req_id(p: Payload) -> str | None:
    s = bytes(p).decode("utf-8", "replace")
    i, n = _json_space_end(s, 0), len(s)
    if i >= n or s[i] != "{":
        return None
    depth, key_next = 1, True
    i += 1
    while i < n:
        c = s[i]
        if c == '"':
            end = _json_string_end(s, i)
            if depth == 1 and key_next:
                key = s[i:end]
                j = _json_space_end(s, end)
                if s[j] != ":":
                    return None
                j = _json_space_end(s, j + 1)
                if key == '"reqId"':
                    if s[j] != '"':
                        return None
                    value = json.loads(s[j:_json_string_end(s, j)])
                    return value if isinstance(value, str) else None
                key_next, i = False, j
                continue
            i = end
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return None
        elif c == "," and depth == 1:
            key_next = True
        i += 1
    return None


_LENIENT = {"msgpack": _msgpack_map, "cbor": _cbor_map}
# Read by the top-level walk, when the lenient decode finds nothing.
_TOP_LEVEL = {"cbor": _cbor_top_req_id, "json": _json_top_req_id}


def salvage_req_id(codec_name: str, payload: Payload) -> str | None:
    """The string ``reqId`` of a payload that failed its strict decode, or None."""
    if not payload or len(payload) > MAX_SALVAGE_BYTES:
        return None
    req_id: Any = None
    lenient = _LENIENT.get(codec_name)
    try:
        value = lenient(payload) if lenient is not None else None
        if isinstance(value, dict):
            req_id = value.get("reqId")
    except Exception:  # noqa: BLE001 - too deep, or worse: the walk below may still read it
        pass
    walk = _TOP_LEVEL.get(codec_name)
    if req_id is None and walk is not None:
        try:
            req_id = walk(payload)
        except Exception:  # still not readable: answered without a reqId, as before
            return None
    if isinstance(req_id, str) and len(req_id) <= MAX_REQ_ID_CHARS:
        return req_id
    return None
