"""The ``reqId`` of a frame the broker refuses to decode, when one can still be read.

A client waits for the reply that carries its ``reqId``. A frame that fails decoding
(a value outside the protocol's data model: a CBOR tag, a msgpack extension type, bad
UTF-8 in some field, nesting past ``MAX_DEPTH``) used to be answered without one, so a
client with several commands in flight could not tell which failed and waited for its
timeout. When the strict decode fails, a lenient one (every tag, extension and bad
string read as a placeholder) looks for a top-level map with a string ``reqId``; the
error then goes to that request. Only small frames are tried (a large one is not decoded
twice), and only payloads that begin with a map.
"""

from __future__ import annotations

import io
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


_LENIENT = {"msgpack": _msgpack_map, "cbor": _cbor_map}


def salvage_req_id(codec_name: str, payload: Payload) -> str | None:
    """The string ``reqId`` of a payload that failed its strict decode, or None."""
    lenient = _LENIENT.get(codec_name)
    if lenient is None or not payload or len(payload) > MAX_SALVAGE_BYTES:
        return None
    try:
        value = lenient(payload)
    except Exception:  # still not readable: answered without a reqId, as before
        return None
    if not isinstance(value, dict):
        return None
    req_id = value.get("reqId")
    if isinstance(req_id, str) and len(req_id) <= MAX_REQ_ID_CHARS:
        return req_id
    return None
