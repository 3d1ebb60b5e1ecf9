"""Payload codecs: msgpack and CBOR on TCP (chosen per connection), JSON on WebSocket text.

Decoding is the broker's main exposure to hostile input, so every codec funnels
its result through one validating walk (:func:`~trioqueue.transport.wire.datamodel.validated`)
that accepts only the JSON-like data model the protocol uses (maps with string keys,
arrays, strings, bytes, numbers, booleans, null) and nothing a decoder library might
conjure from tags or extension types. The walk also bounds nesting depth, so later
code can recurse over decoded values without fear.

JavaScript ``undefined`` (msgpack ext type 0, CBOR simple value 23) means "not
present": map entries holding it are dropped and array slots become ``None``.
On the way out, :data:`ABSENT` plays the same role: map entries holding it are
dropped (not sent as ``undefined``, which saves bytes and is indistinguishable
to a JavaScript reader) and array slots become null.

Encoding is tuned for the common case: the native packer runs once and its
output is returned untouched unless a rare condition forces a rewrite
(:mod:`~trioqueue.transport.wire.rewrite`). ``ABSENT``, ``DecodeError`` and ``MAX_DEPTH``
live in :mod:`~trioqueue.transport.wire.datamodel` and are importable from here.
"""

from __future__ import annotations

import base64
import io
import json
import mmap
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import IO, Any, Final, NoReturn, cast

import cbor2
import msgpack

from trioqueue.transport.wire.framing import Payload, frame_header

from ...core.job import JobWire
from .datamodel import ABSENT, MAX_DEPTH, DecodeError, validated
from .rewrite import CBOR_REWRITE, JSON_REWRITE, MSGPACK_REWRITE

__all__ = [
    "ABSENT",
    "CBOR",
    "JSON",
    "MAX_BIGNUM_BYTES",
    "MAX_DEPTH",
    "MSGPACK",
    "CborCodec",
    "Codec",
    "DecodeError",
    "JsonCodec",
    "MsgpackCodec",
    "detect_codec",
    "encode_frames",
]


class Codec(ABC):
    """Turns one frame payload into a protocol value and back."""

    name: str

    @abstractmethod
    def decode(self, payload: Payload) -> Any:
        """Decode and validate ``payload``; raises :class:`DecodeError` on anything bad."""

    @abstractmethod
    def encode(self, obj: Any) -> bytes:
        """Encode ``obj``, dropping map entries whose value is :data:`ABSENT`.

        Raises ``TypeError`` for values outside the protocol's data model: they
        are broker bugs, never client input.
        """

    def __repr__(self) -> str:
        return f"<{self.name} codec>"


class _Rewrite(Exception):
    """Raised from an encoder's default hook: the value needs the slow path."""


def _refuse_unknown(obj: Any) -> NoReturn:
    if obj is ABSENT:
        raise _Rewrite
    raise TypeError(f"cannot encode {type(obj).__name__}")


# --------------------------------------------------------------------------- msgpack


def _msgpack_ext(code: int, data: bytes) -> Any:
    if code == 0:
        return ABSENT
    raise DecodeError(f"msgpack extension type {code} is not allowed")


def _msgpack_default(obj: Any) -> NoReturn:
    # The packer hands us ints that do not fit in 64 bits; the rewrite makes them floats.
    if isinstance(obj, int):
        raise _Rewrite
    _refuse_unknown(obj)


class _Packers(threading.local):
    """One reusable packer per thread.

    Reusing a Packer skips its construction, about a third of the cost of packing
    a typical reply. It is per thread because a Packer owns a single buffer; it
    resets that buffer itself when packing raises.
    """

    def __init__(self) -> None:
        self.pack = msgpack.Packer(use_bin_type=True, default=_msgpack_default).pack


_packers = _Packers()


class MsgpackCodec(Codec):
    """bunqueue's default codec; also the one used to answer undetectable peers."""

    name = "msgpack"

    def decode(self, payload: Payload) -> Any:
        try:
            value = msgpack.unpackb(payload, raw=False, strict_map_key=False, ext_hook=_msgpack_ext)
            return validated(value)
        except DecodeError:
            raise
        except Exception as exc:
            raise DecodeError(f"invalid msgpack payload: {exc}") from exc

    def encode(self, obj: Any) -> bytes:
        """Encode, sending integers outside [-2**31, 2**32-1] as float64.

        Integers beyond float64's range become infinities, as in JavaScript.
        """
        pack = _packers.pack
        if (type(obj) is dict and type(jobs := obj.get("jobs")) is list and len(jobs) > 1
                and type(jobs[0]) is JobWire):
            # A reply with several job objects (PULLB, GetJobs): rewrite first, pack
            # once. The marker test below would match anyway, as the marker bytes
            # also occur inside the float64 timestamps of every job. (A client's PUSHB
            # also has "jobs", plain maps of small values: the test below suits it.)
            return pack(MSGPACK_REWRITE(obj))
        try:
            out: bytes = pack(obj)
        except _Rewrite:
            out = pack(MSGPACK_REWRITE(obj))
        else:
            # A 64-bit int marker byte can also occur inside strings or floats; such
            # false positives merely cost one rewrite, and the check is a memchr. (An
            # int operand: `bytes in bytes` first tries the operand as an int and raises
            # and formats a TypeError inside, ten times the cost of the search.)
            if 0xCF in out or 0xD3 in out:
                out = pack(MSGPACK_REWRITE(obj))
        return out


# ------------------------------------------------------------------------------ CBOR


def _refuse_tag(*_args: Any) -> NoReturn:
    raise DecodeError("CBOR tags are not allowed")


#: Longest CBOR bignum magnitude accepted, in bytes. 512 bits is far beyond any real
#: use, yet always converts to a finite float64 for msgpack peers and to short decimal
#: text for JSON ones, so a CBOR client cannot store a number other clients choke on.
MAX_BIGNUM_BYTES: Final = 64


def _cbor_bignum(negative: bool) -> Any:
    def decode(value: Any, _immutable: bool) -> int:
        if type(value) is not bytes:
            raise DecodeError("a CBOR bignum must wrap a byte string")
        if len(value) > MAX_BIGNUM_BYTES:
            raise DecodeError(f"CBOR bignum longer than {MAX_BIGNUM_BYTES} bytes")
        magnitude = int.from_bytes(value, "big")
        return -1 - magnitude if negative else magnitude

    return decode


# Tags cbor2 decodes natively (found by probing cbor2 6), which would otherwise
# bypass tag_hook. Refusing them keeps shared references (28/29, which can build
# cycles), dates, decimals, sets, regexes and the like out of decoded values; the
# validating walk is a second line of defence for any tag missing from this list.
# Bignums (2/3) are the one tag kind allowed: they decode to plain ints.
_CBOR_NATIVE_TAGS: Final = (
    0, 1, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004,
    43000, 55799,
)  # fmt: skip
_CBOR_SEMANTIC_DECODERS: Final = {
    **{tag: _refuse_tag for tag in _CBOR_NATIVE_TAGS},
    2: _cbor_bignum(negative=False),
    3: _cbor_bignum(negative=True),
}


class _MmapFile:
    """An mmap (a large frame's payload) as the file cbor2 reads: it reads, seeks and
    tells as one, but cbor2 also asks ``readable()`` and ``seekable()``. The methods are
    the mmap's own."""

    __slots__ = ("read", "seek", "tell")

    def __init__(self, body: mmap.mmap) -> None:
        self.read = body.read
        self.seek = body.seek
        self.tell = body.tell

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True


def cbor_decoder(stream: io.BytesIO | mmap.mmap) -> cbor2.CBORDecoder:
    """A decoder reading ``stream`` with the rules of :meth:`CborCodec.decode` (which
    builds its own inline: it runs per frame), for decoding a payload item by item;
    seek ``stream`` to an item and :meth:`~cbor2.CBORDecoder.decode` reads just it."""
    fp = _MmapFile(stream) if isinstance(stream, mmap.mmap) else stream
    return cbor2.CBORDecoder(cast(IO[bytes], fp), tag_hook=_refuse_tag,
                             semantic_decoders=_CBOR_SEMANTIC_DECODERS, max_depth=MAX_DEPTH)


def msgpack_unpacker(size: int, buffer_bytes: int | None = None) -> msgpack.Unpacker:
    """A resumable decoder with the rules of :meth:`MsgpackCodec.decode`, for one payload
    of ``size`` bytes fed in parts. Its buffer is allocated at once (``read_size``):
    grown by doubling, it would copy what it holds at each step, 20 MB at the last. A
    caller that feeds it less than ``size`` says so with ``buffer_bytes``."""
    return msgpack.Unpacker(raw=False, strict_map_key=False, ext_hook=_msgpack_ext,
                            max_buffer_size=size, read_size=buffer_bytes or size)


def _cbor_default(_encoder: Any, obj: Any) -> NoReturn:
    _refuse_unknown(obj)


class CborCodec(Codec):
    """CBOR; duplicate map keys are accepted and the last occurrence wins."""

    name = "cbor"

    def decode(self, payload: Payload) -> Any:
        try:
            # cbor2.loads silently ignores bytes after the first item, so decode from a
            # stream and check that the item used the whole payload.
            stream = io.BytesIO(payload)
            value = cbor2.CBORDecoder(
                stream,
                tag_hook=_refuse_tag,
                semantic_decoders=_CBOR_SEMANTIC_DECODERS,
                max_depth=MAX_DEPTH,
            ).decode()
            if stream.tell() != len(payload):
                raise DecodeError("trailing bytes after the CBOR item")
            return validated(value)
        except DecodeError:
            raise
        except Exception as exc:
            raise DecodeError(f"invalid CBOR payload: {exc}") from exc

    def encode(self, obj: Any) -> bytes:
        try:
            return cbor2.dumps(obj, default=_cbor_default)
        except _Rewrite:
            safe = CBOR_REWRITE(obj)
            return cbor2.dumps(safe, default=_cbor_default)


# ------------------------------------------------------------------------------ JSON


def _refuse_constant(name: str) -> NoReturn:
    # JSON.parse rejects NaN/Infinity; accepting them would let a WebSocket client
    # send values no other client could.
    raise DecodeError(f"{name} is not valid JSON")


def _json_default(obj: Any) -> Any:
    # JSON has no byte strings; base64 is the conventional (and reversible) text form.
    if isinstance(obj, bytes | bytearray | memoryview):
        return base64.b64encode(obj).decode("ascii")
    _refuse_unknown(obj)


# Built once: json.loads/json.dumps construct a fresh decoder or encoder on every
# call that passes options, which costs more than the parsing of a small message.
_json_decoder = json.JSONDecoder(parse_constant=_refuse_constant)
_json_encoder = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_json_default
)


class JsonCodec(Codec):
    """JSON for WebSocket text messages; duplicate keys: the last occurrence wins."""

    name = "json"

    def decode(self, payload: Payload | str) -> Any:
        """Decode a text message; ``bytes`` must be UTF-8, as WebSocket text always is."""
        try:
            text = payload if isinstance(payload, str) else bytes(payload).decode("utf-8")
            return validated(_json_decoder.decode(text))
        except DecodeError:
            raise
        except Exception as exc:
            raise DecodeError(f"invalid JSON payload: {exc}") from exc

    def encode(self, obj: Any) -> bytes:
        return self.encode_text(obj).encode("utf-8")

    def encode_text(self, obj: Any) -> str:
        """Encode as ``str``: non-finite floats become null, bytes become base64 text."""
        try:
            return _json_encoder.encode(obj)
        except (_Rewrite, ValueError):
            # ValueError: a NaN or infinity, which JSON cannot carry.
            return _json_encoder.encode(JSON_REWRITE(obj))


MSGPACK: Final = MsgpackCodec()
CBOR: Final = CborCodec()
JSON: Final = JsonCodec()


def detect_codec(first_byte: int) -> Codec | None:
    """Pick the codec from the first payload byte of a connection.

    Every request is a map, and the two formats' map markers do not overlap, so
    the first byte identifies the codec. ``None`` means neither; the caller then
    answers in msgpack, bunqueue's default.
    """
    if 0xA0 <= first_byte <= 0xBB or first_byte == 0xBF:
        return CBOR
    if 0x80 <= first_byte <= 0x8F or first_byte == 0xDE or first_byte == 0xDF:
        return MSGPACK
    return None


def encode_frames(codec: Codec, objs: Iterable[Any]) -> bytes:
    """Encode and frame several replies into one buffer, so they go out in one send."""
    parts: list[bytes] = []
    append = parts.append
    for obj in objs:
        payload = codec.encode(obj)
        append(frame_header(len(payload)))
        append(payload)
    return b"".join(parts)
